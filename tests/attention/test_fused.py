"""The fast path's backward: exact at any score scale, blockwise, and accepted by torch.compile.

The bound. Every gradient of a float32 run, on the fast path and on the explicit path alike, is
held entry by entry to |ĝ − g| ≤ R: g the float64 reference's, R what float32 rounding allows
along the steps both paths take, derived as derive/conform derives its tolerances
(`gradient_bound.rounding_bound`). The model: a float32 result is off by at most u = 2⁻²⁴ of
itself (2⁻¹²⁶ more where it underflows); a product of depth k by γ_k |X||Y|, γ_k = k u/(1 − k u),
in any order of summation; exp by 1 ulp (torch.exp and torch.softmax, SLEEF's), 20 ulps in the
fused kernel's forward (its exp_u20), and exp(0) = 1 exactly (checked below). Each step's radius
is what its operands' radii carry through it, exactly (a product keeps |ΔX||ΔY|), plus its own
rounding over the magnitudes the computed operands may have, |X̂| = |X| + ΔX:

    Q, K, V = X W         γ_d |X||W|
    Q̂ = Q / √c_h          2u (the factor rounded, then the product)
    Ω̃ = Q̂ Kᵀ              ΔQ̂ |K|ᵀ + |Q̂| ΔKᵀ + ΔQ̂ ΔKᵀ + γ_{c_h} |Q̂||K̂|ᵀ
    A = softmax(Ω̃)        scores off by e_p = Δω̃_p + u (|ω̃_p − max ω̃| + 2 max Δω̃) + exp's, so
                          â_p / a_p ∈ [1/(1 + T_p), 1/(1 − L_p)] exactly, with
                          T_p = Σ_{r≠p} a_r (e^{e_p+e_r} − 1), L_p = Σ_{r≠p} a_r (1 − e^{−e_p−e_r});
                          then γ_{n+1} for the row's sum and division
    C = A V, dA = dC Vᵀ,  products of depth n, c_h, n, c + 1
      dV = Aᵀ dC, dC = dY W_oᵀ
    dΩ̃ = A ∘ (dA − D)     ΔA |dA − D| + Â (Σ_r ΔA_r |dA_r| + |1 − Â| ΔdA + Σ_{r≠p} Â_r ΔdA_r)
      D = rowsum(A ∘ dA)  + γ_{n+4} Â (|dÂ| + Σ_r Â_r |dÂ_r|)
    dQ = dΩ̃ K / √c_h,     depth n, and the scale's 2u
      dK = dΩ̃ᵀ Q̂
    dX = dQ W_qᵀ + …      depth c each (three), and two additions
    dW = Xᵀ dQ, …         depth B·n (the batch's rows, summed); dW_o = Cᵀ dY likewise

plus the float64 reference's own radius (the same walk with u = 2⁻⁵³). Where the two paths
differ, the count is the longer one's: dΩ̃ takes n + 2 roundings in torch's softmax backward
(the fast path, and the explicit path without a mask), n + 4 through the autograd of exp / Σ exp
(the explicit path with a mask); C's exponentials are the kernel's (20 ulps). Where a row is
saturated (one weight within u of 1, the rest sharing μ < u) the γ_{n+1} and γ_{n+4} above
would hold gradients that are nearly 0 to u of their parts; rounding to nearest also says that
a + b is within |b| of the exact sum and x·f within |1 − f||x| of the exact product, so with the
winner's exp(0) = 1 the row's sum is off by (n − 1) min(u, μ), its division by min(2u, nμ/(1−μ))
(1/1 and x·1 are exact), and each product by a weight f in dΩ̃ by min(u, 2|1 − f|)
(`gradient_bound.softmax`, `softmax_backward` give the details).

Each line follows from the model for any operands within their radii, to every order but the
magnitudes taken from the float64 reference (first order in 2⁻⁵³): the bound holds because of
the derivation, not because the draws so far met it, and has no safety factor. Measured (2500
draws of `attention_inputs`, Hypothesis with random seeds; 2500 of test_sliding_window.py's
`windowed_inputs`): the largest error / bound is 0.57 on either path (0.38 with a window;
median 0.15), at one token, where C = V and products of depth 1 and 2 round all they can. It
catches what it should: a change of 10⁻⁴ of itself in the fast backward's dQ, dK or dV at unit
scores (by 7× to 37×), in dV at any scale, dropping rowsum(A ∘ dA) at any scale, and PyTorch's
own fused backward (by 70× at s = 10, by 10⁶ and more from s = 30).

It replaces error(fast) ≤ 4 · error(explicit) + 8 ε G (G the largest gradient), which compared
the paths with each other and missed about 1 draw in 300 with a mask, by up to 11.7×: at those
draws both paths are within the derived bound (at most 0.13 of it); neither path was wrong
there, the explicit one had only rounded luckier than the fast one.
"""

