r"""Mamba's selective scan (Gu and Dao, *Mamba: Linear-Time Sequence Modeling with Selective State
Spaces*, 2023; the mixers of Mamba, Falcon Mamba and Jamba), for one of its channels: a state of
d_state numbers h_m, each entry j decaying at its own rate, h_{m,j} = e^{Δ_m A_j} h_{m−1,j} +
Δ_m x_m B_{m,j}, read as y_m = Σ_j C_{m,j} h_{m,j}. In the book's letters the queries are Mamba's
C (Q = X W_q), the keys its B (K = X W_k) and the values its x (V = X W_v): the rule of Kimi
Delta Attention's decay per key channel, with SSD's write (the value scaled by the step) and no
delta correction — each channel of Mamba is a head whose values are one number wide.

Its graph is the quadratic form, C = ((Q ∘ e^{G}) (K ∘ e^{−G})ᵀ ∘ M) diag(Δ) V, with
G_{m,j} = Σ_{r ≤ m} Δ_r A_j the cumulative log-decays of each state entry and Δ the steps (inputs
both), unscaled. That the recurrence, any split into chunks and this form are one is what SymPy
derives in the facts (`derive.proofs.linear`, its rule "selective-scan"); Mamba's D skip
(y + D x) is outside the graph, `attention.linear.selective_scan` adds it.
"""

from __future__ import annotations

from sympy import Eq, Piecewise

from ...notation import letters as L
from ..claims import WithoutSoftmax
from ..declaration import Declaration, Graph
from ..twins import StepTwin, Twin
from ..variant import Document, Variant
from .deltanet import WRITTEN
from .kda import K_DECAYED, LOG_DECAYS, Q_DECAYED, decayed, decayed_scores
from .ssd import STEP, read_written, stepped_values

__all__ = ["VARIANT", "selective"]


def _weights() -> Declaration:
    """a_{m,p} = ω_{m,p} for p ≤ m, 0 after: the scores of the decayed queries and keys."""
    a, omega = L.base("a"), L.base("omega")
    return Declaration(
        "weights",
        "A",
        "Weights: the decayed scores, causal",
        Eq(a[L.m, L.p], Piecewise((omega[L.m, L.p], L.p <= L.m), (0, True)), evaluate=False),
        {"Omega": (L.n, L.n), "A": (L.n, L.n)},
        twin=StepTwin("attention.linear.causal_weights", ("Omega",)),
    )


def selective(graph: Graph) -> Graph:
    """Linear attention's graph as the selective scan's quadratic form: the queries and keys
    decayed channel by channel, the scaling gone, the values written scaled by the steps."""
    steps = []
    for step in graph.declarations:
        if step.output == "Omega_scaled":
            continue
        if step.name == "scores":
            steps += [decayed("qdecayed", "q", +1), decayed("kdecayed", "k", -1), decayed_scores()]
        elif step.name == "weights":
            steps.append(_weights())
        elif step.name == "context":
            steps += [stepped_values(), read_written()]
        else:
            steps.append(step)
    return Graph("Mamba's selective scan", tuple(steps), graph.relations)


_TEXT = {
    "written": "What token $m$ writes into the state: its value scaled by its step.",
    "state": "The recurrence takes the invariant at token $m - 1$ to the invariant at token $m$, "
    "each entry $j$ of the state decayed by its own $e^{g_{m,j}}$, $g_{m,j} = \\Delta_m A_j$ "
    "(before the segment's first token it holds: $G_s = 0$, an empty sum):",
    "output": "What token $m$ reads is row $m$ of the quadratic form (with $S^{(s)} = 0$ for the "
    "whole sequence: the graph's $C$):",
    "carried": "A chunk that starts from the state the chunk before it ended with, each entry's "
    "decays counted from its own start, holds the state of the unsplit sequence; so any split "
    "into chunks, uneven ones included, gives the recurrence's numbers:",
}

VARIANT = Variant(
    "selective-scan",
    "Mamba's selective scan",
    (
        "Mamba (Gu and Dao, 2023; Falcon Mamba and Jamba run it too) keeps, for each of its "
        "channels, a state of $d_{state}$ numbers, each decaying at its own rate: "
        "$h_{m,j} = e^{\\Delta_m A_j} h_{m-1,j} + \\Delta_m x_m B_{m,j}$, read as "
        "$y_m = \\sum_j C_{m,j} h_{m,j}$, with $A_j < 0$ and the step $\\Delta_m > 0$ of the "
        "token. Here, for one channel, the queries are Mamba's $C$, the keys its $B$ and the "
        "values its $x$: $Q = X W_q$, $K = X W_k$, $V = X W_v$.",
        "Unrolled, $h_{m,j} = \\sum_{p \\le m} e^{G_{m,j} - G_{p,j}} \\Delta_p v_p k_{p,j}$ with "
        "$G_{m,j} = \\sum_{r \\le m} \\Delta_r A_j$, and the channel is attention with a decay "
        "per key entry: $C = ((Q \\circ e^{G}) (K \\circ e^{-G})^\\top \\circ M) "
        "\\operatorname{diag}(\\Delta) V$, the graph below, given $G$ and $\\Delta$. Over a "
        "segment that starts from a state, the rule keeps the invariant from which SymPy "
        "derives, at symbolic sizes, that the recurrent, quadratic and chunked forms are one.",
    ),
    base="linear-attention",
    build=selective,
    claims=tuple(
        WithoutSoftmax(
            part, "selective-scan", heading="" if part != "written" else None, text=_TEXT[part]
        )
        for part in ("written", "state", "output", "carried")
    ),
    twin=Twin(
        "attention.linear.selective_read",
        ("X", "W_q", "W_k", "W_v", "Delta_step", "G_log"),
        label="quadratic form",
    ),
    alone="it is derived for one channel of Mamba's mixer as causal linear attention, a decay "
    "per key entry and the writes scaled by the steps, in its recurrent, chunked and "
    "quadratic forms",
    rank=10,
    short="selective scan",
    document=Document(
        sections=("introduction", "shapes", "steps", "facts", "backward", "explicit", "code"),
        states="derive.proofs.linear.chunk_states",
    ),
    notation=(WRITTEN, STEP, LOG_DECAYS, Q_DECAYED, K_DECAYED),
)
