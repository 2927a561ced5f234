r"""QK-norm (the book's Qwen 3), declared: queries and keys RMS-normalised before the scores.

Each row of a head's queries (and keys) is divided by its root mean square and scaled by a
learnable gain per feature, shared by the heads (the book's ``q_norm = RMSNorm(head_dim)``):

    \check{q}_{m,j} = (γ_q)_{1,j} q_{m,j} / √( Σ_{j'} q_{m,j'}² / c + ε )

The gains are a 1 × c matrix (a row), so that every matrix of the derivation has two indices.
Its twin: `grouped_query_attention(..., q_gain, k_gain, eps)`; its step's twin,
`attention.grouped.rms_norm`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Sum, sqrt

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import RowsSumToOne, ScoreBound
from ..declaration import Declaration, Graph
from ..sizes import Parameter
from ..twins import StepTwin, Twin
from ..variant import Document, Variant

#: The normalised queries and keys, and their gains.
Q_NORM = register_letter(
    Letter(
        "Q_norm",
        "qnorm",
        r"\check{Q}",
        r"\check{q}",
        meaning="query divided by its root mean square, times the gains (QK-norm)",
        indices=(L.m, L.j),
        after="qrot",
        gradient_after="dkrot",
    )
)
K_NORM = register_letter(
    Letter(
        "K_norm",
        "knorm",
        r"\check{K}",
        r"\check{k}",
        meaning="key divided by its root mean square, times the gains (QK-norm)",
        indices=(L.p, L.j),
        after="krot",
        gradient_after="dqnorm",
    )
)
G_Q = register_letter(
    Letter(
        "G_q",
        "gq",
        r"\gamma_q",
        r"(\gamma_q)",
        meaning="gain of query feature j (QK-norm; the book's `q_norm.scale`)",
        indices=(sp.S.One, L.j),
        after="q",
        gradient_after="dy",
    )
)
G_K = register_letter(
    Letter(
        "G_k",
        "gk",
        r"\gamma_k",
        r"(\gamma_k)",
        meaning="gain of key feature j (QK-norm; the book's `k_norm.scale`)",
        indices=(sp.S.One, L.j),
        after="k",
        gradient_after="dgq",
    )
)

__all__ = ["EPS", "NORMED", "VARIANT", "rms_norm", "with_qk_norm"]

#: The entries of the normalised queries and keys.
NORMED = {"q": "qnorm", "k": "knorm"}
_GAIN = {"q": "gq", "k": "gk"}


def rms_norm(
    which: str, head: bool, rows: sp.Expr, *, width: sp.Expr | None = None, gains: bool = True
) -> Declaration:
    r"""$\check{q}_{m,j} = (\gamma_q)_{1,j}\, q_{m,j} / \sqrt{\sum_{j'} q_{m,j'}^2 / c +
    \epsilon}$ (`which`: ``"q"`` or ``"k"``; keys by their row p), over `width` features (c_h
    for one head's, c for a whole row's by default); without `gains`, no γ (Llama 4's)."""
    width = width if width is not None else L.c_h if head else L.c
    row, j, j2 = (L.m if which == "q" else L.p), L.j, L.j2
    base, normed = L.base(which), L.base(NORMED[which])

    def entry(b: sp.IndexedBase, *indices: sp.Expr) -> sp.Indexed:
        return b[(L.ell, *indices)] if head else b[indices]

    mean_square = Sum(entry(base, row, j2) ** 2, (j2, 1, width)) / width
    rhs = entry(base, row, j) / sqrt(mean_square + L.eps)
    if gains:
        rhs = L.base(_GAIN[which])[1, j] * rhs
    suffix = "_l" if head else ""
    letter, source = L.BASES[NORMED[which]] + suffix, which.upper() + suffix
    gain = L.BASES[_GAIN[which]]
    return Declaration(
        "rms_norm",
        letter,
        "Normalising the " + ("queries" if which == "q" else "keys"),
        Eq(entry(normed, row, j), rhs, evaluate=False),
        {
            source: (rows, width),
            **({gain: (sp.S.One, width)} if gains else {}),
            letter: (rows, width),
        },
        twin=StepTwin("attention.grouped.rms_norm", options=(("eps", L.eps),)),
    )


#: The ε of the RMS norm (the book's Qwen 3 and OLMo 3: 10⁻⁶).
EPS = Parameter(
    L.eps,
    sp.Rational(1, 10**6),
    "the ε of the RMS norm",
    meaning="the constant under the root of an RMS normalisation (QK-norm; $10^{-6}$)",
)


def with_qk_norm(graph: Graph, gains: bool = True) -> Graph:
    """`graph` with its queries and keys RMS-normalised before the scores (per head), with
    learned gains or none."""
    steps: list[Declaration] = []
    found = False
    for step in graph.declarations:
        if step.name != "scores":
            steps.append(step)
            continue
        if {letter.removesuffix("_l") for letter in step.inputs} != {"Q", "K"}:
            raise ValueError(
                f"QK-norm normalises Q and K, and the scores of {graph.name} read "
                f"{', '.join(step.inputs)}"
            )
        found = True
        rows = {letter[0].lower(): step.shapes[letter][0] for letter in step.inputs}
        steps += [
            rms_norm("q", step.head, rows["q"], gains=gains),
            rms_norm("k", step.head, rows["k"], gains=gains),
            step.reading(NORMED),
        ]
    if not found:
        raise ValueError(f"{graph.name} has no scores for QK-norm to normalise")
    named = graph.name + (" with QK-norm" if gains else " with QK-norm without gains")
    return Graph(named, tuple(steps), graph.relations)


VARIANT = Variant(
    "qk-norm",
    "QK-norm",
    "QK-norm (the book's Qwen 3) divides each query and each key by its root mean "
    "square and scales it by learned gains before the scores. The scores then stay "
    "within a bound set by the width and the gains, whatever the scale of the inputs: "
    "growing inputs cannot saturate the softmax.",
    base="causal",
    build=with_qk_norm,
    claims=(RowsSumToOne(), ScoreBound()),
    parameters=(EPS,),
    twin=Twin("attention.grouped.grouped_query_attention", ("X", "W_q", "W_k", "W_v", "W_o?")),
    options=(("q_gain", "G_q"), ("k_gain", "G_k"), ("eps", L.eps)),
    rank=40,
    document=Document(figures=("softmax-saturation-qk-norm",)),
    notation=(Q_NORM, K_NORM, G_Q, G_K),
)
