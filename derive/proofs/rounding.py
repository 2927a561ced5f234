r"""Where float32 breaks the blocked backward pass, derived: a first-order rounding analysis of
the two ways to get a row's weights A and the scores' gradient dΩ̃ = A ∘ (dA − D) in the
backward pass.

- the stored log-sum-exp (`stored_lse`, FlashAttention's and PyTorch's fused kernels): a weight
  P̂_{m,p} = e^{ω̃_{m,p} − L̂_m} from the L̂_m the forward pass kept, and D = rowsum(dC ∘ C) from
  the context the forward pass kept;
- the recomputed row maximum (`row_maximum`, our fast path `attention._fused`): each weight
  e^{ω̃_{m,p} − μ_m} / Σ_r e^{ω̃_{m,r} − μ_m}, and D = Σ_r a_{m,r} ā_{m,r} summed from the same
  rounded ā the gradient subtracts it from.

The model (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, §2.2 and §3.1): every
operation's result is the exact one times 1 + δ, |δ| ≤ u (u = 2⁻²⁴ in float32); an exponential's
times 1 + ε, |ε| ≤ η (η = 2u for an exp accurate to 1 ulp); a sum of k terms is Σ t_r (1 + θ_r),
|θ_r| ≤ γ_k = k u / (1 − k u), in any order; a dot product of c terms is off by at most
γ_c Σ_j |x_j||y_j|, written β θ with |θ| ≤ γ_c. The scores, V and dC are the inputs; the stored
L̂_m and ĉ_{m,j} are the exact ones rounded once (the forward pass's own error comes on top, the
same for both routes in a forward pass that subtracts its running maximum). SymPy builds each
route's computation with a symbol for each rounding (`Roundings`), and its first-order error is
Σ_ξ (∂/∂ξ)|_{ξ=0} ξ: each coefficient derived by differentiation, the bound Σ_ξ |coefficient|
times ξ's unit. (First order: terms in u² are left out; at |L_m| u ≥ 1 they are not small, and
the bound with them.)

`derive.proofs.rounding_facts` derives what the two routes' bounds say; `bounds` evaluates the
whole first-order bounds of both routes on numbers, for the figure. Each route is a function the
facts take as an argument: a test changes one and sees the facts fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from sympy import Abs, exp, log

from ..notation import letters as L

__all__ = [
    "U",
    "ETA",
    "GAMMA_C",
    "GAMMA_N",
    "SCALE",
    "Roundings",
    "Row",
    "Route",
    "stored_lse",
    "row_maximum",
    "bounds",
    "evaluate",
    "UNITS",
    "signs",
    "weight",
    "spread_row",
    "offset_row",
]

#: u, η, γ_c (a dot product of c terms), γ_n (a sum of n terms, or a dot product of n): the
#: units of the roundings; s, the scale of a row of scores.
U, ETA = sp.Symbol("u", positive=True), sp.Symbol("eta", positive=True)
GAMMA_C, GAMMA_N = sp.Symbol("gamma_c", positive=True), sp.Symbol("gamma_n", positive=True)
SCALE = sp.Symbol("s", positive=True)
#: Their values in float32 at c and n (η: exp to 1 ulp, as SLEEF's expf behind torch.exp).
UNITS = {U: 2.0**-24, ETA: 2 * 2.0**-24}


def _gamma(k: int) -> float:
    return k * UNITS[U] / (1 - k * UNITS[U])


@dataclass
class Roundings:
    """The roundings of one computation: a symbol for each, and its unit (u, η, γ_c, γ_n)."""

    units: dict[sp.Symbol, sp.Expr] = field(default_factory=dict)

    def error(self, unit: sp.Expr) -> sp.Symbol:
        """A fresh rounding ξ, |ξ| ≤ unit."""
        xi = sp.Symbol(f"xi_{len(self.units) + 1}", real=True)
        self.units[xi] = unit
        return xi

    def rounded(self, value: sp.Expr, unit: sp.Expr = U) -> sp.Expr:
        """value (1 + ξ): one operation's result."""
        return value * (1 + self.error(unit))

    def exact(self, expr: sp.Expr) -> sp.Expr:
        return expr.xreplace({xi: 0 for xi in self.units})

    def first_order(self, expr: sp.Expr) -> dict[sp.Symbol, sp.Expr]:
        """{ξ: ∂expr/∂ξ at ξ = 0}: expr's error to first order is Σ coefficient · ξ."""
        return {xi: self.exact(sp.diff(expr, xi)) for xi in self.units}

    def bound(self, expr: sp.Expr, at: dict | None = None, *, factor: bool = True) -> sp.Expr:
        """Σ_ξ |∂expr/∂ξ| unit(ξ): the first-order bound on expr's error (each coefficient
        taken at `at` first, where given; factored, for SymPy to see its sign, unless `factor`
        is False: numbers will decide it)."""
        found = self.first_order(expr)
        if at is not None:
            found = {xi: sp.powsimp(c.xreplace(at), combine="exp") for xi, c in found.items()}
        shaped = sp.factor if factor else (lambda c: c)
        return sp.Add(*(Abs(shaped(c)) * self.units[xi] for xi, c in found.items() if c != 0))


