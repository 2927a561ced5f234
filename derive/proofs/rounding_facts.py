r"""What the first-order rounding analysis of `derive.proofs.rounding` says about the two
backward routes, derived:

- `stored_weights`: a weight from the stored log-sum-exp is off by a_{m,p}(u |L_m| + u (L_m −
  ω̃_{m,p}) + η), u |L_m| the size of the scores;
- `maximum_weights`: one from the recomputed maximum by a_{m,p} Σ_r |δ_{p,r} − a_{m,r}| (u (μ_m
  − ω̃_{m,r}) + η) + γ_n + 2u, derived at n = 3 keys and written with the weights; and
  `bounded_product`: each a_{m,r} u (μ_m − ω̃_{m,r}) is at most u/e, as x e^{−x} ≤ e^{−1};
- `scale_stored`, `scale_maximum`: on a row of scores s + z_r (size s, a spread that does not
  grow), the first bound over s tends to u a_{m,1} (it grows as u s), the second does not
  depend on s;
- `cancellation_stored`, `cancellation_maximum`: the rounding of the dot products ā and D
  enters the largest key's dω̃ with a_{m,1} β (and −a_{m,1} β_C) against the stored context, with
  a_{m,1}(1 − a_{m,1}) β_1 and −a_{m,1} a_{m,r} β_r when D is summed from the same rounded ā:
  as the row saturates (scores s z_r, s → ∞) the first tends to γ_c (β_1 + β_C), the second
  to 0.
"""

from __future__ import annotations

import sympy as sp
from sympy import Abs, Eq, Le, Limit, exp

from ..graph import Graph
from ..graph.claims import Rounding
from ..notation import letters as L
from .fact import Fact
from .rounding import (
    ETA,
    GAMMA_C,
    GAMMA_N,
    SCALE,
    Roundings,
    Route,
    Row,
    U,
    offset_row,
    row_maximum,
    signs,
    spread_row,
    stored_lse,
)
from .rounding import weight as weight_of
from .softmax import one_head_without_mask

__all__ = [
    "stored_weights",
    "maximum_weights",
    "bounded_product",
    "scale_stored",
    "scale_maximum",
    "cancellation_stored",
    "cancellation_maximum",
    "prove",
]

A_HAT, A_M = sp.Symbol(r"\hat{a}_{m,p}"), L.base("a")[L.m, L.p]


def stored_weights(route: Route = stored_lse) -> Fact:
    """|P̂_{m,p} − a_{m,p}| ≤ a_{m,p} (u |L_m| + u (L_m − ω̃_{m,p}) + η), derived from `route` at
    one key (the weight of a key reads the row's L_m and its own score only)."""
    row = Row.symbolic(None)
    fl = Roundings()
    (computed,), _ = route(fl, row)
    weight = exp(row.scores[0] - row.lse)
    found = fl.first_order(computed)
    error = sp.Add(*(sp.simplify(c / weight) * xi for xi, c in found.items()))
    derived = (fl.bound(computed) / weight).xreplace(signs(row))
    derived = sp.expand(sp.simplify(derived))
    claim = U * Abs(row.lse) + U * (row.lse - row.scores[0]) + ETA
    lhs = Abs(A_HAT - A_M) / A_M
    return Fact(
        "stored_weights",
        "A weight from the stored log-sum-exp",
        (
            Eq(A_HAT, computed, evaluate=False),
            Eq(A_HAT / A_M - 1, error, evaluate=False),
            Le(lhs, derived, evaluate=False),
        ),
        Le(lhs, claim, evaluate=False),
        ("A",),
        "each rounding a symbol, the error's coefficients by differentiation at 0 (first order), "
        "their magnitudes times the units; L_m is at least the score",
    )


