r"""QK-norm without gains (Llama 4's layers with RoPE, its `L2Norm`, despite the name an RMS
norm), declared: each head's queries and keys divided by their root mean square,

    \check{q}_{m,j} = q_{m,j} / √( Σ_{j'} q_{m,j'}² / c + ε ),

no learned gain after it. Every normalised row then has a squared length of at most c, and every
scaled score lies within ±√c whatever the inputs (`ScoreBound`, with gains of 1). Llama 4
normalises after RoPE, Qwen 3 before; without gains the two orders are one (a rotation keeps each
pair's length, so the root mean square too). Its twin: `grouped_query_attention(...,
q_gain=1.0, k_gain=1.0, eps)`; its step's twin, `attention.grouped.rms_norm` without a gain.
"""

from __future__ import annotations

import functools

from ...notation import letters as L
from ..claims import RowsSumToOne, ScoreBound
from ..twins import Twin
from ..variant import Variant
from .qk_norm import EPS, with_qk_norm

__all__ = ["VARIANT"]

VARIANT = Variant(
    "l2-qk-norm",
    "QK-norm without gains (Llama 4)",
    "Llama 4's layers with RoPE divide each query and each key by its root mean square before "
    "the scores, as QK-norm does, but learn no gain after it: every scaled score stays within "
    "$\\pm\\sqrt{c}$ whatever the inputs, a bound set by the width alone.",
    base="causal",
    build=functools.partial(with_qk_norm, gains=False),
    claims=(RowsSumToOne(), ScoreBound()),
    parameters=(EPS,),
    twin=Twin("attention.grouped.grouped_query_attention", ("X", "W_q", "W_k", "W_v", "W_o?")),
    options=(("q_gain", 1.0), ("k_gain", 1.0), ("eps", L.eps)),
    rank=40,
    short="QK-norm without gains",
)
