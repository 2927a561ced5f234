"""The unchecked computations behind `attention.functional` and the modules.

Nothing here checks its arguments: the public functions and the modules' `forward` check first,
then call in here. Keeping checks out of this file keeps it traceable by `torch.compile`.

Shapes use the book's letters: x (*batch, n, d), w (d, c), q (*batch, n, c), k/v (*batch, s, c)
(s = n in self-attention; the keys of another sequence in cross-attention); with heads,
(*batch, h, n, c_h).
"""

import math
from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _fused, _modify
from . import mods as M
from ._masks import hide_unattended, masked_softmax
from ._scores import softcap_parts


def projection(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """Q = X W (+ b)."""
    if b is None:
        return x @ w
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(
        *x.shape[:-1], w.shape[-1]
    )  # (*batch·n, c) -> (*batch, n, c)


def scale(width: float) -> float:
    """1/√c: the factor that brings q·k of c unit-variance components back to unit variance."""
    return 1.0 / math.sqrt(width)


def scores(q: Tensor, k: Tensor) -> Tensor:
    """Ω = Q Kᵀ."""
    return q @ k.mT  # k: (..., s, c) -> (..., c, s)


def scaled_scores(omega: Tensor, width: float) -> Tensor:
    """Ω / √c."""
    return omega * scale(width)


def softmax_rows(
    scaled: Tensor, allowed: Tensor | None, sinks: Tensor | None = None, *, guarded: bool = False
) -> Tensor:
    """Softmax of each row (over the keys p), masked entries 0; with `sinks` (broadcastable to
    (..., n, 1)), a sink logit in each row's denominator; `guarded`: scores may be −∞ already
    (the modifications' masks), a row of them all gets zero weights."""
    if allowed is None and sinks is None and not guarded:
        return torch.softmax(scaled, dim=-1)
    return masked_softmax(scaled, allowed, sinks)


def weights(omega: Tensor, width: int, allowed: Tensor | None) -> Tensor:
    """A = softmax(Ω / √c) row by row, masked entries 0."""
    return softmax_rows(scaled_scores(omega, width), allowed)


def context(a: Tensor, v: Tensor) -> Tensor:
    """C = A V."""
    return a @ v


def softcapped(scaled: Tensor, cap: float) -> Tensor:
    """cap · tanh(ω̃ / cap): every score within (−cap, cap), nearly unchanged where |ω̃| ≪ cap."""
    return softcap_parts(scaled, cap)[0]


def gated(c: Tensor, gamma: Tensor) -> Tensor:
    """C ∘ σ(Γ): the output gate (Qwen 3.5), each feature scaled by its logit's sigmoid."""
    return c * torch.sigmoid(gamma)


def expand_groups(t: Tensor, heads: int) -> Tensor:
    """(*batch, g, n, c_h) -> (*batch, h, n, c_h): each group repeated h/g times in place."""
    return t.repeat_interleave(heads // t.shape[-3], dim=-3)


#: Inputs of lower precision are normalised in float32, as the book's Qwen 3 `RMSNorm` does.
_LOW_PRECISION = (torch.float16, torch.bfloat16)


class _Normalised(torch.autograd.Function):
    """x · rsqrt(u), u = mean(x²) + ε over the last axis: the books' forward, bit for bit, with
    the derived backward r (ḡ − x (x·ḡ) / (c u)), r = rsqrt(u). Autograd's own backward of rsqrt
    forms u^(−3/2), which underflows in float32 once |x| ≳ 1e13 (the gradient then off by
    2–50 %); r / u does not."""

    @staticmethod
    def forward(ctx, x: Tensor, eps: float) -> Tensor:  # type: ignore[override]
        r = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        ctx.save_for_backward(x, r)
        ctx.eps = eps
        return x * r

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        x, r = ctx.saved_tensors
        u = x.pow(2).mean(dim=-1, keepdim=True) + ctx.eps
        along = (x * grad).sum(dim=-1, keepdim=True) / (x.shape[-1] * u)
        return r * (grad - x * along), None


def rms_norm(
    x: Tensor, gain: Tensor | None, eps: float, shift: Tensor | None = None, upcast: bool = True
) -> Tensor:
    """x / √(mean(x²) + ε) ∘ g (+ shift) over the last axis; float16/bfloat16 in float32 with
    `upcast`; returned in x's dtype."""
    dtype = x.dtype
    if upcast and dtype in _LOW_PRECISION:
        x = x.float()
    out = _Normalised.apply(x, eps)
    if gain is not None:  # Llama 4's L2Norm has none
        out = out * gain
    if shift is not None:
        out = out + shift
    return out.to(dtype)


def attend_explicitly(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    mods: tuple = (),
    allowed: Tensor | None = None,
    dropout_p: float = 0.0,
    heads: bool = True,
) -> tuple[Tensor, Tensor]:
    """(C, A) step by step: ω̃ = (scale·Q) Kᵀ (scale·Ω with Ω = QKᵀ, but finite wherever the
    scaled scores are, even where Ω itself would overflow), through the modifications `mods`
    (`attention._modify.forward`, on the whole matrix as one block), the user's masks `allowed`,
    A the softmax of each row (with the sink's logit in its denominator), dropout on A, C = AV.

    q: (..., n, c), k, v: (..., s, c) (with `heads`, (..., h, ·, c_h), the modifications'
    tensors one number per head); `allowed` broadcasts to (..., n, s).
    """
    n, s = q.shape[-2], k.shape[-2]
    offset = _modify.offset_of(mods)
    block = M.Block(offset, offset + n, 0, s)
    shaped = {  # one number per head: (h,) -> (h, 1, 1), or (1, 1) for one head
        kind: t.to(q.dtype)[:, None, None] if heads else t.to(q.dtype).reshape(1, 1)
        for kind, t in _modify.learned(mods).items()
    }
    scaled = scores(q * scale, k)  # (scale Q) Kᵀ: no overflow where the scaled scores fit
    scaled, _ = _modify.forward(scaled, mods, block, shaped, inplace=False)
    sink = shaped.get(_modify.sink_kind(mods) or "")
    a = softmax_rows(scaled, allowed, sink, guarded=bool(mods))
    if dropout_p > 0.0:
        a = F.dropout(a, p=dropout_p)
    return context(a, v), a


# What `attend` returns follows `return_weights`: C alone, or (C, A).
@overload
def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    heads: bool,
    mods: tuple = ...,
    allowed: Tensor | None = ...,
    dropout_p: float = ...,
    return_weights: Literal[False] = ...,
) -> Tensor: ...
@overload
def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    heads: bool,
    mods: tuple = ...,
    allowed: Tensor | None = ...,
    dropout_p: float = ...,
    return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]: ...
