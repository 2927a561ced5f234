"""Cosine attention, declared in a file of its own: unit queries and keys, a temperature τ.

Swin Transformer V2 (Liu et al., 2022) and the "QK-normalised" attention it draws on score a
query against a key by the cosine of their angle, divided by a temperature τ:

    q̂_{m,j} = q_{m,j} / ‖q_m‖,   k̂_{p,j} = k_{p,j} / ‖k_p‖,   ω_{m,p} = q̂_m · k̂_p / τ

then scale by √c and take the softmax as self-attention does. The file inserts two steps (the
unit queries and keys, each a row divided by its length: no matrix form, SymPy derives their
gradients entry by entry) and replaces the scores; τ is a parameter (a number, 1/10 here).

What SymPy proves and what it cannot: each normalised row has length 1 (the squares of a row
over the sum of the same squares); that no score exceeds 1/τ is Cauchy–Schwarz, which SymPy's
simplification does not find, so the document shows that claim as stated and marks it
unproved, and `derive latex` says so on stderr (``--strict`` refuses it); its draws at numbers
find no counter-example. From this repository's root:

    derive latex --variant docs/examples/cosine_attention.py:COSINE -o cosine.tex
    derive check --variant docs/examples/cosine_attention.py:COSINE --value tau=0.25
    derive conform docs/examples/cosine_attention.py:layer \\
        --variant docs/examples/cosine_attention.py:COSINE

conform reads τ off the module (``CosineAttention.tau``), over the declaration's default.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import c, j, k, m, n, omega, p, q

#: The temperature: a number the formulas read (not learnt here), default 1/10.
tau = sp.Symbol("tau", positive=True)
#: A second context feature, the one a row's length sums over.
j_ = sp.Symbol("j'", integer=True, positive=True)

Q_HAT = declare.matrix(
    "Q_unit",
    entry="qunit",
    shape=(n, c),
    latex=r"\hat{Q}",
    entry_latex=r"\hat{q}",
    meaning="query divided by its length",
    indices=(m, j),
)
K_HAT = declare.matrix(
    "K_unit",
    entry="kunit",
    shape=(n, c),
    latex=r"\hat{K}",
    entry_latex=r"\hat{k}",
    meaning="key divided by its length",
    indices=(p, j),
)


def unit_rows(rows):
    """Each row divided by its length (the queries' twin, and the keys')."""
    return rows / rows.norm(dim=-1, keepdim=True)


def cosine_scores(q_unit, k_unit, *, tau):
    """Ω = Q̂ K̂ᵀ / τ."""
    return q_unit @ k_unit.transpose(-2, -1) / tau


def cosine_attention(x, w_q, w_k, w_v, *, tau):
    """The twin of the whole: softmax(Q̂ K̂ᵀ / (τ √c)) X W_v."""
    q_, k_, v_ = x @ w_q, x @ w_k, x @ w_v
    scores = unit_rows(q_) @ unit_rows(k_).transpose(-2, -1) / tau / math.sqrt(q_.shape[-1])
    return scores.softmax(-1) @ v_


def _length(matrix, row):
    return sp.sqrt(sp.Sum(matrix[row, j_] ** 2, (j_, 1, c)))


QUERIES = declare.step(
    "unit_queries",
    sp.Eq(Q_HAT[m, j], q[m, j] / _length(q, m)),
    shape=(n, c),
    title="Unit queries",
    twin=unit_rows,
)
KEYS = declare.step(
    "unit_keys",
    sp.Eq(K_HAT[p, j], k[p, j] / _length(k, p)),
    shape=(n, c),
    title="Unit keys",
    twin=unit_rows,
)
SCORES = declare.step(
    "cosine_scores",
    sp.Eq(omega[m, p], sp.Sum(Q_HAT[m, j] * K_HAT[p, j], (j, 1, c)) / tau),
    shape=(n, n),
    title="Cosine scores",
    twin=cosine_scores,
    options={"tau": tau},
)

COSINE = declare.variant(
    "cosine",
    title="Cosine attention",
    text="Cosine attention (Swin Transformer V2) scores each query against each key by the "
    "cosine of their angle over a temperature $\\tau$: whatever the size of the queries and "
    "keys, a score stays within $[-1/\\tau, 1/\\tau]$.",
    inserts=[("V", QUERIES), ("Q_unit", KEYS)],
    replaces=[SCORES],
    parameters={tau: sp.Rational(1, 10)},
    claims=[
        declare.claim(
            sp.Sum(Q_HAT[m, j] ** 2, (j, 1, c)),
            1,
            title="A unit query has length 1",
            text="Each row of $\\hat{Q}$, squared and summed, is 1:",
        ),
        declare.bound(
            omega[m, p],
            1 / tau,
            title="No score exceeds 1/τ",
            text="By Cauchy–Schwarz, a cosine is at most 1, so no score exceeds $1/\\tau$:",
        ),
    ],
    twin=cosine_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform`: τ an attribute."""
    import torch

    class CosineAttention(torch.nn.Module):
        def __init__(self, d_in: int = 4, d_out: int = 3, tau: float = 0.25) -> None:
            super().__init__()
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)
            self.tau = tau

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            q_, k_ = unit_rows(self.W_query(x)), unit_rows(self.W_key(x))
            scores = q_ @ k_.transpose(-2, -1) / self.tau / math.sqrt(q_.shape[-1])
            return scores.softmax(-1) @ self.W_value(x)

    torch.manual_seed(0)
    return CosineAttention()
