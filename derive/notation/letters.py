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

import sympy as sp
from sympy import IndexedBase, MatrixSymbol, Symbol

__all__ = [
    "n", "d", "c", "h", "c_h", "s", "d_y", "w", "g", "d_u", "c_r", "B_r", "B_c", "beta", "eta",
    "alpha_l", "alpha_h", "L_0", "eps", "kappa", "m", "p",
    "r", "t", "i", "j", "j2", "f", "ell", "nu", "b", "lam", "CONSTANT_LETTERS",
    "SIZES", "BASES", "READING_ORDER", "reading_key", "MATRIX_LATEX", "ENTRY_LATEX", "base",
    "letter_of", "name_of",
    "matrix_symbol", "entries", "head_entries", "gradient", "is_gradient", "register",
]  # fmt: skip

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
#: A group of keys and values (grouped-query attention).
nu = Symbol("nu", integer=True, positive=True)
#: The constant added to every score of a row (shift invariance of the softmax).
lam = Symbol("lambda", real=True)

#: Entry name -> (matrix letter, LaTeX of one entry's letter, LaTeX of the matrix). The entry
#: names are internal; readers see the LaTeX: x_{m,i}, (W_q)_{i,j}, ω_{m,p}, z_{m,j} (an entry of
#: C), ... The variants of the later chapters (RoPE, QK-norm, latent keys and values, softcapping)
#: follow the book's own letters.
_TABLE = {
    "x": ("X", "x", "X"),
    "y": ("Y", "y", "Y"),
    "wq": ("W_q", "(W_q)", "W_q"),
    "wk": ("W_k", "(W_k)", "W_k"),
    "wv": ("W_v", "(W_v)", "W_v"),
    "wo": ("W_o", "(W_o)", "W_o"),
    "q": ("Q", "q", "Q"),
    "k": ("K", "k", "K"),
    "v": ("V", "v", "V"),
    "omega": ("Omega", r"\omega", r"\Omega"),
    "omegatilde": ("Omega_scaled", r"\tilde{\omega}", r"\tilde{\Omega}"),
    "omegacap": ("Omega_capped", r"\breve{\omega}", r"\breve{\Omega}"),
    "omegabias": ("Omega_biased", r"\dot{\omega}", r"\dot{\Omega}"),
    "mu": ("Mu", r"\mu", r"\mu"),
    "gap": ("Delta", r"\Delta", r"\Delta"),
    "sink": ("Zeta", r"\zeta", r"\zeta"),
    "mask": ("M", "M", "M"),
    "omegahat": ("Omega_masked", r"\hat{\omega}", r"\hat{\Omega}"),
    "a": ("A", "a", "A"),
    "ctx": ("C", "z", "C"),
    "ctxcat": ("C_concat", r"\hat{z}", r"\hat{C}"),
    "wg": ("W_g", "(W_g)", "W_g"),
    "gamma": ("Gamma", r"\gamma", r"\Gamma"),
    "ctxgated": ("C_gated", r"\tilde{z}", r"\tilde{C}"),
    "phi": ("Phi", r"\phi", r"\Phi"),
    "rot": ("R", "R", "R"),
    "qrot": ("Q_rot", r"\mathring{q}", r"\mathring{Q}"),
    "krot": ("K_rot", r"\mathring{k}", r"\mathring{K}"),
    "qnorm": ("Q_norm", r"\check{q}", r"\check{Q}"),
    "knorm": ("K_norm", r"\check{k}", r"\check{K}"),
    "gq": ("G_q", r"(\gamma_q)", r"\gamma_q"),
    "gk": ("G_k", r"(\gamma_k)", r"\gamma_k"),
    "u": ("U", "u", "U"),
    "wdkv": ("W_dkv", "(W_{dkv})", "W_{dkv}"),
    "wuk": ("W_uk", "(W_{uk})", "W_{uk}"),
    "wuv": ("W_uv", "(W_{uv})", "W_{uv}"),
    # FlashAttention's state after block t (derive.proofs.online_softmax): μ^{(t)}_{m,1},
    # ℓ^{(t)}_{m,1}, o^{(t)}_{m,j}, indexed (t, m, j) as a head's entries are
    "mustate": ("Mu_state", r"\mu", r"\mu"),
    "ellstate": ("Ell_state", r"\ell", r"\ell"),
    "ostate": ("O_state", "o", "O"),
}  # fmt: skip
_FORWARD = {name: row[0] for name, row in _TABLE.items()}
#: Letters whose entries are numbers fixed by the sizes (no gradient flows into them).
CONSTANT_LETTERS = frozenset({"M", "Phi", "R", "Delta"})
_CONSTANT_NAMES = frozenset({"mask", "phi", "rot", "gap"})
_ENTRY = {name: row[1] for name, row in _TABLE.items()}
#: LaTeX of each matrix letter.
_MATRIX = {row[0]: row[2] for row in _TABLE.values()}


