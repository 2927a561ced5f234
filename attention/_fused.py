"""The one fast path: every variant's attention without an n×n matrix, and one backward pass,
blockwise and exact at any score scale.

What it computes. Queries q (B, h, n, c_h) in h heads; keys and values k, v (B, g, s, c_h) in g
groups, g dividing h, head ℓ (0-based) reading group ℓ // (h/g) (g = h: multi-head attention;
g = 1: multi-query attention). Query m sits at position m + o (`offset` o: 0 in self-attention,
s − n when new tokens attend a cache) and key p at position p. Each row of scores is, in this
order (`Scores`):

    ω̃_{m,p} = scale · q_m · k_p                        (scale = 1/√c_h, or 1/√query_pre_attn_scalar)
    ω̃_{m,p} ← cap · tanh(ω̃_{m,p} / cap)                 (logit softcapping, Gemma 2)
    ω̃_{m,p} ← ω̃_{m,p} − μ_ℓ · (m + o − p)               (ALiBi: a slope μ_ℓ per head, BLOOM)
    ω̃_{m,p} ← −∞ unless p is allowed                   (causal p ≤ m + o; a window m + o − p < w;
                                                         the user's masks, shared by the heads)
    a_{m,p} = exp(ω̃_{m,p}) / (exp(σ_ℓ) + Σ_r exp(ω̃_{m,r}))   (a sink logit σ_ℓ per head, GPT-OSS;
                                                         without sinks the exp(σ_ℓ) term is 0)

and C = A V. A query that may attend no key gets a zero row (with a sink, the sink takes all its
weight: the same zero row).

The forward pass. Without softcapping, ALiBi or sinks, PyTorch's fused kernel
(`scaled_dot_product_attention`, its own grouped-query support, so K and V are never repeated):
whole when the mask is the kernel's causal flag or the user's mask, and block by block when a
window or an offset bands the keys (each block of query rows against the keys its band reaches,
with the band as the block's mask, so that neither pass holds an n×n matrix or does n² work).
With a modification the kernel does not know, `_sweep` below: the same blocks, the scores of each
computed, modified and normalised in full.

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
it is as wrong as the kernel at s = 1000 (and with D = rowsum(P ∘ dA), far worse). This is
derived, to first order in float32's rounding, by `derive.proofs.rounding` (printed in
``derive latex --variant flash``, "Where float32 breaks it"): a weight from the stored lse
carries u |L_m|, one from the row's maximum u (μ_m − ω̃_{m,r}) times a weight, at most u/e; and
the rounding of dA cancels in D = rowsum(A ∘ dA) summed from the same dA as the row saturates,
not in D = rowsum(dC ∘ C). tests/benchmarks/bench_flash_rounding.py measures both routes
against those bounds.

The backward pass (`_sweep` with the upstream gradient): each block of query rows with all the
keys they may attend, its scores recomputed and normalised exactly as the explicit path does (the
row maximum subtracted, so the winning key gets exp(0) = 1), then the derived formulas

    dV = Aᵀ dC,  dA = dC Vᵀ,  dΩ̃' = A ∘ (dA − rowsum(A ∘ dA)),
    dμ_ℓ = −Σ_{m,p} dΩ̃'_{m,p} (m + o − p)    (ALiBi's slopes, when they are learned),
    dΩ̃ = dΩ̃' ∘ (1 − tanh²(ω̃/cap))           (softcapping),
    dσ_ℓ = −Σ_m a_{m,σ} rowsum(A ∘ dA)_m      (a sink carries no value: its dA is 0),
    dQ = scale · dΩ̃ K,  dK = scale · dΩ̃ᵀ Q

(`torch._softmax_backward_data` is dΩ̃' in one pass, the sink's column included, since its dA is
0). Its gradients agree with the float64 reference as well as the explicit path's at every
scale. The h/g query heads of a group go through each matrix product together, as (h/g)·b rows
against their group's keys, so dK and dV sum over the group's heads inside the products.

Memory. A block holds `rows` × keys scores per slice (`_plan`: about 2¹⁷ entries or 128 rows,
whichever is more, and a few (batch, group) slices at a time), so the extra memory is a few such
blocks plus copies of Q, K, V, dC and the gradients: O(n·c), never an n×n matrix (about 110 MiB
at n = 16384, c = 64, forward and backward, against 1 GiB for one n×n float32 matrix). With
causal attention a block of rows needs the keys before its last row only, which halves the
work; with a window, the w − 1 keys before its first row and its own.

Devices: the same code runs on any device (its operations are plain torch ops). On a GPU it
would be slower than the fused backward kernels there, which also recompute P from a stored
log-sum-exp; neither their accuracy nor our speed there is measured (no GPU here).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ._masks import allowed_positions, band, fully_masked_rows
from ._modifications import distance, key_range, sink_normalised, softcap_parts

__all__ = ["Scores", "attention", "gradients"]

#: Scores per query block of one slice: 2¹⁷ float32 entries, 512 KiB (a core's L2 cache holds
#: the block's four such matrices at n ≤ 1024).
ROW_ENTRIES = 2**17
#: Fewer query rows than this make the block's matrix products slow: dV and dK sum over the
#: block's rows (one thread, backward alone against torch's: 64 rows 1.45×, 128 rows 1.32×,
#: 256 rows 1.41× at n = 4096; 1.27×, 1.25×, 1.46× at n = 1024).
MIN_ROWS = 128
#: Scores per block across slices: several (batch, group) slices go through each batched matrix
#: product, so that the threads work on slices of their own (forward + backward against torch's
#: at batch 4, 12 heads, n = 1024, two threads: one slice per block 1.28×, two 1.18×, four 1.11×,
#: six 1.07-1.09×, twelve 1.08-1.16×). 2¹⁹ is four slices of 128 rows at n = 1024.
BLOCK_ENTRIES = 2**19


@dataclass(frozen=True, eq=False)
class Scores:
    """How each row of scores is formed before its softmax (the module docstring's order).

    scale: the factor of q·k. causal: query m (at position m + offset) attends keys p ≤ m +
    offset; window w (with causal): only m + offset − p < w. allowed: the user's masks, (B or 1,
    1, R, s) with R ∈ {1, n}, True = may attend, or None. softcap: cap, or None. slopes: ALiBi's
    μ_ℓ, (h,), or None (with causal: the bias −μ_ℓ (m + offset − p)).
    """

    scale: float
    causal: bool = False
    window: int | None = None
    offset: int = 0
    allowed: Tensor | None = None
    softcap: float | None = None
    slopes: Tensor | None = None

    @property
    def kernel_knows(self) -> bool:
        """Whether the fused kernel computes these scores itself (no softcap, no ALiBi)."""
        return self.softcap is None and self.slopes is None

    @property
    def banded(self) -> bool:
        """Whether the allowed keys of a row form a band other than the kernel's causal one."""
        return self.causal and (self.window is not None or self.offset != 0)


