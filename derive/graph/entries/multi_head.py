"""Multi-head attention (the book's section 3.6): h heads of width c_h = c / h side by side,
their contexts concatenated and projected by W_o (`derive.graph.heads`). Its twins:
`multi_head_attention`, its explicit path, and (causal, as in the book) `MultiHeadAttention`."""

from __future__ import annotations

from ...notation import letters as L
from ...notation.letters import Letter, Name, register_letter
from ..heads import with_heads
from ..sizes import Size
from ..twins import ModuleTwin, Twin
from ..variant import Variant

#: The heads' contexts side by side, and the output projection.
C_CONCAT = register_letter(
    Letter(
        "C_concat",
        "ctxcat",
        r"\hat{C}",
        r"\hat{z}",
        meaning="the heads' context vectors side by side (multi-head attention)",
        indices=(L.m, L.j),
        after="ctxgated",
        gradient_after="dwo",
    )
)
W_O = register_letter(
    Letter(
        "W_o",
        "wo",
        "W_o",
        "(W_o)",
        meaning="output weight (multi-head attention)",
        indices=(L.i, L.j),
        after="wg",
        gradient_after="dwg",
    )
)
NAMES = (
    Name(L.c_h, "width of one head", "size"),
    Name(L.ell, "a head (multi-head attention)", "index"),
    Name(
        L.ell2, "another head, summed over by a step that reads every head (talking heads)", "index"
    ),
)

__all__ = ["VARIANT"]

_LINEAR = (
    ("W_query.weight", "W_q", True),
    ("W_key.weight", "W_k", True),
    ("W_value.weight", "W_v", True),
    ("out_proj.weight", "W_o", True),
)
_ARGUMENTS = ("X", "W_q", "W_k", "W_v", "W_o")

VARIANT = Variant(
    "multi-head",
    "Multi-head attention",
    "Multi-head attention runs $h$ attention heads side by side, each on its own block of "
    "columns of the projections, with its own scaling by the head width $c_h = c / h$, and "
    "mixes their outputs with one more learnable matrix $W_o$. Head $\\ell$ takes its block of "
    "columns of $Q$, $K$ and $V$ and runs the steps of self-attention on them; the heads' "
    "context vectors are put side by side and projected by $W_o$.",
    build=with_heads,
    sizes=(Size(L.h, 2, "heads", meaning="number of heads (multi-head attention)"),),
    twin=Twin("attention.functional.multi_head_attention", _ARGUMENTS, label="fused path"),
    options=(("heads", L.h),),
    also=(
        Twin(
            "attention.functional.multi_head_attention",
            _ARGUMENTS,
            (("return_weights", True),),
            label="explicit path",
            output=0,
        ),
        ModuleTwin(
            "attention.MultiHeadAttention",
            (L.d, L.c, L.n, 0.0, L.h),
            _LINEAR,
            zeroed=("out_proj.bias",),
            implies=("causal", "heads"),
            requires=("causal",),
        ),
    ),
    rank=10,
    short="several heads",
    notation=(C_CONCAT, W_O, *NAMES),
)