def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    heads: bool,
    mods: tuple = (),
    allowed: Tensor | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """C (or (C, A)) from Q, K, V: the one entry to the fast path (`attention._fused`) and the
    explicit path, every variant's.

    q (*batch, n, c) and k, v (*batch, s, c); with `heads`, q (*batch, h, n, c_h) and k, v
    (*batch, g, s, c_h), g dividing h. `scale`: the factor of q·k (1/√c, or 1/√c_h). `mods`:
    the modifications (`attention.mods`: causal with the queries' offset, a window, chunks,
    softcapping, ALiBi, sinks, …; ALiBi without slopes takes Press et al.'s for the heads).
    `allowed`: the user's masks (`_masks.given_masks`, (*batch, 1 or n, s), shared by the
    heads).

    The explicit path serves when A is wanted or dropout is on (so that dropout draws the same
    random numbers as the book's `nn.Dropout` on the weights); otherwise the fast path runs.
    Keys that no query may attend are zeroed first (`_masks.hide_unattended`).
    """
    n, s = q.shape[-2], k.shape[-2]
    offset = _modify.offset_of(mods)
    mods = _modify.resolved(mods, q.shape[-3] if heads else 1, q)
    mods = _modify.trimmed(mods, M.Block(offset, offset + n, 0, s))
    k, v = hide_unattended(k, v, mods, allowed, heads)
    if heads and allowed is not None:
        allowed = allowed.unsqueeze(-3)  # (*batch, R, s) -> (*batch, 1, R, s): shared by heads
    if return_weights or dropout_p > 0.0:
        if heads and k.shape[-3] != q.shape[-3]:  # g groups: each repeated for its h/g heads
            k, v = expand_groups(k, q.shape[-3]), expand_groups(v, q.shape[-3])
        c, a = attend_explicitly(
            q, k, v, scale=scale, mods=mods, allowed=allowed, dropout_p=dropout_p, heads=heads
        )
        return (c, a) if return_weights else c
    if not heads:
        q, k, v = q.unsqueeze(-3), k.unsqueeze(-3), v.unsqueeze(-3)  # (*b, n, c) -> (*b, 1, n, c)
        if allowed is not None:
            allowed = allowed.unsqueeze(-3)  # (*batch, R, s) -> (*batch, 1, R, s)
    out = attend_fused(q, k, v, scale=scale, mods=mods, allowed=allowed)
    return out.squeeze(-3) if not heads else out  # (*batch, 1, n, c) -> (*batch, n, c)


