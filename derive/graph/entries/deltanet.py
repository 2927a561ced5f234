r"""DeltaNet and Gated DeltaNet (the delta rule and the gated delta rule; the linear layers of Qwen
3.5 and Qwen3-Next, the book's ch04/08_deltanet; Kimi Linear's refines it with a gate per
channel): linear attention whose tokens write into the state only what it does not already
predict, u_m = β_m (v_m − α_m S^{(m−1)ᵀ} k_m), the gated rule's state decaying by
α_m = e^{g_m} before each write.

Their graph is the parallel form's read, C = (Q Kᵀ/√c ∘ Γ ∘ M) U: linear attention's graph with
the values replaced by the written values U, and for the gated rule each weight multiplied by the
decay γ_{m,p} = e^{G_m − G_p} from token p's write to token m's read. U and Γ are the graph's
inputs: how they come from V, β and g — U solves the delta rule's unit lower-triangular system,
Γ is the cumulative decay taken exclusive of token p's own — and that the recurrence, the chunked
form and this read are one, is what SymPy derives in the facts (`derive.proofs.linear`), and what
the tests of `attention.linear` check number for number. `derive check` compares the read's steps
and its derived backward pass (dU, dΓ, dQ, dK, the weights') with torch, and the whole with
`attention.linear.read_written` (for the delta rule, linear attention's recurrence on U; for the
gated rule, given any Γ, the parallel read).
"""

from __future__ import annotations

from sympy import Eq, Piecewise, Sum

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import WithoutSoftmax
from ..declaration import Declaration, Graph
from ..twins import StepTwin, Twin
from ..variant import Document, Variant

#: The values the delta rule writes (one row per token), and the decays between two tokens.
WRITTEN = register_letter(
    Letter(
        "U_written",
        "uwritten",
        "U",
        "u",
        meaning="value token $p$ writes into the state: $\\beta_p (v_p - \\alpha_p "
        "S^{(p-1)\\top} k_p)$ (the delta rule's), $\\Delta_p v_p$ (SSD's)",
        indices=(L.p, L.j),
        after="a",
    )
)
DECAYS = register_letter(
    Letter(
        "Gamma_decay",
        "gammadecay",
        r"\Gamma",
        r"\gamma",
        meaning="decay from token $p$'s write to token $m$'s read, $e^{G_m - G_p}$ "
        "($\\alpha_{p+1} \\cdots \\alpha_m$)",
        indices=(L.m, L.p),
        after="omegatilde",
    )
)

__all__ = ["DELTANET", "GATED_DELTANET", "reading_written"]


def _weights(gated: bool) -> Declaration:
    """a_{m,p} = ω̃_{m,p} (γ_{m,p}) for p ≤ m, 0 after."""
    a, omega, gamma = L.base("a"), L.base("omegatilde"), L.base("gammadecay")
    kept = omega[L.m, L.p] * (gamma[L.m, L.p] if gated else 1)
    shapes = {"Omega_scaled": (L.n, L.n), **({"Gamma_decay": (L.n, L.n)} if gated else {})}
    return Declaration(
        "weights",
        "A",
        "Weights without the softmax" + (", decayed" if gated else ""),
        Eq(a[L.m, L.p], Piecewise((kept, L.p <= L.m), (0, True)), evaluate=False),
        {**shapes, "A": (L.n, L.n)},
        twin=StepTwin(
            "attention.linear.causal_weights",
            ("Omega_scaled",),
            (("decays", "Gamma_decay"),) if gated else (),
        ),
    )


def _read() -> Declaration:
    """c_{m,j} = Σ_p a_{m,p} u_{p,j}: each token reads the written values."""
    ctx, a, u = L.base("ctx"), L.base("a"), L.base("uwritten")
    return Declaration(
        "context",
        "C",
        "What each token reads",
        Eq(ctx[L.m, L.j], Sum(a[L.m, L.p] * u[L.p, L.j], (L.p, 1, L.n)), evaluate=False),
        {"A": (L.n, L.n), "U_written": (L.n, L.c), "C": (L.n, L.c)},
        twin=StepTwin("attention.functional.context", ("A", "U_written")),
    )


def reading_written(gated: bool):
    """The build: linear attention's graph reading U in place of V (whose projection goes), its
    weights decayed by Γ for the gated rule."""

    def build(graph: Graph) -> Graph:
        steps = []
        for step in graph.declarations:
            if step.output == "V":
                continue
            if step.name == "weights":
                step = _weights(gated)
            elif step.name == "context":
                step = _read()
            steps.append(step)
        name = "gated delta rule" if gated else "delta rule"
        return Graph(f"the {name}'s read", tuple(steps), graph.relations)

    return build


