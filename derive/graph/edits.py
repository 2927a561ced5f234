"""A user's steps put into a graph, checked: the steps a variant replaces or inserts
(`derive.declare`), each read against the graph it goes into.

`Step` is a step declared by the formula of one entry of its output and its output's shape; the
shapes of what it reads come from the graph (or from the matrices a user declared, `SHAPES`).
`build` makes a variant's `build` from its steps. Every mistake is a `DeclarationError` naming
the step: a letter no step computes, an index that is neither free nor summed over, an index
outside the rows or columns of what it indexes, shapes that do not chain, a step replaced that
another variant of a combination changed. A step whose output the graph computes per head is
put in per head (`derive.graph.heads.per_head`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import sympy as sp
from sympy import Indexed

from ..notation import letters as L
from ..notation.plain import plain
from .declaration import Declaration, Graph
from .heads import one_head, per_head
from .registry import DeclarationError, variant
from .twins import StepTwin, argument_order

__all__ = ["Step", "SHAPES", "build"]

#: The shapes of the matrices users declare (`derive.declare.matrix`), by letter.
SHAPES: dict[str, tuple[sp.Expr, sp.Expr]] = {}


@dataclass(frozen=True)
class Step:
    """A step declared by the formula of one entry of its output (see `step`); its shapes, but
    the output's, are read off the graph it is put into.

    Args:
        name: what it computes (``"sigmoid_weights"``).
        element: ``Eq(entry of the output, formula)``, such as ``Eq(a[m, p], ...)``.
        shape: the output's ``(rows, columns)``, in the book's sizes (``(n, n)``).
        title: a few words for documents.
        twin: the torch function that computes it; None (the default): the function of
            ``attention.functional`` of its name where there is one, else derive's generated
            code.
        requires: conditions on the sizes it needs (`Even`, `Divides`, `AtLeast`).
        text: a few sentences its document prints before it.
    """

    name: str
    element: sp.Eq
    shape: tuple[sp.Expr, sp.Expr]
    title: str
    twin: StepTwin | None = None
    requires: tuple = ()
    text: str = ""

    @property
    def output(self) -> str:
        return L.letter_of(self.element.lhs)


def _ranges(element: sp.Eq, shape: tuple) -> dict:
    """The range of each index of a step: the output's free indices over its rows and columns
    (an axis of one entry, written 1, has none), each sum's and product's over its limits."""
    indices = element.lhs.indices
    ranges = {indices[0]: (1, L.h)} if len(indices) == 3 else {}  # one head's: ℓ = 1 … h
    ranges |= {
        index: (1, size)
        for index, size in zip(indices[-2:], shape, strict=True)
        if isinstance(index, sp.Symbol)
    }
    for total in element.rhs.atoms(sp.Sum, sp.Product):
        for variable, low, high in total.limits:
            ranges[variable] = (low, high)
    return ranges


def _innermost_first(ranges: dict) -> dict:
    """The ranges ordered so that an index comes before the indices its limits read (ℓ = p + 1
    … m before p and m), as `indices.decide` substitutes them."""
    ordered: dict = {}
    pending = dict(ranges)
    while pending:
        for index in pending:
            if not any(
                index in set().union(*(sp.sympify(x).free_symbols for x in other))
                for name, other in pending.items()
                if name != index
            ):
                break
        else:  # limits that read each other: keep the declared order
            index = next(iter(pending))
        ordered[index] = pending.pop(index)
    return ordered


def _outside(index: sp.Expr, size: sp.Expr, ranges: dict) -> tuple[sp.Expr, sp.Expr] | None:
    """(lowest, highest) value of an index over the ranges of what it reads, where it may leave
    1 … size; None where it stays within. An index that is a sum's own symbol must be shown to
    stay within (Σ_{j=1}^{d} q[m,j] on columns 1 … c is refused; Σ_{ℓ=p+1}^{m} f[ℓ,1] with
    p, m = 1 … n is not); an expression of indices is refused only where the ranges decide
    that it leaves (q[m, j + c] with j = 1 … c reaches 2c), shifts such as k[p − m + w, j]
    reading a declared window being the declaration's to keep in range."""
    low = _extreme(index, ranges, lowest=True)
    high = _extreme(index, ranges, lowest=False)
    if isinstance(index, sp.Symbol):
        inside = (low - 1).is_nonnegative and (size - high).is_nonnegative
        return None if inside else (low, high)
    if (low - 1).is_negative or (size - high).is_negative:
        return low, high
    return None


def _extreme(index: sp.Expr, ranges: dict, *, lowest: bool) -> sp.Expr:
    value = sp.expand(index)
    for variable, (low, high) in _innermost_first(ranges).items():
        coefficient = value.coeff(variable)
        if coefficient == 0:
            continue
        if coefficient.is_positive:
            value = sp.expand(value.xreplace({variable: low if lowest else high}))
        elif coefficient.is_negative:
            value = sp.expand(value.xreplace({variable: high if lowest else low}))
        else:
            return sp.nan
    return value


