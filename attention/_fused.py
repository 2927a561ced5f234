"""The fast path: PyTorch's fused kernel forward, and a backward pass that is exact at any scale.

Why not the kernel's own backward. With X = randn(2, 5, 3)·s and random 3×4 weights, the weight
gradients of the fused kernel's backward on the CPU (float32) against a float64 reference are
off by 4e-2 at s = 30, 6 at s = 100 (gradients of size 229) and 2e3 at s = 1000, while the
explicit path stays at 1e-5. Like every FlashAttention backward, the kernel recomputes
P = exp(S − lse) from a stored log-sum-exp and takes dS = P ∘ (dP − D) with D = rowsum(dC ∘ C).
At large scores both halves are ill-conditioned in float32: lse is a number of the size of the
scores, so P of the winning key is exp(±ulp(|S|)) instead of 1 (at |S| = 3·10⁶ the ulp is 0.25),
and dP and D are two separately rounded sums of size |dC||V| whose exact difference is 0 for a
saturated row, so their rounding error, multiplied by K, lands in dQ. Recomputing P from a
float32 lse (tests/benchmarks/bench_gradients_at_scale.py measures every variant) is no cure:
it is as wrong as the kernel at s = 1000 (and with D = rowsum(P ∘ dA), far worse).

The cure: the backward below takes each block of query rows with all their keys, recomputes
S = (Q/√c)Kᵀ for the block, and its softmax exactly as the explicit path does (the row maximum
subtracted, so the winning key gets exp(0) = 1), then the derived formulas

    dV = Aᵀ dC,  dA = dC Vᵀ,  dS = A ∘ (dA − rowsum(A ∘ dA)),  dΩ = dS/√c,
    dQ = dΩ K,  dK = dΩᵀ Q

(`torch._softmax_backward_data` is dS in one pass). Its gradients agree with the float64
reference as well as the explicit path's at every scale. A block holds `rows` × n scores
(`_plan`: 2¹⁷ entries or 128 rows, whichever is more; a few (batch, head) slices at a time), so
the extra memory is four such blocks plus dQ, dK, dV: O(n·c), never an n×n matrix (about 110 MiB at
n = 16384, c = 64, forward and backward, against 1 GiB for one n×n float32 matrix). With
`causal`, a block of rows r0…r1 needs keys < r1 only, which halves the work.

Devices: the same code runs on any device (its operations are plain torch ops). On a GPU it
would be slower than the fused backward kernels there, which also recompute P from a stored
log-sum-exp; neither their accuracy nor our speed there is measured (no GPU here).
"""

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._masks import allowed_positions, fully_masked_rows

#: Scores per query block of one (batch, head) slice: 2¹⁷ float32 entries, 512 KiB (a core's L2
#: cache holds the block's four such matrices at n ≤ 1024).
ROW_ENTRIES = 2**17
#: Fewer query rows than this make the block's matrix products slow: dV and dK sum over the
#: block's rows (one thread, backward alone against torch's: 64 rows 1.45×, 128 rows 1.32×,
#: 256 rows 1.41× at n = 4096; 1.27×, 1.25×, 1.46× at n = 1024).
MIN_ROWS = 128
#: Scores per block across slices: several (batch, head) slices go through each batched matrix
#: product, so that the threads work on slices of their own (forward + backward against torch's
#: at batch 4, 12 heads, n = 1024, two threads: one slice per block 1.28×, two 1.18×, four 1.11×,
#: six 1.07-1.09×, twelve 1.08-1.16×). 2¹⁹ is four slices of 128 rows at n = 1024.
BLOCK_ENTRIES = 2**19


def attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, allowed: Tensor | None
) -> Tensor:
    """C = softmax(QKᵀ·scale, masked) V for q, k, v of shape (B, h, n, c_h).

    `allowed` (B, 1, R, n) with R ∈ {1, n}, or None: the user's masks, causal kept apart. A
    query that may attend no key gets a zero row. With gradients, through `FusedAttention`.
    """
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return FusedAttention.apply(q, k, v, scale, causal, allowed)
    return _forward(q, k, v, scale, causal, allowed)


def _forward(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, allowed: Tensor | None
) -> Tensor:
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    # the kernel takes a mask or its causal flag, not both: with a mask, causal joins it
    allowed = allowed_positions(q.shape[-2], q.device, causal, allowed)
    dead = fully_masked_rows(allowed).unsqueeze(-1)  # (B, 1, R) -> (B, 1, R, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | dead, scale=scale)
    return out.masked_fill(dead, 0.0)  # opened only to avoid 0/0: those rows are zero


class FusedAttention(torch.autograd.Function):
    """The fused kernel forward; the blockwise backward of this module's docstring."""

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


