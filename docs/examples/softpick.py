r"""Softpick attention, declared in a file of its own: a rectified softmax whose weights may be
exactly 0 and need not sum to 1.

Zuhri, Fuadi and Aji (2025, "Softpick: No Attention Sink, No Massive Activations with Rectified
Softmax") replace the softmax of each row of scores by

    a_{m,p} = max(0, e^{ω̃_{m,p}} − 1) / (Σ_{r=1}^{n} |e^{ω̃_{m,r}} − 1| + ε)

so that a negative score gives the weight 0 and a row of negative scores gives no weight at all
(no "attention sink" is needed to park it). The rule is piecewise: max(0, ·) and |·| have no
derivative where e^{ω̃} = 1, that is at ω̃ = 0. derive differentiates them where they have one
(θ and sign), and at the kink takes the value torch's autograd computes, θ(0) = 0 and
sign(0) = 0; the document says so under the backward pass, and every printed gradient is
checked against autograd, kinks included. From this repository's root:

    derive latex --variant docs/examples/softpick.py:SOFTPICK -o softpick.tex
    derive check --variant docs/examples/softpick.py:SOFTPICK
    derive conform docs/examples/softpick.py:layer --variant docs/examples/softpick.py:SOFTPICK

ε is a parameter of the variant (the paper's 10⁻⁶ by default; ``--param epsilon=…`` sets
another). The paper's kernel computes the same ratio with the row's largest score factored out
of numerator and denominator, for its range in low precision; the twins compute it as written,
in float64.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, m, n, omega_tilde, p, r

#: ε, keeping the denominator off 0 (a row of zero scores).
epsilon = sp.Symbol("epsilon", positive=True)
EPSILON = sp.Rational(1, 10**6)


def softpick(omega_scaled, *, epsilon):
    """The twin of the weights: ReLU(e^{Ω̃} − 1) over the row's sum of |e^{Ω̃} − 1| plus ε."""
    shifted = omega_scaled.exp() - 1
    return shifted.relu() / (shifted.abs().sum(-1, keepdim=True) + epsilon)


def softpick_attention(x, w_q, w_k, w_v, *, epsilon):
    """The twin of the whole: C = softpick(XW_q (XW_k)ᵀ/√c) X W_v."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return softpick(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), epsilon=epsilon) @ v


def _shifted(key):
    """e^{ω̃_{m,key}} − 1: positive where the score is, 0 where it is 0."""
    return sp.exp(omega_tilde[m, key]) - 1


WEIGHTS = declare.step(
    "softpick",
    sp.Eq(
        a[m, p],
        sp.Max(0, _shifted(p)) / (sp.Sum(sp.Abs(_shifted(r)), (r, 1, n)) + epsilon),
    ),
    shape=(n, n),
    title="Attention weights (softpick)",
    twin=softpick,
    options={"epsilon": epsilon},
    text="The positive part of $e^{\\tilde{\\omega}_{m,p}} - 1$, over the row's sum of "
    "$|e^{\\tilde{\\omega}_{m,r}} - 1|$:",
)

SOFTPICK = declare.variant(
    "softpick",
    title="Softpick attention",
    text="Softpick (Zuhri et al., 2025) rectifies the softmax: a key whose score is negative "
    "gets the weight 0, and a row's weights sum to at most 1, so that no token has to serve "
    "as a sink for the weight a query does not need.",
    replaces=[WEIGHTS],
    parameters={epsilon: EPSILON},
    claims=[
        declare.bound(
            0,
            a[m, p],
            title="No weight is negative",
            text="The numerator is a positive part, the denominator positive:",
        ),
    ],
    twin=softpick_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform`: the book's
    projections by their names, ε the paper's."""
    import torch

    class SoftpickAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d_in, d_out = 4, 3
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            return softpick(scores, epsilon=float(EPSILON)) @ v

    torch.manual_seed(0)
    return SoftpickAttention()
