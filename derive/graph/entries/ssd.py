r"""Mamba-2's state-space dual layer (SSD; Dao and Gu, *Transformers are SSMs: Generalized Models
and Efficient Algorithms Through Structured State Space Duality*, 2024): per head, the state
h_t = a_t h_{t−1} + B_t x_tᵀ Δ_t, read as y_t = h_tᵀ C_t, with the scalar decay a_t = e^{Δ_t A}.
In the book's letters the queries are Mamba's C (Q = X W_q), the keys its B (K = X W_k) and the
values its x (V = X W_v): SSD is causal linear attention that decays its state before each write
and writes each value scaled by the token's step Δ_p.

Its graph is the quadratic (dual) form, C = (Q Kᵀ ∘ Γ ∘ M) diag(Δ) V, the scores unscaled (SSD has
no 1/√c): linear attention's graph with the scaling gone, the weights decayed by the
semiseparable mask Γ (γ_{m,p} = a_{p+1} ⋯ a_m, 1 on the diagonal) and the values written as
U = diag(Δ) V. Γ and Δ are the graph's inputs; that the recurrence, the chunked algorithm and
this form are one (any split into chunks), that with a ≡ 1 and Δ ≡ 1 it is causal linear
attention, and that its write is the gated delta rule's without the correction, are what SymPy
derives in the facts (`derive.proofs.linear`). Mamba-2's D skip (y_t + D x_t) is outside the
graph: `attention.linear.ssd` adds it.

Its twins: `attention.linear.stepped_values` for the written values, and
`attention.linear.ssd_read` for the whole; `attention.linear.ssd` computes the same numbers in
its three forms from Δ and A (its tests).
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Piecewise

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import WithoutSoftmax
from ..declaration import Declaration, Graph
from ..twins import StepTwin, Twin
from ..variant import Document, Variant
from .deltanet import DECAYS, WRITTEN

#: Each token's step Δ_p (Mamba's dt after its softplus), one number per token.
STEP = register_letter(
    Letter(
        "Delta_step",
        "deltastep",
        r"\Delta",
        r"\Delta",
        meaning="step of token $p$ (Mamba-2's $\\Delta_p$): it scales the value token $p$ "
        "writes, and its decay is $a_p = e^{\\Delta_p A}$",
        indices=(L.p, sp.S.One),
        after="v",
    )
)

__all__ = ["VARIANT", "state_space_dual", "stepped_values", "read_written"]


def _weights() -> Declaration:
    """a_{m,p} = ω_{m,p} γ_{m,p} for p ≤ m, 0 after: the unscaled scores, decayed."""
    a, omega, gamma = L.base("a"), L.base("omega"), L.base("gammadecay")
    kept = omega[L.m, L.p] * gamma[L.m, L.p]
    return Declaration(
        "weights",
        "A",
        "Weights: the scores masked by the semiseparable decays",
        Eq(a[L.m, L.p], Piecewise((kept, L.p <= L.m), (0, True)), evaluate=False),
        {"Omega": (L.n, L.n), "Gamma_decay": (L.n, L.n), "A": (L.n, L.n)},
        twin=StepTwin("attention.linear.causal_weights", ("Omega",), (("decays", "Gamma_decay"),)),
    )


def stepped_values() -> Declaration:
    """u_{p,j} = Δ_{p,1} v_{p,j}: each value scaled by its token's step."""
    u, delta, v = L.base("uwritten"), L.base("deltastep"), L.base("v")
    return Declaration(
        "stepped_values",
        "U_written",
        "What each token writes: its value times its step",
        Eq(u[L.p, L.j], delta[L.p, 1] * v[L.p, L.j], evaluate=False),
        {"V": (L.n, L.c), "Delta_step": (L.n, sp.S.One), "U_written": (L.n, L.c)},
        twin=StepTwin("attention.linear.stepped_values", ("V", "Delta_step")),
    )


def read_written() -> Declaration:
    """c_{m,j} = Σ_p a_{m,p} u_{p,j}."""
    ctx, a, u = L.base("ctx"), L.base("a"), L.base("uwritten")
    return Declaration(
        "context",
        "C",
        "What each token reads",
        Eq(ctx[L.m, L.j], sp.Sum(a[L.m, L.p] * u[L.p, L.j], (L.p, 1, L.n)), evaluate=False),
        {"A": (L.n, L.n), "U_written": (L.n, L.c), "C": (L.n, L.c)},
        twin=StepTwin("attention.functional.context", ("A", "U_written")),
    )


def state_space_dual(graph: Graph) -> Graph:
    """Linear attention's graph as SSD's quadratic form: the scaling gone, the weights decayed,
    the values written scaled by the steps."""
    steps = []
    for step in graph.declarations:
        if step.output == "Omega_scaled":
            continue
        if step.name == "weights":
            steps.append(_weights())
        elif step.name == "context":
            steps.extend((stepped_values(), read_written()))
        else:
            steps.append(step)
    return Graph("Mamba-2's state-space dual", tuple(steps), graph.relations)


