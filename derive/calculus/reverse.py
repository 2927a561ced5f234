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
from ..notation.functions import Indicator, indicators
from .forward import declared_matrix, steps, symbols_of
from .indices import element_of, fresh_index, zero_based, zero_index
from .matrix_form import NoMatrixForm, matrix_form
from .naming import book_indices, compact_roots
from .summation import bound_apart, readable, simplified

__all__ = ["Contribution", "Gradient", "backward", "in_outputs", "term_element"]

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


def _scalars_apart(form: sp.MatrixExpr) -> tuple[sp.MatrixExpr, dict]:
    """`form` with each scalar factor of a product a plain symbol, and the map back: SymPy's
    matrix derivative fails on some scalars (√2/√c, from a scale 1/√(c/2))."""
    back: dict = {}

    def apart(product: sp.MatMul) -> sp.MatrixExpr:
        scalar = sp.Mul(*[f for f in product.args if not f.is_Matrix])
        if scalar.is_Integer or scalar.is_Symbol:
            return product
        stand_in = sp.Dummy("s")
        back[stand_in] = scalar
        return sp.MatMul(stand_in, *[f for f in product.args if f.is_Matrix])

    return form.replace(lambda e: isinstance(e, sp.MatMul), apart), back


def _linear(step: Declaration, form: sp.MatrixExpr, letter: str, shapes: dict) -> Contribution:
    upstream = _symbol(L.gradient(step.output), shapes)
    plain, back = _scalars_apart(form)
    term = Trace(upstream.T * plain).diff(_symbol(letter, shapes)).xreplace(back)
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


def _entry(letter: str, row: sp.Expr, col: sp.Expr, head: sp.Expr = L.ell) -> Indexed:
    base = L.base(L.name_of(letter))
    return base[head, row, col] if letter.endswith("_l") else base[row, col]


def in_outputs(expr: sp.Expr, step: Declaration, indices: set[sp.Symbol]) -> sp.Expr:
    """`expr` written in the step's outputs: for a quotient y = N / D, every N and D instance
    with y (N = y D); for a function applied entry by entry, y = f(x), every f(x) as y (σ(ω̃ + b)
    is a)."""
    row, col = step.free
    if isinstance(step.element.rhs, sp.Function):
        rows = indices if row.is_Symbol else {row}
        cols = indices if col.is_Symbol else {col}
        found = {
            step.element.rhs.xreplace(
                {x: y for x, y in ((row, first), (col, second)) if x.is_Symbol}
            ): _entry(step.output, first, second)
            for first in rows
            for second in cols
        }  # (a condition that fixes the value at some indices, Piecewise's, is no instance)
        # an instance whose sums run over other names (Σ_{i'} where i is free) is one still
        named = {k.as_dummy(): v for k, v in found.items() if k.has(Indexed)}
        kind = type(step.element.rhs)
        return sp.factor_terms(
            expr.replace(
                lambda e: isinstance(e, kind) and e.as_dummy() in named,
                lambda e: named[e.as_dummy()],
            )
        )
    numerator, denominator = _quotient(step.element.rhs)
    if denominator == 1 or numerator.is_number:
        return expr
    holders = {}
    for first in indices if row.is_Symbol else {row}:
        d_here = denominator.xreplace({row: first} if row.is_Symbol else {})
        holder = sp.Function("D", positive=True)(first)  # depends on its row, for _pull
        holders[holder] = d_here
        # the quotient rule's D², which summing out the deltas may have multiplied out
        expr = expr.xreplace({d_here: holder, sp.expand(d_here**2): holder**2})
        for second in indices if col.is_Symbol else {col}:
            at = {x: y for x, y in ((row, first), (col, second)) if x.is_Symbol}
            n_here = numerator.xreplace(at)
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


#: The letters a sum's index may be named by where neither its declared name nor the book's
#: name for its size is free (a sum over p + 1 … m, inside the gradient of an entry (m, p)).
_SPARE = (L.r, L.t, L.p, L.m, sp.Symbol("k", integer=True, positive=True))


