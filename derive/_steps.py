"""Each step of self-attention as an object: name, matrix-level and element-wise equation, shapes.

The generic derivation keeps n, d, c symbolic. The element-wise equation of every matrix product
is not typed in: SymPy expands the matrix product element by element (`MatMul[m, j]` gives a
`Sum` over a 0-based dummy) and `_matexpr.entry_of` only renames that sum to the seed's 1-based
indices.
The softmax has no matrix-level meaning in SymPy, so its element-wise form is the definition.

Step names match `attention.functional`: projection, scores, scaled_scores, weights, context
(and split_heads, merge_heads for the multi-head variant), so the two halves read side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp
from sympy import Eq, Indexed, MatMul, MatrixSymbol, Sum, Transpose, exp, sqrt

from . import _notation as N
from ._matexpr import Concat, Softmax, entry_of

__all__ = ["Step", "Softmax", "Concat", "steps", "batched", "STEP_NAMES", "PER_SEQUENCE"]

#: The names of `attention.functional` that the steps mirror, in derivation order.
STEP_NAMES = (
    "projection",
    "split_heads",
    "scores",
    "scaled_scores",
    "weights",
    "context",
    "merge_heads",
)


@dataclass(frozen=True)
class Step:
    """One step of the derivation.

    Attributes:
        name: the `attention.functional` function that computes it (``"scores"``, ...).
        output: the letter of the matrix it produces (``"Omega"``; see `derive._notation`).
        title: a few words for documents.
        matrix: the matrix-level equation, e.g. ``Eq(Omega, Q*K.T)``.
        element: the element-wise equation, e.g. ω_{m,p} = Σ_j q_{m,j} k_{p,j}.
        shapes: the shape of every matrix in the equation, letter -> (rows, cols).
        head: True for the per-head steps of the multi-head variant.
    """

    name: str
    output: str
    title: str
    matrix: Eq
    element: Eq
    shapes: dict[str, tuple[sp.Expr, sp.Expr]] = field(hash=False)
    head: bool = False

    def _repr_latex_(self) -> str:
        from ._latex import step_latex

        return "$$" + step_latex(self) + "$$"


def _shapes(*symbols: MatrixSymbol) -> dict[str, tuple[sp.Expr, sp.Expr]]:
    return {str(symbol.name): symbol.shape for symbol in symbols}


def _per_head(name: str) -> str:
    return f"{name}_l"


# ---------------------------------------------------------------------------------------------
# The steps, one function each


def projection(which: str, *, width: sp.Expr = N.c) -> Step:
    r"""Projection of the inputs: $Q = X W_q$, $q_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_q)_{i,j}$.

    `which` is ``"q"``, ``"k"`` or ``"v"``.
    """
    letter = which.upper()
    x = N.matrix_symbol("X", N.n, N.d)
    weight = N.matrix_symbol(f"W_{which}", N.d, width)
    out = N.matrix_symbol(letter, N.n, width)
    names = {x: N.base("x"), weight: N.base(f"w{which}")}
    element = entry_of(MatMul(x, weight), N.m, N.j, N.i, names)
    return Step(
        name="projection",
        output=letter,
        title=f"{ {'q': 'Query', 'k': 'Key', 'v': 'Value'}[which] } projection",
        matrix=Eq(out, MatMul(x, weight), evaluate=False),
        element=Eq(N.base(which)[N.m, N.j], element, evaluate=False),
        shapes=_shapes(x, weight, out),
    )


def output_projection() -> Step:
    r"""Output projection of the concatenated heads: $C = \hat{C} W_o$."""
    cat = N.matrix_symbol("C_concat", N.n, N.c)
    weight = N.matrix_symbol("W_o", N.c, N.c)
    out = N.matrix_symbol("C", N.n, N.c)
    names = {cat: N.base("ctxcat"), weight: N.base("wo")}
    element = entry_of(MatMul(cat, weight), N.m, N.j, N.i, names)
    return Step(
        name="projection",
        output="C",
        title="Output projection",
        matrix=Eq(out, MatMul(cat, weight), evaluate=False),
        element=Eq(N.base("ctx")[N.m, N.j], element, evaluate=False),
        shapes=_shapes(cat, weight, out),
    )


def split_heads() -> Step:
    r"""Head l takes columns (l-1)c_h+1 … l c_h: $q^{(l)}_{m,j} = q_{m,(l-1)c_h+j}$."""
    q = N.matrix_symbol("Q", N.n, N.c)
    head = N.matrix_symbol(_per_head("Q"), N.n, N.c_h)
    column = (N.ell - 1) * N.c_h + N.j
    return Step(
        name="split_heads",
        output=_per_head("Q"),
        title="Split into heads",
        matrix=Eq(head, q[:, (N.ell - 1) * N.c_h : N.ell * N.c_h], evaluate=False),
        element=Eq(N.base("q")[N.ell, N.m, N.j], N.base("q")[N.m, column], evaluate=False),
        shapes=_shapes(q, head),
    )


def scores(*, heads: bool = False) -> Step:
    r"""Attention scores: $\Omega = Q K^\top$, $\omega_{m,p} = \sum_{j=1}^{c} q_{m,j} k_{p,j}$."""
    width = N.c_h if heads else N.c
    suffix = "_l" if heads else ""
    q = N.matrix_symbol("Q" + suffix, N.n, width)
    k = N.matrix_symbol("K" + suffix, N.n, width)
    omega = N.matrix_symbol("Omega" + suffix, N.n, N.n)
    names = {q: _entry_base("q", heads), k: _entry_base("k", heads)}
    element = entry_of(MatMul(q, Transpose(k)), N.m, N.p, N.j, names)
    return Step(
        name="scores",
        output="Omega" + suffix,
        title="Attention scores",
        matrix=Eq(omega, MatMul(q, Transpose(k)), evaluate=False),
        element=Eq(_entry_base("omega", heads)[N.m, N.p], element, evaluate=False),
        shapes=_shapes(q, k, omega),
        head=heads,
    )


def scaled_scores(*, heads: bool = False) -> Step:
    r"""Scaled scores: $\tilde{\Omega} = \Omega / \sqrt{c}$, $\tilde\omega_{m,p} = \omega_{m,p}
    / \sqrt{c}$ (per head: $\sqrt{c_h}$)."""
    width = N.c_h if heads else N.c
    suffix = "_l" if heads else ""
    omega = N.matrix_symbol("Omega" + suffix, N.n, N.n)
    scaled = N.matrix_symbol("Omega_scaled" + suffix, N.n, N.n)
    entry = _entry_base("omega", heads)[N.m, N.p]
    return Step(
        name="scaled_scores",
        output="Omega_scaled" + suffix,
        title="Scaling by the square root of the width",
        matrix=Eq(scaled, MatMul(1 / sqrt(width), omega), evaluate=False),
        element=Eq(_entry_base("omegatilde", heads)[N.m, N.p], entry / sqrt(width)),
        shapes=_shapes(omega, scaled),
        head=heads,
    )


def weights(*, causal: bool = False, masked: bool = False, heads: bool = False) -> Step:
    r"""Attention weights: $A = \mathrm{softmax}(\Omega/\sqrt{c})$ row by row,
    $a_{m,p} = \exp(\omega_{m,p}/\sqrt{c}) / \sum_{r=1}^{n} \exp(\omega_{m,r}/\sqrt{c})$.

    Causal: the sum runs over r = 1 … m and $a_{m,p} = 0$ for p > m. Padding (`masked`): an
    additive mask M with entries 0 (may attend) or −∞ (may not) inside the exponentials, so a
    masked entry gets weight $e^{-\infty} = 0$; a row with no key left is all zeros.
    """
    width = N.c_h if heads else N.c
    suffix = "_l" if heads else ""
    omega = N.matrix_symbol("Omega" + suffix, N.n, N.n)
    a = N.matrix_symbol("A" + suffix, N.n, N.n)
    w = _entry_base("omega", heads)
    scaled = MatMul(1 / sqrt(width), omega)
    shapes = _shapes(omega, a)
    if masked:
        mask = N.matrix_symbol("M", N.n, N.n)
        scaled = sp.MatAdd(scaled, mask)
        shapes |= _shapes(mask)
        mk = N.base("mask")
        numerator = exp(w[N.m, N.p] / sqrt(width) + mk[N.m, N.p])
        total = Sum(exp(w[N.m, N.r] / sqrt(width) + mk[N.m, N.r]), (N.r, 1, N.n))
        value: sp.Expr = numerator / total
    elif causal:
        total = Sum(exp(w[N.m, N.r] / sqrt(width)), (N.r, 1, N.m))
        value = sp.Piecewise((exp(w[N.m, N.p] / sqrt(width)) / total, sp.Le(N.p, N.m)), (0, True))
    else:
        total = Sum(exp(w[N.m, N.r] / sqrt(width)), (N.r, 1, N.n))
        value = exp(w[N.m, N.p] / sqrt(width)) / total
    return Step(
        name="weights",
        output="A" + suffix,
        title="Attention weights (row-wise softmax)",
        matrix=Eq(a, Softmax(scaled), evaluate=False),
        element=Eq(_entry_base("a", heads)[N.m, N.p], value, evaluate=False),
        shapes=shapes,
        head=heads,
    )


def context(*, heads: bool = False) -> Step:
    r"""Context vectors: $C = A V$, $c_{m,j} = \sum_{p=1}^{n} a_{m,p} v_{p,j}$."""
    width = N.c_h if heads else N.c
    suffix = "_l" if heads else ""
    a = N.matrix_symbol("A" + suffix, N.n, N.n)
    v = N.matrix_symbol("V" + suffix, N.n, width)
    out = N.matrix_symbol("C" + suffix, N.n, width)
    names = {a: _entry_base("a", heads), v: _entry_base("v", heads)}
    element = entry_of(MatMul(a, v), N.m, N.j, N.p, names)
    return Step(
        name="context",
        output="C" + suffix,
        title="Context vectors",
        matrix=Eq(out, MatMul(a, v), evaluate=False),
        element=Eq(_entry_base("ctx", heads)[N.m, N.j], element, evaluate=False),
        shapes=_shapes(a, v, out),
        head=heads,
    )


def merge_heads() -> Step:
    r"""Concatenate the heads' contexts: $\hat{c}_{m,(l-1)c_h+j} = c^{(l)}_{m,j}$."""
    head = N.matrix_symbol(_per_head("C"), N.n, N.c_h)
    cat = N.matrix_symbol("C_concat", N.n, N.c)
    return Step(
        name="merge_heads",
        output="C_concat",
        title="Concatenate the heads",
        matrix=Eq(cat, Concat(head, N.h), evaluate=False),
        element=Eq(
            N.base("ctxcat")[N.m, (N.ell - 1) * N.c_h + N.j],
            N.base("ctx")[N.ell, N.m, N.j],
            evaluate=False,
        ),
        shapes=_shapes(head, cat),
    )