import math

import pytest
import torch
import torch.nn.functional as torch_F
from gradient_bound import gradients, rounding_bound, worst_ratio
from hypothesis import given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from attention import _fused
from attention import functional as F


@st.composite
def attention_inputs(draw):
    """Sizes, heads, batch, masks, causal, and X ~ randn · s with s log-uniform in [1, 10⁴]."""
    scale = 10 ** draw(st.floats(0, 4), label="log10 s")
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2), label="batch"))
    n, d = draw(st.integers(1, 7), label="n"), draw(st.integers(1, 5), label="d")
    heads = draw(st.integers(1, 3), label="heads")
    c = heads * draw(st.integers(1, 3), label="c_h")
    causal = draw(st.booleans(), label="causal")
    seed = draw(st.integers(0, 2**16), label="seed")
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(*batch, n, n, generator=g) > 0.3 if draw(st.booleans()) else None
    kpm = torch.rand(*batch, n, generator=g) > 0.3 if draw(st.booleans()) else None
    tensors = [torch.randn(*batch, n, d, generator=g) * scale]
    tensors += [torch.randn(d, c, generator=g) for _ in range(3)]
    tensors.append(torch.randn(c, c + 1, generator=g))  # W_o
    upstream = torch.randn(*batch, n, c + 1, generator=g)
    options = {"heads": heads, "causal": causal, "mask": mask, "key_padding_mask": kpm}
    return tensors, upstream, options


@given(attention_inputs())
def test_both_paths_gradients_are_within_the_rounding_bound_at_any_scale(inputs):
    tensors, upstream, options = inputs
    reference = gradients(tensors, upstream, options, torch.float64, explicit=True)
    values, radii = rounding_bound(tensors, upstream, options)
    # the bound's walk computes the reference's gradients (both in float64): its radii are theirs
    assert worst_ratio(values, reference, radii) <= 0.1
    for explicit in (True, False):
        got = gradients(tensors, upstream, options, torch.float32, explicit)
        ratio = worst_ratio(got, reference, radii)
        assert ratio <= 1.0, ("explicit" if explicit else "fast", ratio)


def test_exp_of_zero_is_one_in_every_softmax_the_bound_counts_on():
    # the bound's saturated rows: the winner's exp(0) = 1 exactly, in torch.exp, torch.softmax
    # and the fused kernel (its vectorised exp_u20 from 16 keys on, a scalar exp below)
    assert torch.equal(torch.exp(torch.zeros(40)), torch.ones(40))
    for n in (3, 40):
        scores = torch.zeros(2, n)
        scores[:, 1:] = -200.0
        assert torch.equal(torch.softmax(scores, dim=-1)[:, 0], torch.ones(2))
        q, k = torch.tensor([1000.0, 0.0]).view(1, 1, 1, 2), torch.zeros(1, 1, n, 2)
        k[..., 0, 0] = 1.0  # key 0 scores 1000, the others 0
        v = torch.randn(1, 1, n, 2)
        out = torch_F.scaled_dot_product_attention(q, k, v, scale=1.0)
        assert torch.equal(out[0, 0, 0], v[0, 0, 0])