_TEXT = {
    "written": "What token $m$ writes into the state: its value scaled by its step.",
    "state": "The recurrence takes the invariant at token $m - 1$ to the invariant at token $m$ "
    "(before the segment's first token it holds: $G_s = 0$, an empty sum), with the "
    "log-decay $g_m = \\Delta_m A$ and $G_m = \\sum_{r = s+1}^{m} g_r$:",
    "output": "What token $m$ reads is row $m$ of the quadratic form (with $S^{(s)} = 0$ for the "
    "whole sequence: the graph's $C$):",
    "carried": "A chunk that starts from the state the chunk before it ended with, its decays "
    "counted from its own start, holds the state of the unsplit sequence; so any split into "
    "chunks, uneven ones included, gives the recurrence's numbers (Mamba-2's chunked "
    "algorithm: the quadratic form within each chunk, the states passed from chunk to chunk, "
    "each chunk's outputs read from the state it starts with):",
    "linear": "With no decay ($A = 0$, every $a_m = 1$, $G \\equiv 0$) and unit steps "
    "($\\Delta \\equiv 1$), what a token reads is causal linear attention's row, without a "
    "feature map and without the scaling:",
    "delta": "SSD's write is the gated delta rule's $\\beta_m (v_m - \\epsilon \\alpha_m "
    "S^{(m-1)\\top} k_m)$ (the first line, $\\epsilon = 1$ its own) with the correction's "
    "strength $\\epsilon$ set to 0 (the second line) and $\\beta_m = \\Delta_m$ (the third):",
    "shared": "With that write, the gated delta rule's state step (the first line, on the "
    "invariant at token $m - 1$) is SSD's: the decay and the state are the two rules' same, "
    "so SSD is the gated delta rule that writes without first taking out what the state "
    "predicts:",
}


def _claims() -> tuple[WithoutSoftmax, ...]:
    parts = ("written", "state", "output", "carried", "linear", "delta", "shared")
    headings = {
        "written": None,
        "linear": "SSD without decay is linear attention",
        "delta": "SSD is the gated delta rule without its correction",
    }
    return tuple(
        WithoutSoftmax(part, "ssd", heading=headings.get(part, ""), text=_TEXT[part])
        for part in parts
    )


VARIANT = Variant(
    "ssd",
    "Mamba-2's state-space dual (SSD)",
    (
        "Mamba-2 (Dao and Gu, 2024; the layers of Mamba 2, Bamba, Granite 4's hybrid layers, "
        "Nemotron-H and Zamba 2) keeps, per head, a state $h_m$ that decays by "
        "$a_m = e^{\\Delta_m A}$ ($A < 0$ a number per head, $\\Delta_m > 0$ the token's "
        "step) before each write: "
        "$h_m = a_m h_{m-1} + \\Delta_m k_m v_m^\\top$, read as $o_m = h_m^\\top q_m$. Mamba "
        "calls the queries $C$, the keys $B$ and the values $x$; here they are the book's "
        "$Q = X W_q$, $K = X W_k$ and $V = X W_v$.",
        "Unrolled, the state is $h_m = \\sum_{p \\le m} \\gamma_{m,p} \\Delta_p k_p v_p^\\top$ "
        "with $\\gamma_{m,p} = a_{p+1} \\cdots a_m$, and the layer is attention with a "
        "1-semiseparable mask: $C = (Q K^\\top \\circ \\Gamma \\circ M) "
        "\\operatorname{diag}(\\Delta) V$, the graph below, given $\\Gamma$ and $\\Delta$. "
        "Over a segment of tokens $s + 1, \\dots$ that starts from a state $S^{(s)}$, with "
        "$G_m = \\sum_{r = s+1}^{m} \\Delta_r A$, the rule keeps the invariant "
        "$S^{(m)} = e^{G_m} S^{(s)} + \\sum_{p = s+1}^{m} \\gamma_{m,p} \\Delta_p k_p v_p^\\top$, "
        "from which SymPy derives, at symbolic sizes, that the recurrent, quadratic and chunked "
        "forms are one.",
    ),
    base="linear-attention",
    build=state_space_dual,
    claims=_claims(),
    twin=Twin(
        "attention.linear.ssd_read",
        ("X", "W_q", "W_k", "W_v", "Delta_step", "Gamma_decay"),
        label="quadratic form",
    ),
    alone="it is derived for one head of causal linear attention, its state decayed and its "
    "writes scaled by the steps, in its recurrent, chunked and quadratic forms",
    rank=8,
    short="SSD",
    document=Document(
        sections=("introduction", "shapes", "steps", "facts", "backward", "explicit", "code"),
        states="derive.proofs.linear.chunk_states",
    ),
    notation=(WRITTEN, DECAYS, STEP),
)