def _index_name(size: sp.Expr, taken: set, declared: sp.Symbol | None) -> sp.Symbol:
    """A name for a sum's index: the book's for its size, else the one declared, else a spare
    letter; none of those in scope (`taken`)."""
    found = fresh_index(size, taken)
    if not isinstance(found, sp.Dummy):
        return found
    for name in (declared, *_SPARE):
        if name is not None and name not in taken:
            return name
    return found


def _expanded(expr: sp.Expr) -> sp.Expr:
    """Products over sums multiplied out; exp(a + b), log(a b) and a power of a sum, (s + ε)²,
    left whole (SymPy would turn the exponential of a sum into a product of exponentials, and
    the square into s² + 2εs + ε²)."""
    return sp.expand(expr, power_exp=False, power_base=False, log=False, multinomial=False)


#: The value of a derivative at a kink, where the function has none: torch's autograd's, so that
#: the printed gradient is the number a module's backward pass computes there. ReLU's max(0, x)
#: has θ(x) with θ(0) = 0 (SymPy's Heaviside would give 1/2), |x| has sign(x) with sign(0) = 0,
#: and a step's or sign's own derivative (a Dirac delta) is 0, its kink a point. The documents
#: state it under the backward pass (`KINK_CONVENTION`).
KINK_CONVENTION = (
    "At a kink, where the function has no derivative, the one printed takes torch's value: "
    "$\\theta(0) = 0$ (the derivative of $\\max(0, x)$, ReLU's), "
    "$\\operatorname{sign}(0) = 0$ (that of $|x|$), and a step's derivative is 0."
)


def has_kinks(expr: sp.Expr) -> bool:
    """True where a derivative reads θ or sign: its value at a kink is a convention."""
    return expr.has(sp.Heaviside, sp.sign)


def almost_everywhere(expr: sp.Expr, of: sp.Expr) -> sp.Expr:
    """The derivative `expr` of `of` where it exists, and torch's value at a kink
    (`KINK_CONVENTION`): a Dirac delta is 0, and a θ the derivative brought (max's, ReLU's)
    has θ(0) = 0; a θ declared in `of` keeps its own value at 0."""
    expr = expr.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.S.Zero)
    declared = of.atoms(sp.Heaviside)
    return expr.replace(
        lambda e: isinstance(e, sp.Heaviside) and e not in declared,
        lambda e: sp.Heaviside(e.args[0], sp.S.Zero),
    )


def _cut(expr: sp.Expr) -> bool:
    """A sum over part of a row only (Σ_{p=m+1}^{n}): not a matrix product's."""
    sizes = set(L.SIZES)
    return any(
        low != 1 or not (sp.sympify(high).free_symbols <= sizes)
        for total in expr.atoms(Sum)
        for _, low, high in total.limits
    )


