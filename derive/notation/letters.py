"""The book's letters, once: sizes, indices, the entries of every matrix, and their LaTeX.

Sizes (positive integer symbols)::

    n  tokens        d  input width      c  width of queries, keys, values and contexts
    h  heads         c_h  per-head width
    s  keys read from another sequence (cross-attention), d_y  its width
    w  the window of sliding-window attention
    g  groups of keys and values (grouped-query attention)
    d_u  width of the shared latent of keys and values (multi-head latent attention)
    c_r  the rotated width of each head (partial RoPE)

Parameters (positive reals): β the base of the rotary angles (RoPE), ε the constant under the
root of an RMS normalisation, κ the cap of logit softcapping; η, α_l, α_h and L_0, Llama 3.1's
RoPE frequencies (its factor, low and high frequency factors, original context length).

The attention of today's open models adds: ALiBi's slopes μ (1 × h) and distances Δ, a sink's
logits ζ (1 × h), and the output gate's W_g, its logits Γ = X W_g (entries γ) and the gated
context \tilde{C} (entries \tilde{z}).

Indices (1-based, as in the book)::

    m, p, r, t  tokens (m a query; p, t keys; r the summation index of the softmax)
    i           input features (columns of X, rows of W_q, W_k, W_v)
    j, j'       context features (columns of W_q, W_k, W_v, Q, K, V, C)
    f           latent features (columns of U, rows of W_uk, W_uv)
    l           a head (printed ℓ),  ν  a group of keys and values,  b  a sequence in a batch

One letter, one meaning: the entries of C are z_{m,j} (the book calls the context vector of a
token z), so that c is only ever the width; a gradient ∂L/∂Y is written with a bar, Ȳ (its
entries ȳ), so that d is only ever the input width; the constant added to a row of scores is
λ, so that t is only ever a token.

Matrices are `MatrixSymbol`s (symbolic sizes); their entries are `Indexed` objects whose indices
are 1-based integers or index symbols, so ``base("x")[m, i]`` is x_{m,i} with no shift anywhere.
A head's entries carry the head first: ``base("omega")[l, m, p]`` is ω^{(ℓ)}_{m,p}.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy as sp
from sympy import IndexedBase, MatrixSymbol, Symbol

__all__ = [
    "n",
    "d",
    "c",
    "h",
    "c_h",
    "s",
    "d_y",
    "w",
    "g",
    "d_u",
    "c_r",
    "B_r",
    "B_c",
    "beta",
    "eta",
    "alpha_l",
    "alpha_h",
    "L_0",
    "eps",
    "kappa",
    "m",
    "p",
    "r",
    "t",
    "i",
    "j",
    "j2",
    "f",
    "ell",
    "ell2",
    "nu",
    "b",
    "lam",
    "CONSTANT_LETTERS",
    "SIZES",
    "BASES",
    "reading_order",
    "reading_key",
    "MATRIX_LATEX",
    "ENTRY_LATEX",
    "base",
    "letter_of",
    "name_of",
    "Letter",
    "Name",
    "LETTERS",
    "register_letter",
    "role",
    "matrix_symbol",
    "entries",
    "head_entries",
    "gradient",
    "is_gradient",
]

# Sizes.
n, d, c, h = sp.symbols("n d c h", integer=True, positive=True)
c_h = Symbol("c_h", integer=True, positive=True)
#: The variants' sizes: s keys (and d_y their width) read from another sequence Y
#: (cross-attention), the window w of sliding-window attention.
s, w = sp.symbols("s w", integer=True, positive=True)
d_y = Symbol("d_y", integer=True, positive=True)
#: Groups of keys and values (grouped-query attention), the latent width (latent attention).
g = Symbol("g", integer=True, positive=True)
d_u = Symbol("d_u", integer=True, positive=True)
#: The rotated width of each head (partial RoPE: its first c_r features).
c_r = Symbol("c_r", integer=True, positive=True)
#: FlashAttention's blocks: B_r queries, B_c keys (FlashAttention's own names).
B_r = Symbol("B_r", integer=True, positive=True)
B_c = Symbol("B_c", integer=True, positive=True)
SIZES = (n, d, c, h, c_h, s, d_y, w, g, d_u, c_r, B_r, B_c)
#: The base of the rotary angles θ_j = β^{−2(j−1)/c}, and the ε of an RMS normalisation.
beta = Symbol("beta", positive=True)
#: Llama 3.1's RoPE frequencies: the factor of the slow ones, the low and high frequency
#: factors, and the context length the model was first trained at.
eta = Symbol("eta", positive=True)
alpha_l = Symbol("alpha_l", positive=True)
alpha_h = Symbol("alpha_h", positive=True)
L_0 = Symbol("L_0", positive=True)
eps = Symbol("epsilon", positive=True)
#: The cap of logit softcapping (Gemma 2): each scaled score becomes κ tanh(ω̃/κ).
kappa = Symbol("kappa", positive=True)

# Indices, 1-based.
m, p, r, t, i, j, b, f = sp.symbols("m p r t i j b f", integer=True, positive=True)
#: A second context feature (the variance of a score sums over pairs j, j').
j2 = Symbol("j'", integer=True, positive=True)
#: The head index (the letter l, named `ell` in Python so that it never reads as 1).
ell = Symbol("l", integer=True, positive=True)
#: Another head, the one a step that reads every head sums over (talking heads: Σ_{ℓ'} P_{ℓ',ℓ}
#: ω̃^{(ℓ')}).
ell2 = Symbol("l'", integer=True, positive=True)
#: A group of keys and values (grouped-query attention).
nu = Symbol("nu", integer=True, positive=True)
#: The constant added to every score of a row (shift invariance of the softmax).
lam = Symbol("lambda", real=True)


@dataclass(frozen=True)
class Letter:
    r"""One matrix of the notation, declared once: how code, documents, the plain printer and the
    glossary name it and its entries. The built-in entries of the registry declare theirs with
    this record, as a user's file does (`derive.declare.matrix` makes one); `register_letter`
    puts it into the tables every printer reads.

    Args:
        matrix: the matrix's letter in code (``"Omega_capped"``; a Python identifier).
        entry: the name of its entries (``"omegacap"``: ``base("omegacap")[m, p]``).
        latex: LaTeX of the matrix (``\breve{\Omega}``; default: `matrix`).
        entry_latex: LaTeX of one entry's letter (``\breve{\omega}``; default: `entry`).
        meaning: what one entry is, for the glossary (LaTeX allowed: ``$\kappa$``).
        indices: the indices the book gives an entry (``(m, p)``; default: read off `shape`).
        shape: its ``(rows, columns)``, where the letter states it (a user's matrix; the
            built-ins' shapes come from their steps).
        constant: its entries are numbers fixed by the sizes (a mask, RoPE's angles): no
            gradient flows into it. False by default.
        after: the entry name it reads after in a product or a sum (``"omegatilde"``: ω̃ then
            ω̆), the book's order (x W, q k, a v, ẑ W_o); None: after every letter before it.
        gradient_after: the same for its gradient's entries (``"domegatilde"``).
        role: what the matrix is, for a document's table of shapes (default: none).
        plain: the entry's letter in plain text (default: read off `entry_latex`, ``ω̆``).
    """

    matrix: str
    entry: str
    latex: str = ""
    entry_latex: str = ""
    meaning: str = ""
    indices: tuple = ()
    shape: tuple = ()
    constant: bool = False
    after: str | None = None
    gradient_after: str | None = None
    role: str = ""
    plain: str = ""

    @property
    def matrix_latex(self) -> str:
        return self.latex or self.matrix

    @property
    def letter_latex(self) -> str:
        return self.entry_latex or self.entry


@dataclass(frozen=True)
class Name:
    """A symbol of the notation that is not a matrix, and what it means, for the glossary: a
    size the book has (n, d, c), an index (m, p, j), or another symbol (λ, δ_{p,t}, J). The
    entries of the registry that use it declare it (`derive.graph.Variant.notation`); the sizes
    and parameters a variant adds say theirs in their own records (`Size`, `Parameter`).

    Args:
        symbol: the SymPy symbol, or the LaTeX of a symbol that is none (``r"\\delta_{p,t}"``).
        meaning: what it is (LaTeX allowed).
        kind: ``"size"``, ``"index"`` or ``"other"`` (the default).

    Raises:
        ValueError: when `kind` is none of those three.
    """

    symbol: sp.Symbol | str
    meaning: str
    kind: str = "other"

    def __post_init__(self) -> None:
        if self.kind not in ("size", "index", "other"):
            raise ValueError(f"a name's kind is size, index or other, got {self.kind!r}")


#: Entry name -> the `Letter` that declared it (the forward matrices; gradients are derived).
LETTERS: dict[str, Letter] = {}
#: Entry name -> matrix letter, for the forward matrices and their gradients ("dq" -> "dQ").
BASES: dict[str, str] = {}
#: Entry name -> LaTeX of the entry's letter (gradients with a bar: "dq" -> \bar{q}).
ENTRY_LATEX: dict[str, str] = {}
#: Matrix letter -> LaTeX; gradients ("dQ" -> \bar{Q}); per head ("Q_l" -> Q^{(\ell)}).
MATRIX_LATEX: dict[str, str] = {}
#: Letters whose entries are numbers fixed by the sizes (no gradient flows into them).
CONSTANT_LETTERS: frozenset[str] = frozenset()
_LETTERS: dict[str, str] = {}
#: Entry name -> (the entry it reads after, the order it was registered in), for `reading_key`.
_AFTER: dict[str, tuple[str | None, int]] = {}


def _subscriptable(tex: str) -> str:
    """An entry's letter that takes its indices as a subscript: one with a subscript of its own
    (a user's ``b_f``) in parentheses, as the book writes (W_q)_{i,j}, never b_f_{1,1}."""
    depth = 0
    for character in tex:
        depth += {"{": 1, "}": -1}.get(character, 0)
        if character == "_" and depth == 0 and not (tex.startswith("(") and tex.endswith(")")):
            return f"({tex})"
    return tex


def _bar(tex: str) -> str:
    """The adjoint's bar: x -> \\bar{x}, (W_q) -> (\\bar{W}_q), W_q -> \\bar{W}_q."""
    if tex.startswith("(") and tex.endswith(")"):
        return "(" + _bar(tex[1:-1]) + ")"
    if "_" in tex and not tex.startswith("\\"):
        head, _, tail = tex.partition("_")
        return rf"\bar{{{head}}}_{tail}"
    if "^" in tex and not tex.startswith("\\"):  # P^{L} -> \bar{P}^{L}
        head, _, tail = tex.partition("^")
        return rf"\bar{{{head}}}^{tail}"
    return rf"\bar{{{tex}}}"


def register_letter(letter: Letter) -> Letter:
    """Put a letter into the tables every printer reads: its entries' name, its matrix letter,
    their LaTeX, and, unless it is constant, its gradient's (``dq`` -> ``dQ``, \\bar{q}); its
    per-head form comes with it (``Q_l`` -> Q^{(\\ell)}). Registering the same letter again
    with the same meaning does nothing; with another, a ValueError (so is a name that reads as
    another letter's gradient). Returns `letter`."""
    name, matrix = letter.entry, letter.matrix
    if not (name.isidentifier() and matrix.isidentifier()):
        raise ValueError(f"a letter is named like a Python identifier, got {name!r}, {matrix!r}")
    if matrix.endswith("_l") or name.endswith("_l"):
        raise ValueError(
            f"a name ending in _l is head ℓ's block of another matrix (Q_l is head ℓ's Q), "
            f"got {matrix if matrix.endswith('_l') else name!r}: name it otherwise (T_ell, TL)"
        )
    if name in BASES or matrix in _LETTERS:
        if LETTERS.get(name) == letter:
            return letter
        same = BASES.get(name) == matrix and ENTRY_LATEX.get(name) == _subscriptable(
            letter.letter_latex
        )
        if same and MATRIX_LATEX.get(matrix) == letter.matrix_latex and name in LETTERS:
            LETTERS[name] = letter  # the same letter, said again with more words
            return letter
        raise ValueError(
            f"the letter {matrix!r} (entries {name!r}) is taken: "
            f"{BASES.get(name) or _LETTERS.get(matrix)}"
        )
    if name.startswith("d") and name[1:] in BASES:
        raise ValueError(f"{name!r} reads as the gradient of {BASES[name[1:]]}; choose another")
    LETTERS[name] = letter
    BASES[name], _LETTERS[matrix] = matrix, name
    ENTRY_LATEX[name], MATRIX_LATEX[matrix] = (
        _subscriptable(letter.letter_latex),
        letter.matrix_latex,
    )
    MATRIX_LATEX[matrix + "_l"] = f"{letter.matrix_latex}^{{(\\ell)}}"
    _AFTER[name] = (letter.after, len(_AFTER))
    if letter.constant:
        global CONSTANT_LETTERS
        CONSTANT_LETTERS = CONSTANT_LETTERS | {matrix}
    else:
        gradient = "d" + name
        BASES[gradient], _LETTERS["d" + matrix] = "d" + matrix, gradient
        ENTRY_LATEX[gradient] = _subscriptable(_bar(letter.letter_latex))
        MATRIX_LATEX["d" + matrix] = _bar(letter.matrix_latex)
        MATRIX_LATEX["d" + matrix + "_l"] = f"{_bar(letter.matrix_latex)}^{{(\\ell)}}"
        _AFTER[gradient] = (letter.gradient_after, len(_AFTER))
    _order.cache_clear()
    return letter


@functools.cache
def _order() -> dict[str, int]:
    """Each entry name's place in the reading order: the letters that read after none in the
    order they were registered, each followed by those that read after it (the latest
    registered first among several after one letter, so that each goes right after its own)."""
    followers: dict[str | None, list[str]] = {}
    for name, (after, _) in sorted(_AFTER.items(), key=lambda item: item[1][1]):
        anchor = after if after in _AFTER else None
        followers.setdefault(anchor, []).append(name)
    placed: list[str] = []

    def place(name: str) -> None:
        placed.append(name)
        for follower in reversed(followers.get(name, [])):
            place(follower)

    for name in followers.get(None, []):
        place(name)
    return {name: rank for rank, name in enumerate(placed)}


def role(letter: str) -> str:
    """What a matrix is, as its `Letter` says (``"queries, one row per token"``), or ""."""
    found = LETTERS.get(_LETTERS.get(letter.removesuffix("_l"), ""))
    return found.role if found is not None else ""


def reading_order() -> tuple[str, ...]:
    """Every entry name in the reading order (see `Letter.after`): the order of entries in a
    product and of terms in a sum (and of a step's inputs)."""
    return tuple(_order())


def reading_key(entry: sp.Indexed) -> tuple:
    """Where an entry goes in a product or a sum: its letter's place in `reading_order`, then
    its indices (numbers numerically, so x_{1,2} comes before x_{1,10}; symbols by name)."""
    indices = tuple((0, int(k), "") if k.is_Integer else (1, 0, str(k)) for k in entry.indices)
    rank = _order()
    return (rank.get(entry.base.label.name, len(rank)), indices)


def is_gradient(letter: str) -> bool:
    """True for a gradient's letter (``dQ``, ``dW_q``, ``dQ_l``)."""
    return letter.startswith("d") and letter[1:].removesuffix("_l") in _LETTERS


def gradient(letter: str) -> str:
    """The letter of a matrix's gradient: ``Q`` -> ``dQ``, ``Q_l`` -> ``dQ_l``."""
    return "d" + letter


@functools.cache
def base(name: str) -> IndexedBase:
    """The `IndexedBase` of one letter's entries, e.g. ``base("omega")[m, p]`` is ω_{m,p}."""
    if name not in BASES:
        raise ValueError(f"unknown entry letter {name!r}; expected one of {sorted(BASES)}")
    return IndexedBase(name, real=True)


def letter_of(entry: sp.Indexed) -> str:
    """The matrix letter of an entry: x_{m,i} -> ``X``; a head's ω^{(ℓ)}_{m,p} -> ``Omega_l``."""
    letter = BASES[entry.base.label.name]
    return letter + "_l" if len(entry.indices) == 3 else letter


def name_of(letter: str) -> str:
    """The entry name of a matrix letter: ``Omega`` -> ``omega`` (``Omega_l`` too)."""
    return _LETTERS[letter.removesuffix("_l")]


@functools.cache
def matrix_symbol(letter: str, rows: sp.Expr, cols: sp.Expr) -> MatrixSymbol:
    """The `MatrixSymbol` of a whole matrix, e.g. ``X`` of shape n × d."""
    return MatrixSymbol(letter, rows, cols)


@functools.cache
def entries(name: str, rows: int, cols: int) -> sp.ImmutableMatrix:
    """The explicit rows × cols matrix of a letter's entries, 1-based: entry (m, i) is x[m, i].

    The same call returns the same (immutable) matrix, so that every step and every later
    derivation (the gradients) shares one set of symbols.
    """
    letter = base(name)
    return sp.ImmutableMatrix(rows, cols, lambda row, col: letter[row + 1, col + 1])


@functools.cache
def head_entries(name: str, head: int, rows: int, cols: int) -> sp.ImmutableMatrix:
    """The entries of one head's matrix: ω^{(ℓ)}_{m,p} is ``omega[l, m, p]``."""
    letter = base(name)
    return sp.ImmutableMatrix(rows, cols, lambda row, col: letter[head, row + 1, col + 1])
