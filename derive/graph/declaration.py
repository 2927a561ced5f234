"""A declaration: one step of attention, written once, by its element-wise formula.

A `Declaration` holds the equation of one entry of the step's output in terms of the entries of
its inputs (ω_{m,p} = Σ_{j=1}^{c} q_{m,j} k_{p,j}), over named index ranges (the free indices run
over the output's shape, each summation index over its own limits), and the shapes of every
matrix it reads or writes. It is the only place where mathematics is typed in: matrix forms,
gradients, facts, explicit matrices and documents are derived from declarations by SymPy
(`derive.calculus`, `derive.proofs`, `derive.explicit`).

A `Graph` is the steps of one mechanism in order: each step's inputs are the graph's inputs (X
and the weights) or earlier steps' outputs. Forward and backward are two walks over one graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import sympy as sp
from sympy import Indexed

from ..notation import letters as L
from .sizes import Constraint
from .twins import StepTwin

__all__ = ["Declaration", "Graph", "Shape"]

Shape = tuple[sp.Expr, sp.Expr]


@dataclass(frozen=True)
class Declaration:
    """One step, declared by its element-wise formula.

    Attributes:
        name: the `attention.functional` function that computes it (``"scores"``, ...).
        output: the letter of the matrix it produces (``"Omega"``; per head ``"Omega_l"``).
        title: a few words for documents.
        element: the entry of the output as an equation in entries of the inputs.
        shapes: letter -> (rows, cols) of every matrix the equation reads or writes.
        constant: True for a step that depends on no input (the causal mask): no gradient
            flows into it, and at concrete sizes its entries are numbers.
        twin: how `derive check` computes the step with torch: by default the function of
            `attention.functional` with the step's name, given the matrices it reads
            (`derive.graph.twins.StepTwin`).
        requires: the conditions on the sizes the step needs (RoPE's rotation: an even width).
        text: a few sentences a document prints before the step (words only).
        composed: letters whose declarations a document puts into this one for a second display
            (the weights with the scaling put in), and `composed_text` the words before it.

    The fields after `twin` say how the step is checked and shown, not what it is: two
    declarations of the same formula and twin are equal whatever their words. (The twin counts:
    what is derived from a declaration is cached by it, and carries its twin.)
    """

    name: str
    output: str
    title: str
    element: sp.Eq
    shapes: Mapping[str, Shape] = field(hash=False, compare=False)
    constant: bool = False
    twin: StepTwin | None = field(default=None, repr=False)
    requires: tuple[Constraint, ...] = field(default=(), hash=False, compare=False, repr=False)
    text: str = field(default="", hash=False, compare=False, repr=False)
    composed: tuple[str, ...] = field(default=(), hash=False, compare=False, repr=False)
    composed_text: str = field(default="", hash=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        missing = {letter for letter in (self.output, *self.inputs) if letter not in self.shapes}
        if missing:
            raise ValueError(f"declaration {self.output}: no shape for {sorted(missing)}")

    @property
    def inputs(self) -> tuple[str, ...]:
        """The letters the formula reads, in a fixed order (that of their first entry)."""
        found: list[str] = []
        for entry in sorted(self.element.rhs.atoms(Indexed), key=L.reading_key):
            letter = L.letter_of(entry)
            if letter not in found:
                found.append(letter)
        return tuple(found)

    @property
    def head(self) -> bool:
        """True for a per-head step (its output is one head's matrix)."""
        return self.output.endswith("_l")

    @property
    def across(self) -> bool:
        """True for a step of one head that reads other heads' entries (talking heads: Σ_{ℓ'}
        P_{ℓ',ℓ} ω̃^{(ℓ')}): head ℓ's output depends on every head."""
        return self.head and any(
            len(e.indices) == 3 and e.indices[0] != L.ell for e in self.element.rhs.atoms(Indexed)
        )

    @property
    def free(self) -> tuple[sp.Expr, ...]:
        """The indices of the output entry: (m, p) for ω_{m,p}; an expression such as
        (ℓ − 1) c_h + j where the entry is a block of a larger matrix."""
        indices = self.element.lhs.indices
        return tuple(indices[1:]) if len(indices) == 3 else tuple(indices)

    def ranges(self) -> dict[sp.Symbol, tuple[sp.Expr, sp.Expr]]:
        """Each free index symbol and its range 1 … rows or 1 … cols of the output."""
        rows, cols = self.shapes[self.output]
        found: dict[sp.Symbol, tuple[sp.Expr, sp.Expr]] = {}
        for index, size in zip(self.free, (rows, cols), strict=True):
            if isinstance(index, sp.Symbol):
                found[index] = (sp.S.One, size)
        return found

    def with_element(self, rhs: sp.Expr) -> Declaration:
        """The same step with another right-hand side (tests change one declaration this way)."""
        return replace(self, element=sp.Eq(self.element.lhs, rhs, evaluate=False))

    def reading(self, renamed: Mapping[str, str]) -> Declaration:
        """The same step reading other matrices in place of some it reads, by their entries'
        names (``{"q": "qrot", "k": "krot"}``: the scores of the rotated queries and keys),
        one head's as one head's; its twin, where it names the matrices it is given, is given
        the new ones (the masked weights' twin takes the scaled scores, which the step itself
        reads through the masked ones)."""
        bases = {L.base(old): L.base(new) for old, new in renamed.items()}
        letters = {  # each entry read as it is read: a head's, or a whole matrix's (heads split)
            L.letter_of(entry): L.letter_of(entry.xreplace(bases))
            for entry in self.element.rhs.atoms(Indexed)
            if entry.base in bases
        }
        if not letters:  # a step that names a matrix to its twin only (the masked weights)
            suffix = "_l" if self.head else ""
            letters = {L.BASES[old] + suffix: L.BASES[new] + suffix for old, new in renamed.items()}
        shapes = dict(self.shapes)
        for old, new in letters.items():
            if old in shapes:  # a step may name a matrix to its twin only (the masked weights)
                shapes[new] = shapes.pop(old)
        rhs = self.element.rhs.xreplace(bases)
        twin = self.twin
        if isinstance(twin, StepTwin) and twin.arguments:
            twin = replace(twin, arguments=tuple(letters.get(a, a) for a in twin.arguments))
        element = sp.Eq(self.element.lhs, rhs, evaluate=False)
        return replace(self, element=element, shapes=shapes, twin=twin)

    def _repr_latex_(self) -> str:
        from ..notation import latex

        return "$$" + latex(self.element) + "$$"


@dataclass(frozen=True)
class Graph:
    """The steps of one mechanism, in order, and the size relations they rely on.

    Attributes:
        name: what it computes (``"self-attention"``, ``"causal self-attention"``, ...).
        declarations: the steps, inputs before the steps that read them.
        relations: declared relations between sizes (``c_h = c / h`` for several heads).
    """

    name: str
    declarations: tuple[Declaration, ...]
    relations: tuple[sp.Eq, ...] = ()

    def __post_init__(self) -> None:
        produced: set[str] = set()
        for step in self.declarations:
            if step.output in produced:
                raise ValueError(f"graph {self.name}: {step.output} is produced twice")
            produced.add(step.output)

    def __repr__(self) -> str:
        """Short, at a prompt: its name, its steps' outputs in order."""
        outputs = ", ".join(step.output for step in self.declarations)
        return f"Graph({self.name!r}: {outputs})"

    def producer(self, letter: str) -> Declaration | None:
        """The step that computes `letter`, or None for an input of the graph."""
        for step in self.declarations:
            if step.output == letter:
                return step
        return None

    def consumers(self, letter: str) -> tuple[Declaration, ...]:
        """The steps that read `letter`, in forward order."""
        return tuple(step for step in self.declarations if letter in step.inputs)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The matrices no step computes (X and the weights), in the order they are first read."""
        produced = {step.output for step in self.declarations}
        found: list[str] = []
        for step in self.declarations:
            for letter in step.inputs:
                if letter not in produced and letter not in found:
                    found.append(letter)
        return tuple(found)

    @property
    def output(self) -> str:
        """The letter of the last step's output (C)."""
        return self.declarations[-1].output

    @property
    def shapes(self) -> dict[str, Shape]:
        """Every matrix of the graph -> (rows, cols)."""
        known: dict[str, Shape] = {}
        for step in self.declarations:
            known |= dict(step.shapes)
        return known

    def step(self, output: str) -> Declaration:
        """The step that computes `output`; KeyError naming the known outputs otherwise."""
        found = self.producer(output)
        if found is None:
            known = [s.output for s in self.declarations]
            raise KeyError(f"graph {self.name} has no step {output!r}; known: {known}")
        return found

    def replace(self, output: str, rhs: sp.Expr) -> Graph:
        """The graph with the declaration of `output` given another right-hand side."""
        steps = tuple(s.with_element(rhs) if s.output == output else s for s in self.declarations)
        if steps == self.declarations and self.producer(output) is None:
            raise KeyError(f"graph {self.name} has no step {output!r}")
        return Graph(self.name, steps, self.relations)

    def with_step(self, step: Declaration) -> Graph:
        """The graph with `step` in place of the step that computes the same output."""
        self.step(step.output)  # KeyError naming the known outputs
        steps = tuple(step if s.output == step.output else s for s in self.declarations)
        return Graph(self.name, steps, self.relations)

    def inserted(self, after: str, *steps: Declaration) -> Graph:
        """The graph with `steps` right after the step that computes `after`."""
        at = self.declarations.index(self.step(after)) + 1
        found = (*self.declarations[:at], *steps, *self.declarations[at:])
        return Graph(self.name, found, self.relations)

    def named(self, name: str) -> Graph:
        """The same steps under another name."""
        return Graph(name, self.declarations, self.relations)

    @property
    def requires(self) -> tuple[Constraint, ...]:
        """The conditions its steps put on the sizes, each once."""
        return tuple(dict.fromkeys(c for step in self.declarations for c in step.requires))
