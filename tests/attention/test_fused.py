"""The fast path's backward: exact at any score scale, blockwise, and accepted by torch.compile.

The bound. Both paths evaluate the same formulas in float32 (the fast path with blocked matrix
products and torch's softmax kernels, the explicit path through autograd of each step), so each
is off the float64 reference by float32 rounding amplified by the conditioning of softmax, which
at large scores is poor near ties: the explicit path itself reaches 3e-3 of the largest gradient
there. The property asks the fast path to do as well as the explicit path on the same input, up
to rounding: error(fast) ≤ 4 · error(explicit) + 8 ε · G, ε the float32 epsilon and G the
largest gradient of the reference. PyTorch's own fused backward misses it from s = 30 on (by 10⁴
and more at s = 1000).

The bound is not met by every draw. Measured again over 2000 random draws of these strategies
(/ tests/attention/test_sliding_window.py's, with a window), 7 of each missed it, by up to 4×
(11.7× with a window); every miss had a mask, causal or a window, where the explicit path takes
the masked softmax's composed autograd and the fast path torch's softmax backward (none without
one, where both take torch's). The derandomized `quick` profile draws examples
that pass; the `thorough` profile can find a miss. Which path rounds better there is open.
"""

import math

import pytest
import torch
import torch.nn.functional as torch_F
from gradient_bound import EPSILON, bound, error, gradients
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
def test_fast_path_gradients_are_as_exact_as_the_explicit_path_at_any_scale(inputs):
    tensors, upstream, options = inputs
    reference = gradients(tensors, upstream, options, torch.float64, explicit=True)
    largest = max(r.abs().max().item() for r in reference)
    explicit = error(gradients(tensors, upstream, options, torch.float32, True), reference)
    fast = error(gradients(tensors, upstream, options, torch.float32, False), reference)
    assert fast <= 4 * explicit + 8 * EPSILON * largest, (fast, explicit, largest)


@pytest.mark.parametrize("scale", [30.0, 100.0, 1000.0])
def test_the_bound_catches_the_kernels_own_backward(scale):
    # The example: X = randn(2, 5, 3) · s, random 3×4 weights. PyTorch's fused backward
    # (through its own autograd) misses the bound that the fast path meets.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 3, generator=g) * scale
    weights = [torch.randn(3, 4, generator=g) for _ in range(3)]
    upstream = torch.randn(2, 5, 4, generator=g)

    def torch_own(dtype):
        leaves = [t.to(dtype).requires_grad_() for t in (x, *weights)]
        q, k, v = (leaves[0] @ w for w in leaves[1:])  # (2, 5, 4) each
        out = torch_F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        return torch.autograd.grad(out, leaves, upstream.to(dtype))

    def ours(dtype, explicit=False):
        leaves = [t.to(dtype).requires_grad_() for t in (x, *weights)]
        out = F.self_attention(*leaves, return_weights=explicit)
        out = out[0] if explicit else out
        return torch.autograd.grad(out, leaves, upstream.to(dtype))

    reference = ours(torch.float64, explicit=True)
    allowed = bound(error(ours(torch.float32, True), reference), reference)
    assert error(ours(torch.float32), reference) <= allowed
    assert error(torch_own(torch.float32), reference) > allowed


class Record(TorchDispatchMode):
    """The name and size of every operation's output."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sizes = [t.numel() for t in (out if isinstance(out, tuple) else (out,)) if
                 isinstance(t, torch.Tensor)]  # fmt: skip
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
    group, rows = _fused._plan(slices, n)
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
