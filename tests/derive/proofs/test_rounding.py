"""The first-order rounding analysis of FlashAttention's two backward routes: every fact holds
for the routes as the kernels compute them, and fails when a route is changed (the maximum
replaced by the stored log-sum-exp; D summed from separately rounded dA; L kept exact); the
numeric bounds of the figure are the printed formulas."""

import math
from dataclasses import replace

import numpy as np
import pytest
import sympy as sp
from sympy import exp

import derive
from derive.graph.claims import Rounding
from derive.proofs import rounding as R
from derive.proofs import rounding_facts as RF
from derive.proofs.claims import prove


def separate_rowsum(fl, row):
    """The recomputed weights, but D from dA rounded apart from the dA it is subtracted from."""
    weights, _ = R.row_maximum(fl, row)
    upstream = [a + b * fl.error(R.GAMMA_C) for a, b in zip(row.upstream, row.beta, strict=True)]
    again = [a + b * fl.error(R.GAMMA_C) for a, b in zip(row.upstream, row.beta, strict=True)]
    rowsum = sp.Add(*(w * a for w, a in zip(weights, again, strict=True)))
    return weights, [R._gradient(fl, w, a, rowsum) for w, a in zip(weights, upstream, strict=True)]


def exact_lse(fl, row):
    """The stored route with L kept exactly (no rounding of the stored log-sum-exp)."""
    weights = [fl.rounded(exp(fl.rounded(score - row.lse)), R.ETA) for score in row.scores]
    return weights, []


FACTS = [
    RF.stored_weights,
    RF.maximum_weights,
    RF.bounded_product,
    RF.scale_stored,
    RF.scale_maximum,
    RF.cancellation_stored,
    RF.cancellation_maximum,
]


@pytest.mark.parametrize("fact", FACTS, ids=lambda f: f.__name__)
def test_every_fact_holds_for_the_routes_the_kernels_take(fact):
    found = fact()
    assert found.holds, found.residual


def test_a_first_order_coefficient_is_a_derivative():
    fl = R.Roundings()
    x, y = sp.symbols("x y", positive=True)
    product = fl.rounded(fl.rounded(x) * y)  # fl(fl(x) y)
    assert set(fl.first_order(product).values()) == {x * y}
    assert fl.bound(product) == 2 * R.U * x * y


def test_the_stored_weight_carries_the_size_of_the_scores():
    claim = RF.stored_weights().claim.rhs
    assert claim.has(sp.Abs(R.Row.symbolic(None).lse))
    found = RF.stored_weights(exact_lse)  # L exact: only the subtraction and exp are left
    assert not found.holds


@pytest.mark.parametrize("fact", [RF.maximum_weights, RF.scale_maximum])
def test_weights_not_normalised_again_fail(fact):
    # e^{ω̃ − L̂} taken as the weight, not divided by the row's sum of exponentials
    assert not fact(R.stored_lse).holds


def test_a_shift_by_the_stored_lse_cancels_when_the_weights_are_normalised():
    # the rounding of L̂ is common to the row: dividing by the sum takes it away
    def shifted(fl, row):
        return R.row_maximum(fl, replace(row, maximum=fl.rounded(row.lse)))

    fl = R.Roundings()
    row = R.Row.symbolic(3)
    weights, _ = shifted(fl, row)
    first = next(iter(fl.units))  # the rounding of L̂
    assert sp.simplify(fl.first_order(weights[0])[first]) == 0


def test_the_recomputed_route_does_not_grow_as_the_stored_one():
    assert not RF.scale_stored(R.row_maximum).holds  # its bound over s tends to 0, not u a


def test_d_from_a_separately_rounded_da_does_not_cancel():
    assert not RF.cancellation_maximum(separate_rowsum).holds
    assert not RF.cancellation_stored(R.row_maximum).holds


def test_the_limits_are_at_symbolic_scores():
    stored = RF.scale_stored()
    assert stored.derivation[0].rhs.free_symbols >= set(sp.symbols("z_1:4", real=True))
    assert R.SCALE in stored.derivation[0].rhs.free_symbols  # B(s), whose limit is taken
    assert RF.cancellation_maximum(n=2).holds and RF.cancellation_stored(n=4).holds


def _numbers(seed=0, n=4, width=8):
    rng = np.random.default_rng(seed)
    scores = 30 + rng.standard_normal((5, n))
    values, upstream = rng.standard_normal((n, width)), rng.standard_normal((5, width))
    top = scores.max(-1, keepdims=True)
    weights = np.exp(scores - top) / np.exp(scores - top).sum(-1, keepdims=True)
    context = weights @ values
    d_a = upstream @ values.T
    beta = np.abs(upstream) @ np.abs(values).T
    return (
        scores,
        weights,
        d_a,
        beta,
        (upstream * context).sum(-1),
        (np.abs(upstream) * np.abs(context)).sum(-1),
    )


def test_the_figures_bounds_are_the_printed_formulas():
    scores, weights, d_a, beta, rowsum, beta_c = _numbers()
    functions = R.bounds(4)
    u, eta = R.UNITS[R.U], R.UNITS[R.ETA]
    gamma = 4 * u / (1 - 4 * u)
    top = scores.max(-1, keepdims=True)
    lse = top + np.log(np.exp(scores - top).sum(-1, keepdims=True))
    rest = dict(upstream=d_a, beta=beta, rowsum=rowsum, beta_c=beta_c, width=8)
    stored = R.evaluate(functions["weights stored"], scores, **rest)
    assert stored == pytest.approx(weights * (u * np.abs(lse) + u * (lse - scores) + eta), rel=1e-9)
    maximum = R.evaluate(functions["weights maximum"], scores, **rest)
    terms = u * (top - scores) + eta  # (rows, r)
    own = np.eye(4)[None] - weights[:, None, :]  # δ_{p,r} − a_r, (rows, p, r)
    expected = weights * ((np.abs(own) * terms[:, None, :]).sum(-1) + gamma + 2 * u)
    assert maximum == pytest.approx(expected, rel=1e-9)
    gradient = R.evaluate(functions["gradient stored"], scores, **rest)
    gamma_c = 8 * u / (1 - 8 * u)
    gap = np.abs(d_a - rowsum[:, None])  # |ā − D|: what a weight's error and two roundings scale
    expected = weights * (
        gap * (u * np.abs(lse) + u * (lse - scores) + eta + 2 * u)
        + gamma_c * beta
        + (gamma_c + u) * beta_c[:, None]
    )
    assert gradient == pytest.approx(expected, rel=1e-9)


def test_the_routes_refuse_heads_and_masks():
    with pytest.raises(ValueError, match="rounding analysis"):
        prove(derive.variant("causal").graph, Rounding("stored-weights"))


def test_an_unknown_part_is_named():
    with pytest.raises(ValueError, match="part='weights'"):
        prove(derive.variant("flash").graph, Rounding("weights"))


def test_a_weight_times_its_rounding_is_at_most_u_over_e():
    x = np.linspace(0, 50, 10001)
    assert (x * np.exp(-x)).max() <= math.exp(-1) + 1e-12
    assert RF.bounded_product().holds
