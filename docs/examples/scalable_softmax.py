"""Scalable-Softmax attention, declared in a file of its own: a learnable scale s per layer.

Nakanishi (2025, "Scalable-Softmax Is Superior for Attention") observes that the softmax of a
row of n scores flattens as n grows, and multiplies each score by s log n before it, s learnt:

    a_{m,p} = exp(s log n · ω̃_{m,p}) / Σ_r exp(s log n · ω̃_{m,r})

(``n^{s ω̃}``, normalised). The scale s is a 1 × 1 matrix of the graph's inputs, so that its
gradient is derived and checked like a weight's. SymPy proves that the rows still sum to 1 (the
denominator is the numerator's sum, whatever s) and that at s = 1/log n it is the softmax of
self-attention, step for step. From this repository's root:

    derive latex --variant docs/examples/scalable_softmax.py:SSMAX -o ssmax.tex
    derive check --variant docs/examples/scalable_softmax.py:SSMAX
    derive conform docs/examples/scalable_softmax.py:layer \\
        --variant docs/examples/scalable_softmax.py:SSMAX

The last finds s on the module by its name (``ScalableSoftmaxAttention.s``): no adapter to write.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, m, n, omega_tilde, p, r

#: The learnable scale, one number: a 1 × 1 input of the graph (its entry s_{1,1}).
S = declare.matrix("S", entry="s", shape=(1, 1), meaning="the learnable scale of Scalable-Softmax")


def ssmax_weights(omega_scaled, s):
    """The twin of the step, in plain torch: softmax(s log n Ω̃) row by row (s arrives with
    shape (1,), a matrix of one row: it broadcasts)."""
    return (s * math.log(omega_scaled.shape[-1]) * omega_scaled).softmax(-1)


def ssmax_attention(x, w_q, w_k, w_v, s):
    """The twin of the whole: C = softmax(s log n X W_q (X W_k)ᵀ / √c) X W_v."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return (s * math.log(x.shape[-2]) * scores).softmax(-1) @ v


def _exp(i):
    return sp.exp(S[1, 1] * sp.log(n) * omega_tilde[m, i])


WEIGHTS = declare.step(
    "ssmax_weights",
    sp.Eq(a[m, p], _exp(p) / sp.Sum(_exp(r), (r, 1, n))),
    shape=(n, n),
    title="Attention weights (Scalable-Softmax)",
    twin=ssmax_weights,
    text="Each row's scores are multiplied by $s \\log n$ before the softmax: the longer the "
    "row, the sharper the softmax can stay.",
)

SSMAX = declare.variant(
    "ssmax",
    title="Scalable-Softmax attention",
    text="Scalable-Softmax (Nakanishi, 2025) multiplies every score by $s \\log n$, $s$ learnt, "
    "so that the weights of a long row do not flatten towards $1/n$ as they do with the softmax.",
    replaces=[WEIGHTS],
    claims=[
        declare.claim(
            sp.Sum(a[m, p], (p, 1, n)),
            1,
            title="The rows still sum to 1",
            text="Whatever $s$, each row's denominator is the sum of its numerators:",
        ),
        declare.SameAs(
            declare.BEFORE,
            substitute=((S[1, 1], 1 / sp.log(n)),),
            heading="At $s = 1/\\log n$ it is the softmax",
            text="With $s$ at $1/\\log n$ the factor is 1, and each step is self-attention's:",
        ),
    ],
    arguments=("X", "W_q", "W_k", "W_v", "S"),
    twin=ssmax_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform` (a function of no
    arguments builds the target): its weights by the book's names, s an nn.Parameter of its
    own name."""
    import torch

    class ScalableSoftmaxAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d_in, d_out = 4, 3
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)
            self.s = torch.nn.Parameter(torch.tensor(0.8))

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            return (self.s * math.log(x.shape[-2]) * scores).softmax(-1) @ v

    torch.manual_seed(0)
    return ScalableSoftmaxAttention()
