r"""Every gradient a document prints, checked by numbers before it is shown.

The backward pass at symbolic sizes (`derive.calculus.backward`) is derived by rules: the matrix
derivative of a trace, the chain rule entry by entry with its Kronecker deltas summed out under
the declared ranges, a matrix form read off the entries. A rule that meets a form it does not
handle (a shifted index, an index summed inside a condition) can print a wrong formula. So each
printed form is evaluated at concrete sizes, on drawn inputs, against the chain rule taken entry
by entry at those sizes (`ExplicitGradients`: ``sympy.diff`` of each entry's formula, which
``derive check`` compares with torch's autograd):

- every gradient's matrix form, through its entry (\bar{q}_{m,j} at every m, j): its value;
- every term of it (one per step that reads the matrix), and every equation of the chain rule a
  document prints for a term derived entry by entry, each the value of its term: the first too,
  Σ ∂y/∂u · ȳ with its derivatives left as such, each ∂y/∂u put in as the derivative of y's
  formula at those sizes.

A form that differs, or that leaves an index free (a summed index escaped from its sum), is a
`DerivationError` naming the gradient, the step, the entry and both values: derive refuses to
print what it has not checked. `checked_backward` is what documents and the public face read.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import sympy as sp
from sympy import Indexed

from .. import calculus
from ..calculus import Gradient
from ..calculus.reverse import Contribution, term_element
from ..graph import Entry, Graph, explicit_sizes
from ..graph.errors import DerivationError
from ..graph.fitting import drawn_sizes
from ..notation import letters as L
from ..notation.plain import plain
from .forward import ExplicitGraph
from .gradients import MAX_GRADIENT_SIZE, ExplicitGradients, partial_of
from .instantiate import cells, value_at
from .values import exact_numbers

__all__ = ["Mismatch", "mismatches", "checked_backward", "printed_gradients", "CHECK_SIZES"]

#: The sizes the printed gradients are checked at are drawn from 1 … CHECK_SIZES[0] (then up to
#: CHECK_SIZES[1] where the entry's conditions ask for more), pairwise distinct where possible.
CHECK_SIZES = (4, MAX_GRADIENT_SIZE)
#: The largest difference allowed between a printed form and the chain rule (30-digit values).
TOLERANCE = sp.Float("1e-18", 30)
_DIGITS = 30


@dataclass(frozen=True)
class Mismatch:
    """A printed form that is not the chain rule's number at one entry.

    Attributes:
        gradient: the gradient's letter (``"dQ"``); step: the step the term flows through, or ""
            for the whole gradient; form: which printed form (``"the matrix form"``, ``"the
            chain rule, deltas summed out"``); entry: the entry (``dq[1, 2]``); printed, expected:
            the two values (printed may hold a free symbol); sizes: where.
    """

    gradient: str
    step: str
    form: str
    entry: Indexed
    printed: sp.Expr
    expected: sp.Expr
    sizes: dict

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        through = f" through step {self.step}" if self.step else ""
        free = self.printed.free_symbols if isinstance(self.printed, sp.Basic) else set()
        got = (
            f"leaves {', '.join(sorted(map(str, free)))} free"
            if free
            else f"gives {sp.N(self.printed, 6)}"
        )
        return (
            f"{self.form} of {self.gradient}{through} {got} at {plain(self.entry)} where the "
            f"chain rule gives {sp.N(self.expected, 6)} ({at})"
        )


def _number(value: sp.Expr) -> sp.Expr:
    value = sp.sympify(value)
    if value.is_Float or value.is_Integer:
        return value
    return value.evalf(_DIGITS) if not value.free_symbols else value


def _differs(printed: sp.Expr, expected: sp.Expr) -> bool:
    if printed.free_symbols or not printed.is_number:
        return True
    if printed.has(sp.nan, sp.zoo) or expected.has(sp.nan, sp.zoo):
        return printed != expected
    scale = max(sp.Integer(1), abs(expected))
    return bool(abs(printed - expected) > TOLERANCE * scale)


class _Values:
    """The numbers of one draw: every named entry of the forward pass and of the chain rule
    (`given`: each input by its letter, the upstream gradient included)."""

    def __init__(self, g: ExplicitGradients, given: dict) -> None:
        self.g = g
        values = g.evaluate(**given, digits=_DIGITS)
        self.values = values
        env: dict[sp.Basic, sp.Expr] = {
            k: sp.sympify(v).evalf(_DIGITS) for k, v in g.forward.sizes.items()
        }
        env |= {k: v for k, v in exact_numbers(g.inputs, {}, given, None).items()}
        for step in (*g.forward.steps, *g.steps):
            env.update(zip(step.entries, values.matrices[step.output], strict=True))
        folded = dict(g.forward.instance.folded)
        for _ in range(4):  # a folded entry may read another folded entry
            folded = {e: v.xreplace(folded) for e, v in folded.items()}
        env |= {e: _number(v.xreplace(env)) for e, v in folded.items()}
        compact = g.compact_entries()
        gradients = {e: v for e, v in compact.items() if e not in env}  # a folded step's
        env |= {e: _number(v.xreplace(env)) for e, v in gradients.items()}
        self.env = env
        self.sizes = {str(k): v for k, v in g.forward.sizes.items()}

    def at(self, expr: sp.Expr) -> sp.Expr:
        return _number(expr.xreplace(self.env))

    def step_partial(self, y: Indexed, u: Indexed, otherwise: sp.Expr) -> sp.Expr:
        """∂y/∂u from y's step formula at symbolic sizes, read at y's indices (the entries it
        reads kept by name, so a folded u stays), or `otherwise` where no step's formula has
        y's letter with plain indices."""
        for step in self.g.forward.generic_steps:
            lhs, rhs = step.element.lhs, step.element.rhs
            same = lhs.base.label == y.base.label and len(lhs.indices) == len(y.indices)
            if not same or not all(sp.sympify(i).is_Symbol for i in lhs.indices):
                continue
            sizes = self.g.forward.sizes
            at = {k: int(v) for k, v in sizes.items() if sp.sympify(v).is_Integer}
            at |= dict(zip(lhs.indices, (int(i) for i in y.indices), strict=True))
            return partial_of(value_at(rhs, at, sizes), u)
        return otherwise


def _drawn(g: ExplicitGradients, seed: int) -> dict:
    rng = random.Random(seed)
    return {
        letter: sp.ImmutableMatrix(*symbols.shape, lambda *_: sp.Rational(rng.randint(-16, 16), 8))
        for letter, symbols in g.inputs.items()
    }


def printed_gradients(g: ExplicitGradients, given: dict) -> dict[str, sp.ImmutableMatrix]:
    """Each gradient of `g` as the documents print it (its form derived at symbolic sizes, at
    g's sizes) at the inputs `given` (by letter, the upstream gradient included): what `derive
    check` compares with torch's autograd. A form that leaves a symbol free gives NaN there."""
    values = _Values(g, given)

    def number(expr: sp.Expr) -> sp.Expr:
        value = values.at(expr)
        return value if value.is_number and not value.free_symbols else sp.nan

    return {step.output: step.compact.applyfunc(number) for step in g.steps}


def _cells(element: sp.Eq, shape: tuple, values: _Values):
    sizes = {k: sp.sympify(v) for k, v in values.g.forward.sizes.items()}
    yield from cells(element, shape, sizes, values.g.heads)


def _partials_put_in(expr: sp.Expr, values: _Values) -> sp.Expr:
    """The chain rule as printed first (Σ ∂y/∂u · ȳ, with SymPy's Derivative objects) at
    concrete indices, each ∂y/∂u replaced by its formula at the check's sizes: the derivative of
    y's formula with respect to u (`ExplicitGradients.partials`), 0 where y does not read u; where
    u is an entry the explicit pass folded into y (a mask added, a copy), the derivative of y's
    own step formula, read at y's indices. One that cannot be read stays a Derivative, and the
    check reports the equation."""
    g = values.g
    folded = g.forward.instance.folded

    def partial(derivative: sp.Derivative) -> sp.Expr:
        ((u, count),) = derivative.variable_count
        y = derivative.expr
        table = g.partials.get(y)
        if count != 1 or not isinstance(y, Indexed) or not isinstance(u, Indexed):
            return derivative
        if table is not None and (u in table or u not in folded):
            return table.get(u, sp.S.Zero)
        return values.step_partial(y, u, derivative)

    return expr.replace(lambda e: isinstance(e, sp.Derivative), partial)


def _term_mismatches(
    gradient: Gradient, part: Contribution, values: _Values, shapes: dict
) -> tuple[list[Mismatch], dict]:
    """The term's value at every entry, and each chain-rule equation printed for it against it."""
    found: list[Mismatch] = []
    element = term_element(gradient.of, part, shapes)
    shape = shapes[gradient.of]
    term = {lhs: values.at(rhs) for _, lhs, rhs in _cells(element, shape, values)}
    for number, equation in enumerate(part.chain):
        form = (
            "the chain rule",
            "the chain rule, differentiated",
            "the chain rule, deltas summed out",
        )
        last = number == len(part.chain) - 1 and number > 0
        label = "the derived entry" if last else form[min(number, 2)]
        for _, lhs, rhs in _cells(equation, shape, values):
            printed = values.at(_partials_put_in(rhs, values) if number == 0 else rhs)
            expected = term.get(lhs)
            if expected is not None and _differs(printed, expected):
                found.append(
                    Mismatch(
                        gradient.output, part.step.name, label, lhs, printed, expected, values.sizes
                    )
                )
                break
    return found, term


def mismatches(graph: Graph, sizes: dict, *, heads: int, given: dict, seed: int) -> list[Mismatch]:
    """Every printed form of `graph`'s backward pass against the chain rule at `sizes` (symbol
    -> number, parameters included), one draw of inputs from `seed`: the first entry of each
    form that differs."""
    explicit = ExplicitGraph(graph, sizes, heads=heads, given=given)
    g = ExplicitGradients(explicit)
    values = _Values(g, _drawn(g, seed))
    shapes = graph.shapes
    found: list[Mismatch] = []
    for gradient in calculus.backward(graph):
        expected_total: dict = {}
        for step in g.steps:
            if step.of == gradient.of or step.of.removesuffix(f"_{step.head}") + "_l" == (
                gradient.of
            ):
                expected_total |= {e: values.env[e] for e in step.entries if e in values.env}
        totals: dict = {}
        for part in gradient.contributions:
            wrong, term = _term_mismatches(gradient, part, values, shapes)
            found += wrong
            for entry, value in term.items():
                totals[entry] = totals.get(entry, 0) + value
        printed = {
            lhs: values.at(rhs)
            for _, lhs, rhs in _cells(gradient.element, shapes[gradient.of], values)
        }
        for entry, value in printed.items():
            expected = expected_total.get(entry, values.env.get(entry))
            if expected is None:
                continue
            if _differs(value, expected):
                found.append(
                    Mismatch(gradient.output, "", "the entry", entry, value, expected, values.sizes)
                )
                break
            if entry in totals and _differs(_number(totals[entry]), expected):
                steps = ", ".join(p.step.name for p in gradient.contributions)
                found.append(
                    Mismatch(
                        gradient.output,
                        steps,
                        "the matrix form",
                        entry,
                        _number(totals[entry]),
                        expected,
                        values.sizes,
                    )
                )
                break
    return found


def _mask(graph: Graph, at: dict, rng: random.Random) -> dict:
    """A drawn mask for a graph whose mask M is an input: each entry 0 or −∞, the diagonal 0
    (a row with no key would give the quotient 0/0 its convention, not a derivative)."""
    if "M" not in graph.inputs:
        return {}
    rows, cols = (int(sp.sympify(x).xreplace(at)) for x in graph.shapes["M"])
    return {
        L.base("mask")[m, p]: sp.S.Zero if m == p or rng.random() < 0.7 else -sp.oo
        for m in range(1, rows + 1)
        for p in range(1, cols + 1)
    }


@functools.cache
def _checked(entry: Entry, graph: Graph) -> tuple[Gradient, ...]:
    with_graph = entry if graph == entry.graph else entry.with_graph(graph)
    rng = random.Random(0)
    drawn = drawn_sizes(with_graph, rng, {}, limits=CHECK_SIZES)
    n, d, c = drawn.pop("n"), drawn.pop("d"), drawn.pop("c")
    at = explicit_sizes(with_graph, n, d, c, drawn)
    gradients = calculus.backward(graph)
    found = mismatches(graph, at, heads=int(at.get(L.h, 1)), given=_mask(graph, at, rng), seed=1)
    if found:
        wrong = found[0]
        doing = f"print the gradient {wrong.gradient}" + (
            f" (step {wrong.step})" if wrong.step else ""
        )
        raise DerivationError(
            doing,
            f"checked by numbers, {wrong}",
            "derive refuses to print a gradient it has not checked; report it with your "
            "declaration (set DERIVE_TRACEBACK=1 for the traceback)",
        )
    return gradients


def checked_backward(entry: Entry, graph: Graph | None = None) -> tuple[Gradient, ...]:
    """`derive.calculus.backward` of the entry's graph (or of `graph`, read at the entry's
    sizes), every printed form checked by numbers first (see the module docstring); a
    `DerivationError` names the first form that differs."""
    return _checked(entry, entry.graph if graph is None else graph)
