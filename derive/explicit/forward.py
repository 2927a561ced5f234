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
from ..graph import Graph, explicit_sizes, variant
from ..notation import letters as L
from .instantiate import instantiate
from .sizes import check_sizes
from .values import Values, compose, evaluate_steps, exact_numbers, size_values, to_rows

__all__ = ["ExplicitGraph", "ExplicitAttention", "explicit_attention", "allowed_keys", "entry_name"]


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
        positionally in the order of `inputs`."""
        if len(positional) > len(self.inputs):
            raise TypeError(
                f"evaluate takes at most {len(self.inputs)} inputs "
                f"({', '.join(self.inputs)}), got {len(positional)}"
            )
        given = dict(zip(self.inputs, positional, strict=False)) | given
        missing = sorted(set(self.inputs) - set(given))
        unknown = sorted(set(given) - set(self.inputs))
        if missing or unknown:
            raise TypeError(
                f"evaluate needs exactly {list(self.inputs)}: missing {missing}, unknown {unknown}"
            )
        exact = exact_numbers(self.inputs, self.sizes, 1, given, None, digits)
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


def entry_name(*, causal: bool, masked: bool, heads: int) -> str:
    """The registry's name for self-attention in this form (``"multi-head+causal"``)."""
    parts = [
        name
        for name, on in (
            ("multi-head", heads > 1),
            ("causal", causal and not masked),
            ("masked", masked),
        )
        if on
    ]
    return "+".join(parts) or "self-attention"


class ExplicitAttention(ExplicitGraph):
    """Self-attention written out at sizes n, d, c: see `explicit_attention` (the graph of the
    registry's self-attention, causal, masked or multi-head entry, with the mask's numbers)."""

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
        name = entry_name(causal=causal, masked=self.masked, heads=self.heads)
        found = variant(name)
        graph = graph or found.graph
        own = {"h": self.heads} if self.heads > 1 else {}
        sizes = explicit_sizes(found, self.n, self.d, self.c, own)
        self.width = self.c // self.heads
        given = {}
        if self.masked:  # M: 0 where a query may attend, −∞ where not (causal folded in)
            for row in range(self.n):
                for col in range(self.n):
                    value = sp.S.Zero if self.allowed[row][col] else -sp.oo
                    given[L.base("mask")[row + 1, col + 1]] = value
        super().__init__(graph, sizes, heads=self.heads, given=given)
        self.X, self.W_q, self.W_k, self.W_v = (self.inputs[k] for k in ("X", "W_q", "W_k", "W_v"))
        self.W_o = self.inputs.get("W_o")

    def __repr__(self) -> str:
        variant = ", causal=True" if self.causal else ""
        variant += ", mask=..." if self.masked else ""
        return (
            f"explicit_attention(n={self.n}, d={self.d}, c={self.c}{variant}, heads={self.heads})"
        )

    # self-attention's inputs by name (and W_o), narrower than any graph's on purpose
    def evaluate(  # pyright: ignore[reportIncompatibleMethodOverride]
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
