r"""The Forgetting Transformer, declared in a file of its own: a forget gate per token, its
logarithms summed into a decay that every score is biased by.

Lin, Nikishin, He and Courville (2025, "Forgetting Transformer: Softmax Attention with a Forget
Gate") give each token m a gate f_m = σ(x_m · w_f + b_f) between 0 and 1, learnt, and let a
query m forget the keys before it by the product of the gates in between:

    f_m     = σ(Σ_i x_{m,i} (w_f)_{i,1} + b_f)
    D_{m,p} = Σ_{ℓ=p+1}^{m} log f_ℓ                     (0 where p = m)
    a_{m,p} = exp(ω̂_{m,p} + D_{m,p}) / Σ_{r=1}^{n} exp(ω̂_{m,r} + D_{m,r})

where ω̂ holds the scaled scores with −∞ above the diagonal, as in the book's causal attention
(chapter 3.5): it is that attention with a data-dependent bias. exp(D_{m,p}) is the product of
the gates f_ℓ for ℓ = p+1 … m, so a gate near 0 cuts off everything before its token. The
variant is declared on causal attention (``base="causal"``), so that its mask is the book's
and `derive conform` reads a causal layer as this variant. Two things the declaring language
is asked for here: a step whose output is a column (F, n × 1, entries f[m, 1]) and a sum whose
range is another index's (ℓ = p+1 … m, a cumulative sum). derive proves that the rows sum to
1 and that row m reads only the rows p ≤ m, and checks the gates' gradients by numbers like every
other. From this repository's root:

    derive latex --variant docs/examples/forgetting_transformer.py:FOX -o fox.tex
    derive check --variant docs/examples/forgetting_transformer.py:FOX
    derive conform docs/examples/forgetting_transformer.py:layer \
        --variant docs/examples/forgetting_transformer.py:FOX --param B_f=W_f.bias

The layer holds the gate as one nn.Linear with a bias: conform finds w_f by its name (W_f) and
is told where b_f is (``--param``).

Above the diagonal the mask's −∞ decides every weight, whatever D holds there; derive's
numbers take an empty sum (ℓ = p+1 … m with p > m) as 0, not as SymPy's sum of a negative
count, and the decay's twin keeps the lower triangle only (`.tril()`) to match.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, d, i, m, n, omega_hat, p, r, sigmoid, x

#: ℓ, the token a gate belongs to in the decay's sum (the book's ℓ counts heads elsewhere).
ell = sp.Symbol("ell", integer=True, positive=True)

#: The gate's weights (a column of d) and its bias (one number): inputs of the graph, so that
#: their gradients are derived and checked like W_q's.
W_F = declare.matrix(
    "W_f", entry="wf", shape=(d, 1), latex="w_f", entry_latex="w_f", meaning="forget gate weights"
)
B_F = declare.matrix(
    "B_f", entry="bf", shape=(1, 1), latex="b_f", entry_latex="b_f", meaning="forget gate bias"
)
#: The gates (one per token, a column) and the decay bias they make (n × n).
F = declare.matrix(
    "F", entry="fg", shape=(n, 1), latex="f", entry_latex="f", meaning="forget gates"
)
D = declare.matrix("D", entry="dec", shape=(n, n), latex="D", entry_latex="D", meaning="decay bias")


def forget_gates(x, w_f, b_f):
    """The twin of the gates: σ(X w_f + b_f), one per token (n × 1)."""
    return (x @ w_f + b_f).sigmoid()


def decay(f):
    """The twin of the decay: D_{m,p} = S_m − S_p with S the cumulative sum of log f, the lower
    triangle only (the entries no softmax reads are 0)."""
    s = f.log().squeeze(-1).cumsum(-1)
    return (s.unsqueeze(-1) - s.unsqueeze(-2)).tril()


def fox_weights(omega_masked, d):
    """The twin of the weights: the softmax of Ω̂ + D, row by row (Ω̂ holds −∞ above the
    diagonal: causal attention's mask)."""
    return (omega_masked + d).softmax(-1)


def fox_attention(x, w_q, w_k, w_v, w_f, b_f, *, causal=True):
    """The twin of the whole: softmax(XW_q (XW_k)ᵀ/√c + D, causal) X W_v. `causal` is what
    `derive check` hands the twins of a variant built on causal attention; the forgetting
    attention has no other form."""
    if not causal:
        raise ValueError("fox_attention: causal must be True, got False")
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = scores.new_ones(scores.shape[-2:], dtype=bool).triu(1)
    masked = scores.masked_fill(future, float("-inf"))
    return fox_weights(masked, decay(forget_gates(x, w_f, b_f))) @ v


GATES = declare.step(
    "forget_gates",
    sp.Eq(F[m, 1], sigmoid(sp.Sum(x[m, i] * W_F[i, 1], (i, 1, d)) + B_F[1, 1])),
    shape=(n, 1),
    title="Forget gates",
    twin=forget_gates,
    text="Each token's gate, a number between 0 and 1 learnt from the token itself:",
)

DECAY = declare.step(
    "decay",
    sp.Eq(D[m, p], sp.Sum(sp.log(F[ell, 1]), (ell, p + 1, m))),
    shape=(n, n),
    title="Decay bias",
    twin=decay,
    text="The logarithms of the gates between a key and its query, summed: "
    "$e^{D_{m,p}}$ is the product of those gates.",
)


def _score(row, key):
    return omega_hat[row, key] + D[row, key]


WEIGHTS = declare.step(
    "fox_weights",
    sp.Eq(a[m, p], sp.exp(_score(m, p)) / sp.Sum(sp.exp(_score(m, r)), (r, 1, n))),
    shape=(n, n),
    title="Attention weights (forgetting)",
    twin=fox_weights,
    text="The softmax of the masked scores, each biased by its decay:",
)

FOX = declare.variant(
    "fox",
    title="Forgetting Transformer attention",
    text="The Forgetting Transformer (Lin et al., 2025) biases causal attention's scores by "
    "the logarithms of learnt forget gates: a query attends less to the keys behind a closed "
    "gate.",
    base="causal",
    inserts=[("V", GATES), ("F", DECAY)],
    replaces=[WEIGHTS],
    claims=[
        declare.claim(
            sp.Sum(a[m, p], (p, 1, n)),
            1,
            title="The rows still sum to 1",
            text="Whatever the gates, each row's denominator is the sum of its numerators:",
        ),
        declare.ReadsRows(
            heading="Row m reads only the rows up to it",
            text="The weights put into the context (the mask's $-\\infty$ decided), and the "
            "sums stopped where they vanish: row $m$ reads the gates and the values of the "
            "tokens up to $m$ only, so a decoding step needs the cached rows alone.",
            letter="C",
        ),
    ],
    arguments=("X", "W_q", "W_k", "W_v", "W_f", "B_f"),
    twin=fox_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform`: the book's
    projections by their names, the gate an nn.Linear of one output (its weight is w_fᵀ, its
    bias b_f)."""
    import torch

    class ForgettingAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d_in, d_out = 4, 3
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_f = torch.nn.Linear(d_in, 1)

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            future = scores.new_ones(scores.shape[-2:], dtype=bool).triu(1)
            gates = self.W_f(x).sigmoid()
            return fox_weights(scores.masked_fill(future, float("-inf")), decay(gates)) @ v

    torch.manual_seed(0)
    return ForgettingAttention()
