r"""The backward pass at concrete sizes, derived by SymPy from the explicit forward steps.

A scalar loss L reaches self-attention through its output: the upstream gradient \bar{C} is a
matrix of fresh entries \bar{z}_{m,j}. Every forward step gives each output entry y as a short
formula f_y in the previous steps' named entries. Walking the steps backwards, the gradient of
each named entry u is the chain rule

$$\bar{u} = \sum_{\text{steps that read } u} \; \sum_{y} \bar{y} \,
  \frac{\partial f_y}{\partial u},$$

each partial derivative taken by `sympy.diff` on one entry's formula (a few terms), never on one
expanded expression in x and the weights. The matrix forms derived at symbolic sizes
(`derive.calculus.backward`) are instantiated at the same sizes (`compact`), and
`derive.explicit.agreement` shows that the two derivations agree entry by entry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import sympy as sp
from sympy import Add, ImmutableMatrix, Indexed

from .. import calculus
from ..notation import letters as L
from .forward import ExplicitGraph
from .instantiate import cells
from .sizes import check_size
from .values import Values, by_letter, compose, evaluate_steps, exact_numbers, size_values

__all__ = ["MAX_GRADIENT_SIZE", "GradientStep", "ExplicitGradients"]

#: The largest n, d or c that `explicit_gradients` accepts (docs/benchmarks.md: the whole check
#: against autograd takes about 3 s at n = d = c = 8 on a 2-core machine and grows like n⁴).
MAX_GRADIENT_SIZE = 8


def gradient_of(entry: Indexed) -> Indexed:
    """The gradient's entry of a named entry: ω_{m,p} -> \\bar{ω}_{m,p}, x_{m,i} -> …"""
    return L.base("d" + entry.base.label.name)[entry.indices]


@dataclass(frozen=True)
class GradientStep:
    """One gradient at concrete sizes.

    Attributes:
        output: its key, ``"d"`` + the forward key (``"dV"``, ``"dA_2"`` for head 2).
        of: the forward matrix it is the gradient of (``"V"``, ``"A_2"``).
        head: the head (1-based) for per-head gradients, else None.
        entries: its named entries (\\bar{v}_{p,j}, ...), the left-hand sides.
        formula: each entry by the chain rule, in named entries of the forward steps and of the
            gradients before it.
        compact: the matrix form derived at symbolic sizes, at these sizes, in the same entries.
    """

    output: str
    of: str
    head: int | None
    entries: ImmutableMatrix
    formula: ImmutableMatrix
    compact: ImmutableMatrix

    #: Read by `derive.explicit.values.evaluate_steps`: gradients are evaluated on Floats.
    polynomial: ClassVar[bool] = False
    name: ClassVar[str] = "gradient"

    def _repr_latex_(self) -> str:
        from .display import explicit_lines

        return "$$\\begin{aligned}" + " \\\\ ".join(explicit_lines(self)) + "\\end{aligned}$$"


def _partials(formula: sp.Expr) -> list[tuple[Indexed, sp.Expr]]:
    """(u, ∂formula/∂u) for each named entry u of one entry's formula, by `sympy.diff`, its
    value at a kink torch's (`derive.calculus.almost_everywhere`).

    Each entry stands in as a plain symbol for the derivative and is put back after: SymPy
    differentiates with respect to a symbol about twice as fast as with respect to an `Indexed`.
    """
    return _derivatives(formula, formula.atoms(Indexed))


def partial_of(formula: sp.Expr, u: Indexed) -> sp.Expr:
    """∂formula/∂u for one named entry u, as `_partials` gives it (0 where it does not read u)."""
    return _derivatives(formula, {u})[0][1]


def _derivatives(formula: sp.Expr, entries) -> list[tuple[Indexed, sp.Expr]]:
    """(u, ∂formula/∂u) for each u of `entries`, each entry of the formula standing in as a
    plain symbol while it is differentiated."""
    plain = {u: sp.Symbol(str(u), real=True) for u in formula.atoms(Indexed) | set(entries)}
    back = {symbol: u for u, symbol in plain.items()}
    stand_in = formula.xreplace(plain)
    return [
        (u, calculus.almost_everywhere(sp.diff(stand_in, plain[u]), stand_in).xreplace(back))
        for u in entries
    ]  # at a kink, torch's value (derive.calculus.KINK_CONVENTION), as the printed forms