#: What each of the book's indices counts, and the sizes it may run over: a token (a query m, a
#: key p; r and t in sums) over n (or s, the keys of another sequence; w, a window), an input
#: feature i over d (or d_y), a context feature j over c (or a head's c_h, a rotated c_r).
_KINDS = {
    L.m: ("a token", (L.n, L.s, L.w)),
    L.p: ("a token", (L.n, L.s, L.w)),
    L.r: ("a token", (L.n, L.s, L.w)),
    L.t: ("a token", (L.n, L.s, L.w)),
    L.i: ("an input feature", (L.d, L.d_y)),
    L.j: ("a context feature", (L.c, L.c_h, L.c_r)),
    L.j2: ("a context feature", (L.c, L.c_h, L.c_r)),
}
#: The index the book gives an axis of each size.
_NATURAL = {L.n: "m or p", L.s: "p", L.d: "i", L.d_y: "i", L.c: "j", L.c_h: "j", L.c_r: "j"}


def _kind_of_index(where: str, index: sp.Symbol, size: sp.Expr, what: str) -> None:
    """An index of the book's used over an axis of another kind of size (j, a context feature,
    over the n columns of A) is a mistake, whatever it reads."""
    if index not in _KINDS or not isinstance(size, sp.Symbol) or size not in _NATURAL:
        return
    kind, sizes = _KINDS[index]
    if size not in sizes:
        raise DeclarationError(
            f"{where}: {what} over 1 … {size} with the index {index}, {kind} (1 … "
            f"{sizes[0]}); an axis of {size} is indexed by {_NATURAL[size]}"
        )


def _known_letter(where: str, entry: Indexed) -> str:
    name = entry.base.label.name
    if name not in L.BASES:
        raise DeclarationError(
            f"{where} reads {entry}, whose letter {name!r} is neither one of "
            "the book's nor a matrix declared with derive.declare.matrix"
        )
    return L.letter_of(entry)


def _declaration(spec: Step, graph: Graph) -> Declaration:
    """The step, its shapes read off `graph` (and the matrices declared), checked: every letter
    it reads is known, every index within the range of the axis it indexes and of the kind the
    book gives that axis."""
    where = f"step {spec.name} ({spec.output})"
    known = graph.shapes | SHAPES | {f"{x}_l": shape for x, shape in SHAPES.items()}
    ranges = _ranges(spec.element, spec.shape)
    shapes = {spec.output: spec.shape}
    for entry in sorted(spec.element.rhs.atoms(Indexed), key=L.reading_key):
        letter = _known_letter(where, entry)
        if letter not in known:
            raise DeclarationError(
                f"{where} reads {plain(entry)}, an entry of {letter}, which no step of "
                f"{graph.name} computes and which is not declared (derive.declare.matrix)"
            )
        shapes[letter] = known[letter]
        axes = tuple(zip(entry.indices[-2:], known[letter], ("row", "column"), strict=True))
        if len(entry.indices) == 3:  # one head's entry: its head ℓ runs over 1 … h
            axes = ((entry.indices[0], L.h, "head"), *axes)
        for index, size, axis in axes:
            if isinstance(index, sp.Symbol) and index not in ranges:
                raise DeclarationError(
                    f"{where}: the index {index} of {plain(entry)} is "
                    "neither an index of the output nor one a sum or a product runs "
                    "over"
                )
            outside = _outside(sp.sympify(index), size, ranges)
            if outside is not None:
                low, high = outside
                raise DeclarationError(
                    f"{where}: {plain(entry)} reads {axis} {plain(index)} = {plain(low)} … "
                    f"{plain(high)} of {letter}, whose {axis}s run 1 … {size}"
                )
    for index, size, axis in zip(
        spec.element.lhs.indices[-2:], spec.shape, ("rows", "columns"), strict=True
    ):
        _kind_of_index(where, index, size, f"the {axis} of {spec.output} run")
    for total in spec.element.rhs.atoms(sp.Sum):
        for variable, low, high in total.limits:
            if low == 1:
                _kind_of_index(where, variable, high, "a sum runs")
    twin = _bound_twin(where, spec.twin, shapes, spec.output)
    # a step of the positions and sizes alone (δ_{m,p} = m − p), or of constants: numbers fixed
    # by the sizes, through which no gradient flows
    constant = all(x in L.CONSTANT_LETTERS for x in shapes if x != spec.output)
    return Declaration(
        spec.name,
        spec.output,
        spec.title,
        spec.element,
        shapes,
        constant=constant,
        twin=twin,
        requires=spec.requires,
        text=spec.text,
    )


