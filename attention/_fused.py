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

Sliding windows. With a window w (query m attends key p iff 0 ≤ m − p < w), the forward runs
the fused kernel block by block too: each block of query rows r0…r1 − 1 against its keys
r0 − w + 1 … r1 − 1 only, with the band as a boolean mask of (r1 − r0) × (r1 − r0 + w − 1)
entries, so that neither pass ever holds an n×n matrix (the kernel given one n×n boolean mask
would, and would do n² work); the backward takes the same blocks. Cross-attention (n queries, s
keys, never causal) goes through the same code with s in place of n for the keys.

Devices: the same code runs on any device (its operations are plain torch ops). On a GPU it
would be slower than the fused backward kernels there, which also recompute P from a stored
log-sum-exp; neither their accuracy nor our speed there is measured (no GPU here).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._masks import allowed_positions, band_allowed, fully_masked_rows

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
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    causal: bool,
    allowed: Tensor | None,
    window: int | None = None,
) -> Tensor:
    """C = softmax(QKᵀ·scale, masked) V for q of shape (B, h, n, c_h), k and v (B, h, s, c_h).

    `allowed` (B, 1, R, s) with R ∈ {1, n}, or None: the user's masks, causal and the window
    kept apart. `causal` (s = n) keeps p ≤ m; `window` w < n (with causal) keeps 0 ≤ m − p < w.
    A query that may attend no key gets a zero row. With gradients, through `FusedAttention`.
    """
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return FusedAttention.apply(q, k, v, scale, causal, allowed, window)
    return _forward(q, k, v, scale, causal, allowed, window)


def _forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    causal: bool,
    allowed: Tensor | None,
    window: int | None,
) -> Tensor:
    if window is not None:
        return _windowed_forward(q, k, v, scale, window, allowed)
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    # the kernel takes a mask or its causal flag, not both: with a mask, causal joins it
    allowed = allowed_positions(q.shape[-2], q.device, causal, allowed)
    dead = fully_masked_rows(allowed).unsqueeze(-1)  # (B, 1, R) -> (B, 1, R, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | dead, scale=scale)
    return out.masked_fill(dead, 0.0)  # opened only to avoid 0/0: those rows are zero


def _windowed_forward(
    q: Tensor, k: Tensor, v: Tensor, scale: float, window: int, allowed: Tensor | None
) -> Tensor:
    """The fused kernel on each block of query rows r0…r1 − 1 against keys r0 − w + 1 … r1 − 1,
    with the band (and the user's masks) as its mask.

    Every block whose keys start at r0 − w + 1 ≥ 0 sees the same band, relative to its first
    row, so one additive mask (0 or −∞, in q's dtype) serves them all: a boolean mask would be
    turned into such a one by the kernel at every call, which costs more than the block's
    attention at small widths.
    """
    batch, heads, n, _ = q.shape
    _, rows = _plan(batch * heads, n, window=window)
    span = rows + window - 1
    inside = band_allowed(range(window - 1, window - 1 + rows), range(span), window, q.device)
    shared = _additive(inside, q.dtype)  # (rows, rows + w − 1), for blocks with r0 ≥ w − 1
    out = q.new_empty(q.shape)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        lo = max(0, r0 - window + 1)
        if r0 >= window - 1:
            block = shared[: r1 - r0, : r1 - lo]
        else:  # the first blocks: fewer keys than the band would reach
            block = _additive(band_allowed(range(r0, r1), range(lo, r1), window, q.device), q.dtype)
        dead = None
        if allowed is not None:
            rows_of = slice(r0, r1) if allowed.shape[-2] > 1 else slice(None)
            given = (block == 0) & allowed[..., rows_of, lo:r1]  # -> (B, 1, b, keys)
            dead = fully_masked_rows(given).unsqueeze(-1)  # (B, 1, b) -> (B, 1, b, 1)
            block = _additive(given | dead, q.dtype)
        part = F.scaled_dot_product_attention(
            q[:, :, r0:r1], k[:, :, lo:r1], v[:, :, lo:r1], attn_mask=block, scale=scale
        )  # (B, h, b, c_h)
        out[:, :, r0:r1] = part if dead is None else part.masked_fill(dead, 0.0)
    return out


def _additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask as the kernel adds it to the scores: 0 where allowed, −∞ where not."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, float("-inf")
    )


