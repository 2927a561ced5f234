r"""RoPE with linear position interpolation, declared: every frequency divided by a factor.

Position interpolation (Chen et al., 2023, "Extending Context Window of Large Language Models
via Positional Interpolation", §2.2; Hugging Face's ``rope_type: "linear"``, its
``_compute_linear_scaling_rope_parameters``; Kaiokendal's SuperHOT and the long-context
fine-tunes of Llama 2 that followed) reads position m as m/η, so that a context η times the one
a model was trained on maps into the positions it has seen. The angles m ω_j become m ω_j / η:
each frequency ω_j = β^{−2(j−1)/c} divided by the factor η where the angles read it, so that the
variant combines with partial and interleaved RoPE. The angles stay (m − 1) times a frequency of
the pair: the score still depends on p − m only. Its twins: `grouped_query_attention(...,
theta_base=β, freq_config={"rope_type": "linear", "factor": η})` and
`attention.rope.rope_rotation(x, theta_base=β, freq_config={...})`.
"""

from __future__ import annotations

import dataclasses

import sympy as sp
from sympy import Eq

from ...notation import letters as L
from ..claims import RelativePosition, RowsSumToOne
from ..declaration import Declaration, Graph
from ..sizes import Parameter
from ..twins import Given
from ..variant import Variant
from .rope import rotations_told, unscaled_angles

__all__ = ["VARIANT", "with_linear_rope", "LINEAR_CONFIG"]

#: `attention.rope`'s ``freq_config`` of linear scaling (Hugging Face's keys), with its symbol.
LINEAR_CONFIG = (("rope_type", Given("linear")), ("factor", L.eta))


def _interpolated(step: Declaration) -> Declaration:
    rhs = step.element.rhs.replace(
        lambda e: isinstance(e, sp.Pow) and e.base == L.beta, lambda e: e / L.eta
    )
    return dataclasses.replace(
        step,
        element=Eq(step.element.lhs, rhs, evaluate=False),
        title="The rotary angles, at interpolated positions' frequencies",
    )


def with_linear_rope(graph: Graph) -> Graph:
    """`graph` (with RoPE, perhaps partial or interleaved) at positions divided by η."""
    angles = unscaled_angles(graph, "linear scaling")
    steps = rotations_told(graph, ("freq_config", LINEAR_CONFIG))
    found = Graph(
        graph.name.replace("RoPE", "RoPE with interpolated positions"), steps, graph.relations
    )
    return found.with_step(_interpolated(angles))  # rotations_told leaves Φ as it was


VARIANT = Variant(
    "linear-rope",
    "RoPE with interpolated positions",
    "Position interpolation (Chen et al., 2023) stretches RoPE to a context $\\eta$ times the "
    "one a model was trained on by reading position $m$ as $m/\\eta$: every frequency "
    "$\\omega_j$ divided by $\\eta$ (Hugging Face's linear RoPE scaling).",
    base="rope",
    build=with_linear_rope,
    claims=(RowsSumToOne(), RelativePosition()),
    parameters=(
        Parameter(
            L.eta,
            sp.Integer(4),
            "the factor the positions are divided by",
            meaning="RoPE's frequency factor `factor`: Llama 3.1's and YaRN's divide the slow "
            "frequencies by it, linear scaling every one",
        ),
    ),
    options=(("freq_config", LINEAR_CONFIG),),
    rank=55,
    short="linear RoPE scaling (position interpolation)",
)