def _element_route(step: Declaration, letter: str, shapes: dict) -> Contribution:
    """\\bar{u}_{m,p} = Σ_{m'} Σ_t \\bar{y}_{m',t} ∂y_{m',t}/∂u_{m,p}, deltas summed out."""
    row, col = step.free
    (rows, cols) = step.shapes[step.output]
    book = tuple(  # a row of gains: its one row; one number: (1, 1)
        sp.S.One if size == 1 else index
        for index, size in zip(
            book_indices(letter, step.shapes[letter]), step.shapes[letter], strict=True
        )
    )
    # one number per head, ζ_{1,ℓ}, read by a head's step: its own index while deriving, not ℓ
    across = step.across  # head ℓ's output reads every head: the chain sums over the heads too
    stand_in = (
        {L.ell: sp.Dummy("head", integer=True, positive=True)} if step.head and not across else {}
    )
    out_head = sp.Dummy("head", integer=True, positive=True) if across else L.ell
    m, p = (stand_in.get(index, index) for index in book)
    # the output's entry (m', t), summed over; an axis of one entry (f[m, 1]) keeps its 1
    out_row, out_col = (
        index if index.is_Integer else name for index, name in ((row, _ROW), (col, _COL))
    )
    over = [(x, 1, size) for x, size in ((out_col, cols), (out_row, rows)) if x.is_Symbol]
    over += [(out_head, 1, L.h)] if across else []
    y = step.element.rhs.xreplace({x: y_ for x, y_ in ((row, out_row), (col, out_col)) if x != y_})
    y, declared = bound_apart(indicators(y))
    if across:  # the output's head, summed over, read where the formula reads ℓ
        y = y.xreplace({L.ell: out_head})
        declared = {**declared, out_head: L.ell2}
    upstream = _entry(L.gradient(step.output), out_row, out_col, out_head)
    target = _entry(letter, m, p)
    derivative = sp.Derivative(_entry(step.output, out_row, out_col, out_head), target)
    chain = Sum(upstream * derivative, *over)
    raw = almost_everywhere(sp.diff(y, target), y)
    differentiated = Sum(_expanded(upstream * raw), *over)
    ranges = {
        index: (1, size)
        for index, size in zip((m, p), step.shapes[letter], strict=True)
        if index.is_Symbol
    }
    if step.head:
        ranges[L.ell] = (1, L.h)
    taken = {m, p, _ROW, _COL} | ({L.ell} if step.head else set())
    summed = readable(simplified(differentiated, ranges), declared, taken, _index_name)
    differentiated = readable(differentiated, declared, taken, _index_name)
    chain = readable(chain, declared, taken, _index_name)
    written = in_outputs(summed, step, {m, p, _ROW, _COL} - {sp.S.One})
    for index, size in ((_ROW, rows), (_COL, cols)):  # the output's rows, then its columns
        if written.has(index):  # still summed over: named as the book names it
            name = _index_name(size, (written.atoms(sp.Symbol) | {m, p}) - {index}, None)
            written = written.xreplace({index: name})
    final = compact_roots(written)
    shared = step.head and not across and not letter.endswith("_l")
    if shared:  # shared by the heads: add up
        final = Sum(final, (L.ell, 1, L.h))
        if final.has(sp.KroneckerDelta):  # a row of one number per head: head p's alone
            final = simplified(final, ranges)
    lhs = _entry(L.gradient(letter), m, p)
    steps_before = (chain, differentiated, summed)
    if shared:  # every head's term, in every equation (the heads summed as ℓ′, ℓ stays free)
        steps_before = tuple(
            Sum(e.xreplace({L.ell: L.ell2}), (L.ell2, 1, L.h)) for e in steps_before
        )
    equations = (
        *(Eq(lhs, e, evaluate=False) for e in steps_before),
        Eq(lhs, final, evaluate=False),
    )
    if stand_in and not final.has(L.ell):  # the head's own index back where it is free
        back = {dummy: index for index, dummy in stand_in.items()}
        m, p = (back.get(index, index) for index in (m, p))
        final = final.xreplace(back)
        equations = tuple(e.xreplace(back) if not e.rhs.has(L.ell) else e for e in equations)
    symbols = symbols_of(dict(step.shapes)) | {
        L.gradient(step.output): _symbol(L.gradient(step.output), shapes),
        L.gradient(letter): _symbol(L.gradient(letter), shapes),
        step.output: _symbol(step.output, shapes),
    }
    how = "the chain rule entry by entry: sympy.diff, the Kronecker deltas summed out"
    try:
        if not (m.is_Symbol and p.is_Symbol) or final.has(Indicator, sp.Product) or _cut(final):
            raise NoMatrixForm("a gradient of one row, or with conditions, is given by its entries")
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