def attention(
    q: Tensor, k: Tensor, v: Tensor, scores: Scores, sinks: Tensor | None = None
) -> Tensor:
    """C (B, h, n, c_h) for q (B, h, n, c_h), k and v (B, g, s, c_h), `sinks` σ (h,) or None.
    With gradients, through `_Attention` (the blockwise exact backward)."""
    leaves = [t for t in (q, k, v, sinks, scores.slopes) if t is not None]
    if torch.is_grad_enabled() and any(t.requires_grad for t in leaves):
        s = scores
        return _Attention.apply(
            q, k, v, sinks, s.allowed, s.slopes, s.scale, s.causal, s.window, s.offset, s.softcap
        )
    return _forward(q, k, v, scores, sinks)


def _forward(q: Tensor, k: Tensor, v: Tensor, scores: Scores, sinks: Tensor | None) -> Tensor:
    if sinks is not None or not scores.kernel_knows:
        return _sweep(q, k, v, scores, sinks)[0]
    if scores.banded:
        return _banded_forward(q, k, v, scores)
    gqa = q.shape[1] != k.shape[1]
    allowed = scores.allowed
    if allowed is None:
        return F.scaled_dot_product_attention(
            q * scores.scale, k, v, is_causal=scores.causal, scale=1.0, enable_gqa=gqa
        )  # the scale on Q first: no overflow of q·k where the scaled scores fit
    # the kernel takes a mask or its causal flag, not both: with a mask, causal joins it
    allowed = allowed_positions(q.shape[-2], q.device, scores.causal, allowed)
    dead = fully_masked_rows(allowed).unsqueeze(-1)  # (B, 1, R) -> (B, 1, R, 1)
    out = F.scaled_dot_product_attention(
        q * scores.scale, k, v, attn_mask=allowed | dead, scale=1.0, enable_gqa=gqa
    )
    return out.masked_fill(dead, 0.0)  # opened only to avoid 0/0: those rows are zero


