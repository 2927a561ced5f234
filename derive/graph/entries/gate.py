r"""The output gate of Qwen 3.5 (and Qwen3-Next; Qiu et al., *Gated Attention for Large Language
Models*, 2025), declared: the heads' merged contexts, each feature scaled by the sigmoid of a
logit computed from the same token,

    γ_{m,j} = Σ_i x_{m,i} (W_g)_{i,j},        \tilde{z}_{m,j} = \hat{z}_{m,j} σ(γ_{m,j}),

before the output projection W_o. Column j of \hat{C} belongs to one head, and so does its gate:
the gate is per head (Qwen 3.5 computes each head's queries and gate logits in one projection,
`attention.MultiHeadAttention(..., gate=True)`; here W_g is a matrix of its own, the layout of
`attention.functional.multi_head_attention(..., w_g=)`). It adds ``w_g=W_g`` to the twins of the
entry it modifies; its steps' twins are `attention.functional.projection` and `output_gate`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Sum

from ...notation import letters as L
from ...notation.functions import Sigmoid
from ...notation.letters import Letter, register_letter
from ..claims import Bound, Equality, RowsSumToOne
from ..declaration import Declaration, Graph
from ..twins import StepTwin
from ..variant import Variant

#: The gate's weights, its logits and the gated context.
W_G = register_letter(
    Letter(
        "W_g",
        "wg",
        "W_g",
        "(W_g)",
        meaning="gate weight from input feature i to the gate logit of feature j (output gate)",
        indices=(L.i, L.j),
        after="wuv",
        gradient_after="dwuv",
    )
)
GAMMA = register_letter(
    Letter(
        "Gamma",
        "gamma",
        r"\Gamma",
        r"\gamma",
        meaning="gate logit of token m, feature j, $\\gamma = X W_g$ (output gate)",
        indices=(L.m, L.j),
        after="sink",
        gradient_after="ctx",
    )
)
C_GATED = register_letter(
    Letter(
        "C_gated",
        "ctxgated",
        r"\tilde{C}",
        r"\tilde{z}",
        meaning="the heads' context vectors gated, $\\hat z_{m,j} \\sigma(\\gamma_{m,j})$ "
        "(Qwen 3.5's output gate)",
        indices=(L.m, L.j),
        after="u",
        gradient_after="a",
    )
)

__all__ = ["VARIANT", "gate_logits", "output_gate", "with_gate"]

_GAMMA, _GATED, _MERGED = L.base("gamma"), L.base("ctxgated"), L.base("ctxcat")


def gate_logits() -> Declaration:
    r"""$\gamma_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_g)_{i,j}$: Γ = X W_g."""
    rhs = Sum(L.base("x")[L.m, L.i] * L.base("wg")[L.i, L.j], (L.i, 1, L.d))
    return Declaration(
        "gate_logits",
        "Gamma",
        "The gate's logits",
        Eq(_GAMMA[L.m, L.j], rhs, evaluate=False),
        {"X": (L.n, L.d), "W_g": (L.d, L.c), "Gamma": (L.n, L.c)},
        twin=StepTwin("attention.functional.projection", ("X", "W_g")),
    )


def output_gate() -> Declaration:
    r"""$\tilde z_{m,j} = \hat z_{m,j}\, \sigma(\gamma_{m,j})$: the merged heads, gated."""
    return Declaration(
        "output_gate",
        "C_gated",
        "The output gate",
        Eq(_GATED[L.m, L.j], _MERGED[L.m, L.j] * Sigmoid(_GAMMA[L.m, L.j]), evaluate=False),
        {"C_concat": (L.n, L.c), "Gamma": (L.n, L.c), "C_gated": (L.n, L.c)},
        twin=StepTwin("attention.functional.output_gate", ("C_concat", "Gamma")),
    )


def with_gate(graph: Graph) -> Graph:
    """`graph` with its merged heads gated before the output projection, which reads the gated
    ones."""
    if not any(step.name == "merge_heads" for step in graph.declarations):
        raise ValueError(
            f"{graph.name} has no heads to gate: the output gate scales each head's context "
            f"before W_o (combine it with multi-head or gqa)"
        )
    steps: list[Declaration] = []
    for step in graph.declarations:
        if step.name == "merge_heads":
            steps += [step, gate_logits(), output_gate()]
        elif any(s.name == "output_gate" for s in steps):
            steps.append(step.reading({"ctxcat": "ctxgated"}))
        else:
            steps.append(step)
    return Graph(graph.name + " with an output gate", tuple(steps), graph.relations)


VARIANT = Variant(
    "gate",
    "Gated attention (output gate)",
    "Qwen 3.5 and Qwen3-Next gate the output of attention: each feature of the heads' merged "
    "context is multiplied by the sigmoid of a logit computed from the same token, "
    "$\\sigma(X W_g)$, before the output projection. A head can thus switch its output off "
    "for a token (which removes the need for a sink of attention on the first tokens, Qiu et "
    "al., 2025). The gate never amplifies a feature, and a gate wide open is no gate.",
    base="multi-head",
    build=with_gate,
    claims=(
        Equality(
            sp.Subs(_GATED[L.m, L.j], _GAMMA[L.m, L.j], sp.oo),
            _MERGED[L.m, L.j],
            "A gate wide open is no gate",
            text="As a logit grows, its sigmoid tends to 1 and the gated feature to the "
            "feature itself: with every gate open the attention is the one it gates.",
        ),
        Bound(
            _GATED[L.m, L.j] ** 2,
            _MERGED[L.m, L.j] ** 2,
            "The gate never amplifies",
            text="A gated feature is never larger in magnitude than the feature: "
            "$0 < \\sigma < 1$.",
        ),
        RowsSumToOne(),
    ),
    options=(("w_g", "W_g"),),
    rank=60,
    short="output gate",
    notation=(W_G, GAMMA, C_GATED),
)