_TEXT = {
    "written": "What token $m$ writes, from the invariant at token $m - 1$: row $m$ of the "
    "unit lower-triangular system $(I + L) U = \\operatorname{diag}(\\beta)(V - "
    "\\operatorname{diag}(e^{G}) K S^{(s)})$:",
    "state": "The recurrence takes the invariant at token $m - 1$ to the invariant at token $m$ "
    "(before the segment's first token it holds: $G_s = 0$, an empty sum):",
    "output": "What token $m$ reads is row $m$ of the graph's $C$ (with $S^{(s)} = 0$ for the "
    "whole sequence): the parallel form.",
    "carried": "A chunk that starts from the state the chunk before it ended with, its decays "
    "counted from its own start, holds the state of the unsplit sequence; so any split into "
    "chunks, uneven ones included, gives the recurrence's numbers (the chunked form):",
}


def _claims(rule: str) -> tuple[WithoutSoftmax, ...]:
    return tuple(
        WithoutSoftmax(part, rule, heading="" if part != "written" else None, text=_TEXT[part])
        for part in ("written", "state", "output", "carried")
    )


_DOCUMENT = Document(
    sections=("introduction", "shapes", "steps", "facts", "backward", "explicit", "code"),
    states="derive.proofs.linear.chunk_states",
)

_INTRO = (
    "Over a segment of tokens $s + 1, \\dots$ that starts from a state $S^{(s)}$ (0 for the "
    "whole sequence; what the chunk before left, for the chunked form), with "
    "$G_m = \\sum_{r = s+1}^{m} g_r$ and $\\gamma_{m,p} = e^{G_m - G_p}$, the rule keeps the "
    "invariant $S^{(m)} = e^{G_m} S^{(s)} + \\sum_{p = s+1}^{m} \\gamma_{m,p} k_p u_p^\\top$, "
    "from which SymPy derives, at symbolic sizes, that the recurrent, parallel and chunked forms "
    "are one. The graph below is the parallel form's read, given the written values $U$"
)

DELTANET = Variant(
    "deltanet",
    "DeltaNet (the delta rule)",
    (
        "DeltaNet (Schlag et al., 2021; Yang et al., 2024) keeps linear attention's state "
        "$S^{(m)}$ ($c \\times c$ numbers, read as $o_m = S^{(m)\\top} q_m$) and changes what a "
        "token writes: $S^{(m)} = S^{(m-1)} + k_m u_m^\\top$ with "
        "$u_m = \\beta_m (v_m - S^{(m-1)\\top} k_m)$, only the part of $v_m$ the state does not "
        "already predict for $k_m$, at the strength $\\beta_m \\in (0, 1)$.",
        _INTRO + " ($G = 0$, $\\gamma = 1$ here).",
    ),
    base="linear-attention",
    build=reading_written(gated=False),
    claims=_claims("deltanet"),
    twin=Twin(
        "attention.linear.read_written",
        ("X", "W_q", "W_k", "U_written"),
        label="recurrent read",
    ),
    alone="its state's update (the delta rule) is derived for one head of causal linear "
    "attention, in its recurrent, chunked and parallel forms",
    rank=6,
    short="DeltaNet",
    document=_DOCUMENT,
    notation=(WRITTEN,),
)

GATED_DELTANET = Variant(
    "gated-deltanet",
    "Gated DeltaNet (the gated delta rule)",
    (
        "Gated DeltaNet (Yang et al., 2025; the linear layers of Qwen 3.5 and Qwen3-Next, the "
        "book's ch04/08; Kimi Linear's gates each channel) decays DeltaNet's state before each "
        "write: "
        "$S^{(m)} = \\alpha_m S^{(m-1)} + k_m u_m^\\top$ with "
        "$u_m = \\beta_m (v_m - \\alpha_m S^{(m-1)\\top} k_m)$ and $\\alpha_m = e^{g_m}$, "
        "$g_m \\le 0$ a log-decay computed from the token. Qwen 3.5 normalises each query and "
        "key to unit length and scales the queries by $1/\\sqrt{c}$ (the $\\tilde\\omega$ of "
        "the graph).",
        _INTRO + ", and the decays $\\Gamma$ (0 above the diagonal): "
        "$\\gamma_{m,p} = \\alpha_{p+1} \\cdots \\alpha_m$, without token $p$'s own $\\alpha_p$ "
        "(its write comes after its decay).",
    ),
    base="linear-attention",
    build=reading_written(gated=True),
    claims=_claims("gated-deltanet"),
    twin=Twin(
        "attention.linear.read_written",
        ("X", "W_q", "W_k", "U_written", "Gamma_decay"),
        label="parallel read",
    ),
    alone="its state's update (the gated delta rule) is derived for one head of causal linear "
    "attention, in its recurrent, chunked and parallel forms",
    rank=7,
    short="Gated DeltaNet",
    document=_DOCUMENT,
    notation=(WRITTEN, DECAYS),
)