@dataclass(frozen=True)
class Row:
    """One row m of the backward pass: its scaled scores ω̃_{m,r}, their maximum μ_m and
    log-sum-exp L_m, the upstream ā_{m,r} = Σ_j \\bar{c}_{m,j} v_{r,j} and β_r = Σ_j
    |\\bar{c}_{m,j}| |v_{r,j}| (what a dot product's rounding is relative to), D_m and
    β_C = Σ_j |\\bar{c}_{m,j}| |c_{m,j}|."""

    scores: tuple[sp.Expr, ...]
    maximum: sp.Expr
    lse: sp.Expr
    upstream: tuple[sp.Expr, ...]
    beta: tuple[sp.Expr, ...]
    rowsum: sp.Expr
    beta_c: sp.Expr

    @staticmethod
    def symbolic(n: int | None) -> Row:
        """n keys, every entry a symbol (ω̃_{m,r}, ā_{m,r}, …); None: the one key p."""
        m = L.m
        keys = (L.p,) if n is None else range(1, n + 1)
        return Row(
            tuple(L.base("omegatilde")[m, r] for r in keys),
            sp.Symbol("mu_m", real=True),
            sp.IndexedBase("L", real=True)[m],
            tuple(L.base("da")[m, r] for r in keys),
            tuple(sp.Symbol(f"beta_{r}", positive=True) for r in keys),
            sp.IndexedBase("D", real=True)[m],
            sp.Symbol("beta_C", positive=True),
        )


#: A route: (its roundings, a row) -> (the computed weights, the computed dω̃), key by key.
Route = Callable[[Roundings, Row], tuple[list[sp.Expr], list[sp.Expr]]]


def _gradient(fl: Roundings, weight: sp.Expr, upstream: sp.Expr, rowsum: sp.Expr) -> sp.Expr:
    """dω̃ = a (ā − D): the difference rounded, then the product."""
    return fl.rounded(weight * fl.rounded(upstream - rowsum))


def stored_lse(fl: Roundings, row: Row) -> tuple[list[sp.Expr], list[sp.Expr]]:
    """P̂ = e^{ω̃ − L̂} from the stored L̂ = L (1 + δ); ā rounded in its dot product; D =
    rowsum(dC ∘ Ĉ), the stored context rounded once and the dot product rounded."""
    kept = fl.rounded(row.lse)
    weights = [fl.rounded(exp(fl.rounded(score - kept)), ETA) for score in row.scores]
    upstream = [a + b * fl.error(GAMMA_C) for a, b in zip(row.upstream, row.beta, strict=True)]
    rowsum = row.rowsum + row.beta_c * (fl.error(GAMMA_C) + fl.error(U))
    return weights, [_gradient(fl, w, a, rowsum) for w, a in zip(weights, upstream, strict=True)]


def row_maximum(fl: Roundings, row: Row) -> tuple[list[sp.Expr], list[sp.Expr]]:
    """â = e^{ω̃ − μ} · (1 / Σ_r e^{ω̃_r − μ}) (torch's softmax: the sum's reciprocal, then a
    product); ā rounded in its dot product; D = Σ_r â_r ā_r from those same ā."""
    exps = [fl.rounded(exp(fl.rounded(score - row.maximum)), ETA) for score in row.scores]
    total = sp.Add(*(e * (1 + fl.error(GAMMA_N)) for e in exps))
    inverse = fl.rounded(1 / total)
    weights = [fl.rounded(e * inverse) for e in exps]
    upstream = [a + b * fl.error(GAMMA_C) for a, b in zip(row.upstream, row.beta, strict=True)]
    rowsum = sp.Add(
        *(w * a * (1 + fl.error(GAMMA_N)) for w, a in zip(weights, upstream, strict=True))
    )
    return weights, [_gradient(fl, w, a, rowsum) for w, a in zip(weights, upstream, strict=True)]