class ExplicitGradients:
    """The backward pass of an explicit graph (a variant's at concrete sizes), entry by entry by
    the chain rule: `derive.explicit_gradients` builds one for a variant's name.

    Attributes: `dC`, the upstream gradient's fresh entries (\\bar{z}_{m,j}); each gradient by
    its letter (``dX``, ``dW_q``, ``dA``; a tuple per head), SymPy matrices over the entries of
    the inputs and of \\bar{C}, the symbols of `forward`; `steps`, each gradient's derived
    formula in named entries; `evaluate`, numbers put in step by step; `residuals`, the chain
    rule here against the matrix forms derived at symbolic sizes. Every size is at most
    `MAX_GRADIENT_SIZE`.
    """

    def __init__(self, forward: ExplicitGraph) -> None:
        for symbol, value in forward.sizes.items():
            if symbol not in L.SIZES:  # a parameter (RoPE's β, QK-norm's ε), not a size
                continue
            check_size(
                str(symbol),
                value,
                limit=MAX_GRADIENT_SIZE,
                what="derive.explicit.MAX_GRADIENT_SIZE",
                generic="derive.backward_steps()",
            )
        self._build(forward)

    def _build(self, forward: ExplicitGraph) -> None:
        self.forward = forward
        sizes = {str(symbol): value for symbol, value in forward.sizes.items()}
        self.n, self.d, self.c = sizes["n"], sizes["d"], sizes["c"]
        self.heads = forward.heads
        self.width = self.c // self.heads
        output = forward.graph.output
        rows, cols = (
            int(sp.sympify(x).xreplace(forward.sizes)) for x in forward.graph.shapes[output]
        )
        self.dC = L.entries("d" + L.name_of(output), rows, cols)
        #: The upstream gradient's key among the inputs: ``"dC"``, the gradient of the output.
        self.upstream = L.gradient(output)
        self.inputs = {**forward.inputs, self.upstream: self.dC}
        self.steps = tuple(self._derive())

    def _repr_latex_(self) -> str:
        """Every gradient entry by its derived formula, in the named entries before it."""
        from .display import explicit_lines, matrix_line

        lines = [matrix_line(L.MATRIX_LATEX[self.upstream], self.dC)]
        for step in self.steps:
            lines += explicit_lines(step)
        return "$$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$$"

    def __repr__(self) -> str:
        sizes = ", ".join(f"{symbol}={value}" for symbol, value in self.forward.sizes.items())
        return f"ExplicitGradients({self.forward.graph.name!r}, {sizes})"

    # -- the derivation ----------------------------------------------------------------------------

    def _derive(self) -> list[GradientStep]:
        nodes = [(key, None, value, None) for key, value in self.forward.inputs.items()]
        nodes += [(s.output, s.head, s.entries, s.formula) for s in self.forward.steps]
        terms: dict[Indexed, list[sp.Expr]] = {}
        partials: dict[Indexed, dict[Indexed, sp.Expr]] = {}
        for _, _, entries, formula in nodes:
            if formula is None:
                continue
            for output, f in zip(entries, formula, strict=True):
                d_output = gradient_of(output)
                partials[output] = dict(_partials(f))
                for u, partial in partials[output].items():
                    terms.setdefault(u, []).append(d_output * partial)
        #: ∂output/∂u for each named entry `output` of a step and each named entry u its formula
        #: reads (what the chain rule's Derivative objects stand for, at these sizes).
        self.partials = partials
        compact = self._compact()
        derived = []
        for key, head, entries, _ in reversed(nodes):
            if key == self.forward.graph.output:
                continue  # the output's gradient is the upstream gradient, given
            formula = entries.applyfunc(lambda u: Add(*terms.get(u, [])))
            gradient = entries.applyfunc(gradient_of)
            form = gradient.applyfunc(lambda e: compact.get(e, e))
            matrices = (ImmutableMatrix(m) for m in (gradient, formula, form))
            derived.append(GradientStep("d" + key, key, head, *matrices))
        return derived

    def compact_entries(self) -> dict[Indexed, sp.Expr]:
        """Every entry of every gradient printed at symbolic sizes (`derive.calculus.backward`),
        at these sizes (see `_compact`); the entries of folded steps' gradients included."""
        return self._compact()

    @functools.cache  # noqa: B019 - one per instance, kept with it
    def _compact(self) -> dict[Indexed, sp.Expr]:
        """Every entry of every gradient derived at symbolic sizes, at these sizes, written in
        the entries this explicit derivation names (folded entries resolved)."""
        sizes = size_values(self.forward.sizes)
        values: dict[Indexed, sp.Expr] = {}
        for gradient in calculus.backward(self.forward.graph):
            shape = gradient.shape
            for _, entry, value in cells(gradient.element, shape, sizes, self.heads):
                values[entry] = value
        folded = dict(self.forward.instance.folded)
        letters = self.forward.instance.folded_letters
        folded |= {e: v for e, v in values.items() if L.letter_of(e)[1:] in letters}
        for _ in range(4):  # folded gradients may read folded gradients
            values = {e: v.xreplace(folded) for e, v in values.items()}
            folded = {e: v.xreplace(folded) for e, v in folded.items()}
        return values

    def step(self, output: str) -> GradientStep:
        """The gradient step that produces `output` (``"dV"``, ``"dA_2"``, ...)."""
        for step in self.steps:
            if step.output == output:
                return step
        raise KeyError(f"no gradient step {output!r}; known: {[s.output for s in self.steps]}")

    # -- the matrices over X, the weights and \bar{C} --------------------------------------------

    @functools.cached_property
    def _composed(self) -> dict[str, ImmutableMatrix]:
        env = size_values(self.forward.sizes)
        compose(self.forward.steps, env)  # the forward entries, in x and the weights
        return compose(self.steps, env)

    def __getattr__(self, letter: str) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        """Each gradient by its letter, as a matrix over the entries of the inputs and of
        \\bar{C} (``dX``, ``dW_q``; a per-head gradient as a tuple of one per head, ``dA``)."""
        if letter.startswith("_") or "steps" not in self.__dict__:
            raise AttributeError(letter)
        composed = self._composed
        if letter in composed:
            return composed[letter]
        per_head = [composed.get(f"{letter}_{head}") for head in range(1, self.heads + 1)]
        if self.heads > 1 and all(matrix is not None for matrix in per_head):
            return tuple(per_head)
        known = sorted({key.rsplit("_", 1)[0] if key[-1].isdigit() else key for key in composed})
        raise AttributeError(
            f"{self.forward.graph.name} has no gradient {letter!r}; its "
            f"gradients: {', '.join(known)}"
        )

    # -- proofs ------------------------------------------------------------------------------------

    def residuals(self) -> dict[str, ImmutableMatrix]:
        """Chain rule minus the instantiated symbolic form, per gradient step, simplified."""
        from .agreement import residual

        return {step.output: residual(self, step) for step in self.steps}

    def proven(self) -> bool:
        """True when every gradient by the chain rule equals its symbolic form (`residuals`)."""
        return all(matrix.is_zero_matrix for matrix in self.residuals().values())

    def rowsum_residual(self) -> ImmutableMatrix:
        """Σ_r a_{m,r} \\bar{a}_{m,r} − Σ_j \\bar{z}_{m,j} z_{m,j} per row (and head), expanded."""
        from .agreement import rowsum_residual

        return rowsum_residual(self)

    # -- numbers -----------------------------------------------------------------------------------

    def evaluate(self, *positional: object, digits: int | None = 30, **given: object) -> Values:
        """The forward steps, then each gradient step, on numbers (`xreplace`, step by step):
        every input by its letter (``X=…, W_q=…, dC=…``), or positionally in the order of
        `inputs` (the forward graph's, then dC).

        Returns a `Values` holding the forward values (``Q`` … ``C``) and the gradients (``dA``,
        ``dV``, …, ``dX``), 30-digit SymPy Floats by default.
        """
        given = by_letter(self.inputs, positional, given)
        exact = exact_numbers(self.inputs, self.forward.sizes, given, digits)
        return evaluate_steps(self.forward.steps + self.steps, exact, digits, self.heads)