def _banded_forward(q: Tensor, k: Tensor, v: Tensor, scores: Scores) -> Tensor:
    """The fused kernel on each block of query rows against the keys of its band (a window, or
    the cache before new tokens), with the band (and the user's masks) as its mask.

    With a window, every block whose band starts at a key ≥ 0 sees the same band relative to its
    first row, so one additive mask (0 or −∞, in q's dtype) serves them all: a boolean mask would
    be turned into such a one by the kernel at every call, which costs more than the block's
    attention at small widths.
    """
    batch, heads, n, _ = q.shape
    groups, total = k.shape[1], k.shape[2]
    window, offset, allowed = scores.window, scores.offset, scores.allowed
    _, rows = _plan(batch * groups, n, total, window, heads // groups)
    shared = None
    if window is not None:
        span = rows + window - 1
        inside = band(window - 1, window - 1 + rows, 0, span, window, q.device)
        shared = _additive(inside, q.dtype)  # (rows, rows + w − 1), for a band starting ≥ 0
    out = q.new_empty(q.shape)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        first, last = r0 + offset, r1 + offset  # the block's positions
        low, high = key_range(scores.causal, scores.window, first, last, total)
        if shared is not None and first - window + 1 >= 0 and last <= total:  # pyright: ignore[reportOperatorIssue]  # shared: with a window
            block = shared[: r1 - r0, : high - low]
        else:
            block = _additive(band(first, last, low, high, window, q.device), q.dtype)
        dead = None
        if allowed is not None:
            rows_of = slice(r0, r1) if allowed.shape[-2] > 1 else slice(None)
            given = (block == 0) & allowed[..., rows_of, low:high]  # -> (B, 1, b, K)
            dead = fully_masked_rows(given).unsqueeze(-1)  # (B, 1, b) -> (B, 1, b, 1)
            block = _additive(given | dead, q.dtype)
        part = F.scaled_dot_product_attention(
            q[:, :, r0:r1] * scores.scale,
            k[:, :, low:high],
            v[:, :, low:high],
            attn_mask=block,
            scale=1.0,
            enable_gqa=heads != groups,
        )  # (B, h, b, c_h)
        out[:, :, r0:r1] = part if dead is None else part.masked_fill(dead, 0.0)
    return out


def _additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask as the kernel adds it to the scores: 0 where allowed, −∞ where not."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, float("-inf")
    )