def signs(row: Row) -> dict[sp.Expr, sp.Expr]:
    """|ω̃_r − μ| = μ − ω̃_r and |ω̃_r − L| = L − ω̃_r: the maximum and the log-sum-exp are at
    least every score of the row (L = log Σ e^{ω̃} ≥ log e^{ω̃_r})."""
    found = {}
    for score in row.scores:
        for top in (row.maximum, row.lse):
            found[Abs(score - top)] = top - score
            found[Abs(top - score)] = top - score
    return found


def weight(row: Row, key: int, shift: sp.Expr) -> sp.Expr:
    """a_{m,key} = e^{ω̃_key − shift} / Σ_r e^{ω̃_r − shift}."""
    exps = [exp(score - shift) for score in row.scores]
    return exps[key] / sp.Add(*exps)


def spread_row(n: int) -> tuple[Row, dict]:
    """A row of scores s z_r, z_1 = 1 the largest and z_r = 1 − (r − 1) g, evenly spaced by any
    g > 0 (SymPy's limits need to know which exponential dominates: symbolic gaps of no known
    order leave them undecided): its maximum s and its log-sum-exp, as functions of s."""
    gap = sp.Symbol("g", positive=True)
    gaps = [k * gap for k in range(1, n)]
    scores = (SCALE, *(SCALE * (1 - g) for g in gaps))
    symbolic = Row.symbolic(n)
    lse = SCALE + log(1 + sp.Add(*(exp(-SCALE * g) for g in gaps)))  # log Σ_r e^{s z_r}
    at = {
        **dict(zip(symbolic.scores, scores, strict=True)),
        symbolic.maximum: SCALE,
        symbolic.lse: lse,
    }
    return symbolic, at


def offset_row(n: int) -> tuple[Row, dict]:
    """A row of scores s + z_r, z_1 the largest: scores of size s whose spread does not grow
    (the row does not saturate); its maximum s + z_1 and its log-sum-exp s + log Σ_r e^{z_r}."""
    spread = sp.symbols(f"z_1:{n + 1}", real=True)
    symbolic = Row.symbolic(n)
    at = {
        **{w: SCALE + z for w, z in zip(symbolic.scores, spread, strict=True)},
        symbolic.maximum: SCALE + spread[0],
        symbolic.lse: SCALE + log(sp.Add(*(exp(z) for z in spread))),
    }
    return symbolic, at


def bounds(n: int) -> dict[str, Callable]:
    """The whole first-order bounds of both routes at n keys, as numpy functions of a row's
    numbers: {"weights stored", "weights maximum", "gradient stored", "gradient maximum"} ->
    f(scores (…, n), μ (…,), L (…,), ā (…, n), β (…, n), D (…,), β_C (…,)) -> (…, n), each
    key's bound. γ_c and γ_n are taken at `c` and n by `evaluate`."""
    row = Row.symbolic(n)
    arguments = (
        *row.scores,
        row.maximum,
        row.lse,
        *row.upstream,
        *row.beta,
        row.rowsum,
        row.beta_c,
        GAMMA_C,
        GAMMA_N,
    )
    found = {}
    for name, route in (("stored", stored_lse), ("maximum", row_maximum)):
        fl = Roundings()
        weights, gradients = route(fl, row)
        for part, exprs in (("weights", weights), ("gradient", gradients)):
            terms = [fl.bound(e, factor=False).xreplace(UNITS) for e in exprs]
            found[f"{part} {name}"] = sp.lambdify(arguments, terms, "numpy", cse=True)
    return found


def evaluate(
    function: Callable,
    scores: np.ndarray,
    *,
    upstream: np.ndarray,
    beta: np.ndarray,
    rowsum: np.ndarray,
    beta_c: np.ndarray,
    width: int,
) -> np.ndarray:
    """One of `bounds`' functions on rows of numbers (float64): scores, ā and β (rows, n); D
    and β_C (rows,); μ and L from the scores; γ_c at `width`, γ_n at n."""
    n = scores.shape[-1]
    top = scores.max(axis=-1)
    lse = top + np.log(np.exp(scores - top[:, None]).sum(axis=-1))
    columns = (*scores.T, top, lse, *upstream.T, *beta.T, rowsum, beta_c, _gamma(width), _gamma(n))
    return np.stack([np.broadcast_to(t, top.shape) for t in function(*columns)], axis=-1)
