"""Sliding-window attention: query m attends key p iff 0 ≤ m − p < w. Against the reference
written from that formula, on both paths, with heads and masks; the fast path block by block
(no n×n matrix, exact gradients at any score scale)."""

import math

import numpy as np
import pytest
import torch
from gradient_bound import gradients, rounding_bound, worst_ratio
from hypothesis import given
from hypothesis import strategies as st
from reference import attention_reference, batched_reference, causal_allowed, window_allowed

from attention import ShapeError, _fused
from attention import functional as F


def make(batch, n, d, c, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, d, generator=g, dtype=dtype)
    return x, *(torch.randn(d, c, generator=g, dtype=dtype) for _ in range(3))


def test_the_mask_is_the_formula():
    assert F.sliding_window_mask(4, 2).tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [False, True, True, False],
        [False, False, True, True],
    ]
    for n, w in [(7, 1), (7, 3), (5, 5), (3, 9)]:
        assert np.array_equal(F.sliding_window_mask(n, w).numpy(), window_allowed(n, w))
    assert torch.equal(F.sliding_window_mask(5, 5), F.causal_mask(5))  # w ≥ n: causal
    assert not torch.equal(F.sliding_window_mask(5, 4), F.causal_mask(5))


@pytest.mark.parametrize("return_weights", [False, True], ids=["fast", "explicit"])
@pytest.mark.parametrize(
    ("batch", "n", "d", "c", "w"),
    [
        ((), 7, 3, 2, 3),  # unbatched
        ((2,), 6, 4, 5, 1),  # w = 1: every token attends itself only
        ((3, 2), 5, 2, 3, 2),  # two batch dimensions
        ((2,), 4, 3, 2, 9),  # w > n: causal
    ],
)
def test_self_attention_with_a_window_matches_the_reference(batch, n, d, c, w, return_weights):
    x, w_q, w_k, w_v = make(batch, n, d, c)
    expected_c, expected_a = batched_reference(x, w_q, w_k, w_v, allowed=window_allowed(n, w))
    out = F.self_attention(x, w_q, w_k, w_v, causal=True, window=w, return_weights=return_weights)
    got_c = out[0] if return_weights else out
    np.testing.assert_allclose(got_c.numpy(), expected_c, rtol=0, atol=1e-12)
    if return_weights:
        np.testing.assert_allclose(out[1].numpy(), expected_a, rtol=0, atol=1e-12)
    if w < n:  # the window changes the result: the test can fail
        causal_c, _ = batched_reference(x, w_q, w_k, w_v, allowed=causal_allowed(n))
        assert not np.allclose(got_c.numpy(), causal_c)


def test_the_weights_step_takes_the_window():
    omega = torch.randn(2, 6, 6, dtype=torch.float64)
    a = F.weights(omega, 3, causal=True, window=2)
    assert torch.equal(a != 0, F.sliding_window_mask(6, 2).expand(2, 6, 6))
    band = F.sliding_window_mask(6, 2).expand(2, 6, 6)  # (n, n) -> (*batch, n, n)
    torch.testing.assert_close(a, F.weights(omega, 3, mask=band), rtol=0, atol=0)


@pytest.mark.parametrize("return_weights", [False, True], ids=["fast", "explicit"])
def test_multi_head_with_a_window_and_masks_matches_the_reference(return_weights):
    g = torch.Generator().manual_seed(3)
    n, d, heads, c_h, w = 9, 4, 2, 3, 4
    x = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    weights = [torch.randn(d, heads * c_h, generator=g, dtype=torch.float64) for _ in range(3)]
    w_o = torch.randn(heads * c_h, 5, generator=g, dtype=torch.float64)
    exists = torch.rand(2, n, generator=g) > 0.3
    exists[1, :4] = False  # query 3 of sequence 1: its whole window is missing
    out = F.multi_head_attention(
        x,
        *weights,
        w_o,
        heads=heads,
        causal=True,
        window=w,
        key_padding_mask=exists,
        return_weights=return_weights,
    )
    got = out[0] if return_weights else out
    allowed = window_allowed(n, w) & exists.numpy()[:, None, :]
    expected = np.zeros((2, n, heads * c_h))
    for b in range(2):
        for h in range(heads):
            columns = slice(h * c_h, (h + 1) * c_h)
            part = [wt[:, columns] for wt in weights]
            expected[b, :, columns] = attention_reference(x[b], *part, allowed=allowed[b])[0]
    np.testing.assert_allclose(got.numpy(), expected @ w_o.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("n", "w", "masks"),
    [
        (700, 37, False),  # many blocks of rows, each against its window of keys
        (700, 300, True),  # a window wider than a block of rows, with both masks
        (300, 299, False),  # one key short of causal
    ],
)
def test_the_blockwise_fast_path_gives_the_explicit_values_and_gradients(n, w, masks):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    weights = [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    options = {"causal": True, "window": w}
    if masks:
        options["key_padding_mask"] = torch.rand(2, n, generator=g) > 0.2
        options["mask"] = torch.rand(2, n, n, generator=g) > 0.1
    upstream = torch.randn(2, n, 4, generator=g, dtype=torch.float64)

    def run(explicit):
        leaves = [t.clone().requires_grad_() for t in (x, *weights)]
        out = F.self_attention(*leaves, **options, return_weights=explicit)
        out = out[0] if explicit else out
        return out.detach(), torch.autograd.grad(out, leaves, upstream)

    fast, fast_grads = run(explicit=False)
    explicit, explicit_grads = run(explicit=True)
    torch.testing.assert_close(fast, explicit, rtol=0, atol=1e-12)
    for got, expected in zip(fast_grads, explicit_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@st.composite
def windowed_inputs(draw):
    """Sizes, heads, a window, key padding, and X ~ randn · s, s log-uniform in [1, 10⁴]."""
    scale = 10 ** draw(st.floats(0, 4), label="log10 s")
    n, d = draw(st.integers(2, 9), label="n"), draw(st.integers(1, 4), label="d")
    heads = draw(st.integers(1, 2), label="heads")
    c = heads * draw(st.integers(1, 3), label="c_h")
    window = draw(st.integers(1, n - 1), label="w")
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16), label="seed"))
    kpm = torch.rand(2, n, generator=g) > 0.3 if draw(st.booleans()) else None
    tensors = [torch.randn(2, n, d, generator=g) * scale]
    tensors += [torch.randn(d, c, generator=g) for _ in range(3)]
    tensors.append(torch.randn(c, c, generator=g))
    options = {"heads": heads, "causal": True, "window": window, "key_padding_mask": kpm}
    return tensors, torch.randn(2, n, c, generator=g), options


