"""Self-attention at concrete sizes: whole matrices of named entries, step by step.

Each `ExplicitStep` holds its output's named entries (ω_{1,1}, ω_{1,2}, …) and a formula for each
entry in terms of the previous steps' named entries (ω_{m,p} = Σ_j q_{m,j} k_{p,j} written out),
instantiated from the declarations (`derive.explicit.instantiate`). Numbers go in step by step:
substituting the values of the previous steps into one step's formula (`xreplace`, exact) costs
what the step itself costs, where lambdifying the fully expanded C would take seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sympy as sp
from sympy import ImmutableMatrix

from .. import calculus
from ..graph import Graph, self_attention
from ..notation import letters as L
from .instantiate import instantiate
from .sizes import check_sizes
from .values import Values, compose, evaluate_steps, exact_numbers, size_values, to_rows

__all__ = ["ExplicitGraph", "ExplicitAttention", "explicit_attention", "allowed_keys"]


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
    variants' s, d_y, w included): its inputs' named entries, its steps, their values."""

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
            letter: L.entries(L.name_of(letter), *(int(sp.sympify(x).xreplace(self.sizes))
                                                   for x in shapes[letter]))
            for letter in graph.inputs
            if letter != "M"  # a mask is given as numbers, not as an input
        }  # fmt: skip

    def __repr__(self) -> str:
        sizes = ", ".join(f"{symbol}={value}" for symbol, value in self.sizes.items())
        return f"ExplicitGraph({self.graph.name!r}, {sizes})"

    def evaluate(self, *, digits: int | None = 30, **given: object) -> Values:
        """The value of every step for concrete inputs (by letter: ``X=…, Y=…, W_q=…``)."""
        missing = sorted(set(self.inputs) - set(given))
        unknown = sorted(set(given) - set(self.inputs))
        if missing or unknown:
            raise TypeError(f"evaluate needs exactly {list(self.inputs)}: missing {missing}, "
                            f"unknown {unknown}")  # fmt: skip
        exact = exact_numbers(self.inputs, self.sizes, 1, given, None, digits)
        return evaluate_steps(self.steps, exact, digits, self.heads)


class ExplicitAttention(ExplicitGraph):
    """Self-attention written out at sizes n, d, c: see `explicit_attention`."""

    def __init__(
        self,
        n: int,
        d: int,
        c: int,
        *,
        causal: bool,
        heads: int,
        mask: object = None,
        key_padding_mask: object = None,
        graph: Graph | None = None,
    ) -> None:
        self.n, self.d, self.c, self.heads = check_sizes(n, d, c, heads)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        self.causal = causal
        self.masked = mask is not None or key_padding_mask is not None
        self.allowed = allowed_keys(self.n, causal, mask, key_padding_mask)
        graph = graph or self_attention(
            causal=causal and not self.masked, masked=self.masked, heads=self.heads > 1
        )
        self.width = self.c // self.heads
        sizes = {L.n: self.n, L.d: self.d, L.c: self.c, L.h: self.heads, L.c_h: self.width}
        given = {}
        if self.masked:  # M: 0 where a query may attend, −∞ where not (causal folded in)
            for row in range(self.n):
                for col in range(self.n):
                    value = sp.S.Zero if self.allowed[row][col] else -sp.oo
                    given[L.base("mask")[row + 1, col + 1]] = value
        super().__init__(graph, sizes, heads=self.heads, given=given)
        self.X, self.W_q, self.W_k, self.W_v = (self.inputs[k] for k in ("X", "W_q", "W_k", "W_v"))
        self.W_o = self.inputs.get("W_o")

    def _repr_latex_(self) -> str:
        from .display import explicit_lines, matrix_line

        lines = [matrix_line(L.MATRIX_LATEX[k], v) for k, v in self.inputs.items()]
        for step in self.steps:
            lines += explicit_lines(step)
        return "$$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$$"

    def __repr__(self) -> str:
        variant = ", causal=True" if self.causal else ""
        variant += ", mask=..." if self.masked else ""
        return (
            f"explicit_attention(n={self.n}, d={self.d}, c={self.c}{variant}, heads={self.heads})"
        )

    # -- composed matrices (expressions in x and the weights) ----------------------------------

    @functools.cached_property
    def _composed(self) -> dict[str, ImmutableMatrix]:
        return compose(self.steps, size_values(self.sizes))

    def _matrix(self, letter: str) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        if self.heads > 1 and letter in ("Omega", "Omega_scaled", "A"):
            return tuple(self._composed[f"{letter}_{h}"] for h in range(1, self.heads + 1))
        return self._composed[letter]

    Q = property(lambda self: self._matrix("Q"), doc="Q = X W_q, entries in x and W_q.")
    K = property(lambda self: self._matrix("K"), doc="K = X W_k.")
    V = property(lambda self: self._matrix("V"), doc="V = X W_v.")
    Omega = property(lambda self: self._matrix("Omega"), doc="Ω = Q Kᵀ (a tuple per head).")
    Omega_scaled = property(
        lambda self: self._matrix("Omega_scaled"), doc="Ω / √c (per head √c_h)."
    )
    A = property(lambda self: self._matrix("A"), doc="A = softmax(Ω / √c) row by row (per head).")
    C = property(lambda self: self._matrix("C"), doc="C = A V; for heads > 1, [C⁽¹⁾ ⋯ C⁽ʰ⁾] W_o.")

    # -- numbers -------------------------------------------------------------------------------

    def evaluate(
        self, X: object, W_q: object, W_k: object, W_v: object, W_o: object = None, *,
        digits: int | None = 30,
    ) -> Values:  # fmt: skip
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
        self, X: object, W_q: object, W_k: object, W_v: object, W_o: object = None, *,
        digits: int | None = 30,
    ) -> list[Values]:  # fmt: skip
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
    key_padding_mask: Sequence | object = None,
) -> ExplicitAttention:
    r"""Self-attention at concrete sizes, with every matrix written out in named entries.

    $$Q = X W_q,\ K = X W_k,\ V = X W_v,\quad \Omega = Q K^\top,\quad
      A = \mathrm{softmax}(\Omega / \sqrt{c}),\quad C = A V$$

    Shapes: X (n, d); W_q, W_k, W_v (d, c); Q, K, V (n, c); Ω, A (n, n); C (n, c). With
    ``heads=h`` (h divides c), each head ℓ uses columns (ℓ−1)c/h + 1 … ℓc/h of Q, K, V, is scaled
    by √(c/h), and C = [C⁽¹⁾ ⋯ C⁽ʰ⁾] W_o with W_o (c, c); Ω and A are then tuples of h matrices.
    ``causal=True`` sets a_{m,p} = 0 for p > m; ``mask`` (booleans (n, n), True = may attend)
    and ``key_padding_mask`` (booleans (n,), True = the key exists) set the masked weights to 0.

    Attributes X, W_q, W_k, W_v (, W_o) hold the named entries; Q, K, V, Omega, Omega_scaled,
    A, C are SymPy matrices in them; `steps` lists each step's formula in terms of the previous
    steps' named entries; `evaluate(X, W_q, W_k, W_v)` substitutes numbers step by step.
    Each of n, d, c must be a positive int no larger than `derive.MAX_SIZE` (16).

    Example:
        >>> ea = explicit_attention(2, 3, 2)
        >>> ea.Omega.shape
        (2, 2)
    """
    return ExplicitAttention(
        n, d, c, causal=causal, heads=heads, mask=mask, key_padding_mask=key_padding_mask
    )
