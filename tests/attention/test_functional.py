"""attention.functional against the independent NumPy reference, step by step and whole."""

import math

import numpy as np
import pytest
import torch
from reference import batched_reference, causal_allowed

from attention import functional as F

# Pairwise-distinct sizes, so that a swapped axis cannot pass by coincidence.
SHAPES = [
    # (batch, n, d, c)
    ((), 5, 3, 2),  # the seed's unbatched X (n×d)
    ((), 1, 4, 3),  # a single token: n = 1
    ((2,), 7, 5, 3),  # one batch dimension
    ((3, 2), 4, 6, 5),  # two batch dimensions, c > n
]


def make(batch, n, d, c, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, d, generator=g, dtype=dtype)
    w_q, w_k, w_v = (torch.randn(d, c, generator=g, dtype=dtype) for _ in range(3))
    return x, w_q, w_k, w_v


@pytest.mark.parametrize(("batch", "n", "d", "c"), SHAPES)
@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
def test_self_attention_matches_reference(batch, n, d, c, return_weights):
    x, w_q, w_k, w_v = make(batch, n, d, c)
    expected_c, expected_a = batched_reference(x, w_q, w_k, w_v)
    out = F.self_attention(x, w_q, w_k, w_v, return_weights=return_weights)
    got_c, got_a = out if return_weights else (out, None)
    assert got_c.shape == (*batch, n, c)
    np.testing.assert_allclose(got_c.numpy(), expected_c, rtol=0, atol=1e-12)
    if return_weights:
        assert got_a.shape == (*batch, n, n)
        np.testing.assert_allclose(got_a.numpy(), expected_a, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("batch", "n", "d", "c"), SHAPES)
def test_each_step_matches_the_seed(batch, n, d, c):
    x, w_q, w_k, w_v = make(batch, n, d, c)
    q, k, v = (F.projection(x, w) for w in (w_q, w_k, w_v))
    xn = x.numpy()
    np.testing.assert_allclose(q.numpy(), xn @ w_q.numpy(), atol=1e-12)
    np.testing.assert_allclose(v.numpy(), xn @ w_v.numpy(), atol=1e-12)
    omega = F.scores(q, k)
    # ω_{m,p} = q_m · k_p, written with einsum over the shared index j
    np.testing.assert_allclose(omega.numpy(), np.einsum("...mj,...pj->...mp", q, k), atol=1e-12)
    scaled = F.scaled_scores(omega, c)
    np.testing.assert_allclose(scaled.numpy(), omega.numpy() / math.sqrt(c), atol=1e-12)
    a = F.weights(omega, c)
    _, expected_a = batched_reference(x, w_q, w_k, w_v)
    np.testing.assert_allclose(a.numpy(), expected_a, atol=1e-12)
    np.testing.assert_allclose(a.sum(-1).numpy(), 1.0, atol=1e-12)  # rows, not columns, sum to 1
    np.testing.assert_allclose(F.context(a, v).numpy(), a.numpy() @ v.numpy(), atol=1e-12)


def test_projection_adds_the_bias():
    x, w_q, _, _ = make((2,), 5, 3, 2)
    b = torch.tensor([0.5, -2.0], dtype=torch.float64)
    np.testing.assert_allclose(F.projection(x, w_q, b).numpy(), x.numpy() @ w_q.numpy() + b.numpy())


@pytest.mark.parametrize(
    ("dtype", "tolerance"), [(torch.float32, 1e-6), (torch.float64, 1e-12)], ids=["f32", "f64"]
)
@pytest.mark.parametrize("causal", [False, True])
def test_fast_path_equals_explicit_path(dtype, tolerance, causal):
    x, w_q, w_k, w_v = make((3,), 64, 32, 16, dtype=dtype)
    w_q, w_k, w_v = (w / math.sqrt(32) for w in (w_q, w_k, w_v))  # outputs of order 1
    fast = F.self_attention(x, w_q, w_k, w_v, causal=causal)
    explicit, _ = F.self_attention(x, w_q, w_k, w_v, causal=causal, return_weights=True)
    assert fast.dtype == dtype
    torch.testing.assert_close(fast, explicit, rtol=0, atol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scores_of_ten_thousand_stay_finite_and_exact(dtype):
    # Scores of ±1e4: a naive exp overflows; a stable softmax matches the float64 reference.
    x = torch.tensor([[100.0, 0.0], [-100.0, 0.0], [0.0, 1.0]], dtype=dtype)
    w = torch.eye(2, dtype=dtype)
    w_scores = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=dtype)
    omega = F.scores(F.projection(x, w_scores), F.projection(x, w))
    assert omega.abs().max() == 1e4
    expected_c, _ = batched_reference(x.double(), w_scores.double(), w.double(), w.double())
    for return_weights in (False, True):
        out = F.self_attention(x, w_scores, w, w, return_weights=return_weights)
        got = out[0] if return_weights else out
        assert torch.isfinite(got).all()
        np.testing.assert_allclose(got.double().numpy(), expected_c, atol=1e-6)


def test_gradcheck_both_paths():
    x, w_q, w_k, w_v = make((2,), 4, 3, 2)
    inputs = tuple(t.requires_grad_() for t in (x, w_q, w_k, w_v))
    assert torch.autograd.gradcheck(lambda *t: F.self_attention(*t), inputs)
    assert torch.autograd.gradcheck(lambda *t: F.self_attention(*t, return_weights=True)[0], inputs)


def test_causal_matches_reference_with_distinct_sizes():
    x, w_q, w_k, w_v = make((2,), 6, 4, 3)
    expected, _ = batched_reference(x, w_q, w_k, w_v, allowed=causal_allowed(6))
    got = F.self_attention(x, w_q, w_k, w_v, causal=True)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-12)


def test_causal_mask_keeps_the_diagonal():
    mask = F.causal_mask(4)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[p <= m for p in range(4)] for m in range(4)]
