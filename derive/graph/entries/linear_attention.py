r"""Causal linear attention (Katharopoulos et al., *Transformers are RNNs*, 2020; the first of the
linear rules of the book's ch04/08_deltanet): self-attention without the softmax. Its graph is
self-attention's with the weights replaced by the causal scaled scores themselves,

    a_{m,p} = ω̃_{m,p} where p ≤ m, 0 after,

so that C = (Q Kᵀ/√c ∘ M) V: the parallel form, whose backward pass derive derives as for any
graph. What the entry adds is what SymPy derives about the other two forms of the same numbers
(`derive.proofs.linear`): the recurrence S^{(m)} = S^{(m−1)} + k_m v_mᵀ, o_m = S^{(m)ᵀ} q_m keeps
the invariant and reads the parallel form's row, and the chunked form carries its state from chunk
to chunk as the unsplit recurrence does. The same proofs, for the delta rule and the gated delta
rule (DeltaNet, Gated DeltaNet), are stated beside them.

Its twins: `attention.linear.linear_self_attention` in its three forms (the recurrence, chunks of
two tokens, the n × n matrix), and `attention.linear.causal_weights` for its step.
"""

from __future__ import annotations

from sympy import Eq, Piecewise

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import WithoutSoftmax
from ..declaration import Declaration, Graph
from ..twins import StepTwin, Twin
from ..variant import Document, Variant

#: The state after chunk t (`derive.proofs.linear.chunk_states`), indexed (t, j, j') as a head's
#: entries are.
S_STATE = register_letter(Letter("S_state", "sstate", "S", "s", indices=(L.j, L.j2)))

__all__ = ["VARIANT", "without_softmax", "S_STATE"]


def causal_weights() -> Declaration:
    """a_{m,p} = ω̃_{m,p} for p ≤ m, 0 after: the scaled scores, causal, as the weights."""
    a, omega = L.base("a"), L.base("omegatilde")
    rhs = Piecewise((omega[L.m, L.p], L.p <= L.m), (0, True))
    return Declaration(
        "weights",
        "A",
        "Weights without the softmax (the causal scaled scores)",
        Eq(a[L.m, L.p], rhs, evaluate=False),
        {"Omega_scaled": (L.n, L.n), "A": (L.n, L.n)},
        twin=StepTwin("attention.linear.causal_weights", ("Omega_scaled",)),
    )


def without_softmax(graph: Graph) -> Graph:
    """`graph` with its softmax weights replaced by the causal scaled scores."""
    if graph.producer("A") is None or graph.producer("Omega_scaled") is None:
        raise ValueError(f"{graph.name} has no weights of scaled scores to replace")
    steps = tuple(causal_weights() if s.name == "weights" else s for s in graph.declarations)
    return Graph("causal linear attention", steps, graph.relations)


#: What its twins take: X and the weights, and W_o where the graph has heads.
_ARGUMENTS = ("X", "W_q", "W_k", "W_v", "W_o?")

_RULES = (
    ("linear-attention", "Linear attention", "its state adds $k_m v_m^\\top$, token after token"),
    ("deltanet", "The delta rule (DeltaNet)", "its state writes only what it does not predict"),
    (
        "gated-deltanet",
        "The gated delta rule (Gated DeltaNet)",
        "its state decays before each write",
    ),
)
_TEXT = {
    "written": "What token $m$ writes, from the invariant at token $m - 1$:",
    "state": "The recurrence takes the invariant at token $m - 1$ to the invariant at token $m$ "
    "(it holds before the segment's first token: $G_s = 0$, an empty sum):",
    "output": "What token $m$ reads is the parallel form's row $m$:",
    "carried": "A chunk that starts from the state the chunk before it ended with, its decays "
    "counted from its own start, holds the state of the unsplit sequence; so any split into "
    "chunks, uneven ones included, gives the recurrence's numbers:",
}


def _claims() -> tuple[WithoutSoftmax, ...]:
    claims = []
    for rule, heading, what in _RULES:
        for part in ("written", "state", "output", "carried"):
            first = part == "written"
            claims.append(
                WithoutSoftmax(
                    part,
                    rule,
                    heading=f"{heading}: {what}" if first else "",
                    text=_TEXT[part],
                )
            )
    return tuple(claims)


VARIANT = Variant(
    "linear-attention",
    "Causal linear attention (without the softmax)",
    (
        "Linear attention takes the softmax out of causal self-attention: the weights are the "
        "scaled scores themselves, $a_{m,p} = \\tilde\\omega_{m,p}$ for $p \\le m$ and 0 after, "
        "so that $C = (Q K^\\top / \\sqrt{c} \\circ M) V$ (Katharopoulos et al., 2020, with a "
        "feature map $\\phi$ on the queries and keys, here the identity). Without the softmax "
        "the product can be taken the other way round: token $m$ reads "
        "$o_m = S^{(m)\\top} q_m$ from a state $S^{(m)} = S^{(m-1)} + k_m v_m^\\top$ of "
        "$c \\times c$ numbers, whatever the length of the sequence (the recurrent form, what "
        "generation runs), or chunks of tokens carry the state from one to the next (the "
        "chunked form, what training runs).",
        "DeltaNet and Gated DeltaNet (the linear layers of Qwen 3.5 and Qwen3-Next, the "
        "book's ch04/08) keep the state and change the write: the delta rule "
        "writes $u_m = \\beta_m (v_m - \\alpha_m S^{(m-1)\\top} k_m)$, only what the state "
        "does not already predict for $k_m$, and the gated rule decays the state by "
        "$\\alpha_m = e^{g_m}$ first. Over a segment of tokens $s + 1, \\dots$ that starts "
        "from a state $S_0$, with $G_m = \\sum_{r = s+1}^{m} g_r$ and "
        "$\\gamma_{m,p} = e^{G_m - G_p}$, each rule keeps the invariant "
        "$S^{(m)} = e^{G_m} S_0 + \\sum_{p = s+1}^{m} \\gamma_{m,p} k_p u_p^\\top$ "
        "(linear attention: $G = 0$, $u = v$), from which SymPy derives, at symbolic sizes, "
        "that the three forms are one. The delta rule's writes solve a unit lower-triangular "
        "system, $(I + L) U = \\operatorname{diag}(\\beta)(V - \\operatorname{diag}(e^{G}) K "
        "S_0)$ with $L_{m,p} = \\beta_m \\gamma_{m,p}\\, k_m \\cdot k_p$ for $p < m$: the "
        "chunked form solves it once per chunk (the WY/UT representation).",
    ),
    build=without_softmax,
    claims=_claims(),
    twin=Twin(
        "attention.linear.linear_self_attention",
        _ARGUMENTS,
        label="recurrent form",
        implies=("causal",),
    ),
    also=(
        Twin(
            "attention.linear.linear_self_attention",
            _ARGUMENTS,
            options=(("chunk_size", 2),),
            label="chunked form (chunks of 2)",
            implies=("causal",),
        ),
        Twin(
            "attention.linear.linear_self_attention",
            _ARGUMENTS,
            options=(("parallel", True),),
            label="parallel form",
            implies=("causal",),
        ),
    ),
    rank=5,
    short="linear attention",
    document=Document(
        sections=("introduction", "shapes", "steps", "facts", "backward", "explicit", "code"),
        states="derive.proofs.linear.chunk_states",
    ),
    notation=(S_STATE,),
)