class FusedAttention(torch.autograd.Function):
    """The fused kernel forward; the blockwise backward of this module's docstring."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, allowed, window):  # type: ignore[override]
        ctx.save_for_backward(q, k, v, allowed)
        ctx.scale, ctx.causal, ctx.window = scale, causal, window
        return _forward(q, k, v, scale, causal, allowed, window)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, allowed = ctx.saved_tensors
        dq, dk, dv = gradients(q, k, v, grad_out, ctx.scale, ctx.causal, allowed, ctx.window)
        return dq, dk, dv, None, None, None, None


def _plan(slices: int, n: int, keys: int | None = None, window: int | None = None) -> tuple:
    """(slices per block, query rows per block) for n queries and `keys` keys (n if None):
    about ROW_ENTRIES scores per slice and BLOCK_ENTRIES per block, at least MIN_ROWS rows (or
    all n). With a window w, a block of b rows reads b + w − 1 keys."""
    keys = n if keys is None else keys
    if window is None:
        rows = min(n, max(MIN_ROWS, ROW_ENTRIES // keys))
        span = keys
    else:  # the largest b with b (b + w − 1) ≤ ROW_ENTRIES
        fit = (math.sqrt((window - 1) ** 2 + 4 * ROW_ENTRIES) - (window - 1)) / 2
        rows = min(n, max(MIN_ROWS, int(fit)))
        span = min(keys, rows + window - 1)
    group = max(1, BLOCK_ENTRIES // (rows * span))
    return min(group, slices), rows


def _block_mask(allowed: Tensor, where: tuple, heads: int, rows: slice, keys: slice) -> Tensor:
    """The block's part of `allowed` (B, 1, R, s): (G or 1, r1 − r0 or 1, keys), where `where`
    is the block's (batch entry, heads) or (range of flattened B·h slices)."""
    rows = rows if allowed.shape[-2] > 1 else slice(None)  # key padding: one row for all
    if len(where) == 2:  # one batch entry: its mask, shared by the heads
        return allowed[where[0], 0, rows, keys]
    s0, s1 = where[0].start, where[0].stop
    index = torch.arange(s0, s1, device=allowed.device) // heads  # slice -> batch entry
    return allowed[index, 0, rows, keys]  # -> (G, R', keys)


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
    flat = tuple(t.reshape(slices, t.shape[-2], width) for t in tensors)  # -> (B·h, n or s, c_h)
    return flat, [(slice(s, min(slices, s + group)),) for s in range(0, slices, group)]


def gradients(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad_out: Tensor,
    scale: float,
    causal: bool,
    allowed: Tensor | None,
    window: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV) for q, grad_out of shape (B, h, n, c_h) and k, v of shape (B, h, s, c_h),
    block by block; the gradients have the memory layout of the groups' tensors (`_groups`)."""
    batch, heads, n, width = q.shape
    total = k.shape[-2]
    group, rows = _plan(batch * heads, n, total, window)
    (q, k, v, grad_out), where = _groups(q, k, v, grad_out, group)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    above = None
    if causal and window is None:
        above = torch.ones(rows, rows, dtype=torch.bool, device=q.device).triu(1)
    for slices in where:
        q_s, k_s, v_s, g_s = q[slices], k[slices], v[slices], grad_out[slices]  # (G, n or s, c_h)
        dq_s, dk_s, dv_s = dq[slices], dk[slices], dv[slices]
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            # causal: the keys after the block's last row are masked; a window: those before
            keys = slice(max(0, r0 - window + 1) if window else 0, r1 if causal else total)
            q_b, g_b = q_s[:, r0:r1] * scale, g_s[:, r0:r1]
            k_b, v_b = k_s[:, keys], v_s[:, keys]
            s = torch.bmm(q_b, k_b.transpose(1, 2))  # (G, b, c_h) @ (G, c_h, keys) -> (G, b, keys)
            if window is not None:
                band = band_allowed(range(r0, r1), range(keys.start, keys.stop), window, q.device)
                s.masked_fill_(~band, float("-inf"))
            elif above is not None:
                s[..., r0:r1].masked_fill_(above[: r1 - r0, : r1 - r0], float("-inf"))
            if allowed is not None:
                block = _block_mask(allowed, slices, heads, slice(r0, r1), keys)
                s.masked_fill_(~block, float("-inf"))
            a = torch.softmax(s, dim=-1)
            if allowed is not None:  # a row with no key: 0/0 above, zero weights by convention
                a.masked_fill_(torch.isneginf(s.amax(dim=-1, keepdim=True)), 0.0)
            dv_s[:, keys].baddbmm_(a.transpose(1, 2), g_b)  # += Aᵀ dC
            d_a = torch.bmm(g_b, v_b.transpose(1, 2))  # dA = dC Vᵀ: (G, b, keys)
            d_s = torch._softmax_backward_data(d_a, a, -1, a.dtype)  # A ∘ (dA − rowsum(A ∘ dA))
            dq_s[:, r0:r1] = torch.bmm(d_s, k_b)  # dS K (the 1/√c comes below)
            dk_s[:, keys].baddbmm_(d_s.transpose(1, 2), q_b)  # += dSᵀ (Q/√c) = dΩᵀ Q
    dq.mul_(scale)  # dQ = dΩ K = (dS/√c) K
    rows_of, keys_of = (batch, heads, n, width), (batch, heads, total, width)
    return dq.view(rows_of), dk.view(keys_of), dv.view(keys_of)  # (B·h, ·, c_h) -> (B, h, ·, c_h)
