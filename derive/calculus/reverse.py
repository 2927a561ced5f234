r"""The backward pass at symbolic sizes, derived from the declarations by reverse mode.

A scalar loss L reaches the graph through its output: the upstream gradient \bar{C} = ∂L/∂C is
given. Walking the steps backwards, each step Y = F(U, …) adds to the gradient of each input U
the term SymPy derives for it:

- a step whose matrix form is linear in U (a product, a sum, a scaling): the matrix derivative
  \bar{U} += ∂ tr(\bar{Y}^\top F) / ∂U (``sympy.Trace(...).diff(U)``: ∂ tr(\bar{Y}^\top X W) / ∂X
  = \bar{Y} W^\top);
- any other step (the softmax): the chain rule entry by entry,
  \bar{u}_{m,p} = Σ_{m'} Σ_{t} \bar{y}_{m',t} ∂y_{m',t}/∂u_{m,p}, with `sympy.diff` of the
  declared formula, the Kronecker deltas it produces summed out under the declared index ranges,
  the result written back in the step's own outputs (y = N / D: N = y D), and its matrix form
  found by `matrix_form`;
- a block of columns (the split into heads) and a concatenation (the merge) are each other's
  adjoints: the gradient of the whole is the blocks' gradients side by side, and back.

A constant input (the mask) gets no gradient. The gradient of a matrix read by several steps is
the sum of their terms, in the forward order of those steps (\bar{X} = \bar{Q} W_q^\top +
\bar{K} W_k^\top + \bar{V} W_v^\top).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy as sp
from sympy import Eq, Indexed, MatAdd, MatrixSymbol, Sum, Trace
from sympy.matrices.expressions.applyfunc import ElementwiseApplyFunction

from ..graph import Declaration, Graph
from ..graph.errors import deriving
from ..notation import Concat, Entries, GroupConcat, RMSNorm, Softmax
from ..notation import letters as L
from .forward import declared_matrix, steps, symbols_of
from .indices import element_of, fresh_index, under_ranges, zero_based, zero_index
from .matrix_form import NoMatrixForm, matrix_form
from .naming import book_indices, compact_roots

__all__ = ["Contribution", "Gradient", "backward", "in_outputs"]

#: The indices of the chain rule's sum over the output entries, besides the gradient's own (m, p).
_ROW, _COL = sp.Symbol("m'", integer=True, positive=True), L.t


@dataclass(frozen=True)
class Contribution:
    """One step's term of a gradient.

    Attributes:
        step: the forward step the gradient flows back through.
        term: the matrix term (``dOmega*K`` for \\bar{Q} through the scores).
        how: a few words on how SymPy derived it, for the documents.
        chain: for the entry-by-entry route, the equations of the derivation in order.
    """

    step: Declaration
    term: sp.MatrixExpr
    how: str
    chain: tuple[Eq, ...] = ()


@dataclass(frozen=True)
class Gradient:
    """The gradient of L with respect to one matrix: \\bar{U} = the sum of its contributions.

    Attributes:
        output: its letter (``"dQ"``); of: the matrix it is the gradient of (``"Q"``).
        contributions: one per step that reads the matrix, in forward order.
        matrix: \\bar{U} = Σ terms; element: its entry, expanded by SymPy, in the book's indices.
    """

    output: str
    of: str
    contributions: tuple[Contribution, ...]
    matrix: Eq
    element: Eq

    @property
    def shape(self) -> tuple[sp.Expr, sp.Expr]:
        return self.matrix.lhs.shape

    def _repr_latex_(self) -> str:
        from ..notation import latex

        return f"$${latex(self.matrix)} \\qquad {latex(self.element)}$$"


def _symbol(letter: str, shapes: dict) -> MatrixSymbol:
    base = letter.removeprefix("d") if L.is_gradient(letter) else letter
    return L.matrix_symbol(letter, *shapes[base])


def _is_linear(form: sp.MatrixExpr) -> bool:
    """A form whose trace SymPy differentiates by a matrix: no softmax, no element-wise function,
    and no entry at fixed indices (ALiBi's slope μ[0, 0] is a number of μ to the trace's
    derivative, which sees only whole matrices)."""
    return not form.has(
        Softmax,
        Concat,
        sp.MatrixSlice,
        sp.HadamardProduct,
        sp.HadamardPower,
        RMSNorm,
        ElementwiseApplyFunction,
        Entries,
        sp.matrices.expressions.matexpr.MatrixElement,
    )


def _linear(step: Declaration, form: sp.MatrixExpr, letter: str, shapes: dict) -> Contribution:
    upstream = _symbol(L.gradient(step.output), shapes)
    term = Trace(upstream.T * form).diff(_symbol(letter, shapes))
    return Contribution(step, term, "the matrix derivative of the trace, by SymPy")


def _block(step: Declaration, form: sp.MatrixExpr, shapes: dict, relations) -> Contribution:
    """A block of columns and a concatenation: each the other's adjoint."""
    upstream = _symbol(L.gradient(step.output), shapes)
    if isinstance(form, Concat):  # Ĉ = [C^(1) ⋯ C^(h)]: head ℓ's gradient is its block
        rows, width = form.block.shape
        start = (L.ell - 1) * width
        term = upstream[:, start : start + width]
        return Contribution(step, term, "the adjoint of the concatenation: each block's columns")
    heads = sp.simplify(
        (form.parent.shape[1] / form.shape[1]).subs([(r.lhs, r.rhs) for r in relations])
    )
    shared = list(form.colslice[0].atoms(sp.floor))
    if shared:  # ⌊(ℓ−1) g/h⌋: the heads of group ν read one block, and their gradients add up
        (group,) = shared
        (first,) = sp.solve(sp.Eq(group.args[0], L.nu - 1), L.ell)
        (after,) = sp.solve(sp.Eq(group.args[0], L.nu), L.ell)
        term = GroupConcat(upstream, heads, sp.expand(first), sp.expand(after - 1))
        how = "the adjoint of a shared block: the heads of each group summed, groups side by side"
        return Contribution(step, term, how)
    term = Concat(upstream, heads)
    return Contribution(step, term, "the adjoint of a block of columns: the blocks side by side")