class _HeadBase:
    """An IndexedBase stand-in that puts the head index l first: ``q[m, j]`` -> q[l, m, j]."""

    def __init__(self, name: str) -> None:
        self.base = N.base(name)

    def __getitem__(self, index: tuple) -> Indexed:
        return self.base[(N.ell, *index)]


def _entry_base(name: str, heads: bool) -> sp.IndexedBase | _HeadBase:
    return _HeadBase(name) if heads else N.base(name)


#: The entries that belong to one sequence of a batch (the weights are shared by all).
PER_SEQUENCE = ("x", "q", "k", "v", "omega", "omegatilde", "a", "ctx", "ctxcat", "mask")


def batched(step: Step) -> Step:
    r"""The step for sequence b of a batch: each per-sequence entry gains the index b first
    ($x_{b,m,i}$, $q_{b,m,j}$, …, $c_{b,m,j} = \sum_p a_{b,m,p} v_{b,p,j}$); the weights are
    shared, so $(W_q)_{i,j}$ keeps its two indices."""

    def per_sequence(expr: sp.Basic) -> bool:
        return isinstance(expr, Indexed) and expr.base.label.name in PER_SEQUENCE

    def with_batch(entry: Indexed) -> Indexed:
        return entry.base[(N.b, *entry.indices)]

    element = step.element.replace(per_sequence, with_batch)
    return Step(step.name, step.output, step.title, step.matrix, element, step.shapes, step.head)


def steps(
    *, causal: bool = False, masked: bool = False, heads: bool = False, batch: bool = False
) -> tuple[Step, ...]:
    """The generic derivation (symbolic n, d, c), step by step, in the seed's order.

    With ``heads=True`` the multi-head variant: the projections to width c = h c_h, the split
    into h heads, the per-head scores, scaling (by √c_h), weights and context, the concatenation
    and the output projection by W_o. With ``batch=True`` every per-sequence entry carries the
    batch index b (see `batched`).
    """
    chain = _chain(causal=causal, masked=masked, heads=heads)
    return tuple(batched(step) for step in chain) if batch else chain


def _chain(*, causal: bool, masked: bool, heads: bool) -> tuple[Step, ...]:
    if causal and masked:
        raise ValueError(
            "choose one of causal=True or masked=True: the causal mask is a padding-free "
            "special case of the general mask M"
        )
    prefix = (projection("q"), projection("k"), projection("v"))
    middle = (
        scores(heads=heads),
        scaled_scores(heads=heads),
        weights(causal=causal, masked=masked, heads=heads),
        context(heads=heads),
    )
    if not heads:
        return prefix + middle
    return prefix + (split_heads(),) + middle + (merge_heads(), output_projection())
