"""The one fast path: every variant's attention without an n×n matrix, and one backward pass,
blockwise and exact at any score scale.

What it computes. Queries q (B, h, n, c_h) in h heads; keys and values k, v (B, g, s, c_h) in g
groups, g dividing h, head ℓ (0-based) reading group ℓ // (h/g) (g = h: multi-head attention;
g = 1: multi-query attention). Query m sits at position m + o (the offset o of `mods.Causal`: 0 in
self-attention, s − n when new tokens attend a cache) and key p at position p. Each row of scores
is ω̃_{m,p} = scale · q_m · k_p (scale = 1/√c_h, or another number), then passes through the
tuple of modifications (`attention.mods`: its docstring has their order and formulas; the
user's masks, shared by the heads, after them), then its softmax (with a sink's logit in the
denominator where `mods.Sinks` is given), and C = A V. A query that may attend no key gets a zero
row (with a sink, the sink takes all its weight: the same zero row).

Split by concern: `kernel` (the forward through torch's kernel), `sweep` (the blocks, forward
and backward), `blocks` (how the work is cut and run on the threads).

The forward pass. When the modifications only mask, PyTorch's fused kernel
(`scaled_dot_product_attention`, its own grouped-query support, so K and V are never repeated):
whole when the mask is the kernel's causal flag or the user's mask, and block by block when the
masks band the keys (a window, chunks, an offset; `kernel`). With a modification the kernel does
not know, `sweep`: the same blocks, the scores of each computed, modified and normalised in
full.

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

The backward pass (`sweep` with the upstream gradient): each block of query rows with all the
keys they may attend, its scores recomputed and normalised exactly as the explicit path does (the
row maximum subtracted, so the winning key gets exp(0) = 1), then the derived formulas

    dV = Aᵀ dC,  dA = dC Vᵀ,  dΩ̃' = A ∘ (dA − rowsum(A ∘ dA)),
    dσ_ℓ = −Σ_m a_{m,σ} rowsum(A ∘ dA)_m      (a sink carries no value: its dA is 0),
    dΩ̃ from dΩ̃' through each modification in reverse (`_modify.backward`: softcapping's factor
        1 − tanh²(ω̃/κ), the temperature's τ_m, ALiBi's slope's gradient −Σ dΩ̃' (m + o − p)),
    dQ = scale · dΩ̃ K,  dK = scale · dΩ̃ᵀ Q

(`torch._softmax_backward_data` is dΩ̃' in one pass, the sink's column included, since its dA is
0). Its gradients agree with the float64 reference as well as the explicit path's at every
scale. The h/g query heads of a group go through each matrix product together, as (h/g)·b rows
against their group's keys, so dK and dV sum over the group's heads inside the products.

Memory. A block holds `rows` × keys scores per slice (`blocks.plan`: about 2¹⁷ entries or 128 rows,
whichever is more, and a few (batch, group) slices at a time), so the extra memory is a few such
blocks plus copies of Q, K, V, dC and the gradients: O(n·c), never an n×n matrix (about 110 MiB
at n = 16384, c = 64, forward and backward, against 1 GiB for one n×n float32 matrix). With
causal attention a block of rows needs the keys before its last row only, which halves the
work; with a window (or chunks), the w − 1 keys before its first row and its own.

Devices: the same code runs on any device (its operations are plain torch ops). On a GPU it
would be slower than the fused backward kernels there, which also recompute P from a stored
log-sum-exp; neither their accuracy nor our speed there is measured (no GPU here).
"""

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import _modify
from . import blocks
from .blocks import BLOCK_ENTRIES, MIN_ROWS, ROW_ENTRIES, plan
from .kernel import forward as kernel_forward
from .sweep import sweep

__all__ = ["attention", "gradients", "plan", "ROW_ENTRIES", "MIN_ROWS", "BLOCK_ENTRIES", "blocks"]


def attention(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, mods: tuple, allowed: Tensor | None = None
) -> Tensor:
    """C (B, h, n, c_h) for q (B, h, n, c_h), k and v (B, g, s, c_h), the modifications `mods`
    (`attention.mods`, in order), the user's masks `allowed` (B or 1, 1, R, s) with R ∈ {1, n},
    True = may attend, or None. With gradients, through `_Attention` (the exact blockwise
    backward, the modifications' learned tensors among its arguments)."""
    bare, tensors = _modify.unbound(mods)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *tensors)):
        return _Attention.apply(q, k, v, allowed, scale, bare, *tensors)
    return _forward(q, k, v, scale, mods, allowed)


def _forward(q: Tensor, k: Tensor, v: Tensor, scale: float, mods: tuple, allowed) -> Tensor:
    if _modify.masks_only(mods):
        return kernel_forward(q, k, v, scale, mods, allowed)
    return sweep(q, k, v, scale, mods, allowed)[0]


class _Attention(torch.autograd.Function):
    """`_forward`, and `sweep`'s exact blockwise backward. The modifications travel without
    their tensors (constants) and the tensors as arguments of their own (torch.compile traces
    an autograd.Function whose arguments are tensors and constants; gradients flow to
    arguments only)."""

    @staticmethod
    def forward(ctx, q, k, v, allowed, scale, bare, *tensors):  # type: ignore[override]
        ctx.save_for_backward(q, k, v, allowed, *tensors)
        ctx.constants = (scale, bare)
        return _forward(q, k, v, scale, _modify.bound(bare, tensors), allowed)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, allowed, *tensors = ctx.saved_tensors
        scale, bare = ctx.constants
        mods = _modify.bound(bare, tensors)
        kinds = list(_modify.learned(mods))  # in the order of the tensors
        wanted = frozenset(k for k, w in zip(kinds, ctx.needs_input_grad[6:], strict=True) if w)
        dq, dk, dv, grads = gradients(q, k, v, grad_out, scale, mods, allowed, wanted)
        return dq, dk, dv, None, None, None, *(grads.get(kind) for kind in kinds)


def gradients(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad_out: Tensor,
    scale: float,
    mods: tuple,
    allowed: Tensor | None = None,
    wanted: frozenset[str] | None = None,
) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """(dQ, dK, dV, {kind: the gradient of the modification's tensor (h,)}) for the upstream
    gradient dC (B, h, n, c_h); the tensors' gradients for the kinds in `wanted` (None: all)."""
    wanted = frozenset(_modify.learned(mods)) if wanted is None else wanted
    return sweep(q, k, v, scale, mods, allowed, grad_out, wanted)  # type: ignore[return-value]