def _plan(slices: int, n: int) -> tuple[int, int]:
    """(slices per block, query rows per block): about ROW_ENTRIES scores per slice and
    BLOCK_ENTRIES per block, at least MIN_ROWS rows (or all n)."""
    rows = min(n, max(MIN_ROWS, ROW_ENTRIES // n))
    group = max(1, BLOCK_ENTRIES // (rows * n))
    return min(group, slices), rows


def _block_mask(allowed: Tensor, where: tuple, heads: int, rows: slice, keys: int) -> Tensor:
    """The block's part of `allowed` (B, 1, R, n): (G or 1, r1 − r0 or 1, keys), where `where`
    is the block's (batch entry, heads) or (range of flattened B·h slices)."""
    rows = rows if allowed.shape[-2] > 1 else slice(None)  # key padding: one row for all
    if len(where) == 2:  # one batch entry: its mask, shared by the heads
        return allowed[where[0], 0, rows, :keys]
    s0, s1 = where[0].start, where[0].stop
    index = torch.arange(s0, s1, device=allowed.device) // heads  # slice -> batch entry
    return allowed[index, 0, rows, :keys]  # -> (G, R', keys)


def _groups(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, group: int) -> tuple:
    """How to cut (B, h, n, c_h) into groups of slices without copying: (tensors to index, the
    index of each group). Split heads are views into (B, n, h, c_h) and cannot be flattened to
    (B·h, n, c_h) without a copy each, so they go one batch entry at a time, `group` heads at a
    time; otherwise the slices are flattened."""
    batch, heads, n, width = q.shape
    tensors = (q, k, v, grad_out)
    if heads > 1 and group <= heads and not all(t.is_contiguous() for t in tensors):
        where = [(b, slice(h, min(heads, h + group))) for b in range(batch)
                 for h in range(0, heads, group)]  # fmt: skip
        return tensors, where
    slices = batch * heads
    flat = tuple(t.reshape(slices, n, width) for t in tensors)  # (B, h, n, c_h) -> (B·h, n, c_h)
    return flat, [(slice(s, min(slices, s + group)),) for s in range(0, slices, group)]


def gradients(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad_out: Tensor,
    scale: float,
    causal: bool,
    allowed: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV) for q, k, v, grad_out of shape (B, h, n, c_h), block by block; the
    gradients have the memory layout of the groups' tensors (see `_groups`)."""
    batch, heads, n, width = q.shape
    group, rows = _plan(batch * heads, n)
    (q, k, v, grad_out), where = _groups(q, k, v, grad_out, group)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    above = torch.ones(rows, rows, dtype=torch.bool, device=q.device).triu(1) if causal else None
    for slices in where:
        q_s, k_s, v_s, g_s = q[slices], k[slices], v[slices], grad_out[slices]  # (G, n, c_h)
        dq_s, dk_s, dv_s = dq[slices], dk[slices], dv[slices]
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            keys = r1 if causal else n  # causal: the keys after the block's last row are masked
            q_b, g_b = q_s[:, r0:r1] * scale, g_s[:, r0:r1]
            k_b, v_b = k_s[:, :keys], v_s[:, :keys]
            s = torch.bmm(q_b, k_b.transpose(1, 2))  # (G, b, c_h) @ (G, c_h, keys) -> (G, b, keys)
            if above is not None:
                s[..., r0:r1].masked_fill_(above[: r1 - r0, : r1 - r0], float("-inf"))
            if allowed is not None:
                block = _block_mask(allowed, slices, heads, slice(r0, r1), keys)
                s.masked_fill_(~block, float("-inf"))
            a = torch.softmax(s, dim=-1)
            if allowed is not None:  # a row with no key: 0/0 above, zero weights by convention
                a.masked_fill_(torch.isneginf(s.amax(dim=-1, keepdim=True)), 0.0)
            dv_s[:, :keys].baddbmm_(a.transpose(1, 2), g_b)  # += Aᵀ dC
            d_a = torch.bmm(g_b, v_b.transpose(1, 2))  # dA = dC Vᵀ: (G, b, keys)
            d_s = torch._softmax_backward_data(d_a, a, -1, a.dtype)  # A ∘ (dA − rowsum(A ∘ dA))
            dq_s[:, r0:r1] = torch.bmm(d_s, k_b)  # dS K (the 1/√c comes below)
            dk_s[:, :keys].baddbmm_(d_s.transpose(1, 2), q_b)  # += dSᵀ (Q/√c) = dΩᵀ Q
    dq.mul_(scale)  # dQ = dΩ K = (dS/√c) K
    shape = (batch, heads, n, width)
    return dq.view(shape), dk.view(shape), dv.view(shape)  # (B·h, n, c_h) -> (B, h, n, c_h)
