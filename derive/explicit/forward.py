"""Self-attention at concrete sizes: whole matrices of named entries, step by step.

Each `ExplicitStep` holds its output's named entries (ω_{1,1}, ω_{1,2}, …) and a formula for each
entry in terms of the previous steps' named entries (ω_{m,p} = Σ_j q_{m,j} k_{p,j} written out),
instantiated from the declarations (`derive.explicit.instantiate`). Numbers go in step by step:
substituting the values of the previous steps into one step's formula (`xreplace`, exact) costs
what the step itself costs, where lambdifying the fully expanded C would take seconds.
"""

from __future__ import annotations

import functools

import sympy as sp
from sympy import ImmutableMatrix

from .. import calculus
from ..graph import Graph
from ..notation import letters as L
from .instantiate import instantiate
from .values import Values, by_letter, compose, evaluate_steps, exact_numbers, size_values, to_rows

__all__ = ["ExplicitGraph", "allowed_keys"]


def allowed_keys(n: int, causal: bool, mask: object, key_padding_mask: object) -> list[list[bool]]:
    """Which keys each query may attend to (True = may attend): all, p ≤ m (causal), a full
    boolean mask (n, n), a key-padding mask (n,) (the keys that exist), or their combination."""
    allowed = [[not causal or p <= m for p in range(n)] for m in range(n)]
    if mask is not None:
        rows = to_rows("mask", mask)
        if not (
            len(rows) == n
            and all(isinstance(row, list) and len(row) == n for row in rows)
            and all(isinstance(e, bool) for row in rows for e in row)
        ):
            raise ValueError(f"mask must be booleans of shape ({n}, {n}) (True = may attend)")
        allowed = [
            [a and b for a, b in zip(x, y, strict=True)] for x, y in zip(allowed, rows, strict=True)
        ]
    if key_padding_mask is not None:
        keys = to_rows("key_padding_mask", key_padding_mask)
        if not (len(keys) == n and all(isinstance(e, bool) for e in keys)):
            raise ValueError(
                f"key_padding_mask must be booleans of shape ({n},) (True = the key exists)"
            )
        allowed = [[a and k for a, k in zip(row, keys, strict=True)] for row in allowed]
    return allowed


class ExplicitGraph:
    """Any graph of declarations written out at concrete sizes (`sizes`: symbol -> int, the
    variants' s, d_y, w included, and the parameters): its inputs' named entries, its steps,
    their values.

    The inputs are attributes by their letter (``X``, ``W_q``), and so is each step's matrix
    composed down to the inputs (``Q``, ``Omega``, ``A``, ``C``; a tuple of one per head for a
    per-head step). `evaluate` substitutes numbers step by step.
    """

    def __init__(
        self,
        graph: Graph,
        sizes: dict[sp.Symbol, int],
        *,
        heads: int = 1,
        given: dict | None = None,
    ) -> None:
        self.graph, self.heads = graph, heads
        self.sizes = dict(sizes)
        self.generic_steps = calculus.steps(graph)
        self.instance = instantiate(graph, size_values(self.sizes), heads, dict(given or {}))
        self.steps = self.instance.steps
        shapes = graph.shapes
        self.inputs = {
            letter: L.entries(
                L.name_of(letter),
                *(int(sp.sympify(x).xreplace(self.sizes)) for x in shapes[letter]),
            )
            for letter in graph.inputs
            if letter not in L.CONSTANT_LETTERS  # a mask is given as numbers, not as an input
        }

    def __repr__(self) -> str:
        sizes = ", ".join(f"{symbol}={value}" for symbol, value in self.sizes.items())
        return f"ExplicitGraph({self.graph.name!r}, {sizes})"

    def __getattr__(self, letter: str) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        if letter.startswith("_") or "inputs" not in self.__dict__:
            raise AttributeError(letter)
        if letter in self.inputs:
            return self.inputs[letter]
        composed = self._composed
        if letter in composed:
            return composed[letter]
        per_head = [composed.get(f"{letter}_{head}") for head in range(1, self.heads + 1)]
        if self.heads > 1 and all(matrix is not None for matrix in per_head):
            return tuple(per_head)
        raise AttributeError(f"{type(self).__name__} has no matrix {letter!r}")

    @functools.cached_property
    def _composed(self) -> dict[str, ImmutableMatrix]:
        """Each step's matrix in the entries of the inputs (sizes put in)."""
        return compose(self.steps, size_values(self.sizes))

    def evaluate(self, *positional: object, digits: int | None = 30, **given: object) -> Values:
        """The value of every step for concrete inputs: by letter (``X=…, Y=…, W_q=…``), or
        positionally in the order of `inputs`.

        Inputs may be torch tensors, NumPy arrays, nested lists or SymPy matrices of ints,
        floats (taken exactly), `Fraction`s or SymPy numbers. Polynomial steps (projections,
        scores) are exact; the others SymPy Floats of `digits` significant digits, or exact
        expressions (exp of algebraic numbers) with ``digits=None``.
        """
        exact = exact_numbers(
            self.inputs, self.sizes, by_letter(self.inputs, positional, given), digits
        )
        return evaluate_steps(self.steps, exact, digits, self.heads)

    def evaluate_batch(
        self, X: object, *rest: object, digits: int | None = 30, **given: object
    ) -> list[Values]:
        """`evaluate` for each sequence of a batch X of shape (batch, n, d); the other inputs
        are shared, as in `attention`. Returns one `Values` per sequence, in order."""
        rows = to_rows("X", X)
        if not rows or not isinstance(rows[0], list) or not isinstance(rows[0][0], list):
            shape = self.inputs["X"].shape
            raise ValueError(
                f"X must have shape (batch, {shape[0]}, {shape[1]}) for evaluate_batch"
            )
        return [self.evaluate(x, *rest, digits=digits, **given) for x in rows]

    def _repr_latex_(self) -> str:
        from .display import explicit_lines, matrix_line

        lines = [matrix_line(L.MATRIX_LATEX[k], v) for k, v in self.inputs.items()]
        for step in self.steps:
            lines += explicit_lines(step)
        return "$$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$$"
