r"""Kimi Delta Attention (KDA; Kimi Team, *Kimi Linear*, 2025; the linear layers of Kimi Linear):
the gated delta rule with a decay per key channel. Where Gated DeltaNet decays the whole state by
one α_m, KDA decays each of its rows, the key channels j, by its own α_{m,j} = e^{g_{m,j}}:

    S^{(m)} = diag(α_m) S^{(m−1)} + k_m u_mᵀ,   u_m = β_m (v_m − (diag(α_m) S^{(m−1)})ᵀ k_m).

Its graph is the parallel form's read, C = ((Q ∘ e^{G}) (K ∘ e^{−G})ᵀ/√c ∘ M) U, with
G_{m,j} = g_{1,j} + … + g_{m,j} the cumulative log-decays of each channel (an input, as the
written values U are): a_{m,p} = Σ_j q_{m,j} k_{p,j} e^{G_{m,j} − G_{p,j}}/√c for p ≤ m. That the
recurrence, the chunked form and this read are one, at symbolic sizes and on every split into
chunks, is what SymPy derives in the facts (`derive.proofs.linear`, its rule "kda"), and what
the tests of `attention.linear.kimi_delta_rule` check number for number (which forms the decays
per channel γ_{m,p,j} without e^{−G}, that overflows in a long chunk).
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, exp

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import WithoutSoftmax
from ..declaration import Declaration, Graph
from ..twins import StepTwin, Twin
from ..variant import Document, Variant
from .deltanet import WRITTEN

#: The cumulative log-decays of each key channel, and the queries and keys they decay.
LOG_DECAYS = register_letter(
    Letter(
        "G_log",
        "glog",
        "G",
        "G",
        meaning="cumulative log-decay of key channel $j$ up to token $m$, "
        "$G_{m,j} = \\sum_{r \\le m} g_{r,j}$ (Kimi Delta Attention's, one per channel)",
        indices=(L.m, L.j),
        after="k",
    )
)
Q_DECAYED = register_letter(
    Letter(
        "Q_decayed",
        "qdecayed",
        r"\overset{\circ}{Q}",
        r"\overset{\circ}{q}",
        meaning="query $m$ with each channel $j$ scaled by $e^{G_{m,j}}$",
        indices=(L.m, L.j),
        after="q",
    )
)
K_DECAYED = register_letter(
    Letter(
        "K_decayed",
        "kdecayed",
        r"\overset{\circ}{K}",
        r"\overset{\circ}{k}",
        meaning="key $p$ with each channel $j$ scaled by $e^{-G_{p,j}}$",
        indices=(L.p, L.j),
        after="qdecayed",
    )
)

__all__ = ["VARIANT", "decayed_per_channel", "decayed", "decayed_scores"]


def decayed(letter: str, source: str, sign: int) -> Declaration:
    """x̊_{m,j} = x_{m,j} e^{±G_{m,j}}: each channel of a query (+) or a key (−) decayed."""
    rows = L.m if sign > 0 else L.p
    entry, base, log = L.base(letter), L.base(source), L.base("glog")
    shapes = {
        {"q": "Q", "k": "K"}[source]: (L.n, L.c),
        "G_log": (L.n, L.c),
        {"qdecayed": "Q_decayed", "kdecayed": "K_decayed"}[letter]: (L.n, L.c),
    }
    inputs = ({"q": "Q", "k": "K"}[source], "G_log")
    return Declaration(
        "channel_decayed",
        {"qdecayed": "Q_decayed", "kdecayed": "K_decayed"}[letter],
        ("Queries" if sign > 0 else "Keys") + ", each channel decayed",
        Eq(
            entry[rows, L.j],
            base[rows, L.j] * exp(sign * log[rows, L.j]),
            evaluate=False,
        ),
        shapes,
        twin=StepTwin("attention.linear.channel_decayed", inputs, (("sign", sign),)),
    )


def decayed_scores() -> Declaration:
    """ω_{m,p} = Σ_j q̊_{m,j} k̊_{p,j}."""
    omega, q, k = L.base("omega"), L.base("qdecayed"), L.base("kdecayed")
    return Declaration(
        "scores",
        "Omega",
        "Attention scores of the decayed queries and keys",
        Eq(omega[L.m, L.p], sp.Sum(q[L.m, L.j] * k[L.p, L.j], (L.j, 1, L.c)), evaluate=False),
        {"Q_decayed": (L.n, L.c), "K_decayed": (L.n, L.c), "Omega": (L.n, L.n)},
        twin=StepTwin("attention.functional.scores", ("Q_decayed", "K_decayed")),
    )


def _read() -> Declaration:
    """c_{m,j} = Σ_p a_{m,p} u_{p,j}: each token reads the written values."""
    ctx, a, u = L.base("ctx"), L.base("a"), L.base("uwritten")
    return Declaration(
        "context",
        "C",
        "What each token reads",
        Eq(ctx[L.m, L.j], sp.Sum(a[L.m, L.p] * u[L.p, L.j], (L.p, 1, L.n)), evaluate=False),
        {"A": (L.n, L.n), "U_written": (L.n, L.c), "C": (L.n, L.c)},
        twin=StepTwin("attention.functional.context", ("A", "U_written")),
    )


def decayed_per_channel(graph: Graph) -> Graph:
    """Linear attention's graph reading U in place of V (whose projection goes), its scores
    those of the queries and keys decayed channel by channel."""
    steps = []
    for step in graph.declarations:
        if step.output == "V":
            continue
        if step.name == "scores":
            steps += [decayed("qdecayed", "q", +1), decayed("kdecayed", "k", -1), decayed_scores()]
        elif step.name == "context":
            steps.append(_read())
        else:
            steps.append(step)
    return Graph("Kimi Delta Attention's read", tuple(steps), graph.relations)


_TEXT = {
    "written": "What token $m$ writes, from the invariant at token $m - 1$: row $m$ of the "
    "unit lower-triangular system whose entries are "
    "$L_{m,p} = \\beta_m \\sum_j k_{m,j} k_{p,j} e^{G_{m,j} - G_{p,j}}$:",
    "state": "The recurrence takes the invariant at token $m - 1$ to the invariant at token $m$, "
    "row $j$ of the state decayed by its own $\\alpha_{m,j} = e^{g_{m,j}}$ (before the "
    "segment's first token it holds: $G_s = 0$, an empty sum):",
    "output": "What token $m$ reads is row $m$ of the graph's $C$ (with $S^{(s)} = 0$ for the "
    "whole sequence, and $q_m$ taken scaled by $1/\\sqrt{c}$ as the graph's "
    "$\\tilde\\omega$ scales it): the parallel form.",
    "carried": "A chunk that starts from the state the chunk before it ended with, each "
    "channel's decays counted from its own start, holds the state of the unsplit sequence; so "
    "any split into chunks, uneven ones included, gives the recurrence's numbers:",
}

VARIANT = Variant(
    "kda",
    "Kimi Delta Attention (KDA)",
    (
        "Kimi Delta Attention (the linear layers of Kimi Linear, 2025) is Gated DeltaNet with "
        "a decay per key channel: the state's row $j$ decays by its own "
        "$\\alpha_{m,j} = e^{g_{m,j}}$, $S^{(m)} = \\operatorname{diag}(\\alpha_m) S^{(m-1)} + "
        "k_m u_m^\\top$ with $u_m = \\beta_m (v_m - (\\operatorname{diag}(\\alpha_m) "
        "S^{(m-1)})^\\top k_m)$, read as $o_m = S^{(m)\\top} q_m$. Kimi Linear normalises each "
        "query and key to unit length and scales the queries by $1/\\sqrt{c}$ (the "
        "$\\tilde\\omega$ of the graph).",
        "Over a segment of tokens $s + 1, \\dots$ that starts from a state $S^{(s)}$, with "
        "$G_{m,j} = \\sum_{r = s+1}^{m} g_{r,j}$, the rule keeps the invariant "
        "$S^{(m)}_{j,j'} = e^{G_{m,j}} S^{(s)}_{j,j'} + \\sum_{p = s+1}^{m} "
        "e^{G_{m,j} - G_{p,j}} k_{p,j} u_{p,j'}$, from which SymPy derives, at symbolic sizes, "
        "that the recurrent, parallel and chunked forms are one. The graph below is the "
        "parallel form's read, given the written values $U$ and the decays $G$: each query's "
        "channel $j$ scaled by $e^{G_{m,j}}$, each key's by $e^{-G_{p,j}}$.",
    ),
    base="linear-attention",
    build=decayed_per_channel,
    claims=tuple(
        WithoutSoftmax(part, "kda", heading="" if part != "written" else None, text=_TEXT[part])
        for part in ("written", "state", "output", "carried")
    ),
    twin=Twin(
        "attention.linear.kda_read",
        ("X", "W_q", "W_k", "U_written", "G_log"),
        label="parallel read",
    ),
    alone="its state's update (the delta rule, a decay per key channel) is derived for one "
    "head of causal linear attention, in its recurrent, chunked and parallel forms",
    rank=9,
    short="KDA",
    document=Document(
        sections=("introduction", "shapes", "steps", "facts", "backward", "explicit", "code"),
        states="derive.proofs.linear.chunk_states",
    ),
    notation=(WRITTEN, LOG_DECAYS, Q_DECAYED, K_DECAYED),
)