def _general_maximum(row: Row, key: int, weights: list[sp.Expr]) -> sp.Expr:
    """The recomputed maximum's first-order bound on |â_key − a_key| / a_key, written with the
    `weights`: (1 − a_p)(u(μ − ω̃_p) + η) + Σ_{r≠p} a_r (u(μ − ω̃_r) + η) + γ_n + 2u."""
    own = (1 - weights[key]) * (U * (row.maximum - row.scores[key]) + ETA)
    others = sp.Add(
        *(
            weights[r] * (U * (row.maximum - row.scores[r]) + ETA)
            for r in range(len(row.scores))
            if r != key
        )
    )
    return own + others + GAMMA_N + 2 * U


def maximum_weights(route: Route = row_maximum, *, n: int = 3) -> Fact:
    """|â_{m,p} − a_{m,p}| / a_{m,p} ≤ Σ_r |δ_{p,r} − a_{m,r}| (u(μ − ω̃_{m,r}) + η) + γ_n + 2u,
    derived from `route` at n keys: the claim, its sum written out at n, is each key's derived
    bound (every key checked; key 1's shown with the weights)."""
    row = Row.symbolic(n)
    fl = Roundings()
    weights, _ = route(fl, row)
    exact = [weight_of(row, r, row.maximum) for r in range(n)]
    a, w = L.base("a"), L.base("omegatilde")
    m, p, r = L.m, L.p, L.r
    claim = (
        sp.Sum(
            Abs(sp.KroneckerDelta(p, r) - a[m, r]) * (U * (row.maximum - w[m, r]) + ETA),
            (r, 1, L.n),
        )
        + GAMMA_N
        + 2 * U
    )
    values = {a[m, k + 1]: exact[k] for k in range(n)}
    values |= {w[m, k + 1]: row.scores[k] for k in range(n)}
    same = True
    for key in range(n):
        derived = (fl.bound(weights[key]) / exact[key]).xreplace(signs(row))
        general = claim.xreplace({L.n: n, p: key + 1}).doit().xreplace(values)
        general = general.replace(Abs, lambda x: x if x.is_number else sp.Abs(sp.factor(x)))
        same = same and sp.simplify(derived - general) == 0
    derived = (fl.bound(weights[0]) / exact[0]).xreplace(signs(row))
    named = _general_maximum(row, 0, [a[L.m, k] for k in range(1, n + 1)])
    lhs = Abs(A_HAT - A_M) / A_M
    at_one = Abs(sp.Symbol(r"\hat{a}_{m,1}") - a[m, 1]) / a[m, 1]
    return Fact(
        "maximum_weights",
        "A weight from the recomputed maximum",
        (
            Le(at_one, named if same else derived, evaluate=False),
            Le(lhs, claim if same else sp.nan, evaluate=False),
        ),
        Le(lhs, claim, evaluate=False),
        ("A",),
        f"each rounding a symbol, at n = {n} keys; the coefficients by differentiation at 0, "
        "their magnitudes times the units, the exponentials over their sum written as weights; "
        "the claim's sum written out is each key's derived bound",
    )


def bounded_product() -> Fact:
    """x e^{−x} ≤ e^{−1} for x ≥ 0: a weight a_{m,r} ≤ e^{ω̃_{m,r} − μ_m} times the rounding's
    size u (μ_m − ω̃_{m,r}) is at most u/e, whatever the scale of the scores."""
    x = sp.Symbol("x", nonnegative=True)
    f = x * exp(-x)
    slope = sp.diff(f, x)
    (top,) = sp.solve(slope, x)
    curvature = sp.diff(f, x, 2).subs(x, top)
    peak = f.subs(x, top)
    ends = f.subs(x, 0) == 0 and sp.limit(f, x, sp.oo) == 0
    highest = peak if curvature.is_negative and ends else sp.nan
    return Fact(
        "bounded_product",
        "The largest rounding a small weight carries",
        (
            Eq(sp.Derivative(f, x), sp.factor(slope), evaluate=False),
            Eq(sp.Symbol("x^*"), top, evaluate=False),
            Le(f, highest, evaluate=False),
        ),
        Le(f, exp(-1), evaluate=False),
        (),
        "the derivative's zero, a maximum (the second derivative is negative there, and the "
        "function tends to 0 at both ends)",
    )