def _entry(letter: str, row: sp.Expr, col: sp.Expr) -> Indexed:
    base = L.base(L.name_of(letter))
    return base[L.ell, row, col] if letter.endswith("_l") else base[row, col]


def in_outputs(expr: sp.Expr, step: Declaration, indices: set[sp.Symbol]) -> sp.Expr:
    """`expr` written in the step's outputs: for a quotient y = N / D, every N and D instance
    with y (N = y D); for a function applied entry by entry, y = f(x), every f(x) as y (σ(ω̃ + b)
    is a)."""
    row, col = step.free
    if isinstance(step.element.rhs, sp.Function):
        return sp.factor_terms(
            expr.xreplace(
                {
                    step.element.rhs.xreplace({row: first, col: second}): _entry(
                        step.output, first, second
                    )
                    for first in indices
                    for second in indices
                }
            )
        )
    numerator, denominator = _quotient(step.element.rhs)
    if denominator == 1 or numerator.is_number:
        return expr
    holders = {}
    for first in indices:
        d_here = denominator.xreplace({row: first})
        holder = sp.Function("D", positive=True)(first)  # depends on its row, for _pull
        holders[holder] = d_here
        # the quotient rule's D², which summing out the deltas may have multiplied out
        expr = expr.xreplace({d_here: holder, sp.expand(d_here**2): holder**2})
        for second in indices:
            n_here = numerator.xreplace({row: first, col: second})
            expr = expr.xreplace({n_here: _entry(step.output, first, second) * holder})
    expr = sp.expand(expr)
    expr = expr.replace(lambda e: isinstance(e, Sum), lambda e: sp.factor_terms(_pull(e)))
    return sp.factor_terms(sp.expand(expr)).xreplace(holders)


