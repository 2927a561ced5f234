r"""QK-norm over all heads (OLMo 2 and 3), declared: the whole rows of Q and K RMS-normalised
before the heads are split.

The book's OLMo 3 (``q_norm = RMSNorm(d_out)``, ``k_norm = RMSNorm(num_kv_groups * head_dim)``,
applied to the projections before ``view``) and Hugging Face's ``Olmo2Attention`` and
``Olmo3Attention`` normalise each row of Q (all h·c_h features) and of K (all g·c_h) at once,
with one gain per feature:

    \check{q}_{m,j} = (γ_q)_{1,j} q_{m,j} / √( Σ_{j'=1}^{c} q_{m,j'}² / c + ε )

where Qwen 3's QK-norm (`qk-norm`) normalises each head's c_h features on their own with gains
shared by the heads. The heads are then split from \check{Q} and \check{K}; every other step is
the graph's own. With one head (and one key/value head) the two are the same formula. The
scores stay bounded (a head's slice of a normalised row is no longer than the row), by a bound
√(h g) times the per-head one; it is not derived here. Its twin: `grouped_query_attention(...,
q_gain=(γ_q), k_gain=(γ_k))` with gains of the whole width (h·c_h and g·c_h: the length of the
gains says which QK-norm); its step's twin, `attention.grouped.rms_norm`.
"""

from __future__ import annotations

from ...notation import letters as L
from ..claims import RowsSumToOne
from ..declaration import Graph
from ..twins import Twin
from ..variant import Variant
from .qk_norm import EPS, NORMED, rms_norm

__all__ = ["VARIANT", "with_whole_qk_norm"]


def _normalised(graph: Graph, which: str) -> Graph:
    """`graph` with the whole of Q (`which` = ``"q"``) or K normalised right after its
    projection, and every step that read it reading the normalised one."""
    letter = L.BASES[which]
    rows, width = graph.step(letter).shapes[letter]
    norm = rms_norm(which, False, rows, width=width)
    steps = [
        s.reading({which: NORMED[which]}) if letter in s.inputs else s for s in graph.declarations
    ]
    return Graph(graph.name, tuple(steps), graph.relations).inserted(letter, norm)


def with_whole_qk_norm(graph: Graph) -> Graph:
    """`graph` with the whole rows of its queries and keys RMS-normalised before the heads."""
    if any(step.name == "rms_norm" for step in graph.declarations):
        raise ValueError(
            f"{graph.name} already normalises its queries and keys: QK-norm per head (qk-norm) "
            "and over all heads (whole-qk-norm) exclude each other"
        )
    for letter in ("Q", "K"):
        if graph.producer(letter) is None:
            raise ValueError(f"{graph.name} computes no {letter} for QK-norm to normalise")
    found = _normalised(_normalised(graph, "q"), "k")
    return found.named(graph.name + " with QK-norm over all heads")


VARIANT = Variant(
    "whole-qk-norm",
    "QK-norm over all heads (OLMo 2 and 3)",
    "OLMo 2 and 3 normalise the queries and keys before the scores, as QK-norm does, but "
    "each row of $Q$ and of $K$ as a whole, all heads' features at once, with one learned "
    "gain per feature; the heads are split afterwards. A head's normalised query is then a "
    "slice of a row of length about $\\sqrt{c}$, not a row of its own.",
    base="causal",
    build=with_whole_qk_norm,
    claims=(RowsSumToOne(),),
    parameters=(EPS,),
    twin=Twin("attention.grouped.grouped_query_attention", ("X", "W_q", "W_k", "W_v", "W_o?")),
    options=(("q_gain", "G_q"), ("k_gain", "G_k"), ("eps", L.eps)),
    rank=40,
    short="QK-norm over all heads",
)
