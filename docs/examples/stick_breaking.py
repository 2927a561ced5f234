r"""Stick-breaking attention, declared in a file of its own: no softmax, each key takes a share
of what the keys after it have left.

Tan, Shen, Yang, Courville and Panda (2025, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", ICLR) read each scaled score as a break point
β_{m,p} = σ(ω̃_{m,p}) and let query m break a stick of length 1 from its nearest key backwards:
key p takes the share β_{m,p} of what the keys between it and m have left,

    β_{m,p} = σ(ω̃_{m,p})
    a_{m,p} = β_{m,p} ∏_{t=p+1}^{m−1} (1 − β_{m,t})   for p < m, 0 otherwise

so a row's weights sum to 1 − ∏_{t<m} (1 − β_{m,t}), at most 1, and the nearest keys come
first: a recency bias with no position embedding. A token attends to the keys before it, not
to itself (the paper's default); the first row reads nothing. Two things the declaring
language is asked for here: a product whose range is set by the entry's own indices
(t = p+1 … m−1) and a piecewise rule (p < m); derive differentiates the product factor by
factor, and proves that row m reads only the rows before it. From this repository's root:

    derive latex --variant docs/examples/stick_breaking.py:STICK_BREAKING -o sb.tex
    derive check --variant docs/examples/stick_breaking.py:STICK_BREAKING
    derive conform docs/examples/stick_breaking.py:layer \
        --variant docs/examples/stick_breaking.py:STICK_BREAKING

The twins compute the product in log space, as the paper does for its stability: Σ_{t>p}
log(1 − β_{m,t}) over the keys before m, a cumulative sum along the row.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, m, n, omega_tilde, p, sigmoid, t


def stick_weights(omega_scaled):
    """The twin of the weights, in log space from the scores as the paper computes them:
    log β = log σ(ω̃) and log(1 − β) = log σ(−ω̃), exact where σ rounds to 1, and the
    product's logarithm a suffix sum along the row, Σ_{t>p} over the keys t < m."""
    n = omega_scaled.shape[-1]
    before = omega_scaled.new_ones(n, n, dtype=bool).tril(-1)  # the keys p < m
    logs = (-omega_scaled).sigmoid().log() * before  # log(1 − β), 0 from the diagonal on
    after = logs.sum(-1, keepdim=True) - logs.cumsum(-1)
    return (omega_scaled.sigmoid().log() + after).exp() * before


def stick_breaking_attention(x, w_q, w_k, w_v):
    """The twin of the whole: C = A V with A the stick-breaking weights of XW_q (XW_k)ᵀ/√c."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return stick_weights(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v


def _beta(key):
    """β_{m,key} = σ(ω̃_{m,key}): the share of the stick key would take."""
    return sigmoid(omega_tilde[m, key])


WEIGHTS = declare.step(
    "stick_weights",
    sp.Eq(
        a[m, p],
        sp.Piecewise((_beta(p) * sp.Product(1 - _beta(t), (t, p + 1, m - 1)), p < m), (0, True)),
    ),
    shape=(n, n),
    title="Attention weights (stick-breaking)",
    twin=stick_weights,
    text="Key p takes the share $\\sigma(\\tilde{\\omega}_{m,p})$ of what the keys between "
    "it and the query have left:",
)

STICK_BREAKING = declare.variant(
    "stick-breaking",
    title="Stick-breaking attention",
    text="Stick-breaking attention (Tan et al., 2025) replaces the softmax by a stick broken "
    "from the query's nearest key backwards: no normalisation, no position embedding, a "
    "recency bias of its own.",
    replaces=[WEIGHTS],
    claims=[
        declare.ReadsRows(
            heading="Row m reads only the rows before it",
            text="The weights put into the context, and the sums stopped where they vanish: "
            "row $m$ reads the values of the tokens before it only, so a decoding step needs "
            "the cached rows and no mask.",
            letter="C",
        )
    ],
    twin=stick_breaking_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform`: the book's
    projections by their names."""
    import torch

    class StickBreakingAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d_in, d_out = 4, 3
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            return stick_weights(scores) @ v

    torch.manual_seed(0)
    return StickBreakingAttention()