def attend_fused(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, mods: tuple, allowed: Tensor | None
) -> Tensor:
    """C from the fast path, q (*batch, h, n, c_h), k, v (*batch, g, s, c_h); `allowed` (the
    user's masks) broadcasts to (*batch, 1, R, s). Only a 4-D (B, h, n, c_h) input reaches the
    fused kernel (a 2-D one falls back to the math kernel: 3× slower and O(n²) memory), hence
    the reshapes."""
    *lead, heads, n, width = q.shape
    groups, s = k.shape[-3], k.shape[-2]
    q4 = q.reshape(-1, heads, n, width)  # (*batch, h, n, c_h) -> (B, h, n, c_h)
    k4 = k.reshape(-1, groups, s, width)  # (*batch, g, s, c_h) -> (B, g, s, c_h)
    v4 = v.reshape(-1, groups, s, width)
    if allowed is not None:
        rows = allowed.shape[-2]  # 1 for key padding alone, else n
        if allowed.dim() == 2:  # one mask for the whole batch: broadcast, not copied
            allowed = allowed.view(1, 1, rows, s)
        else:
            allowed = torch.broadcast_to(allowed, (*lead, 1, rows, s)).reshape(-1, 1, rows, s)
    out = _fused.attention(q4, k4, v4, scale=scale, mods=mods, allowed=allowed)
    return out.view(*lead, heads, n, width)  # (B, h, n, c_h) -> (*batch, h, n, c_h)


def split_heads(t: Tensor, heads: int) -> Tensor:
    """(*batch, n, c) -> (*batch, h, n, c_h): head i takes columns i·c_h … (i+1)·c_h − 1."""
    if heads == 1:  # one head is the whole row: no transpose (self-attention's own count)
        return t.unsqueeze(-3)
    *lead, n, c = t.shape
    return t.view(*lead, n, heads, c // heads).transpose(-3, -2)  # -> (*batch, h, n, c_h)


def merge_heads(t: Tensor) -> Tensor:
    """(*batch, h, n, c_h) -> (*batch, n, h·c_h): the heads' context vectors side by side."""
    *lead, heads, n, width = t.shape
    if heads == 1:
        return t.squeeze(-3)
    return t.transpose(-3, -2).reshape(*lead, n, heads * width)  # -> (*batch, n, c)


def attend_new_rows(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, mods: tuple, dropout_p: float, heads: bool
) -> Tensor:
    """The context rows of t new tokens during generation: their queries q (..., t, c) against
    the keys k and values v (..., s, c) of every token so far, whose last t rows are the new
    tokens' own. New token i sits at position s − t + i and attends key p iff p ≤ s − t + i
    (and the other masks of `mods` allow it): causal attention at offset s − t (`mods`' own
    causal mask, `Modification.causal`, replaced), whose blocks read the keys the masks reach
    only."""
    offset = k.shape[-2] - q.shape[-2]
    mods = M.ordered((*(m for m in mods if not m.causal), M.Causal(offset)))
    return attend(q, k, v, scale=scale, heads=heads, mods=mods, dropout_p=dropout_p)


def kept_rows(cache: Tensor, window: int | None, dim: int = -2) -> Tensor:
    """The rows of a key or value cache (s rows along `dim`) that later tokens can still
    attend: all of them, or the last w with a window."""
    if window is None or cache.shape[dim] <= window:
        return cache
    return cache.narrow(dim, cache.shape[dim] - window, window)  # s rows -> the last w