def _element(letter: str, total: sp.MatrixExpr, shapes: dict) -> Eq:
    """The entry of a gradient's matrix form (or of one of its terms), in the book's indices."""
    if isinstance(total, MatAdd) and any(isinstance(t, Entries) for t in total.args):
        parts = [_element(letter, term, shapes) for term in total.args]
        return Eq(parts[0].lhs, sp.Add(*[part.rhs for part in parts]), evaluate=False)
    if isinstance(total, Entries):  # no matrix form: the derived entry, in the book's indices
        row, col = book_indices(letter, shapes.get(letter))
        if all(sp.sympify(index).is_Integer for index in total.indices):  # one number: its own
            row, col = total.indices
        at = dict(zip(total.indices, (row, col), strict=True))
        lhs = _entry(L.gradient(letter), row, col)
        return Eq(
            lhs, total.entry.xreplace({k: v for k, v in at.items() if k.is_Symbol}), evaluate=False
        )
    if isinstance(total, GroupConcat):  # k̄_{m,(ν−1)c_h+j} = Σ_ℓ k̄^{(ℓ)}_{m,j}, ℓ in group ν
        width = total.block.shape[1]
        lhs = _entry(L.gradient(letter), L.m, (L.nu - 1) * width + L.j)
        rhs = Sum(element_of(total.block, L.m, L.j), (L.ell, total.first, total.last))
        return Eq(lhs, rhs, evaluate=False)
    if isinstance(total, Concat):  # \bar{Q} = [\bar{Q}^(1) ⋯]: entry (m, (ℓ−1) w + j)
        width = total.block.shape[1]
        lhs = _entry(L.gradient(letter), L.m, (L.ell - 1) * width + L.j)
        return Eq(lhs, element_of(total.block, L.m, L.j), evaluate=False)
    row, col = book_indices(letter, shapes.get(letter))
    return Eq(_entry(L.gradient(letter), row, col), element_of(total, row, col))


def term_element(letter: str, part: Contribution, shapes: dict) -> Eq:
    """The entry of one term of the gradient of `letter` (what one step contributes)."""
    return _element(letter, part.term, shapes)


def _gradient(letter: str, parts: list[Contribution], shapes: dict) -> Gradient:
    symbol = _symbol(L.gradient(letter), shapes)
    terms = [part.term for part in parts]
    total = terms[0] if len(terms) == 1 else MatAdd(*terms)
    matrix = Eq(symbol, total, evaluate=False)
    element = _element(letter, total, shapes)
    return Gradient(L.gradient(letter), letter, tuple(parts), matrix, element)


def _hint(step: Declaration, letter: str, shapes: dict) -> str:
    """What may help where SymPy fails on one step's gradient: a step with fewer parts."""
    if tuple(shapes.get(letter, ())) == (1, 1):
        return (
            f"a step of its own for what {letter} multiplies may help (set "
            "DERIVE_TRACEBACK=1 for the traceback, and report it with your declaration)"
        )
    return ""


def _live(graph: Graph) -> set[str]:
    """The letters the output is computed from: a step whose output nothing after it reads (a
    base's Ω̃ where a variant's weights read q and k themselves) has no gradient, and gives
    none to what it reads."""
    live = {graph.output}
    for declaration in reversed(graph.declarations):
        if declaration.output in live:
            live |= set(declaration.inputs)
    return live


@functools.cache
def backward(graph: Graph) -> tuple[Gradient, ...]:
    """Every gradient of `graph` at symbolic sizes, each as soon as it is complete (all the
    steps that read its matrix walked back), from the output towards the inputs."""
    shapes = graph.shapes
    pending: dict[str, list[Contribution]] = {}
    done: list[Gradient] = []
    live = _live(graph)
    for step in reversed(steps(graph)):
        declaration = step.declaration
        if declaration.constant or declaration.output not in live:
            continue
        for letter in declaration.inputs:
            made = graph.producer(letter)
            if letter in L.CONSTANT_LETTERS or (made is not None and made.constant):
                continue  # a mask, RoPE's angles, a user's distances: not trained
            doing = (
                f"derive the gradient of {letter} through step {declaration.name} "
                f"({declaration.output})"
            )
            with deriving(doing, _hint(declaration, letter, shapes)):
                part = _contribution(declaration, letter, shapes, graph.relations)
            pending.setdefault(letter, []).insert(0, part)
            readers = [s for s in graph.consumers(letter) if not s.constant and s.output in live]
            if len(pending[letter]) == len(readers):
                with deriving(f"gather the gradient of {letter}"):
                    done.append(_gradient(letter, pending.pop(letter), shapes))
    inputs = graph.inputs  # the gradients of X and the weights last, in the order X, W_q, …
    last = sorted((g for g in done if g.of in inputs), key=lambda g: inputs.index(g.of))
    return tuple([g for g in done if g.of not in inputs] + last)