def issue_example(scale, seed=0, heads=None):
    """X = randn(2, 5, 3) · s and random 3×4 weights (and W_o 4×3 with `heads`), dC or dY."""
    g = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(2, 5, 3, generator=g) * scale]
    tensors += [torch.randn(3, 4, generator=g) for _ in range(3)]
    if heads is not None:
        tensors.append(torch.randn(4, 3, generator=g))
    upstream = torch.randn(2, 5, 4 if heads is None else 3, generator=g)
    return tensors, upstream, {} if heads is None else {"heads": heads, "causal": True}


@pytest.mark.parametrize("scale", [10.0, 30.0, 100.0, 1000.0])
def test_both_paths_meet_the_bound_on_the_issue_s_example(scale):
    # The issue's example, where PyTorch's fused backward (which recomputes the weights from a
    # float32 log-sum-exp) misses the bound by 70× at s = 10 and by 10⁶ from s = 30 on a quiet
    # machine: that is a claim about torch's kernel, measured in docs/benchmarks.md ("The fast
    # path's gradients at large scores"), not asserted here (its margin depends on the kernel's
    # blocking and threads: 8.8× once on a loaded machine). What shows that the bound can fail
    # are mutated copies of our own backward, below.
    tensors, upstream, options = issue_example(scale)
    reference = gradients(tensors, upstream, options, torch.float64, explicit=True)
    _, radii = rounding_bound(tensors, upstream, options)
    for explicit in (True, False):
        got = gradients(tensors, upstream, options, torch.float32, explicit)
        assert worst_ratio(got, reference, radii) <= 1.0


@pytest.mark.parametrize(
    ("change", "scale"),
    [
        ("dQ", 1.0),  # each gradient of the fast backward off by 10⁻⁴ of itself, unit scores
        ("dK", 1.0),
        ("dV", 1.0),
        ("dV", 1000.0),  # saturated rows: dQ and dK are nearly 0 there, dV is not
        ("no rowsum", 1.0),  # dΩ̃ = A ∘ dA: the softmax's backward without rowsum(A ∘ dA)
        ("no rowsum", 1000.0),
    ],
)
def test_the_bound_catches_a_small_change_of_the_fast_backward(change, scale, monkeypatch):
    # two heads of width 2, causal, W_o: within the bound as it is, outside it once changed
    tensors, upstream, options = issue_example(scale, heads=2)
    reference = gradients(tensors, upstream, options, torch.float64, explicit=True)
    _, radii = rounding_bound(tensors, upstream, options)
    assert (
        worst_ratio(gradients(tensors, upstream, options, torch.float32, False), reference, radii)
        <= 1.0
    )
    if change == "no rowsum":
        monkeypatch.setattr(torch, "_softmax_backward_data", lambda d_a, a, dim, dtype: a * d_a)
    else:
        exact = _fused.gradients
        which = ["dQ", "dK", "dV"].index(change)

        def changed(*args, **kwargs):
            found = list(exact(*args, **kwargs))
            found[which] = found[which] * (1 + 1e-4)
            return tuple(found)

        monkeypatch.setattr(_fused, "gradients", changed)
    got = gradients(tensors, upstream, options, torch.float32, explicit=False)
    assert worst_ratio(got, reference, radii) > 1.0