@given(windowed_inputs())
def test_window_gradients_are_within_the_rounding_bound_at_any_scale(inputs):
    # the derived float32 rounding bound of tests/attention/test_fused.py, with a window and
    # key padding, on both paths (the former relative bound missed by up to 11.7×)
    tensors, upstream, options = inputs
    reference = gradients(tensors, upstream, options, torch.float64, explicit=True)
    values, radii = rounding_bound(tensors, upstream, options)
    assert worst_ratio(values, reference, radii) <= 0.1  # the bound's walk is the reference's
    for explicit in (True, False):
        got = gradients(tensors, upstream, options, torch.float32, explicit)
        assert worst_ratio(got, reference, radii) <= 1.0, "explicit" if explicit else "fast"


def test_no_operation_holds_an_n_by_n_matrix_forward_or_backward():
    from test_fused import Record  # the recorder of every operation's output size

    n, w = 2048, 64
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 5, generator=g)
    weights = [torch.randn(5, 3, generator=g).requires_grad_() for _ in range(3)]
    with Record() as record:
        out = F.self_attention(x, *weights, causal=True, window=w)
        torch.autograd.grad(out, weights, torch.randn(n, 3, generator=g))
    names = {name for name, _ in record.ops}
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in names  # the fused kernel
    assert "aten._softmax_backward_data" in names  # our blockwise backward
    largest = max(size for _, size in record.ops)
    assert largest <= 2 * _fused.ROW_ENTRIES < n * n, largest
    with Record() as record:  # the same sequence, causal: the kernel alone, no mask
        F.self_attention(x.detach(), *(t.detach() for t in weights), causal=True)
    assert "aten.where" not in {name for name, _ in record.ops}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda x, w: F.self_attention(x, w, w, w, window=2),
            ValueError,
            r"^self_attention: window=2 needs causal=True \(query m attends key p iff 0 ≤ m − p < w\)",
        ),
        (
            lambda x, w: F.self_attention(x, w, w, w, causal=True, window=0),
            ValueError,
            r"^self_attention: window must be a positive integer or None, got window=0",
        ),
        (
            lambda x, w: F.self_attention(x, w, w, w, causal=True, window=True),
            ValueError,
            r"window must be a positive integer or None, got window=True",
        ),
        (
            lambda x, w: F.self_attention(x, w, w, w, causal=True, window=2.0),
            TypeError,
            r"^self_attention: window must be int \| None, got 2.0",
        ),
        (
            lambda x, w: F.multi_head_attention(x, w, w, w, torch.ones(2, 2), heads=2, window=3),
            ValueError,
            r"^multi_head_attention: window=3 needs causal=True",
        ),
        (
            lambda x, w: F.weights(torch.ones(5, 5), 2, causal=True, window=-1),
            ValueError,
            r"^weights: window must be a positive integer or None, got window=-1",
        ),
        (
            lambda x, w: F.sliding_window_mask(5, 0),
            ValueError,
            r"^sliding_window_mask: w must be a positive integer, got w=0",
        ),
        (
            lambda x, w: F.sliding_window_mask(5, False),
            ValueError,
            r"^sliding_window_mask: w must be a positive integer, got w=False",
        ),
        (
            lambda x, w: F.self_attention(
                x, w, w, w, causal=True, window=2, mask=torch.ones(5, 4, dtype=torch.bool)
            ),
            ShapeError,
            r"^self_attention: mask has n=4 but x has n=5",
        ),
    ],
    ids=[
        "no-causal",
        "zero",
        "bool",
        "float",
        "heads-no-causal",
        "weights-negative",
        "mask-zero",
        "mask-bool",
        "mask-shape",
    ],
)
def test_bad_windows_are_refused(call, error, message):
    x, w = torch.randn(5, 3), torch.randn(3, 2)
    with pytest.raises(error, match=message):
        call(x, w)


def test_a_nan_outside_every_window_changes_nothing():
    # key 0 is in the window of queries 0 and 1 only (w = 2); with those two queries masked
    # out, NaN there reaches no output, on both paths
    x, w_q, w_k, w_v = make((), 6, 3, 2)
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[:2] = False  # queries 0 and 1 attend nothing
    poisoned = x.clone()
    poisoned[0] = math.nan
    for explicit in (False, True):
        clean = F.self_attention(
            x, w_q, w_k, w_v, causal=True, window=2, mask=mask, return_weights=explicit
        )
        out = F.self_attention(
            poisoned, w_q, w_k, w_v, causal=True, window=2, mask=mask, return_weights=explicit
        )
        clean, out = (t[0] if explicit else t for t in (clean, out))
        assert torch.equal(out, clean) and torch.isfinite(out).all()
