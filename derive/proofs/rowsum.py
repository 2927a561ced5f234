r"""The rowsum identity of the softmax's backward pass, from the derived \bar{A} and the declared
context: Σ_r a_{m,r} \bar{a}_{m,r} = Σ_j \bar{z}_{m,j} z_{m,j} (the sum the softmax's gradient
needs, read off C and \bar{C} alone: FlashAttention's backward pass relies on it)."""

from __future__ import annotations

import sympy as sp
from sympy import Sum

from ..calculus import backward
from ..graph import Graph
from ..notation import letters as L
from .fact import Fact, chain

__all__ = ["rowsum_identity"]


def _out(total: Sum) -> sp.Expr:
    """Factors free of the summation index in front of the sum: Σ_r f g_r = f Σ_r g_r."""
    ((variable, *_),) = total.limits
    factors = sp.Mul.make_args(total.function)
    outside = [f for f in factors if variable not in f.free_symbols]
    inside = [f for f in factors if variable in f.free_symbols]
    return sp.Mul(*outside) * Sum(sp.Mul(*inside), *total.limits)


def rowsum_identity(graph: Graph) -> Fact:
    r"""$\sum_{r=1}^{n} a_{m,r} \bar{a}_{m,r} = \sum_{j=1}^{c} \bar{z}_{m,j} z_{m,j}$."""
    head = graph.producer("A") is None
    s = "_l" if head else ""
    (gradient,) = [g for g in backward(graph) if g.of == "A" + s]
    context = graph.step("C" + s)
    m, p, r, j = L.m, L.p, L.r, L.j
    a, z = L.base("a"), L.base("ctx")
    pick = (lambda base, *k: base[(L.ell, *k)]) if head else (lambda base, *k: base[k])
    d_a, d_z = L.base("da"), L.base("dctx")
    left = Sum(pick(a, m, r) * pick(d_a, m, r), (r, 1, L.n))
    d_a_entry = gradient.element.rhs.xreplace({p: r})  # \bar{a}_{m,r} = Σ_j \bar{z}_{m,j} v_{r,j}
    substituted = Sum(pick(a, m, r) * d_a_entry, (r, 1, L.n))
    scale, inner_sum = d_a_entry.as_coeff_Mul()
    ((variable, low, high),) = inner_sum.limits
    inner = inner_sum.function * pick(a, m, r)
    exchanged = scale * Sum(_out(Sum(inner, (r, 1, L.n))), (variable, low, high))
    weight, row = context.element.rhs.as_coeff_Mul()
    row = row.change_index(p, p, r)  # z_{m,j} = Σ_r a_{m,r} v_{r,j}
    recognised = exchanged.xreplace({row: context.element.lhs / weight})
    claim = sp.Eq(left, Sum(pick(d_z, m, j) * pick(z, m, j), (j, 1, high)), evaluate=False)
    return Fact(
        "rowsum_identity",
        "The row sums of the softmax's backward pass",
        chain(left, substituted, exchanged, recognised),
        claim,
        (gradient.output, context.output),
        "the derived gradient of A put in, two finite sums exchanged, the context recognised",
    )
