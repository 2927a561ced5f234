"""Self-attention (section 3.4 of the book): the entry every other variant builds on.

Its graph is the book's seven steps (`derive.graph.attention`): Q, K, V = X W_q, X W_k, X W_v;
Ω = Q Kᵀ; Ω̃ = Ω / √c; A = softmax(Ω̃) row by row; C = A V. Its claims are the facts of the
forward pass (rows sum to 1, shift invariance, why 1/√c); its backward section walks the steps
back one by one, with the softmax's Jacobian and the rowsum identity. Its twins: the fused and
the explicit path of `attention.functional.self_attention`, the book's `SelfAttentionV1`, and
the written-out backward pass.
"""

from __future__ import annotations

from dataclasses import replace

from ...notation import letters as L
from ...notation.book import OMEGA, OMEGA_SCALED, W_K, W_Q, W_V, A, C, K, Q, V, X
from ...notation.letters import Name
from .. import attention as S
from ..claims import (
    RowsSumToOne,
    RowsumIdentity,
    ScaledScoreVariance,
    ScoreVariance,
    ShiftInvariance,
    WeightsJacobian,
)
from ..declaration import Graph
from ..sizes import AtLeast
from ..twins import GradientTwin, ModuleTwin, Twin
from ..variant import Document, Group, Show, Variant
from . import self_attention_words as W

#: The sizes, indices and other symbols of the book's section 3.4.
NAMES = (
    Name(L.n, "tokens in the sequence (rows of $X$)", "size"),
    Name(L.d, "width of an input embedding (columns of $X$)", "size"),
    Name(L.c, "width of the query, key, value and context vectors", "size"),
    Name(L.m, "a token, as the one that attends (a query; rows of $\\Omega$, $A$, $C$)", "index"),
    Name(L.p, "a token, as the one attended to (a key; columns of $\\Omega$, $A$)", "index"),
    Name(L.r, "the token summed over in the softmax's denominator", "index"),
    Name(L.t, "a second key (the Jacobian of the softmax, the chain rule)", "index"),
    Name(L.i, "an input feature (columns of $X$, rows of the weights)", "index"),
    Name(L.j, "a context feature (columns of $Q$, $K$, $V$, $C$)", "index"),
    Name(L.j2, "a second context feature (the variance of a score)", "index"),
    Name(L.b, "a sequence in a batch", "index"),
    Name(r"\lambda", "a constant added to every score of a row (shift invariance)"),
    Name(r"\mathbb{E}, \operatorname{Var}", "expectation and variance (the stated assumptions)"),
    Name(r"\mu_q, \sigma_q^{2}", "mean and variance of a query's components (likewise for keys)"),
    Name(r"\delta_{p,t}", "the Kronecker delta: 1 when p = t, else 0"),
    Name("J", "the all-ones matrix"),
    Name("D_m", "the softmax's denominator of row m, in the explicit sections"),
    Name(r"\circ", "the entry-wise (Hadamard) product"),
    Name(r"\bar{Y}", "the gradient of the loss L with respect to Y, shaped like Y"),
)

__all__ = ["VARIANT", "graph"]


def _said(step, key: tuple[str, str]):
    return replace(step, text=W.STEP_TEXT[key])


def graph(_: Graph | None = None) -> Graph:
    """The seven steps, each with the words its document prints before it."""
    weights = replace(
        _said(S.weights(), ("weights", "A")),
        composed=("Omega_scaled",),
        composed_text=W.COMPOSED_WEIGHTS,
    )
    steps = (
        _said(S.projection("q"), ("projection", "Q")),
        _said(S.projection("k"), ("projection", "K")),
        _said(S.projection("v"), ("projection", "V")),
        _said(S.scores(), ("scores", "Omega")),
        _said(S.scaled_scores(), ("scaled_scores", "Omega_scaled")),
        weights,
        _said(S.context(), ("context", "C")),
    )
    return Graph("self-attention", steps)


_BACKWARD = (
    Group("Through the context", (Show(("dA", "dV"), W.BACKWARD_STEP_TEXT["dA"]),)),
    Group(
        "Through the softmax",
        (
            WeightsJacobian(heading="", text=W.BACKWARD_STEP_TEXT["jacobian"]),
            Show(("dOmega_scaled",), W.BACKWARD_STEP_TEXT["dOmega_scaled"]),
            Show(("dOmega",), W.BACKWARD_STEP_TEXT["dOmega"]),
        ),
    ),
    Group("Through the scores", (Show(("dQ", "dK"), W.BACKWARD_STEP_TEXT["dQ"]),)),
    Group(
        "To the weights and the inputs",
        (
            Show(("dW_q", "dW_k", "dW_v"), W.BACKWARD_STEP_TEXT["dW_q"]),
            Show(("dX",)),
        ),
    ),
    Group("The rowsum identity", (RowsumIdentity(heading="", text=W.BACKWARD_ROWSUM),)),
)

_SINGLE = (("W_query", "W_q", False), ("W_key", "W_k", False), ("W_value", "W_v", False))

VARIANT = Variant(
    "self-attention",
    "Trainable scaled dot-product self-attention",
    (W.PIPELINE, W.READING),
    base=None,
    build=graph,
    claims=(
        RowsSumToOne(text=W.FACT_TEXT["rows_sum_to_one"]),
        ShiftInvariance(text=W.FACT_TEXT["shift_invariance"]),
        ScoreVariance(
            heading="Why the scores are scaled",
            text=W.FACT_TEXT["assumptions"],
            then=W.FACT_TEXT["score_variance"],
        ),
        ScaledScoreVariance(heading="", text=W.FACT_TEXT["scaled_score_variance"]),
    ),
    draws=(AtLeast(L.n, 2, "with one token every weight is 1: the softmax would go untested"),),
    twin=Twin("attention.functional.self_attention", label="fused path"),
    also=(
        Twin(
            "attention.functional.self_attention",
            options=(("return_weights", True),),
            label="explicit path",
            output=0,
        ),
        ModuleTwin("attention.SelfAttentionV1", (L.d, L.c), _SINGLE),
        GradientTwin(
            "attention.functional.self_attention_backward",
            ("X", "W_q", "W_k", "W_v", "dC"),
            ("dX", "dW_q", "dW_k", "dW_v"),
        ),
    ),
    rank=0,
    document=Document(
        heading="From tokens to the input matrix",
        sections=(
            "introduction",
            "shapes",
            "steps",
            "facts",
            "figures",
            "counts",
            "batches",
            "backward",
            "explicit",
            "example",
            "code",
        ),
        prose=(
            ("steps", W.STEPS_INTRO),
            ("facts heading", "What the steps imply"),
            ("facts", W.FACTS_INTRO),
            ("counts", W.COUNT_TEXT),
            ("backward", W.BACKWARD_INTRO),
            ("backward end", W.BACKWARD_CHECKED),
        ),
        figures=("softmax-saturation",),
        backward=_BACKWARD,
    ),
    notation=(X, W_Q, W_K, W_V, Q, K, V, OMEGA, OMEGA_SCALED, A, C, *NAMES),
)
