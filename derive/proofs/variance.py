r"""Why 1/√c: the variance of a score, derived from the stated assumptions.

An expectation operator whose only rules are the stated ones (`derive.graph.assumptions`):

- linearity: E over a finite sum is the sum of the E's, a constant factor comes out;
- independence: E of a product of a query's and a key's components is the product of the E's;
  two components of one vector, q_{m,j} and q_{m,j'}, are the same variable when j = j' and
  independent otherwise: E[q_{m,j} q_{m,j'}] = δ_{j,j'} E[q²] + (1 − δ_{j,j'}) E[q]²;
- the moments: E[q] = μ_q, E[q²] = σ_q² + μ_q² (the definition of the variance).

Applied to the declared score ω_{m,p} = Σ_{j=1}^{c} q_{m,j} k_{p,j}, the Kronecker deltas summed
under the index ranges, it gives Var(ω_{m,p}) = c(σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²) for symbolic c,
which is c with the book's μ = 0, σ² = 1; and through the declared scaling, Var(ω̃_{m,p}) = 1.
"""

from __future__ import annotations

import sympy as sp
from sympy import Indexed, KroneckerDelta, Sum

from ..calculus import under_ranges
from ..graph import Graph
from ..graph.assumptions import ASSUMPTIONS, Assumptions, E, Var, mu, sigma2
from ..notation import letters as L
from .fact import Fact, chain

__all__ = ["score_variance", "scaled_score_variance"]


def _random(expr: sp.Basic, families: tuple[str, ...]) -> bool:
    return any(e.base.label.name in families for e in expr.atoms(Indexed))


def _square(total: sp.Expr) -> sp.Expr:
    """(Σ_j f_j)² as Σ_j Σ_{j'} f_j f_{j'} (the second copy's index renamed)."""
    coefficient, rest = total.as_coeff_Mul()
    if not isinstance(rest, Sum):
        return total**2
    ((variable, low, high),) = rest.limits
    other = L.j2 if variable != L.j2 else L.j
    copy = rest.function.xreplace({variable: other})
    return coefficient**2 * Sum(rest.function * copy, (other, low, high), (variable, low, high))


def _linear(expr: sp.Expr, families: tuple[str, ...]) -> sp.Expr:
    """E of `expr` by linearity alone: into sums, constant factors out."""
    expr = sp.expand(expr)
    if isinstance(expr, sp.Add):
        return sp.Add(*[_linear(term, families) for term in expr.args])
    if isinstance(expr, Sum):
        return Sum(_linear(expr.function, families), *expr.limits)
    constants = [f for f in sp.Mul.make_args(expr) if not _random(f, families)]
    random = [f for f in sp.Mul.make_args(expr) if _random(f, families)]
    if len(random) == 1 and isinstance(random[0], Sum):
        return sp.Mul(*constants) * _linear(random[0], families)
    return sp.Mul(*constants) * E(sp.Mul(*random)) if random else expr


def _split(expr: sp.Expr, families: tuple[str, ...]) -> sp.Expr:
    """Independence of the families: E[q q' k k'] = E[q q'] E[k k']."""

    def split(e: sp.Expr) -> sp.Expr:
        (arg,) = e.args
        groups = {name: [] for name in families}
        for factor in sp.Mul.make_args(arg):
            (entry,) = factor.atoms(Indexed)
            groups[entry.base.label.name].append(factor)
        return sp.Mul(*[E(sp.Mul(*g)) for g in groups.values() if g])

    return expr.replace(lambda e: isinstance(e, E), split)


def _moment(e: sp.Expr) -> sp.Expr:
    """E of a product of one family's components, from the assumptions."""
    (arg,) = e.args
    powers = sp.Mul(arg).as_powers_dict()
    ((first, _),) = [(k, v) for k, v in powers.items()][:1]
    name = first.base.label.name
    first_moment, second_moment = mu(name), sigma2(name) + mu(name) ** 2
    if len(powers) == 1:
        (power,) = powers.values()
        return {1: first_moment, 2: second_moment}[int(power)]
    one, two = powers  # two components: the same variable when their indices agree
    delta = KroneckerDelta(one.indices[-1], two.indices[-1])
    return sp.expand(delta * second_moment + (1 - delta) * first_moment**2)  # δ σ² + μ²


def _sums(expr: sp.Expr, ranges: dict) -> sp.Expr:
    """The Kronecker deltas summed out under the ranges (δ^k = δ), the rest of the sums done."""
    expr = sp.expand(expr).replace(
        lambda e: e.is_Pow and isinstance(e.base, KroneckerDelta), lambda e: e.base
    )
    expr = under_ranges(expr, ranges)
    return sp.factor_terms(sp.expand(expr.doit()))


def _values(assumptions: Assumptions) -> list[tuple[sp.Symbol, sp.Expr]]:
    return list(assumptions.values)


def score_variance(graph: Graph, assumptions: Assumptions = ASSUMPTIONS) -> Fact:
    r"""$\operatorname{Var}(\omega_{m,p}) = c$ from the declared scores and the assumptions."""
    step = graph.step("Omega_l" if graph.producer("Omega") is None else "Omega")
    families = assumptions.families
    score, formula = step.element.lhs, step.element.rhs
    width = [limit[2] for s in formula.atoms(Sum) for limit in s.limits][0]
    ranges = {L.j: (sp.S.One, width), L.j2: (sp.S.One, width)}
    definition = E(score**2) - E(score) ** 2
    written = E(_square(formula)) - E(formula) ** 2
    linear = _linear(_square(formula), families) - _linear(formula, families) ** 2
    independent = _split(linear, families)
    moments = independent.replace(lambda e: isinstance(e, E), _moment)
    summed = _sums(moments, ranges)
    values = _values(assumptions)
    with sp.evaluate(False):  # the stated values put in, shown before any arithmetic on them
        stated = summed.xreplace(dict(values))
    value = sp.simplify(stated.doit())
    return Fact(
        "score_variance",
        "The variance of a score",
        chain(Var(score), definition, written, linear, independent, moments, summed, stated, value),
        sp.Eq(Var(score), width, evaluate=False),
        (step.output,),
        "an expectation operator with only the stated rules: linearity, independence, moments",
    )


def scaled_score_variance(graph: Graph, assumptions: Assumptions = ASSUMPTIONS) -> Fact:
    r"""$\operatorname{Var}(\tilde\omega_{m,p}) = 1$: the declared scaling by 1/√c undoes c."""
    scores = score_variance(graph, assumptions)
    step = graph.step("Omega_scaled_l" if graph.producer("Omega") is None else "Omega_scaled")
    scaled, formula = step.element.lhs, step.element.rhs
    (score,) = [e for e in formula.atoms(Indexed)]
    definition = E(scaled**2) - E(scaled) ** 2
    written = E(formula**2) - E(formula) ** 2
    linear = sp.factor_terms(
        _linear(formula**2, (score.base.label.name,))
        - _linear(formula, (score.base.label.name,)) ** 2
    )
    inner = E(score**2) - E(score) ** 2
    as_variance = linear.xreplace({inner: Var(score)})
    value = sp.simplify(as_variance.xreplace({Var(score): scores.derivation[-1].rhs}))
    return Fact(
        "scaled_score_variance",
        "The variance of a scaled score",
        chain(Var(scaled), definition, written, linear, as_variance, value),
        sp.Eq(Var(scaled), 1, evaluate=False),
        (step.output,),  # the chain reads the scaling; the score's variance is the fact above
        "linearity of the expectation, and the variance of a score above",
    )
