"""Sigmoid attention, declared in a file of its own, as anyone would declare their attention.

Ramapuram et al. (Apple, 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention") replace the softmax of self-attention by the logistic sigmoid of each scaled
score plus a bias b, b = −log n:

    a_{m,p} = σ(ω̃_{m,p} + b)

No row is normalised: each weight depends on its own score only. This file declares that one
step (its formula, its shape, its torch twin), the variant around it (its base, its parameter b,
what SymPy is to prove, a few sentences) and a plain-torch twin of the whole. Then, from this
repository's root:

    derive latex --variant docs/examples/sigmoid_attention.py:SIGMOID -o sigmoid.tex
    derive html --variant docs/examples/sigmoid_attention.py:SIGMOID --n 3 -o sigmoid.html
    derive check --variant docs/examples/sigmoid_attention.py:SIGMOID

derive the matrix form of the new step, the backward pass (the gradient of a score is its own
weight's, ā a (1 − a): no row sum), the claims, the explicit matrices, and compare every step
and every gradient with the twins.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, m, n, omega_tilde, p, sigmoid, t

#: The bias added to every scaled score, a parameter (default −log n, as the paper advises).
b = sp.Symbol("b", real=True)


def sigmoid_weights(omega_scaled, *, b: float):
    """The twin of the step, in plain torch: A = σ(Ω̃ + b), entry by entry (tensor methods
    only, so that the documents of this file never import torch)."""
    return (omega_scaled + b).sigmoid()


def sigmoid_attention(x, w_q, w_k, w_v, *, b: float):
    """The twin of the whole, in plain torch: C = σ(X W_q (X W_k)ᵀ / √c + b) X W_v."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + b).sigmoid() @ v


WEIGHTS = declare.step(
    "sigmoid_weights",
    sp.Eq(a[m, p], sigmoid(omega_tilde[m, p] + b)),
    shape=(n, n),
    title="Attention weights (sigmoid of each score)",
    twin=sigmoid_weights,
    options={"b": b},
    text="Each scaled score, shifted by the bias $b$, goes through the logistic sigmoid on its "
    "own: the weights of a row need not sum to 1.",
)

SIGMOID = declare.variant(
    "sigmoid",
    title="Sigmoid attention",
    text="Sigmoid attention replaces the softmax of each row by the logistic sigmoid of each "
    "scaled score plus a bias $b$ (Ramapuram et al., Apple, 2024, who advise $b = -\\log n$, "
    "the default here): a weight no longer depends on the other scores of its row, so no row "
    "has to be summed, forward or backward.",
    replaces=[WEIGHTS],
    parameters={b: -sp.log(n)},
    claims=[
        declare.claim(
            sp.Limit(a[m, p], b, -sp.oo),
            0,
            title="A large negative bias silences every key",
            text="With the bias going to minus infinity every weight goes to 0, whatever the "
            "scores: $b$ sets how much attention a query pays in all.",
        ),
        declare.bound(
            a[m, p],
            1,
            title="No weight exceeds 1",
            text="No weight exceeds 1, as with the softmax, though a row no longer sums to 1:",
        ),
        declare.claim(
            sp.Derivative(a[m, p], omega_tilde[m, t]),
            sp.KroneckerDelta(p, t) * a[m, p] * (1 - a[m, p]),
            title="Each weight depends on its own score only",
            text="The Jacobian of a row is diagonal, where the softmax's couples every weight "
            "of the row to every score:",
        ),
    ],
    twin=sigmoid_attention,
)
