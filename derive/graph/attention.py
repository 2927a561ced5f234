"""The declarations of self-attention (section 3.4 of the book), its causal and multi-head forms.

This module and `derive.graph.assumptions` are the only places where formulas are typed in.
Each function returns one step, declared by the formula of one entry of its output (and, where
the torch side differs from calling `attention.functional.<name>` on what the step reads, its
twin):

    q_{m,j} = Σ_{i=1}^{d} x_{m,i} (W_q)_{i,j}          projection (and K, V)
    ω_{m,p} = Σ_{j=1}^{c} q_{m,j} k_{p,j}              scores
    ω̃_{m,p} = ω_{m,p} / √c                             scaled_scores
    M_{m,p} = 0 if p ≤ m, −∞ otherwise                  causal_mask
    ω̂_{m,p} = ω̃_{m,p} + M_{m,p}                        masked scores (the mask is additive)
    a_{m,p} = exp(ω̃_{m,p}) / Σ_{r=1}^{n} exp(ω̃_{m,r}) weights (of ω̂ when masked)
    z_{m,j} = Σ_{p=1}^{n} a_{m,p} v_{p,j}              context (z: the entries of C)

and for h heads of width c_h = c / h: the split q^{(ℓ)}_{m,j} = q_{m,(ℓ−1)c_h+j}, the
concatenation \\hat{z}_{m,(ℓ−1)c_h+j} = z^{(ℓ)}_{m,j} and the output projection
z_{m,j} = Σ_{i=1}^{c} \\hat{z}_{m,i} (W_o)_{i,j} (the steps between them run per head:
`derive.graph.heads`). Step names match `attention.functional`, so that the two halves read side
by side. The graphs these steps form are the entries of the registry (`derive.graph.entries`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy import Eq, Piecewise, Sum, exp, sqrt

from ..notation import letters as L
from .declaration import Declaration, Graph
from .sizes import Divides
from .twins import StepTwin

__all__ = [
    "projection",
    "scores",
    "scaled_scores",
    "causal_mask",
    "masked_scores",
    "weights",
    "context",
    "split_heads",
    "merge_heads",
    "output_projection",
    "STEP_NAMES",
    "Dims",
    "SELF",
    "HEADS_DIVIDE",
]

#: The names of `attention.functional` that the steps mirror, in derivation order.
STEP_NAMES = (
    "projection",
    "split_heads",
    "scores",
    "scaled_scores",
    "causal_mask",
    "masked_scores",
    "weights",
    "context",
    "merge_heads",
)

#: Heads split the columns: h divides c.
HEADS_DIVIDE = Divides(L.h, L.c, "each head gets c / h columns")


@dataclass(frozen=True)
class Dims:
    """The sizes a graph's matrices have: queries (rows of X, Q, Ω, A, C), keys (rows of the
    matrix the keys and values are projected from, and of K, V; columns of Ω, A), the width of
    X, the width of the key/value source, c, and the width of K and V (c, or g c_h when g
    groups of keys and values serve h heads). Self-attention reads its keys from X itself;
    cross-attention from another sequence Y (s × d_y); latent attention from U (n × d_u)."""

    queries: sp.Expr = L.n
    keys: sp.Expr = L.n
    width: sp.Expr = L.d
    source_width: sp.Expr = L.d
    source: str = "x"
    kv_width: sp.Expr = L.c

    def shape(self, letter: str) -> tuple[sp.Expr, sp.Expr]:
        """The shape of a matrix; a head's matrices have c_h columns where the whole has c."""
        if letter.endswith("_l"):
            rows, cols = self.shape(letter.removesuffix("_l"))
            return rows, L.c_h if cols in (L.c, self.kv_width) else cols
        n, s, c, kv = self.queries, self.keys, L.c, self.kv_width
        table = {
            "X": (n, self.width),
            "Y": (s, self.source_width),
            "U": (s, L.d_u),
            "W_dkv": (self.width, L.d_u),
            "W_q": (self.width, c),
            "W_k": (self.source_width, kv),
            "W_v": (self.source_width, kv),
            "W_uk": (L.d_u, kv),
            "W_uv": (L.d_u, kv),
            "Q": (n, c),
            "K": (s, kv),
            "V": (s, kv),
            "Omega": (n, s),
            "Omega_scaled": (n, s),
            "M": (n, s),
            "Omega_masked": (n, s),
            "A": (n, s),
            "C": (n, c),
            "C_concat": (n, c),
            "W_o": (c, c),
        }
        return table[letter]

    def shapes(self, *letters: str) -> dict[str, tuple[sp.Expr, sp.Expr]]:
        return {letter: self.shape(letter) for letter in letters}