def _offset_bound(route: Route, n: int) -> tuple[sp.Expr, Row, dict]:
    """`route`'s first-order bound on the error of key 1's weight on a row s + z_r (and the
    symbolic row, and the values put in it)."""
    row, at = offset_row(n)
    fl = Roundings()
    weights, _ = route(fl, row)
    bound = fl.bound(weights[0]).xreplace(signs(row)).xreplace({Abs(row.lse): row.lse})
    return sp.simplify(sp.powsimp(bound.xreplace(at), combine="exp")), row, at


#: B(s): a bound as a function of the scale s, the name the limits print.
_B = sp.Function("B")(SCALE)


def scale_stored(route: Route = stored_lse, *, n: int = 3) -> Fact:
    """On a row of scores s + z_r (size s, z_1 the largest): the stored log-sum-exp's bound on
    key 1's weight, over s, tends to u a_{m,1}: it grows as u s."""
    bound, row, at = _offset_bound(route, n)
    weight = weight_of(row, 0, row.maximum).xreplace(at)
    a = L.base("a")[L.m, 1]
    rest = sp.simplify(bound / weight)  # the bound over the weight: u|L| + u(L − z_1) + η
    lhs = Limit(_B / SCALE, SCALE, sp.oo)
    value = sp.simplify(sp.limit(bound / SCALE, SCALE, sp.oo) / weight)
    return Fact(
        "scale_stored",
        "Large scores, from the stored log-sum-exp",
        (Eq(_B, a * rest, evaluate=False), Eq(lhs, value * a, evaluate=False)),
        Eq(lhs, U * a, evaluate=False),
        ("A",),
        "the first-order bound on a row of scores s + z_r (a_{m,1} = e^{z_1} / Σ_r e^{z_r}, "
        "free of s; |L_m| = L_m once s is large enough that L_m > 0), over s, its limit as s "
        "grows (SymPy's Gruntz algorithm)",
    )


def scale_maximum(route: Route = row_maximum, *, n: int = 3) -> Fact:
    """The same for the recomputed maximum: its bound does not depend on s (the maximum takes
    the size away before any rounding that counts)."""
    bound, row, at = _offset_bound(route, n)
    spread = Row(
        tuple(at[w] - SCALE for w in row.scores),
        at[row.maximum] - SCALE,
        row.lse,
        row.upstream,
        row.beta,
        row.rowsum,
        row.beta_c,
    )
    exact = [weight_of(row, r, row.maximum).xreplace(at) for r in range(n)]
    named = [L.base("a")[L.m, r] for r in range(1, n + 1)]
    same = sp.simplify(bound - exact[0] * _general_maximum(spread, 0, exact)) == 0
    shown = named[0] * _general_maximum(spread, 0, named) if same else bound
    lhs = sp.Derivative(_B, SCALE)
    return Fact(
        "scale_maximum",
        "Large scores, from the recomputed maximum",
        (
            Eq(_B, shown, evaluate=False),
            Eq(lhs, sp.simplify(sp.diff(bound, SCALE)), evaluate=False),
        ),
        Eq(lhs, 0, evaluate=False),
        ("A",),
        "the first-order bound on a row of scores s + z_r (the weights a_{m,r} = e^{z_r} / "
        "Σ e^{z}, free of s), differentiated in s",
    )


def _rounded_upstream(route: Route, n: int) -> tuple[Row, list, list, sp.Expr]:
    """The roundings of the dot products (ā, D) in the largest key's dω̃: (the row, the
    roundings, their coefficients, the limit of their bound on a row s z_r as s → ∞)."""
    row, at = spread_row(n)
    fl = Roundings()
    _, gradients = route(fl, row)
    found = fl.first_order(gradients[0])
    dots = [xi for xi, unit in fl.units.items() if unit == GAMMA_C and found[xi] != 0]
    coefficients = [sp.factor(found[xi]) for xi in dots]
    at_s = [sp.factor(sp.powsimp(c.xreplace(at), combine="exp")) for c in coefficients]
    bound = sp.powsimp(sp.expand(sp.Add(*(Abs(c) for c in at_s)) * GAMMA_C), combine="exp")
    return row, dots, coefficients, sp.limit(bound, SCALE, sp.oo)