class _Attention(torch.autograd.Function):
    """`_forward`, and `_sweep`'s exact blockwise backward. The scores' options travel as plain
    arguments (torch.compile traces an autograd.Function whose arguments are tensors and
    constants)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, allowed, slopes, scale, causal, window, offset, softcap):  # type: ignore[override]  # noqa: E501
        scores = Scores(scale, causal, window, offset, allowed, softcap, slopes)
        ctx.save_for_backward(q, k, v, sinks, allowed, slopes)
        ctx.options = (scale, causal, window, offset, softcap)
        return _forward(q, k, v, scores, sinks)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, sinks, allowed, slopes = ctx.saved_tensors
        scale, causal, window, offset, softcap = ctx.options
        scores = Scores(scale, causal, window, offset, allowed, softcap, slopes)
        learned = (ctx.needs_input_grad[3], ctx.needs_input_grad[5])  # sinks, slopes
        dq, dk, dv, d_sinks, d_slopes = gradients(q, k, v, grad_out, scores, sinks, learned)
        return dq, dk, dv, d_sinks, None, d_slopes, None, None, None, None, None


def gradients(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad_out: Tensor,
    scores: Scores,
    sinks: Tensor | None = None,
    learned: tuple[bool, bool] = (True, True),
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """(dQ, dK, dV, dσ, dμ) for the upstream gradient dC (B, h, n, c_h); dσ is None without
    sinks, dμ (ALiBi's slopes) without slopes, and each is None where `learned` (sinks, slopes)
    says it is not wanted."""
    return _sweep(q, k, v, scores, sinks, grad_out, learned)  # type: ignore[return-value]


def _plan(
    slices: int, n: int, keys: int | None = None, window: int | None = None, heads: int = 1
) -> tuple[int, int]:
    """(slices per block, query rows per block) for n queries of `heads` heads each against
    `keys` keys (n if None): about ROW_ENTRIES scores per slice and BLOCK_ENTRIES per block, at
    least MIN_ROWS rows of scores (or all n). With a window w, a block of b rows reads at most
    b + w − 1 keys."""
    keys = n if keys is None else keys
    least = -(-MIN_ROWS // heads)  # the heads' rows together make the products' rows
    if window is None:
        rows = min(n, max(least, ROW_ENTRIES // (heads * keys)))
        span = keys
    else:  # the largest b with heads · b (b + w − 1) ≤ ROW_ENTRIES
        area = ROW_ENTRIES / heads
        fit = (math.sqrt((window - 1) ** 2 + 4 * area) - (window - 1)) / 2
        rows = min(n, max(least, int(fit)))
        span = min(keys, rows + window - 1)
    group = max(1, BLOCK_ENTRIES // (heads * rows * span))
    return min(group, slices), rows


def _packs(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor | None, pack: int) -> tuple:
    """How to cut the (batch, group) slices into packs without copying: (the tensors as views
    whose first axes a pack indexes, each pack's index and its slices' batch entries and groups).

    Contiguous tensors are flattened to (B·g, h/g, ·, c_h), a pack any run of slices. Split
    heads are views into (B, n, h, c_h) that cannot be flattened without a copy each, so they go
    one batch entry at a time, `pack` groups at a time, as (B, g, h/g, ·, c_h) views.
    """
    batch, heads, n, width = q.shape
    groups, total = k.shape[1], k.shape[2]
    r = heads // groups
    tensors = (q, k, v) if grad_out is None else (q, k, v, grad_out)
    shapes = [
        (groups, r, n, width),
        (groups, total, width),
        (groups, total, width),
        (groups, r, n, width),
    ]
    if all(t.is_contiguous() for t in tensors):
        flat = tuple(t.view(-1, *shape[1:]) for t, shape in zip(tensors, shapes, strict=False))
        slices = batch * groups
        where = []
        for t0 in range(0, slices, pack):
            index = torch.arange(t0, min(slices, t0 + pack), device=q.device)
            where.append(((slice(t0, t0 + len(index)),), index // groups, index % groups))
        return flat, where
    split = tuple(t.view(batch, *shape) for t, shape in zip(tensors, shapes, strict=False))
    where = []
    for b in range(batch):
        for j0 in range(0, groups, pack):
            index = torch.arange(j0, min(groups, j0 + pack), device=q.device)
            entry = torch.full_like(index, b)
            where.append(((b, slice(j0, j0 + len(index))), entry, index))
    return split, where


def _sweep(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scores: Scores,
    sinks: Tensor | None,
    grad_out: Tensor | None = None,
    learned: tuple[bool, bool] = (True, True),
) -> tuple:
    """The blocks of the module docstring: (C,) without `grad_out`; with it, (dQ, dK, dV, dσ,
    dμ), dσ and dμ where `learned` asks for them."""
    batch, heads, n, width = q.shape
    groups, total = k.shape[1], k.shape[2]
    r = heads // groups
    pack, rows = _plan(batch * groups, n, total, scores.window, r)
    tensors, where = _packs(q, k, v, grad_out, pack)
    q_all, k_all, v_all = tensors[:3]
    backward = grad_out is not None
    # Type-checker notes, for the `pyright: ignore`s below: each name bound in one branch is read
    # under the same `backward` only, and d_sinks, d_slopes and the sink's weights are tensors
    # only where sinks and slopes are; pyright follows neither.
    if backward:
        g_all = tensors[3]
        dq = torch.empty_like(q).view(q_all.shape)  # q's memory layout, its packs' view
        dk, dv = torch.zeros_like(k).view(k_all.shape), torch.zeros_like(v).view(v_all.shape)
        per_head_grad = (batch, groups, r)
        wanted_of = zip((sinks, scores.slopes), learned, strict=True)
        d_sinks, d_slopes = (
            None if t is None or not wanted else q.new_zeros(per_head_grad)
            for t, wanted in wanted_of
        )
    else:
        out = torch.empty_like(q).view(q_all.shape)
    per_head = [
        None if t is None else t.to(q.dtype).view(groups, r)[..., None, None]
        for t in (sinks, scores.slopes)
    ]  # (g, h/g, 1, 1)
    allowed = scores.allowed

    def one_pack(item: tuple) -> None:
        index, entries, group_of = item
        sink, slope = (None if t is None else t[group_of] for t in per_head)  # (G, r, 1, 1)
        given = None
        if allowed is not None:  # (B or 1, 1, R, s) -> (G, 1, R, s): each slice's batch entry
            given = allowed[entries if allowed.shape[0] > 1 else torch.zeros_like(entries)]
        q_s, k_s, v_s = q_all[index], k_all[index], v_all[index]  # (G, r, n, c_h), (G, s, c_h)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            first, last = r0 + scores.offset, r1 + scores.offset
            low, high = key_range(scores.causal, scores.window, first, last, total)
            target = (dq if backward else out)[index]  # pyright: ignore[reportPossiblyUnboundVariable]
            if high <= low:  # no key for any of these queries: zero rows, no gradient
                target[:, :, r0:r1] = 0.0
                continue
            shape = (q_s.shape[0], r, r1 - r0, high - low)  # (G, h/g, b, K)
            q_b = q_s[:, :, r0:r1].reshape(shape[0], -1, width) * scores.scale  # (G, r·b, c_h)
            k_b, v_b = k_s[:, low:high], v_s[:, low:high]
            s = torch.bmm(q_b, k_b.transpose(1, 2)).view(shape)  # (G, r·b, c_h) @ (G, c_h, K)
            a, capped, sink_weight = _weights(
                s, scores, sink, slope, given, first, last, (low, high), r0
            )
            a_b = a.view(shape[0], -1, shape[3])  # (G, h/g, b, K) -> (G, r·b, K)
            if not backward:
                target[:, :, r0:r1] = torch.bmm(a_b, v_b).view(*shape[:3], width)
                continue
            g_b = g_all[index][:, :, r0:r1].reshape(shape[0], -1, width)  # pyright: ignore[reportPossiblyUnboundVariable]
            dv[index][:, low:high].baddbmm_(a_b.transpose(1, 2), g_b)  # += Aᵀ dC  # pyright: ignore[reportPossiblyUnboundVariable]
            d_a = torch.bmm(g_b, v_b.transpose(1, 2))  # dA = dC Vᵀ: (G, r·b, K)
            d_s = torch._softmax_backward_data(d_a, a_b, -1, a_b.dtype)  # A ∘ (dA − rowsum)  # pyright: ignore[reportPrivateImportUsage]  # no public name
            if d_sinks is not None:  # dσ = −Σ_m a_{m,σ} rowsum(A ∘ dA)_m
                along = (a_b * d_a).sum(dim=-1).view(shape[:3])  # (G, r, b)
                d_sinks[entries, group_of] -= (sink_weight * along).sum(dim=-1)  # pyright: ignore[reportOptionalOperand]
            if d_slopes is not None:  # dμ_ℓ = −Σ_{m,p} dω̇_{m,p} (m − p), before the cap's factor
                gaps = distance(first, last, low, high, q_b)
                d_slopes[entries, group_of] -= (d_s.view(shape) * gaps).sum(dim=(-2, -1))
            if capped is not None:  # through ω̃ ↦ cap·tanh(ω̃/cap): times 1 − tanh² (in place)
                d_s.view(shape).mul_(capped.square_().neg_().add_(1.0))
            target[:, :, r0:r1] = torch.bmm(d_s, k_b).view(*shape[:3], width)
            dk[index][:, low:high].baddbmm_(d_s.transpose(1, 2), q_b)  # += dΩ̃ᵀ (scale Q)  # pyright: ignore[reportPossiblyUnboundVariable]

    _each(one_pack, where, q.device)
    if not backward:
        return (out.view(q.shape),)  # pyright: ignore[reportPossiblyUnboundVariable]
    dq = dq.view(q.shape).mul_(scores.scale)  # dQ = scale · dΩ̃ K  # pyright: ignore[reportPossiblyUnboundVariable]
    if d_sinks is not None:  # pyright: ignore[reportPossiblyUnboundVariable]
        d_sinks = d_sinks.sum(dim=0).view(heads).to(sinks.dtype)  # (B, g, r) -> (h,)  # pyright: ignore[reportPossiblyUnboundVariable, reportOptionalMemberAccess]
    if d_slopes is not None:  # pyright: ignore[reportPossiblyUnboundVariable]
        d_slopes = d_slopes.sum(dim=0).view(heads).to(scores.slopes.dtype)  # pyright: ignore[reportPossiblyUnboundVariable, reportOptionalMemberAccess]
    return dq, dk.view(k.shape), dv.view(v.shape), d_sinks, d_slopes  # pyright: ignore[reportPossiblyUnboundVariable]


#: Threads that run the packs side by side, each thread's products single-threaded (None: as
#: many as torch has; 1: one pack after the other, each product on torch's threads). `_each`.
PACK_THREADS: int | None = None
_POOLS: dict = {}  # thread count -> its ThreadPoolExecutor, made on first use


def _each(work, packs: list, device: torch.device) -> None:
    """`work(pack)` for every pack.

    On the CPU, the packs go to a pool of as many threads as torch has (`PACK_THREADS`), torch's
    own intra-op threads set to 1 meanwhile and restored after: each thread takes the next pack
    when it is done with its last. A thread slowed by another process on its core then takes
    fewer packs, where torch's threads, splitting every product evenly, each wait for the
    slowest at the end of every one of the blocks' many small products (forward + backward at
    batch 4, 12 heads, n = 1024, beside a one-core busy loop: 2.3× torch's fused kernel with
    torch's threads, 1.1× with the pool; docs/benchmarks.md). While the pool runs, other threads
    of the process see torch set to one thread.

    In the calling thread, one pack after the other: with one thread, on other devices, under
    torch.compile, and under a dispatch mode (tracing or recording operations), whose state is
    the calling thread's own."""
    threads = torch.get_num_threads() if PACK_THREADS is None else PACK_THREADS
    threads = min(threads, len(packs))
    serial = (
        device.type != "cpu"
        or torch.compiler.is_compiling()
        or _get_current_dispatch_mode() is not None
    )
    if threads <= 1 or serial:
        for pack in packs:
            work(pack)
        return
    from concurrent.futures import ThreadPoolExecutor

    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="attention")
    grad = torch.is_grad_enabled()  # thread-local: the pool's threads take the caller's

    def run(pack: tuple) -> None:
        with torch.set_grad_enabled(grad):
            work(pack)

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        list(_POOLS[threads].map(run, packs))
    finally:
        torch.set_num_threads(before)