class Record(TorchDispatchMode):
    """The name and size of every operation's output."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sizes = [
            t.numel()
            for t in (out if isinstance(out, tuple) else (out,))
            if isinstance(t, torch.Tensor)
        ]
        self.ops.append((str(func.overloadpacket), max(sizes, default=0)))
        return out


@pytest.mark.parametrize("causal", [False, True])
def test_backward_is_blockwise_and_never_holds_an_n_by_n_matrix(causal):
    n, d, c = 1024, 5, 3
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g)
    weights = [torch.randn(d, c, generator=g).requires_grad_() for _ in range(3)]
    out = F.self_attention(x, *weights, causal=causal)
    with Record() as record:
        torch.autograd.grad(out, weights, torch.randn(n, c, generator=g))
    names = {name for name, _ in record.ops}
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward" not in names
    assert "aten._softmax_backward_data" in names  # dS, block by block
    largest = max(size for _, size in record.ops)
    assert largest <= _fused.ROW_ENTRIES < n * n, largest  # one sequence: blocks of rows


def test_forward_is_the_fused_kernel():
    x, w = torch.randn(2, 6, 3), torch.randn(3, 4, requires_grad=True)
    with Record() as record:
        F.self_attention(x, w, w, w, causal=True)
    names = [name for name, _ in record.ops]
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in names
    assert "aten._softmax" not in names


@pytest.mark.parametrize(
    ("slices", "n"), [(1, 6), (48, 6), (3, 100), (1, 1024), (48, 1024), (12, 16384)]
)
def test_blocks_stay_within_budget(slices, n):
    group, rows = _fused.plan(slices, n)
    assert 1 <= group <= slices and 1 <= rows <= n
    assert rows == n or rows >= _fused.MIN_ROWS  # the block's products need enough rows
    assert rows * n <= max(_fused.ROW_ENTRIES, _fused.MIN_ROWS * n)
    assert group * rows * n <= max(_fused.BLOCK_ENTRIES, _fused.MIN_ROWS * n)


def test_torch_compile_gives_the_same_gradients():
    def loss(x, w_q, w_k, w_v, kpm):
        out = F.self_attention(x, w_q, w_k, w_v, causal=True, key_padding_mask=kpm)
        return out.square().sum()

    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 7, 3, generator=g) * 100  # large scores: where the kernel's backward fails
    weights = [torch.randn(3, 4, generator=g) for _ in range(3)]
    kpm = torch.rand(2, 7, generator=g) > 0.3

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (x, *weights)]
        fn(*leaves, kpm).backward()
        return [t.grad for t in leaves]

    for eager, compiled in zip(grads(loss), grads(torch.compile(loss)), strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6 * eager.abs().max())


def test_double_precision_gradcheck_with_every_mask():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    weights = [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    mask = torch.rand(2, 5, 5, generator=g) > 0.4
    mask[0, 1] = False  # a fully masked row
    kpm = torch.tensor([[True] * 5, [True, False, True, True, False]])
    inputs = tuple(t.requires_grad_() for t in (x, *weights))
    assert torch.autograd.gradcheck(
        lambda *t: F.self_attention(*t, causal=True, mask=mask, key_padding_mask=kpm), inputs
    )
    assert math.isfinite(F.self_attention(*inputs, mask=mask).sum().item())


@pytest.mark.parametrize(
    ("batch", "heads", "n", "causal"),
    [
        (2, 3, 300, False),  # split heads, two heads per block: one batch entry at a time
        (2, 3, 300, True),
        (3, 1, 200, True),  # one head: the (batch, head) slices flattened
        (2, 2, 700, False),  # row blocks of 374 (2¹⁷ / n) within each slice
    ],
)
def test_blocks_of_slices_and_rows_give_the_explicit_gradients(batch, heads, n, causal):
    g = torch.Generator().manual_seed(4)
    c = 2 * heads
    tensors = [torch.randn(batch, n, 3, generator=g, dtype=torch.float64)]
    tensors += [torch.randn(3, c, generator=g, dtype=torch.float64) for _ in range(3)]
    tensors.append(torch.randn(c, 5, generator=g, dtype=torch.float64))
    upstream = torch.randn(batch, n, 5, generator=g, dtype=torch.float64)
    kpm = torch.rand(batch, n, generator=g) > 0.2
    options = {"heads": heads, "causal": causal, "key_padding_mask": kpm}
    fast = gradients(tensors, upstream, options, torch.float64, explicit=False)
    explicit = gradients(tensors, upstream, options, torch.float64, explicit=True)
    for got, expected in zip(fast, explicit, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
