"""The written-out backward pass against torch.autograd."""

import math

import pytest
import torch

from attention import ShapeError
from attention import functional as F

SHAPES = [
    # (batch, n, d, c)
    ((), 5, 3, 2),
    ((), 1, 4, 3),  # one token: the softmax is constant, dΩ = 0
    ((2,), 4, 6, 5),
    ((2, 3), 6, 2, 4),
]


def make(batch, n, d, c, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, d, generator=g, dtype=torch.float64)
    weights = [torch.randn(d, c, generator=g, dtype=torch.float64) for _ in range(3)]
    return x, weights, torch.randn(*batch, n, c, generator=g, dtype=torch.float64)


@pytest.mark.parametrize(("batch", "n", "d", "c"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_equals_autograd(batch, n, d, c, causal):
    x, weights, grad_c = make(batch, n, d, c)
    leaves = [t.clone().requires_grad_() for t in (x, *weights)]
    out = F.self_attention(*leaves, causal=causal)
    expected = torch.autograd.grad(out, leaves, grad_c)
    got = F.self_attention_backward(x, *weights, grad_c, causal=causal)
    for name, e, g in zip(("dX", "dWq", "dWk", "dWv"), expected, got, strict=True):
        assert g.shape == e.shape, name
        torch.testing.assert_close(g, e, rtol=0, atol=1e-10, msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_every_intermediate_gradient_equals_autograd(causal):
    x, (w_q, w_k, w_v), grad_c = make((2,), 5, 3, 4)
    q, k, v = (F.projection(x, w).requires_grad_() for w in (w_q, w_k, w_v))
    omega = F.scores(q, k).detach().requires_grad_()
    a = F.weights(omega, 4, causal=causal).detach().requires_grad_()
    # dA and dV from C = AV; dΩ from A = softmax(Ω/√c); dQ, dK from Ω = QKᵀ
    d_a, d_v = torch.autograd.grad(F.context(a, v), (a, v), grad_c)
    (d_omega,) = torch.autograd.grad(F.weights(omega, 4, causal=causal), omega, d_a)
    d_q, d_k = torch.autograd.grad(F.scores(q, k), (q, k), d_omega)
    g = F.self_attention_gradients(x, w_q, w_k, w_v, grad_c, causal=causal)
    for name, expected in [("dA", d_a), ("dV", d_v), ("dOmega", d_omega), ("dQ", d_q), ("dK", d_k)]:
        torch.testing.assert_close(getattr(g, name), expected, rtol=0, atol=1e-10, msg=name)
    if causal:
        assert torch.equal(g.dOmega.triu(1), torch.zeros_like(g.dOmega))  # masked: no gradient


def test_rowsum_identity_behind_the_backward_pass():
    # Σ_r a_{m,r} dA_{m,r} = Σ_j dC_{m,j} C_{m,j}
    x, (w_q, w_k, w_v), grad_c = make((3,), 6, 4, 5)
    c, a = F.self_attention(x, w_q, w_k, w_v, return_weights=True)
    g = F.self_attention_gradients(x, w_q, w_k, w_v, grad_c)
    torch.testing.assert_close((a * g.dA).sum(-1), (grad_c * c).sum(-1), rtol=0, atol=1e-12)


def test_dropping_the_scale_is_caught():
    # Sanity of the test itself: a backward pass without 1/√c disagrees with autograd.
    x, weights, grad_c = make((), 5, 3, 4)
    g = F.self_attention_gradients(x, *weights, grad_c)
    leaves = [t.clone().requires_grad_() for t in (x, *weights)]
    (expected_dwq,) = torch.autograd.grad(F.self_attention(*leaves), leaves[1], grad_c)
    unscaled = x.T @ ((g.dOmega * math.sqrt(4)) @ (x @ weights[1]))
    assert not torch.allclose(unscaled, expected_dwq, atol=1e-6)
    torch.testing.assert_close(g.dW_q, expected_dwq, rtol=0, atol=1e-10)


def test_gradcheck_functional_core():
    x, weights, _ = make((2,), 4, 3, 2)
    inputs = tuple(t.requires_grad_() for t in (x, *weights))
    assert torch.autograd.gradcheck(lambda *t: F.self_attention(*t, causal=True), inputs)


def test_grad_c_must_have_the_shape_of_c():
    x, weights, _ = make((), 5, 3, 2)
    with pytest.raises(
        ShapeError, match=r"self_attention_backward: grad_c has c=3 but w_q has c=2"
    ):
        F.self_attention_backward(x, *weights, torch.ones(5, 3, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"grad_c has n=4 but x has n=5"):
        F.self_attention_backward(x, *weights, torch.ones(4, 2, dtype=torch.float64))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e5, 1e10, 1e15])
def test_second_order_gradients_through_the_backward_are_autograd_s(scale, causal):
    """Autograd through self_attention_backward (float32 in) against autograd's own second
    derivative of self-attention in float64, on the same inputs: finite and equal where the
    softmax saturates (x ×1e15 gave NaN: factors of about 1e45 met the saturated rows' zeros)."""
    from attention.functional import self_attention_backward

    g = torch.Generator().manual_seed(2 * [1.0, 1e5, 1e10, 1e15].index(scale) + causal)
    x = torch.randn(4, 3, generator=g) * scale
    w = [torch.randn(3, 2, generator=g) for _ in range(3)]
    dc = torch.randn(4, 2, generator=g)
    ours = [t.clone().requires_grad_() for t in (x, *w, dc)]
    total = sum(t.sum() for t in self_attention_backward(*ours, causal=causal))
    got = torch.autograd.grad(total, ours)
    wide = [t.double().requires_grad_() for t in (x, *w, dc)]
    x_, wq, wk, wv, dc_ = wide
    s = (x_ @ wq) @ (x_ @ wk).mT / 2**0.5
    if causal:
        s = s.masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), -torch.inf)
    c = s.softmax(-1) @ (x_ @ wv)
    first = torch.autograd.grad(c, (x_, wq, wk, wv), dc_, create_graph=True)
    expected = torch.autograd.grad(sum(t.sum() for t in first), wide, allow_unused=True)
    for name, mine, theirs in zip(["x", "W_q", "W_k", "W_v", "dC"], got, expected, strict=True):
        theirs = torch.zeros_like(mine, dtype=torch.float64) if theirs is None else theirs
        assert mine.isfinite().all(), name
        bound = 1e-5 * max(1.0, theirs.abs().max().item())
        assert (mine.double() - theirs).abs().max().item() <= bound, name
