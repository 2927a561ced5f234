"""Explicit self-attention at concrete sizes: whole matrices of symbols, step by step.

Each `ExplicitStep` holds its output's named entries (ω_{1,1}, ω_{1,2}, …) and a formula for
each entry in terms of the previous steps' named entries (ω_{m,p} = Σ_j q_{m,j} k_{p,j}), never
one expanded expression in x and w. Numbers go in step by step: substituting the values of the
previous steps into one step's formula (`xreplace`, exact) costs what the step itself costs (about
n²c operations), where lambdifying the fully expanded C costs seconds at n = d = c = 5.

The composed matrices (Q, …, C as expressions in the entries of X and the weights) are built on
first access, by substituting each step's composed entries into the next step's formula.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp
from sympy import ImmutableMatrix, sqrt

from . import _notation as N
from . import _steps
from ._rows import allowed_keys, softmax_rows
from ._sizes import check_sizes
from ._values import Values, compose, evaluate_steps, exact_numbers, size_values, to_rows

__all__ = ["ExplicitStep", "ExplicitAttention", "explicit_attention"]


@dataclass(frozen=True)
class ExplicitStep:
    """One step at concrete sizes.

    Attributes:
        step: the generic `Step` it instantiates (name, title, equations with symbolic sizes).
        output: the key of its value (``"Q"``, ``"Omega"``, or per head ``"Omega_2"``).
        head: the head (1-based) for per-head steps, else None.
        entries: the matrix of its output's named entries (the left-hand sides).
        formula: each entry in terms of the previous steps' named entries; the sizes c (or c_h)
            stay symbols so that documents print √c.
    """

    step: _steps.Step
    output: str
    head: int | None
    entries: ImmutableMatrix
    formula: ImmutableMatrix

    @property
    def name(self) -> str:
        return self.step.name

    def _repr_latex_(self) -> str:
        from ._sections import explicit_lines

        return "$$\\begin{aligned}" + " \\\\ ".join(explicit_lines(self)) + "\\end{aligned}$$"

    @property
    def polynomial(self) -> bool:
        """Projections and scores: exact over the rationals, whatever `digits` asks for."""
        return self.step.name in ("projection", "scores") and self.output != "C"


class ExplicitAttention:
    """Self-attention written out at sizes n, d, c: see `explicit_attention`."""

    def __init__(
        self, n: int, d: int, c: int, *, causal: bool, heads: int, mask: object = None
    ) -> None:
        self.n, self.d, self.c, self.heads = check_sizes(n, d, c, heads)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        if causal and mask is not None:
            raise ValueError("give causal=True or a mask, not both (combine them into the mask)")
        self.causal = causal
        self.allowed = allowed_keys(self.n, causal, mask)
        self.masked = mask is not None
        self.width = self.c // self.heads
        self.sizes = {N.n: self.n, N.d: self.d, N.c: self.c, N.h: self.heads, N.c_h: self.width}
        generic = {
            (s.name, s.output): s
            for s in _steps.steps(causal=causal, masked=self.masked, heads=self.heads > 1)
        }
        self.generic_steps = tuple(generic.values())
        self.steps = tuple(self._build(generic))
        self.X = N.entries("x", self.n, self.d)
        self.W_q = N.entries("wq", self.d, self.c)
        self.W_k = N.entries("wk", self.d, self.c)
        self.W_v = N.entries("wv", self.d, self.c)
        self.W_o = N.entries("wo", self.c, self.c) if self.heads > 1 else None
        self.inputs = {"X": self.X, "W_q": self.W_q, "W_k": self.W_k, "W_v": self.W_v}
        if self.W_o is not None:
            self.inputs["W_o"] = self.W_o

    def _repr_latex_(self) -> str:
        from ._sections import explicit_lines, matrix_line

        lines = [matrix_line(N.MATRIX_LETTERS[k], v) for k, v in self.inputs.items()]
        for step in self.steps:
            lines += explicit_lines(step)
        return "$$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$$"

    def __repr__(self) -> str:
        variant = ", causal=True" if self.causal else ", mask=..." if self.masked else ""
        return (
            f"explicit_attention(n={self.n}, d={self.d}, c={self.c}{variant}, heads={self.heads})"
        )

    # -- building the steps -------------------------------------------------------------------

    def _build(self, generic: dict) -> list[ExplicitStep]:
        n, d, c, w = self.n, self.d, self.c, self.width
        x = N.entries("x", n, d)
        built = []
        for which in "qkv":
            letter = which.upper()
            built.append(
                ExplicitStep(
                    generic[("projection", letter)],
                    letter,
                    None,
                    N.entries(which, n, c),
                    x * N.entries(f"w{which}", d, c),
                )
            )
        q, k, v = (N.entries(which, n, c) for which in "qkv")
        suffix = "_l" if self.heads > 1 else ""
        width_symbol = N.c_h if self.heads > 1 else N.c
        for head in range(1, self.heads + 1):
            columns = slice((head - 1) * w, head * w)
            label = f"_{head}" if self.heads > 1 else ""
            entries = self._head_entries(head)
            omega, scaled, a, ctx = (entries[name] for name in ("omega", "omegatilde", "a", "ctx"))
            built += [
                ExplicitStep(
                    generic[("scores", "Omega" + suffix)],
                    "Omega" + label,
                    head if label else None,
                    omega,
                    q[:, columns] * k[:, columns].T,
                ),
                ExplicitStep(
                    generic[("scaled_scores", "Omega_scaled" + suffix)],
                    "Omega_scaled" + label,
                    head if label else None,
                    scaled,
                    omega / sqrt(width_symbol),
                ),
                ExplicitStep(
                    generic[("weights", "A" + suffix)],
                    "A" + label,
                    head if label else None,
                    a,
                    softmax_rows(omega, width_symbol, self.allowed),
                ),
                ExplicitStep(
                    generic[("context", "C" + suffix)],
                    "C" + label,
                    head if label else None,
                    ctx,
                    a * v[:, columns],
                ),
            ]
        if self.heads > 1:
            per_head = [self._head_entries(head)["ctx"] for head in range(1, self.heads + 1)]
            built.append(
                ExplicitStep(
                    generic[("merge_heads", "C_concat")],
                    "C_concat",
                    None,
                    N.entries("ctxcat", n, c),
                    ImmutableMatrix(sp.Matrix.hstack(*per_head)),
                )
            )
            built.append(
                ExplicitStep(
                    generic[("projection", "C")],
                    "C",
                    None,
                    N.entries("ctx", n, c),
                    N.entries("ctxcat", n, c) * N.entries("wo", c, c),
                )
            )
        return [
            ExplicitStep(s.step, s.output, s.head, s.entries, ImmutableMatrix(s.formula))
            for s in built
        ]

    def _head_entries(self, head: int) -> dict[str, ImmutableMatrix]:
        n, w = self.n, self.width
        if self.heads == 1:
            return {
                "omega": N.entries("omega", n, n),
                "omegatilde": N.entries("omegatilde", n, n),
                "a": N.entries("a", n, n),
                "ctx": N.entries("ctx", n, self.c),
            }
        return {
            "omega": N.head_entries("omega", head, n, n),
            "omegatilde": N.head_entries("omegatilde", head, n, n),
            "a": N.head_entries("a", head, n, n),
            "ctx": N.head_entries("ctx", head, n, w),
        }

    # -- composed matrices (expressions in x and the weights) ----------------------------------

    @functools.cached_property
    def _composed(self) -> dict[str, ImmutableMatrix]:
        return compose(self.steps, size_values(self.sizes))

    def _matrix(self, letter: str) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        if self.heads > 1 and letter in ("Omega", "Omega_scaled", "A"):
            return tuple(self._composed[f"{letter}_{h}"] for h in range(1, self.heads + 1))
        return self._composed[letter]

    @property
    def Q(self) -> ImmutableMatrix:
        """Q = X W_q, entries in x and W_q."""
        return self._matrix("Q")

    @property
    def K(self) -> ImmutableMatrix:
        """K = X W_k."""
        return self._matrix("K")

    @property
    def V(self) -> ImmutableMatrix:
        """V = X W_v."""
        return self._matrix("V")

    @property
    def Omega(self) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        """Ω = Q Kᵀ (one matrix per head when heads > 1)."""
        return self._matrix("Omega")

    @property
    def Omega_scaled(self) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        """Ω / √c (per head: Ω⁽ˡ⁾ / √c_h)."""
        return self._matrix("Omega_scaled")

    @property
    def A(self) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        """A = softmax(Ω / √c) row by row (one matrix per head when heads > 1)."""
        return self._matrix("A")

    @property
    def C(self) -> ImmutableMatrix:
        """C = A V; for heads > 1, C = [C⁽¹⁾ ⋯ C⁽ʰ⁾] W_o."""
        return self._matrix("C")

    # -- numbers -------------------------------------------------------------------------------

    def evaluate(
        self,
        X: object,
        W_q: object,
        W_k: object,
        W_v: object,
        W_o: object = None,
        *,
        digits: int | None = 30,
    ) -> Values:
        """The value of every step for concrete inputs, substituted step by step.

        Inputs may be torch tensors, NumPy arrays, nested lists or SymPy matrices of ints,
        floats (taken exactly), `Fraction`s or SymPy numbers. Projections and scores are exact.
        The scaled scores, weights and contexts are SymPy Floats with `digits` significant
        digits, or exact expressions (exp of algebraic numbers) when ``digits=None``.
        """
        given = {"X": X, "W_q": W_q, "W_k": W_k, "W_v": W_v}
        exact = exact_numbers(self.inputs, self.sizes, self.heads, given, W_o, digits)
        return evaluate_steps(self.steps, exact, digits, self.heads)

    def evaluate_batch(
        self,
        X: object,
        W_q: object,
        W_k: object,
        W_v: object,
        W_o: object = None,
        *,
        digits: int | None = 30,
    ) -> list[Values]:
        """`evaluate` for each sequence of a batch X of shape (batch, n, d); the weights are
        shared, as in `attention`. Returns one `Values` per sequence, in order."""
        rows = to_rows("X", X)
        if not rows or not isinstance(rows[0], list) or not isinstance(rows[0][0], list):
            raise ValueError(f"X must have shape (batch, {self.n}, {self.d}) for evaluate_batch")
        return [self.evaluate(x, W_q, W_k, W_v, W_o, digits=digits) for x in rows]


def explicit_attention(
    n: int,
    d: int,
    c: int,
    *,
    causal: bool = False,
    heads: int = 1,
    mask: Sequence | object = None,
) -> ExplicitAttention:
    r"""Self-attention at concrete sizes, with every matrix written out in symbols.

    $$Q = X W_q,\ K = X W_k,\ V = X W_v,\quad \Omega = Q K^\top,\quad
      A = \mathrm{softmax}(\Omega / \sqrt{c}),\quad C = A V$$

    Shapes: X (n, d); W_q, W_k, W_v (d, c); Q, K, V (n, c); Ω, A (n, n); C (n, c). With
    ``heads=h`` (h divides c), each head l uses columns (l-1)c/h … l c/h of Q, K, V, is scaled by
    √(c/h), and C = [C⁽¹⁾ ⋯ C⁽ʰ⁾] W_o with W_o (c, c); Ω and A are then tuples of h matrices.
    ``causal=True`` sets a_{m,p} = 0 for p > m; ``mask`` (booleans (n, n), or key padding (n,),
    True = may attend) sets the masked weights to 0.

    Attributes X, W_q, W_k, W_v (, W_o) hold symbols; Q, K, V, Omega, Omega_scaled, A, C are
    SymPy matrices in those symbols; `steps` lists each step's formula in terms of the previous
    step's named entries; `evaluate(X, W_q, W_k, W_v)` substitutes numbers step by step.

    Each of n, d, c must be a positive int no larger than `derive.MAX_SIZE` (16).

    Example:
        >>> ea = explicit_attention(2, 3, 2)
        >>> ea.Omega.shape
        (2, 2)
    """
    return ExplicitAttention(n, d, c, causal=causal, heads=heads, mask=mask)
