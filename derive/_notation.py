"""The seed's letters, once: sizes, indices, matrices and their entries.

Sizes (positive integer symbols)::

    n  tokens        d  input width      c  context width
    h  heads         c_h = c / h  per-head width

Indices (1-based, as in the seed)::

    m, p, r  tokens (rows of X, Q, K, V, Omega, A, C; r is the summation index of the softmax)
    i        input features (columns of X, rows of W_q, W_k, W_v)
    j        context features (columns of W_q, W_k, W_v, Q, K, V, C)
    l        heads (multi-head variant),  b  sequences in a batch

Matrices are `MatrixSymbol`s for the generic (symbolic n, d, c) derivation; their entries are
`Indexed` objects whose indices are 1-based integers or index symbols, so ``x[m, i]`` is the
seed's x_{m,i} with no shift anywhere. The LaTeX printer (`derive._latex`) maps each
`IndexedBase` to its letter (``omega`` prints as ω, ``wq`` as (W_q)).

Every other module builds its symbols through this one, so that the gradients (issue 6) can
reuse exactly the same symbols: `entries(name, rows, cols)` returns the same objects on every
call.
"""

from __future__ import annotations

import functools

import sympy as sp
from sympy import IndexedBase, Matrix, MatrixSymbol, Symbol

__all__ = [
    "n",
    "d",
    "c",
    "h",
    "c_h",
    "m",
    "p",
    "r",
    "i",
    "j",
    "ell",
    "b",
    "BASES",
    "GRADIENT_BASES",
    "MATRIX_LETTERS",
    "base",
    "entries",
    "head_entries",
    "matrix_symbol",
]

# Sizes. ``c_h`` is a symbol of its own (the per-head width); c = h * c_h in the multi-head case.
n, d, c, h = sp.symbols("n d c h", integer=True, positive=True)
c_h = Symbol("c_h", integer=True, positive=True)

# Indices, 1-based.
m, p, r, i, j, b = sp.symbols("m p r i j b", integer=True, positive=True)
#: The head index (the letter l, named `ell` in Python so that it never reads as 1).
ell = Symbol("l", integer=True, positive=True)

#: IndexedBase name -> (matrix letter, LaTeX of one entry's letter). The entry names avoid the
#: size symbols (the context entries are ``ctx``, printed c, so they never collide with c).
BASES: dict[str, tuple[str, str]] = {
    "x": ("X", "x"),
    "wq": ("W_q", r"(W_q)"),
    "wk": ("W_k", r"(W_k)"),
    "wv": ("W_v", r"(W_v)"),
    "wo": ("W_o", r"(W_o)"),
    "q": ("Q", "q"),
    "k": ("K", "k"),
    "v": ("V", "v"),
    "omega": ("Omega", r"\omega"),
    "omegatilde": ("Omega_scaled", r"\tilde{\omega}"),
    "a": ("A", "a"),
    "ctx": ("C", "c"),
    "ctxcat": ("C_concat", r"\hat{c}"),
    "mask": ("M", "M"),
}
#: The backward pass (issue 6): the gradient of a scalar loss L with respect to each matrix,
#: entry by entry (``dctx[m, j]`` is ∂L/∂c_{m,j}, printed dc_{m,j}; ``dwq[i, j]`` is d(W_q)_{i,j}).
GRADIENT_BASES: dict[str, tuple[str, str]] = {
    "d" + name: ("d" + letter, "d" + entry)
    for name, (letter, entry) in BASES.items()
    if name != "mask"
}
BASES |= GRADIENT_BASES

#: Matrix letter -> LaTeX of the matrix.
MATRIX_LETTERS: dict[str, str] = {
    "X": "X",
    "W_q": "W_q",
    "W_k": "W_k",
    "W_v": "W_v",
    "W_o": "W_o",
    "Q": "Q",
    "K": "K",
    "V": "V",
    "Omega": r"\Omega",
    "Omega_scaled": r"\tilde{\Omega}",
    "A": "A",
    "C": "C",
    "C_concat": r"\hat{C}",
    "M": "M",
}
#: The gradient of each matrix: ``dOmega`` is dΩ = ∂L/∂Ω (the same shape as Ω).
MATRIX_LETTERS |= {
    "d" + letter: "d" + latex for letter, latex in list(MATRIX_LETTERS.items()) if letter != "M"
}
#: Per-head matrices of the multi-head variant carry the suffix ``_l``: ``Q_l`` is Q^{(l)}.
MATRIX_LETTERS |= {
    f"{letter}_l": f"{latex}^{{(\\ell)}}"
    for letter, latex in list(MATRIX_LETTERS.items())
    if letter.removeprefix("d") in ("Q", "K", "V", "Omega", "Omega_scaled", "A", "C")
}


@functools.cache
def base(name: str) -> IndexedBase:
    """The `IndexedBase` of one letter's entries, e.g. ``base("omega")[m, p]`` is ω_{m,p}."""
    if name not in BASES:
        raise ValueError(f"unknown entry letter {name!r}; expected one of {sorted(BASES)}")
    return IndexedBase(name, real=True)


@functools.cache
def matrix_symbol(letter: str, rows: sp.Expr, cols: sp.Expr) -> MatrixSymbol:
    """The `MatrixSymbol` of a whole matrix (generic derivation), e.g. ``X`` of shape n x d."""
    return MatrixSymbol(letter, rows, cols)


@functools.cache
def entries(name: str, rows: int, cols: int) -> sp.ImmutableMatrix:
    """The explicit rows x cols matrix of a letter's entries, 1-based: entry (m, i) is x[m, i].

    The same call returns the same (immutable) matrix, so every step and every later derivation
    (gradients) shares one set of symbols.
    """
    letter = base(name)
    return sp.ImmutableMatrix(rows, cols, lambda row, col: letter[row + 1, col + 1])


@functools.cache
def head_entries(name: str, head: int, rows: int, cols: int) -> sp.ImmutableMatrix:
    """Entries of one head's matrix (multi-head variant): ω^{(l)}_{m,p} is omega[l, m, p]."""
    letter = base(name)
    return sp.ImmutableMatrix(rows, cols, lambda row, col: letter[head, row + 1, col + 1])


def as_mutable(matrix: sp.MatrixBase) -> Matrix:
    """A mutable copy (for callers that fill a matrix entry by entry)."""
    return Matrix(matrix)
