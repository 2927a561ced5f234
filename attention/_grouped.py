"""The unchecked computations behind `attention.grouped`: RMS norm, and attention where h query
heads share g key/value groups, on the fused kernel without repeating K and V.

Shapes: q (B, h, n, c_h); k, v (B, g, n, c_h) with g dividing h. Head ℓ (0-based) reads group
ℓ // (h/g), the book's `repeat_interleave(h // g, dim=1)`.

The forward pass is `scaled_dot_product_attention(..., enable_gqa=True)`: the kernel maps each
query head to its group itself, so K and V are never copied h/g times (torch ≥ 2.5). The
backward pass is `attention._fused.gradients` (exact at any score scale), run once per group on
that group's query heads against its keys and values, broadcast to the heads as a view; each
group's dK and dV are the sums over its heads.
"""

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _fused
from ._core import scale as inverse_sqrt
from ._masks import allowed_positions, fully_masked_rows

#: Inputs of lower precision are normalised in float32, as the book's Qwen 3 `RMSNorm` does.
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def rms_norm(
    x: Tensor, gain: Tensor, eps: float, shift: Tensor | None = None, upcast: bool = True
) -> Tensor:
    """x / √(mean(x²) + ε) ∘ g (+ shift) over the last axis; float16/bfloat16 in float32 with
    `upcast`; returned in x's dtype."""
    dtype = x.dtype
    if upcast and dtype in _LOW_PRECISION:
        x = x.float()
    out = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain
    if shift is not None:
        out = out + shift
    return out.to(dtype)


def expand_groups(t: Tensor, heads: int) -> Tensor:
    """(*batch, g, n, c_h) -> (*batch, h, n, c_h): each group repeated h/g times in place."""
    return t.repeat_interleave(heads // t.shape[-3], dim=-3)


def attend(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, allowed: Tensor | None
) -> Tensor:
    """C (B, h, n, c_h) = softmax(Q Kᵀ·scale, masked) V per head, head ℓ on group ℓ // (h/g).

    `allowed` (B or 1, 1, R, n), R ∈ {1, n}, True = may attend, or None; `causal` kept apart.
    A query with no allowed key gets a zero row. With gradients, through `GroupedAttention`.
    """
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return GroupedAttention.apply(q, k, v, scale, causal, allowed)
    return _forward(q, k, v, scale, causal, allowed)


def _forward(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, allowed: Tensor | None
) -> Tensor:
    gqa = q.shape[-3] != k.shape[-3]
    if allowed is None:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa
        )
    allowed = allowed_positions(q.shape[-2], q.device, causal, allowed)
    dead = fully_masked_rows(allowed).unsqueeze(-1)  # (B, 1, R) -> (B, 1, R, 1)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed | dead, scale=scale, enable_gqa=gqa
    )
    return out.masked_fill(dead, 0.0)  # opened only to avoid 0/0: those rows are zero


def attend_heads(q: Tensor, k: Tensor, v: Tensor, causal: bool, allowed: Tensor | None) -> Tensor:
    """q (*lead, h, n, c_h), k and v (*lead, g, n, c_h), `allowed` (*lead, R, n), (R, n) (one
    mask for the whole batch) or None: the 4-D layout the fused kernel takes, and back."""
    *lead, heads, n, width = q.shape
    q4 = q.reshape(-1, heads, n, width)  # (*lead, h, n, c_h) -> (B, h, n, c_h)
    k4 = k.reshape(-1, k.shape[-3], n, width)  # -> (B, g, n, c_h)
    v4 = v.reshape(-1, k.shape[-3], n, width)
    if allowed is not None:
        rows = allowed.shape[-2]
        if allowed.dim() == 2:  # shared by the batch: broadcast by the kernel, not copied
            allowed = allowed.view(1, 1, rows, n)
        else:
            allowed = torch.broadcast_to(allowed, (*lead, rows, n)).reshape(-1, 1, rows, n)
    out = attend(q4, k4, v4, inverse_sqrt(width), causal, allowed)
    return out.view(*lead, heads, n, width)  # (B, h, n, c_h) -> (*lead, h, n, c_h)


def book_mask(blocked: Tensor | None, n: int) -> tuple[bool, Tensor | None]:
    """(causal, allowed) from the books' (n, n) mask (True = may NOT attend): the kernel's causal
    flag when it is the causal mask, else allowed = ~blocked."""
    if blocked is None:
        return False, None
    if torch.equal(blocked, torch.ones(n, n, dtype=torch.bool, device=blocked.device).triu(1)):
        return True, None
    return False, ~blocked


class GroupedAttention(torch.autograd.Function):
    """The fused forward with grouped keys and values; `_fused`'s exact backward, group by group."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, allowed):  # type: ignore[override]
        ctx.save_for_backward(q, k, v, allowed)
        ctx.scale, ctx.causal = scale, causal
        return _forward(q, k, v, scale, causal, allowed)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, allowed = ctx.saved_tensors
        dq, dk, dv = gradients(q, k, v, grad_out, ctx.scale, ctx.causal, allowed)
        return dq, dk, dv, None, None, None


def gradients(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad_out: Tensor,
    scale: float,
    causal: bool,
    allowed: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV): group j's r = h/g query heads against its K_j, V_j broadcast to r heads (a
    view, no copy), then dK_j = Σ over those heads of their dK, likewise dV_j."""
    batch, heads, n, _ = q.shape
    groups = k.shape[1]
    if allowed is not None:
        allowed = allowed.expand(batch, *allowed.shape[1:])  # (1 or B, 1, R, n) -> (B, 1, R, n)
    if groups == heads:
        return _fused.gradients(q, k, v, grad_out, scale, causal, allowed)
    r = heads // groups
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    for j in range(groups):
        heads_j = slice(j * r, (j + 1) * r)
        shape = (batch, r, n, k.shape[-1])
        k_j = k[:, j : j + 1].expand(shape)  # (B, 1, n, c_h) -> (B, r, n, c_h), a view
        v_j = v[:, j : j + 1].expand(shape)
        dq_j, dk_j, dv_j = _fused.gradients(
            q[:, heads_j], k_j, v_j, grad_out[:, heads_j], scale, causal, allowed
        )
        dq[:, heads_j] = dq_j
        torch.sum(dk_j, dim=1, out=dk[:, j])  # (B, r, n, c_h) -> (B, n, c_h)
        torch.sum(dv_j, dim=1, out=dv[:, j])
    return dq, dk, dv