def _quotient(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """(N, D) for a formula N / D whose denominator is a sum (the softmax; with a sink's term
    beside the sum, e^ζ + Σ_r …): read off the factors, not `sympy.fraction`, which would also
    move exp(−s) below the line."""

    def below_the_line(f: sp.Expr) -> bool:
        if not (f.is_Pow and f.exp == -1):
            return False
        return isinstance(f.base, Sum) or (f.base.is_Add and f.base.has(Sum))

    factors = sp.Mul.make_args(expr)
    below = [f.base for f in factors if below_the_line(f)]
    above = [f for f in factors if not below_the_line(f)]
    return sp.Mul(*above), sp.Mul(*below)


def _pull(total: Sum) -> sp.Expr:
    """Factors free of the summation indices, out of the sum: Σ_t f g_t = f Σ_t g_t (a double
    sum, Σ_{m'} Σ_t, as one: the gradient of one number reads every entry)."""
    variables = set(total.variables)
    inside, outside = [], []
    for factor in sp.Mul.make_args(sp.expand(total.function)):
        (inside if variables & factor.free_symbols else outside).append(factor)
    return sp.Mul(*outside) * Sum(sp.Mul(*inside), *total.limits)


def _element_route(step: Declaration, letter: str, shapes: dict) -> Contribution:
    """\\bar{u}_{m,p} = Σ_{m'} Σ_t \\bar{y}_{m',t} ∂y_{m',t}/∂u_{m,p}, deltas summed out."""
    row, col = step.free
    (rows, cols) = step.shapes[step.output]
    m = sp.S.One if step.shapes[letter][0] == 1 else L.m  # a row of gains: its one row
    p = sp.S.One if step.shapes[letter][1] == 1 else L.p  # one number (one head's slope)
    y = step.element.rhs.xreplace({row: _ROW, col: _COL})
    upstream = _entry(L.gradient(step.output), _ROW, _COL)
    target = _entry(letter, m, p)
    derivative = sp.Derivative(_entry(step.output, _ROW, _COL), target)
    chain = Sum(upstream * derivative, (_COL, 1, cols), (_ROW, 1, rows))
    differentiated = Sum(sp.expand(upstream * sp.diff(y, target)), (_COL, 1, cols), (_ROW, 1, rows))
    ranges = {
        index: (1, size)
        for index, size in zip((m, p), step.shapes[letter], strict=True)
        if index.is_Symbol
    }
    summed = under_ranges(differentiated, ranges)
    written = in_outputs(summed, step, {m, p, _ROW, _COL} - {sp.S.One})
    column = fresh_index(cols, written.free_symbols | {m, p} - {_COL})  # r over n, j' over c
    final = compact_roots(written.xreplace({_COL: column}))
    if step.head and not letter.endswith("_l"):  # shared by the heads (gains): theirs add up
        final = Sum(final, (L.ell, 1, L.h))
        if final.has(sp.KroneckerDelta):  # a row of one number per head: head p's alone
            final = under_ranges(final, ranges | {L.ell: (1, L.h)})
    lhs = _entry(L.gradient(letter), m, p)
    equations = (
        Eq(lhs, chain, evaluate=False),
        Eq(lhs, differentiated, evaluate=False),
        Eq(lhs, summed, evaluate=False),
        Eq(lhs, final, evaluate=False),
    )
    symbols = symbols_of(dict(step.shapes)) | {
        L.gradient(step.output): _symbol(L.gradient(step.output), shapes),
        L.gradient(letter): _symbol(L.gradient(letter), shapes),
        step.output: _symbol(step.output, shapes),
    }
    how = "the chain rule entry by entry: sympy.diff, the Kronecker deltas summed out"
    try:
        if not m.is_Symbol:
            raise NoMatrixForm("a gradient of one row (a gain) is given by its entries")
        term = matrix_form(zero_based(final, (m, p), symbols), (zero_index(m), zero_index(p)))
    except NoMatrixForm:  # the matrix of these entries, as derived
        term = Entries(final, (m, p), *step.shapes[letter])
        how += "; no matrix form found: the matrix of its entries"
    return Contribution(step, term, how, equations)


def _contribution(step: Declaration, letter: str, shapes: dict, relations) -> Contribution:
    form = declared_matrix(step, relations)
    if form is not None and _is_linear(form.rhs):
        return _linear(step, form.rhs, letter, shapes)
    if form is not None and isinstance(form.rhs, Concat | sp.MatrixSlice):
        return _block(step, form.rhs, shapes, relations)
    return _element_route(step, letter, shapes)


def _gradient(letter: str, parts: list[Contribution], shapes: dict) -> Gradient:
    symbol = _symbol(L.gradient(letter), shapes)
    terms = [part.term for part in parts]
    total = terms[0] if len(terms) == 1 else MatAdd(*terms)
    matrix = Eq(symbol, total, evaluate=False)
    if isinstance(total, Entries):  # no matrix form: the derived entry, in the book's indices
        row, col = book_indices(letter, shapes.get(letter))
        if all(sp.sympify(index).is_Integer for index in total.indices):  # one number: its own
            row, col = total.indices
        at = dict(zip(total.indices, (row, col), strict=True))
        lhs = _entry(L.gradient(letter), row, col)
        element = Eq(
            lhs, total.entry.xreplace({k: v for k, v in at.items() if k.is_Symbol}), evaluate=False
        )
    elif isinstance(total, GroupConcat):  # k̄_{m,(ν−1)c_h+j} = Σ_ℓ k̄^{(ℓ)}_{m,j}, ℓ in group ν
        width = total.block.shape[1]
        lhs = _entry(L.gradient(letter), L.m, (L.nu - 1) * width + L.j)
        rhs = Sum(element_of(total.block, L.m, L.j), (L.ell, total.first, total.last))
        element = Eq(lhs, rhs, evaluate=False)
    elif isinstance(total, Concat):  # \bar{Q} = [\bar{Q}^(1) ⋯]: entry (m, (ℓ−1) w + j)
        width = total.block.shape[1]
        lhs = _entry(L.gradient(letter), L.m, (L.ell - 1) * width + L.j)
        element = Eq(lhs, element_of(total.block, L.m, L.j), evaluate=False)
    else:
        row, col = book_indices(letter, shapes.get(letter))
        element = Eq(_entry(L.gradient(letter), row, col), element_of(total, row, col))
    return Gradient(L.gradient(letter), letter, tuple(parts), matrix, element)


def _hint(step: Declaration, letter: str, shapes: dict) -> str:
    """What may help where SymPy fails on one step's gradient: a step with fewer parts."""
    if tuple(shapes.get(letter, ())) == (1, 1):
        return (
            f"a step of its own for what {letter} multiplies may help (set "
            "DERIVE_TRACEBACK=1 for the traceback, and report it with your declaration)"
        )
    return ""


@functools.cache
def backward(graph: Graph) -> tuple[Gradient, ...]:
    """Every gradient of `graph` at symbolic sizes, each as soon as it is complete (all the
    steps that read its matrix walked back), from the output towards the inputs."""
    shapes = graph.shapes
    pending: dict[str, list[Contribution]] = {}
    done: list[Gradient] = []
    for step in reversed(steps(graph)):
        declaration = step.declaration
        if declaration.constant:
            continue
        for letter in declaration.inputs:
            if letter in L.CONSTANT_LETTERS:  # a mask, RoPE's angles: not trained
                continue
            doing = (
                f"derive the gradient of {letter} through step {declaration.name} "
                f"({declaration.output})"
            )
            with deriving(doing, _hint(declaration, letter, shapes)):
                part = _contribution(declaration, letter, shapes, graph.relations)
            pending.setdefault(letter, []).insert(0, part)
            readers = [s for s in graph.consumers(letter) if not s.constant]
            if len(pending[letter]) == len(readers):
                with deriving(f"gather the gradient of {letter}"):
                    done.append(_gradient(letter, pending.pop(letter), shapes))
    inputs = graph.inputs  # the gradients of X and the weights last, in the order X, W_q, …
    last = sorted((g for g in done if g.of in inputs), key=lambda g: inputs.index(g.of))
    return tuple([g for g in done if g.of not in inputs] + last)