def _bar(tex: str) -> str:
    """The adjoint's bar: x -> \\bar{x}, (W_q) -> (\\bar{W}_q), W_q -> \\bar{W}_q."""
    if tex.startswith("(") and tex.endswith(")"):
        return "(" + _bar(tex[1:-1]) + ")"
    if "_" in tex and not tex.startswith("\\"):
        head, _, tail = tex.partition("_")
        return rf"\bar{{{head}}}_{tail}"
    return rf"\bar{{{tex}}}"


#: Entry name -> matrix letter, for the forward matrices and their gradients ("dq" -> "dQ").
BASES: dict[str, str] = _FORWARD | {
    "d" + k: "d" + v for k, v in _FORWARD.items() if k not in _CONSTANT_NAMES
}
#: Entry name -> LaTeX of the entry's letter (gradients with a bar: "dq" -> \bar{q}).
ENTRY_LATEX: dict[str, str] = _ENTRY | {
    "d" + k: _bar(v) for k, v in _ENTRY.items() if k not in _CONSTANT_NAMES
}
#: Matrix letter -> LaTeX; gradients ("dQ" -> \bar{Q}); per head ("Q_l" -> Q^{(\ell)}).
MATRIX_LATEX: dict[str, str] = _MATRIX | {
    "d" + k: _bar(v) for k, v in _MATRIX.items() if k not in CONSTANT_LETTERS
}
MATRIX_LATEX |= {f"{k}_l": f"{v}^{{(\\ell)}}" for k, v in list(MATRIX_LATEX.items())}
_LETTERS = {letter: name for name, letter in BASES.items()}


#: The order of entries in a product and of terms in a sum (and of a step's inputs): the book
#: writes x W, q k, a v, \hat{z} W_o; the gradients in the order of their matrix forms.
READING_ORDER = (
    "x", "y", "u", "ctxgated", "ctxcat", "a", "dctxgated", "dctx", "ctx", "dgamma", "domega",
    "domegatilde", "domegacap", "domegabias", "domegahat", "da",
    "dqrot", "dkrot", "dqnorm", "dknorm", "dq", "dk", "dv", "du", "qrot", "qnorm", "q", "gq",
    "wq", "wdkv", "wk", "wv", "wuk", "wuv", "wg", "wo", "krot", "knorm", "k", "gk", "v", "omega",
    "omegatilde", "omegacap", "omegabias", "omegahat", "mask", "rot", "phi", "mu", "gap", "sink",
    "gamma",
    "dx", "dy", "dgq", "dgk", "dmu", "dsink", "dwq", "dwdkv", "dwk", "dwv", "dwuk", "dwuv", "dwg",
    "dwo", "dctxcat",
)  # fmt: skip
_RANK = {name: rank for rank, name in enumerate(READING_ORDER)}


def register(name: str, letter: str, *, entry: str, matrix: str, constant: bool = False) -> None:
    """A new letter (a user's matrix): its entry name (``"g"``), matrix letter (``"G"``), and the
    LaTeX of its entries and of the matrix (``"g"``, ``"G"``); its gradient and per-head forms
    come with it, and it reads after the book's letters. Registering the same letter again with
    the same meaning does nothing; with another, a ValueError."""
    if not (name.isidentifier() and letter.isidentifier()):
        raise ValueError(f"a letter is named like a Python identifier, got {name!r}, {letter!r}")
    if name in BASES or letter in _LETTERS:
        same = BASES.get(name) == letter and ENTRY_LATEX.get(name) == entry
        if same and MATRIX_LATEX.get(letter) == matrix:
            return
        raise ValueError(f"the letter {letter!r} (entries {name!r}) is taken: "
                         f"{BASES.get(name) or _LETTERS.get(letter)}")  # fmt: skip
    if name.startswith("d") and name[1:] in BASES:
        raise ValueError(f"{name!r} reads as the gradient of {BASES[name[1:]]}; choose another")
    BASES[name], _LETTERS[letter] = letter, name
    ENTRY_LATEX[name], MATRIX_LATEX[letter] = entry, matrix
    MATRIX_LATEX[letter + "_l"] = f"{matrix}^{{(\\ell)}}"
    _RANK.setdefault(name, len(_RANK))
    if constant:
        global CONSTANT_LETTERS
        CONSTANT_LETTERS = CONSTANT_LETTERS | {letter}
        return
    BASES["d" + name], _LETTERS["d" + letter] = "d" + letter, "d" + name
    ENTRY_LATEX["d" + name], MATRIX_LATEX["d" + letter] = _bar(entry), _bar(matrix)
    MATRIX_LATEX["d" + letter + "_l"] = f"{_bar(matrix)}^{{(\\ell)}}"
    _RANK.setdefault("d" + name, len(_RANK))


def reading_key(entry: sp.Indexed) -> tuple:
    """Where an entry goes in a product or a sum: its letter's place in `READING_ORDER`, then
    its indices (numbers numerically, so x_{1,2} comes before x_{1,10}; symbols by name)."""
    indices = tuple((0, int(k), "") if k.is_Integer else (1, 0, str(k)) for k in entry.indices)
    return (_RANK.get(entry.base.label.name, len(_RANK)), indices)


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
