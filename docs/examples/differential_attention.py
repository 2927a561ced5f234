"""Differential attention, declared in a file of its own: two softmaxes, one subtracted.

Ye et al. (Microsoft, 2024, "Differential Transformer") compute two maps of attention weights
from two pairs of query and key projections and take their difference, scaled by a learnt λ:

    A₁ = softmax(Q₁ K₁ᵀ / √c),  A₂ = softmax(Q₂ K₂ᵀ / √c),  C = (A₁ − λ A₂) V

so that the weight both maps give to noise cancels. This is one head of it, λ one learnt
number (the paper parametrises λ by four vectors and normalises each head's output after; both
left out here). The first map is self-attention's own (Q₁ = Q, A₁ = A); the file declares the
second pair of projections (W_q2, W_k2), the second map, the difference and the context that
reads it, λ a 1 × 1 input. SymPy proves that each row of the difference sums to 1 − λ. From
this repository's root:

    derive latex --variant docs/examples/differential_attention.py:DIFFERENTIAL -o diff.tex
    derive check --variant docs/examples/differential_attention.py:DIFFERENTIAL
    derive conform docs/examples/differential_attention.py:layer \\
        --variant docs/examples/differential_attention.py:DIFFERENTIAL

conform finds W_q2, W_k2 (nn.Linear: their weights, transposed) and λ (``lam``) on the module
by their names.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, c, d, i, j, m, n, p, r, v, x, z

W_q2 = declare.matrix(
    "W_q2",
    entry="wq2",
    shape=(d, c),
    latex="W_{q2}",
    entry_latex="(W_{q2})",
    meaning="query weight of the second map",
)
W_k2 = declare.matrix(
    "W_k2",
    entry="wk2",
    shape=(d, c),
    latex="W_{k2}",
    entry_latex="(W_{k2})",
    meaning="key weight of the second map",
)
Q_2 = declare.matrix(
    "Q_2",
    entry="q2",
    shape=(n, c),
    latex="Q_2",
    entry_latex="q^{(2)}",
    meaning="query of the second map",
    indices=(m, j),
)
K_2 = declare.matrix(
    "K_2",
    entry="k2",
    shape=(n, c),
    latex="K_2",
    entry_latex="k^{(2)}",
    meaning="key of the second map",
    indices=(p, j),
)
A_2 = declare.matrix(
    "A_2",
    entry="a2",
    shape=(n, n),
    latex="A_2",
    entry_latex="a^{(2)}",
    meaning="weight of the second map",
)
A_diff = declare.matrix(
    "A_diff",
    entry="adiff",
    shape=(n, n),
    latex=r"\Delta A",
    entry_latex=r"\Delta a",
    meaning="the difference of the two maps",
)
LAMBDA = declare.matrix(
    "Lam",
    entry="lam",
    shape=(1, 1),
    latex=r"\lambda",
    entry_latex=r"\lambda",
    meaning="the learnt weight of the second map",
)


def projection(x, w):
    """Q₂ = X W_q2 (and K₂): the twin of both projections."""
    return x @ w


def second_weights(q_2, k_2):
    """A₂ = softmax(Q₂ K₂ᵀ / √c), row by row."""
    return (q_2 @ k_2.transpose(-2, -1) / math.sqrt(q_2.shape[-1])).softmax(-1)


def difference(a, a_2, lam):
    """A₁ − λ A₂ (λ arrives with shape (1,), a matrix of one row: it broadcasts)."""
    return a - lam * a_2


def differential_context(a_diff, v):
    """C = (A₁ − λ A₂) V: the parameters named after the letters, so called in this order."""
    return a_diff @ v


def differential_attention(x, w_q, w_k, w_v, w_q2, w_k2, lam):
    """The twin of the whole, in plain torch."""
    scale = math.sqrt(w_q.shape[-1])
    first = ((x @ w_q) @ (x @ w_k).transpose(-2, -1) / scale).softmax(-1)
    second = ((x @ w_q2) @ (x @ w_k2).transpose(-2, -1) / scale).softmax(-1)
    return (first - lam * second) @ (x @ w_v)


def _score(row, key):
    return sp.Sum(Q_2[row, j] * K_2[key, j], (j, 1, c)) / sp.sqrt(c)


STEPS = [
    (
        "V",
        declare.step(
            "second_queries",
            sp.Eq(Q_2[m, j], sp.Sum(x[m, i] * W_q2[i, j], (i, 1, d))),
            shape=(n, c),
            title="The second queries",
            twin=projection,
        ),
    ),
    (
        "Q_2",
        declare.step(
            "second_keys",
            sp.Eq(K_2[p, j], sp.Sum(x[p, i] * W_k2[i, j], (i, 1, d))),
            shape=(n, c),
            title="The second keys",
            twin=projection,
        ),
    ),
    (
        "A",
        declare.step(
            "second_weights",
            sp.Eq(A_2[m, p], sp.exp(_score(m, p)) / sp.Sum(sp.exp(_score(m, r)), (r, 1, n))),
            shape=(n, n),
            title="The second map of weights",
            twin=second_weights,
        ),
    ),
    (
        "A_2",
        declare.step(
            "difference",
            sp.Eq(A_diff[m, p], a[m, p] - LAMBDA[1, 1] * A_2[m, p]),
            shape=(n, n),
            title="The difference of the two maps",
            twin=difference,
            text="The second map, weighted by $\\lambda$, is taken from the first:",
        ),
    ),
]
CONTEXT = declare.step(
    "differential_context",
    sp.Eq(z[m, j], sp.Sum(A_diff[m, p] * v[p, j], (p, 1, n))),
    shape=(n, c),
    title="Context vectors, of the difference",
    twin=differential_context,
)

DIFFERENTIAL = declare.variant(
    "differential",
    title="Differential attention",
    text="Differential attention (Ye et al., 2024) subtracts a second map of attention weights, "
    "scaled by a learnt $\\lambda$, from the first: what both maps attend to (noise, in the "
    "paper's words) cancels, and a row's weights may be negative.",
    inserts=STEPS,
    replaces=[CONTEXT],
    claims=[
        declare.claim(
            sp.Sum(A_diff[m, p], (p, 1, n)),
            1 - LAMBDA[1, 1],
            title="Each row of the difference sums to 1 − λ",
            text="Both maps' rows sum to 1, so the difference's sum to $1 - \\lambda$:",
        ),
    ],
    arguments=("X", "W_q", "W_k", "W_v", "W_q2", "W_k2", "Lam"),
    twin=differential_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform`."""
    import torch

    class DifferentialAttention(torch.nn.Module):
        def __init__(self, d_in: int = 4, d_out: int = 3) -> None:
            super().__init__()
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_q2 = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_k2 = torch.nn.Linear(d_in, d_out, bias=False)
            self.lam = torch.nn.Parameter(torch.tensor(0.3))

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            scale = math.sqrt(self.W_query.out_features)
            first = (self.W_query(x) @ self.W_key(x).transpose(-2, -1) / scale).softmax(-1)
            second = (self.W_q2(x) @ self.W_k2(x).transpose(-2, -1) / scale).softmax(-1)
            return (first - self.lam * second) @ self.W_value(x)

    torch.manual_seed(0)
    return DifferentialAttention()
