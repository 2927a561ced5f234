r"""What SymPy proves about the softmax of a graph's weights step, at symbolic n.

- `rows_sum_to_one`: Σ_{p=1}^{n} a_{m,p} = 1 from the weights' formula: the denominator does not
  depend on p, so it leaves the sum, and what remains is the denominator itself. With a declared
  mask (causal), the weights are first written without it: the mask's formula put in, and the
  conditions the index ranges decide decided, which gives the causal limits r ≤ m.
- `shift_invariance`: a constant λ added to every score of a row cancels.
- `softmax_jacobian`: ∂a_{m,p}/∂ω̃_{m,t} = a_{m,p}(δ_{p,t} − a_{m,t}), by `sympy.diff`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Indexed, Sum

from ..calculus import inline, under_ranges
from ..calculus.reverse import in_outputs
from ..graph import Declaration, Graph
from ..notation import letters as L
from .fact import Fact, chain

__all__ = [
    "weights_element",
    "same_dummy",
    "one_head_without_mask",
    "rows_sum_to_one",
    "shift_invariance",
    "softmax_jacobian",
]

_RANGES = {L.m: (sp.S.One, L.n), L.p: (sp.S.One, L.n), L.t: (sp.S.One, L.n)}


def _weights(graph: Graph) -> Declaration:
    (step,) = [s for s in graph.declarations if s.output == "A"] or [
        s for s in graph.declarations if s.output == "A_l"
    ]
    return step


def weights_element(graph: Graph) -> tuple[sp.Expr, tuple[str, ...]]:
    """a_{m,p} in the scaled scores: the mask's declaration put in where the graph declares
    one (causal), its conditions decided under the index ranges. Returns (formula, sources)."""
    step = _weights(graph)
    element = step.element.rhs
    declared = {s.output for s in graph.declarations if s.constant}
    if not declared:
        return element, (step.output,)
    masked = [letter for letter in step.inputs if graph.producer(letter) is not None]
    letters = set(masked) | declared
    written = under_ranges(inline(element, graph, letters), _RANGES)
    return written, (step.output, *sorted(letters))


def one_head_without_mask(graph: Graph, what: str) -> None:
    """A ValueError unless `graph` has one head and no mask (what is derived here, `what`, is
    derived for that graph only), naming what the graph has instead."""
    if graph.producer("A") is None or any(s.constant for s in graph.declarations):
        has = "heads" if graph.producer("A") is None else "a mask"
        raise ValueError(f"{what} is derived for one head without a mask; {graph.name} has {has}")


def same_dummy(expr: sp.Expr, index: sp.Symbol) -> sp.Expr:
    """Every sum over the same dummy: Σ_p f(p) and Σ_r f(r) are the same number."""
    return expr.replace(
        lambda e: isinstance(e, Sum),
        lambda s: s.change_index(s.variables[0], s.variables[0], index),
    )


def rows_sum_to_one(graph: Graph) -> Fact:
    r"""$\sum_{p} a_{m,p} = 1$ over the keys, for every row m (with a declared mask, over its
    limits)."""
    element, sources = weights_element(graph)
    step = _weights(graph)
    a, keys = step.element.lhs, step.shapes[step.output][1]  # n, or s keys from another sequence
    total = Sum(a, (L.p, 1, keys))
    written = Sum(element, (L.p, 1, keys))
    decided = under_ranges(written, _RANGES)
    factored = sp.factor_terms(decided)
    renamed = same_dummy(factored, L.r)
    value = sp.simplify(renamed)
    return Fact(
        "rows_sum_to_one",
        "The rows of the weights",
        chain(total, written, decided, factored, value),
        Eq(total, 1, evaluate=False),
        sources,
        "the denominator taken out of the sum over p, by SymPy",
    )


def rows_sum_with_sink(graph: Graph) -> Fact:
    r"""$\sum_p a_{m,p} = 1 - e^{\zeta} / (e^{\zeta} + \sum_r e^{\hat\omega_{m,r}}) < 1$: an
    attention sink's logit ζ in each row's denominator takes the rest of the row's weight."""
    element, sources = weights_element(graph)
    step = _weights(graph)
    a, keys = step.element.lhs, step.shapes[step.output][1]
    total = Sum(a, (L.p, 1, keys))
    written = Sum(element, (L.p, 1, keys))
    decided = under_ranges(written, _RANGES)
    factored = same_dummy(sp.factor_terms(decided), L.r)
    numerator, denominator = sp.fraction(factored)
    sink = sp.expand(denominator - numerator)  # e^ζ: what the denominator holds besides the sum
    taken = sink / denominator
    complement = 1 - taken
    below = bool(sp.simplify(factored - complement) == 0 and sink.is_positive)
    claimed = sp.StrictLessThan(total, 1) if below else Eq(total, sp.nan, evaluate=False)
    return Fact(
        "rows_sum_with_sink",
        "The sink takes the rest of each row",
        (*chain(total, written, decided, factored, complement), claimed),
        claimed,
        sources,
        "the denominator taken out of the sum over p, by SymPy; what it holds besides the "
        "row's sum, positive",
    )


def shift_invariance(graph: Graph) -> Fact:
    r"""Adding λ to every score of a row leaves a_{m,p} unchanged: e^λ cancels."""
    step = _weights(graph)
    (source,) = step.inputs
    element = step.element.rhs

    def shifted(entry: sp.Basic) -> bool:
        return isinstance(entry, Indexed) and L.letter_of(entry) == source

    moved = element.replace(shifted, lambda e: e + L.lam)
    expanded = sp.expand(moved)  # exp(s + λ) -> exp(λ) exp(s)
    cancelled = sp.factor_terms(expanded)
    return Fact(
        "shift_invariance",
        "Adding a constant to a row of scores",
        chain(moved, expanded, cancelled),
        Eq(moved, element, evaluate=False),
        (step.output,),
        "exp of a sum expanded and the common factor cancelled, by SymPy",
    )


def softmax_jacobian(graph: Graph) -> Fact:
    r"""The Jacobian of a row of the weights, written in the weights: for the softmax,
    $\partial a_{m,p} / \partial \tilde\omega_{m,t} = a_{m,p}(\delta_{p,t} - a_{m,t})$ (of the
    scores it reads), by `sympy.diff` of the declared formula and the deltas summed out."""
    step = _weights(graph)
    (source,) = step.inputs
    element = step.element.rhs
    base = L.base(L.name_of(source))
    head = source.endswith("_l")
    target = base[L.ell, L.m, L.t] if head else base[L.m, L.t]
    a = step.element.lhs
    lhs = sp.Derivative(a, target)
    derivative = sp.diff(element, target)
    summed = under_ranges(derivative, _RANGES)
    written = in_outputs(summed, step, {L.m, L.p, L.t})
    return Fact(
        "softmax_jacobian",
        "The Jacobian of a row of the softmax",
        chain(lhs, derivative, summed, written),
        Eq(lhs, written, evaluate=False),  # a derivation: its last line is what it claims
        (step.output,),
        "sympy.diff of the declared weights, the Kronecker deltas summed out",
    )