def _bound_twin(where: str, twin: StepTwin | None, shapes: dict, output: str) -> StepTwin | None:
    """The twin with the matrices it takes in the order it takes them (`twins.argument_order`:
    by its parameters' names where they name them, else the order of the contract), checked
    against its signature where it is a function of the user's."""
    if twin is None:
        return None
    read = tuple(x for x in shapes if x != output and x not in L.CONSTANT_LETTERS)
    read = tuple(sorted(read, key=lambda x: L.reading_key(L.base(L.name_of(x))[1, 1])))
    try:
        ordered = argument_order(twin, read)
    except TypeError as error:
        raise DeclarationError(f"{where}: {error}") from None
    return replace(twin, arguments=ordered)


def _chains(graph: Graph, new: Declaration) -> None:
    """Every later step reads the new output with the shape it has."""
    for reader in graph.consumers(new.output):
        if reader is new:
            continue
        theirs = reader.shapes.get(new.output)
        if theirs is not None and tuple(theirs) != tuple(new.shapes[new.output]):
            raise DeclarationError(
                f"step {new.name} makes {new.output} of shape {new.shapes[new.output][0]} × "
                f"{new.shapes[new.output][1]}, but step {reader.name} ({reader.output}) reads "
                f"it as {theirs[0]} × {theirs[1]}: the shapes do not chain"
            )


def _in_order(graph: Graph, name: str) -> None:
    """Every step reads what earlier steps computed (or an input): a step inserted before a
    step it reads is a mistake of its place."""
    position = {step.output: k for k, step in enumerate(graph.declarations)}
    for k, step in enumerate(graph.declarations):
        for letter in step.inputs:
            if position.get(letter, -1) > k:
                later = graph.declarations[position[letter]]
                raise DeclarationError(
                    f"variant {name}: step {step.name} ({step.output}) reads {letter}, which "
                    f"step {later.name} computes after it; insert it after {letter}"
                )


def _heads_of(graph: Graph) -> set[str]:
    """The matrices a graph computes per head, without their suffix."""
    return {s.output.removesuffix("_l") for s in graph.declarations if s.head} | {"Q", "K", "V"}


def _one_head(spec: Step, heads: set[str]) -> Step:
    """A step written for one head without its ℓ (``a[m, p]`` on a base with heads), as one
    head's (`heads.one_head`), its shape's c become c_h."""
    shape = tuple(sp.sympify(size).xreplace({L.c: L.c_h}) for size in spec.shape)
    return replace(spec, element=one_head(spec.element, heads), shape=shape)


def _put(graph: Graph, spec: Step, base: Graph) -> Declaration:
    """The declaration of `spec` for `graph`: per head where the graph computes its output per
    head (one head's as declared, where the base has heads already); a step replaced must be
    the one the variant's base has (another variant of a combination may have changed it)."""
    headed = graph.producer(spec.output) is None and graph.producer(spec.output + "_l") is not None
    if headed and base.producer(spec.output + "_l") is not None:
        return _declaration(_one_head(spec, _heads_of(graph) | {spec.output}), graph)
    declaration = _declaration(spec, base if headed else graph)
    return per_head(declaration, _heads_of(graph)) if headed else declaration


def _replace(graph: Graph, spec: Step, base: Graph, name: str) -> Graph:
    old = base.producer(spec.output) or base.producer(spec.output + "_l")
    if old is None:
        raise DeclarationError(
            f"variant {name} replaces {spec.output}, which {base.name} does "
            f"not compute (it computes "
            f"{', '.join(s.output for s in base.declarations)})"
        )
    if spec.twin is None and spec.name == old.name and spec.element != old.element:
        raise DeclarationError(
            f"step {spec.name} ({spec.output}) of variant {name} changes the formula of "
            f"{base.name}'s step {old.name} and declares no twin, so its twin would be "
            f"{base.name}'s, which computes the old formula: give it a twin= of its own (or "
            "another name)"
        )
    new = _put(graph, spec, base)
    here = graph.producer(new.output)
    expected = old if old.head or not new.head else per_head(old, _heads_of(graph))
    if here is None or here.element != expected.element:
        raise DeclarationError(
            f"variant {name} replaces {spec.output}, which another variant "
            f"it is combined with changed ({graph.name})"
        )
    return graph.with_step(new)


def build(
    name: str,
    base: str,
    replaces: tuple[Step, ...],
    inserts: tuple[tuple[str, Step], ...],
    graph_name: str,
) -> Callable[[Graph], Graph]:
    """A variant's `build` from the steps it replaces and inserts, each read against the graph
    it goes into (and the graph of its base), every output read with the shape it has."""

    def built(graph: Graph) -> Graph:
        before = variant(base).graph
        for spec in replaces:
            graph = _replace(graph, spec, before, name)
        for after, spec in inserts:
            at = after if graph.producer(after) is not None else after + "_l"
            if graph.producer(at) is None:
                raise DeclarationError(
                    f"variant {name} inserts step {spec.name} after {after}, "
                    f"which {graph.name} does not compute"
                )
            graph = graph.inserted(at, _put(graph, spec, before))
        _in_order(graph, name)
        for declaration in graph.declarations:
            _chains(graph, declaration)
        return graph.named(graph_name)

    return built