SELF = Dims()


def _entry(name: str, head: bool, *indices: sp.Expr) -> sp.Indexed:
    """One entry: ``_entry("q", False, m, j)`` is q_{m,j}; with `head`, q^{(ℓ)}_{m,j}."""
    base = L.base(name)
    return base[(L.ell, *indices)] if head else base[indices]


def _suffix(head: bool) -> str:
    return "_l" if head else ""


_TITLES = {"q": "Query projection", "k": "Key projection", "v": "Value projection"}


def projection(which: str, dims: Dims = SELF) -> Declaration:
    r"""$q_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_q)_{i,j}$ (`which`: ``"q"``, ``"k"`` or ``"v"``);
    keys and values from the source the dims name (Y for cross-attention: row p)."""
    i, j = L.i, L.j
    source = "x" if which == "q" else dims.source
    row = L.p if source == "y" else L.m
    width = dims.width if source == "x" else dims.source_width
    rhs = Sum(_entry(source, False, row, i) * _entry(f"w{which}", False, i, j), (i, 1, width))
    letter = which.upper()
    return Declaration(
        "projection",
        letter,
        _TITLES[which],
        Eq(_entry(which, False, row, j), rhs, evaluate=False),
        dims.shapes(source.upper(), f"W_{which}", letter),
    )


def scores(*, head: bool = False, dims: Dims = SELF) -> Declaration:
    r"""$\omega_{m,p} = \sum_{j=1}^{c} q_{m,j} k_{p,j}$: the dot product of query m and key p."""
    m, p, j = L.m, L.p, L.j
    width = L.c_h if head else L.c
    rhs = Sum(_entry("q", head, m, j) * _entry("k", head, p, j), (j, 1, width))
    s = _suffix(head)
    return Declaration(
        "scores",
        "Omega" + s,
        "Attention scores",
        Eq(_entry("omega", head, m, p), rhs, evaluate=False),
        dims.shapes("Q" + s, "K" + s, "Omega" + s),
    )


def scaled_scores(*, head: bool = False, dims: Dims = SELF) -> Declaration:
    r"""$\tilde\omega_{m,p} = \omega_{m,p} / \sqrt{c}$ (per head: $\sqrt{c_h}$)."""
    width = L.c_h if head else L.c
    s = _suffix(head)
    rhs = _entry("omega", head, L.m, L.p) / sqrt(width)
    return Declaration(
        "scaled_scores",
        "Omega_scaled" + s,
        "Scaling by the square root of the width",
        Eq(_entry("omegatilde", head, L.m, L.p), rhs, evaluate=False),
        dims.shapes("Omega" + s, "Omega_scaled" + s),
        twin=StepTwin("attention.functional.scaled_scores", options=(("c", width),)),
    )


def causal_mask(dims: Dims = SELF) -> Declaration:
    r"""$M_{m,p} = 0$ where $p \le m$ (token m may attend to p), $-\infty$ otherwise."""
    rhs = Piecewise((0, sp.Le(L.p, L.m)), (-sp.oo, True))
    return Declaration(
        "causal_mask",
        "M",
        "The causal mask",
        Eq(_entry("mask", False, L.m, L.p), rhs, evaluate=False),
        dims.shapes("M"),
        constant=True,
        twin=StepTwin("attention.functional.causal_mask", (), (("n", dims.queries),)),
    )


def masked_scores(*, head: bool = False, dims: Dims = SELF) -> Declaration:
    r"""$\hat\omega_{m,p} = \tilde\omega_{m,p} + M_{m,p}$: the mask is added to the scores."""
    s = _suffix(head)
    rhs = _entry("omegatilde", head, L.m, L.p) + _entry("mask", False, L.m, L.p)
    return Declaration(
        "masked_scores",
        "Omega_masked" + s,
        "Masking the scores",
        Eq(_entry("omegahat", head, L.m, L.p), rhs, evaluate=False),
        dims.shapes("Omega_scaled" + s, "M", "Omega_masked" + s),
        twin=StepTwin(
            "attention.functional.masked_scores", ("Omega_scaled" + s,), (("mask", "M"),)
        ),
    )