def _as_weights(expr: sp.Expr, row: Row) -> sp.Expr:
    """`expr` with each e^{ω̃_r − L} and e^{ω̃_r} / Σ_r e^{ω̃_r} written as the weight a_{m,r},
    for the reader (the sum of a row's weights is 1)."""
    a = [L.base("a")[L.m, r] for r in range(1, len(row.scores) + 1)]
    expr = sp.powsimp(sp.factor(expr), combine="exp")
    expr = expr.xreplace({exp(w - row.lse): x for w, x in zip(row.scores, a, strict=True)})
    expr = sp.expand_power_exp(expr)
    expr = expr.xreplace({exp(w): x for w, x in zip(row.scores, a, strict=True)})
    return sp.factor(expr).xreplace({sp.Add(*a): 1})


#: Δ(dω̃_{m,1}): the error of the largest key's gradient that the dot products' roundings make.
_ERROR = sp.Function("Delta")(L.base("domegatilde")[L.m, 1])


def _cancellation(name: str, title: str, route: Route, n: int, claim) -> Fact:
    row, dots, coefficients, value = _rounded_upstream(route, n)
    shown = [_as_weights(c, row) for c in coefficients]
    thetas = [sp.Symbol(f"theta_{k}") for k in range(1, len(dots) + 1)]
    # each coefficient a product of weights and β's, one sign: its magnitude without |·|
    sizes = [-c if c.could_extract_minus_sign() else c for c in shown]
    lhs = Limit(_B, SCALE, sp.oo)
    return Fact(
        name,
        title,
        (
            Eq(
                _ERROR, sp.Add(*(c * t for c, t in zip(shown, thetas, strict=True))), evaluate=False
            ),
            Eq(_B, GAMMA_C * sp.Add(*sizes), evaluate=False),
            Eq(lhs, value, evaluate=False),
        ),
        Eq(lhs, claim(row), evaluate=False),
        ("dA", "dOmega_scaled"),
        "the coefficients of the dot products' roundings θ (|θ| ≤ γ_c) by differentiation at "
        "0, their bound B, and its limit as the row saturates (a_{m,1} → 1 on a row of scores "
        "s z_r as s → ∞)",
    )


def cancellation_stored(route: Route = stored_lse, *, n: int = 3) -> Fact:
    """The roundings of ā and of D = rowsum(dC ∘ C) in the largest key's dω̃ enter with
    coefficients a β and −a β_C: as the row saturates their bound tends to γ_c (β_1 + β_C)."""
    return _cancellation(
        "cancellation_stored",
        "The rounding of dA, against the stored context",
        route,
        n,
        lambda row: GAMMA_C * (row.beta[0] + row.beta_c),
    )


def cancellation_maximum(route: Route = row_maximum, *, n: int = 3) -> Fact:
    """The same with D = Σ_r a_r ā_r from the same rounded ā: the coefficients a_1 (1 − a_1) β_1
    and −a_1 a_r β_r, whose bound tends to 0 as the row saturates."""
    return _cancellation(
        "cancellation_maximum", "The rounding of dA, in the same D", route, n, lambda row: sp.S.Zero
    )


def prove(graph: Graph, claim: Rounding) -> Fact:
    """The fact a `Rounding` claim names, for a graph of one head without a mask."""
    found = {
        "stored-weights": stored_weights,
        "maximum-weights": maximum_weights,
        "bounded-product": bounded_product,
        "scale-stored": scale_stored,
        "scale-maximum": scale_maximum,
        "cancellation-stored": cancellation_stored,
        "cancellation-maximum": cancellation_maximum,
    }
    if claim.part not in found:
        raise ValueError(
            f"Rounding: part must be one of {', '.join(found)}, got part={claim.part!r}"
        )
    one_head_without_mask(graph, "the rounding analysis of the backward pass")
    return found[claim.part]()