def _cut_to_band(s: Tensor, first: int, last: int, low: int, high: int, window: int | None) -> None:
    """−∞ in place where the band cuts the block (queries first … last − 1, keys low … high − 1):
    the keys after a query's position (only those after `first` may be), and with a window w
    those at w or more before it (only those before last − w may be)."""
    ahead = max(low, first + 1)
    if ahead < high:  # p > m for some query of the block
        s[..., ahead - low :].masked_fill_(
            ~band(first, last, ahead, high, None, s.device), float("-inf")
        )
    behind = min(high, last - window) if window is not None else low
    if behind > low:  # m − p ≥ w for some query
        s[..., : behind - low].masked_fill_(
            ~band(first, last, low, behind, window, s.device), float("-inf")
        )


def _weights(
    s: Tensor,
    scores: Scores,
    sink: Tensor | None,
    slope: Tensor | None,
    given: Tensor | None,
    first: int,
    last: int,
    keys: tuple[int, int],
    r0: int,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """A block's weights from its products s = scale · q·k (G, h/g, b, K), which it overwrites:
    (A, the block's tanh(ω̃/cap) or None, the sink's weight (G, h/g, b) or None)."""
    capped = None
    if scores.softcap is not None:  # tanh(ω̃/cap) in s's place (the block's own); kept apart
        s, capped = softcap_parts(s, scores.softcap, overwrite=True)  # before masks and ALiBi
    if slope is not None:  # −μ_ℓ (m − p), positions of the block's queries and keys, in place
        s = s.addcmul_(slope, distance(first, last, *keys, s), value=-1.0)  # (G, r, 1, 1)·(b, K)
    if scores.causal:
        _cut_to_band(s, first, last, *keys, scores.window)
    if given is not None:
        rows = slice(r0, r0 + last - first) if given.shape[-2] > 1 else slice(None)
        s = s.masked_fill_(~given[..., rows, slice(*keys)], float("-inf"))
    if sink is None:
        a = torch.softmax(s, dim=-1)
        if given is not None:  # a row with no key: 0/0 above, zero weights by convention
            a.masked_fill_(torch.isneginf(s.amax(dim=-1, keepdim=True)), 0.0)
        return a, capped, None
    a, sink_weight = sink_normalised(s, sink, overwrite=True)  # (G, r, b, K), (G, r, b, 1)
    return a, capped, sink_weight.squeeze(-1)  # pyright: ignore[reportOptionalMemberAccess]