def weights(*, head: bool = False, masked: bool = False, dims: Dims = SELF) -> Declaration:
    r"""$a_{m,p} = \exp(\tilde\omega_{m,p}) / \sum_{r=1}^{n} \exp(\tilde\omega_{m,r})$: the
    softmax of each row (of the masked scores $\hat\omega$ when `masked`). Its twin takes the
    scaled scores (and the mask M as booleans), ``weights(Ω̃, 1, mask=M)``, so that a row with
    no key gets the convention's zero weights and Ω̃ its gradient."""
    source = "omegahat" if masked else "omegatilde"
    s = _suffix(head)
    numerator = exp(_entry(source, head, L.m, L.p))
    total = Sum(exp(_entry(source, head, L.m, L.r)), (L.r, 1, dims.keys))
    letter = ("Omega_masked" if masked else "Omega_scaled") + s
    options = (("c", 1), *((("mask", "M"),) if masked else ()))
    twin = StepTwin("attention.functional.weights", ("Omega_scaled" + s,), options)
    return Declaration(
        "weights",
        "A" + s,
        "Attention weights (row-wise softmax)",
        Eq(_entry("a", head, L.m, L.p), numerator / total, evaluate=False),
        dims.shapes(letter, "A" + s),
        twin=twin,
    )


def context(*, head: bool = False, dims: Dims = SELF) -> Declaration:
    r"""$z_{m,j} = \sum_{p=1}^{n} a_{m,p} v_{p,j}$: row m of C weighs the value rows."""
    m, p, j = L.m, L.p, L.j
    rhs = Sum(_entry("a", head, m, p) * _entry("v", head, p, j), (p, 1, dims.keys))
    s = _suffix(head)
    return Declaration(
        "context",
        "C" + s,
        "Context vectors",
        Eq(_entry("ctx", head, m, j), rhs, evaluate=False),
        dims.shapes("A" + s, "V" + s, "C" + s),
    )


def weights_step(graph: Graph) -> Declaration | None:
    """The graph's weights step (A, or each head's A_ℓ), or None where it has none."""
    return next((step for step in graph.declarations if step.name == "weights"), None)


def softmax_weights(graph: Graph) -> Declaration | None:
    """The graph's weights step where it is a softmax (its formula has e^x: self-attention's,
    masked or not, a sink's), else None (none, or linear attention's scores as the weights)."""
    step = weights_step(graph)
    return step if step is not None and step.element.rhs.has(sp.exp) else None


def split_heads(which: str) -> Declaration:
    r"""Head ℓ takes its block of columns: $q^{(\ell)}_{m,j} = q_{m,(\ell-1)c_h+j}$."""
    letter = which.upper()
    rhs = _entry(which, False, L.m, (L.ell - 1) * L.c_h + L.j)
    return Declaration(
        "split_heads",
        letter + "_l",
        "Split into heads",
        Eq(_entry(which, True, L.m, L.j), rhs, evaluate=False),
        SELF.shapes(letter, letter + "_l"),
        requires=(HEADS_DIVIDE,),
    )


def merge_heads() -> Declaration:
    r"""The heads side by side: $\hat{z}_{m,(\ell-1)c_h+j} = z^{(\ell)}_{m,j}$."""
    lhs = _entry("ctxcat", False, L.m, (L.ell - 1) * L.c_h + L.j)
    return Declaration(
        "merge_heads",
        "C_concat",
        "Concatenate the heads",
        Eq(lhs, _entry("ctx", True, L.m, L.j), evaluate=False),
        SELF.shapes("C_l", "C_concat"),
    )


def output_projection() -> Declaration:
    r"""$z_{m,j} = \sum_{i=1}^{c} \hat{z}_{m,i} (W_o)_{i,j}$: the heads mixed by $W_o$."""
    m, i, j = L.m, L.i, L.j
    rhs = Sum(_entry("ctxcat", False, m, i) * _entry("wo", False, i, j), (i, 1, L.c))
    return Declaration(
        "projection",
        "C",
        "Output projection",
        Eq(_entry("ctx", False, m, j), rhs, evaluate=False),
        SELF.shapes("C_concat", "W_o", "C"),
    )
