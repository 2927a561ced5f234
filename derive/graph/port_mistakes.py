r"""The mistakes of ports: what goes wrong when attention is carried from one codebase to another,
each declared as a change to the steps of a variant's graph, as `derive.graph.mistakes` declares
the classic ones.

=============================  ===============================================================
``heads-split-without-transpose``  q^{(ℓ)}_{m,j} read from Q (n × c) as an h × n × c_h block in
                               memory: a reshape to (h, n, c_h) with no transpose (nanoGPT's
                               ``view(B, nh, T, hs)``), for queries, keys and values
``mask-filled-with-zero``      ω̂_{m,p} = ω̃_{m,p} where allowed, 0 where masked (``masked_fill``
                               with 0, or a product with the 0/1 mask): masked keys keep e⁰
``gqa-repeat-order``           head ℓ reads group (ℓ − 1) mod g: ``repeat`` where
                               ``repeat_interleave`` is meant
``rope-pairing``               the features rotated in interleaved pairs (2i − 1, 2i) where the
                               model pairs j with j + c_h/2, or the reverse (on the first c_r
                               features with partial RoPE)
``rope-not-on-keys``           the queries rotated, the keys not
``window-off-by-one``          each query sees w + 1 keys, not w (p ≥ m − w for p > m − w)
``softcap-missing``            the scores not capped: ω̆ = ω̃
``sink-missing``               the sink left out of each row's denominator
``rope-offset``                after a cache of s tokens, a call's tokens rotated at positions
                               0, 1, … again, not s, s + 1, … (``start_pos`` not passed on)
``qk-norm-per-head``           each head's c_h features RMS-normalised on their own where the
                               model normalises the whole row of Q and K (OLMo's QK-norm ported
                               as Qwen 3's)
=============================  ===============================================================

Each changes a graph only where its variant is in the form (a window only in a windowed
graph); elsewhere it is the graph itself, which explains nothing.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Mod, Piecewise, Sum, exp, floor

from ..notation import letters as L
from .declaration import Graph
from .forms import Form, entry, replaced, suffix

__all__ = [
    "heads_split_without_transpose",
    "mask_filled_with_zero",
    "gqa_repeat_order",
    "rope_pairing",
    "rope_not_on_keys",
    "window_off_by_one",
    "softcap_missing",
    "sink_missing",
    "qk_norm_per_head",
    "rope_offset",
]


def _has(form: Form, name: str) -> bool:
    return name in form.variant.split("+")


def heads_split_without_transpose(graph: Graph, form: Form) -> Graph:
    r"""$x^{(\ell)}_{m,j} = x_{\lfloor f/c \rfloor + 1,\, (f \bmod c) + 1}$ with
    $f = (\ell-1) n c_h + (m-1) c_h + j - 1$: each head reads the ℓ-th block of n c_h entries of
    X in memory, for Q, K and V."""
    if not form.heads or _has(form, "gqa"):
        return graph
    flat = (L.ell - 1) * L.n * L.c_h + (L.m - 1) * L.c_h + L.j - 1
    row, column = floor(flat / L.c) + 1, Mod(flat, L.c, evaluate=False) + 1
    for letter in ("Q", "K", "V"):
        graph = replaced(graph, letter + "_l", L.base(L.name_of(letter))[row, column])
    return graph


def mask_filled_with_zero(graph: Graph, form: Form) -> Graph:
    r"""$\hat\omega_{m,p} = \tilde\omega_{m,p}$ where $M_{m,p} = 0$, and $0$ where masked."""
    if not (form.causal or form.masked):
        return graph
    step = graph.step("Omega_masked" + suffix(form))
    scores = next(e for e in step.element.rhs.atoms(sp.Indexed) if L.letter_of(e) != "M")
    mask = entry("mask", False, L.m, L.p)
    return replaced(graph, step.output, Piecewise((scores, Eq(mask, 0)), (0, True)))


def gqa_repeat_order(graph: Graph, form: Form) -> Graph:
    r"""$k^{(\ell)}_{m,j} = k_{m, ((\ell-1) \bmod g) c_h + j}$: the groups repeated whole (head
    ℓ reads group (ℓ − 1) mod g), not each group h/g times in turn."""
    if not _has(form, "gqa"):
        return graph
    column = Mod(L.ell - 1, L.g, evaluate=False) * L.c_h + L.j
    for letter in ("K", "V"):
        graph = replaced(graph, letter + "_l", L.base(L.name_of(letter))[L.m, column])
    return graph


def rope_pairing(graph: Graph, form: Form) -> Graph:
    r"""The other layout of the pairs: interleaved, $\phi_{m,j} = (m-1)\beta^{-2\lfloor (j-1)/2
    \rfloor / c}$ and $x R = [-x_2\ x_1\ -x_4\ x_3 \cdots]$, where the model pairs j with
    j + c/2; or the reverse, where it interleaves (partial RoPE: on its first c_r features)."""
    from .entries import interleaved_rope, partial_rope, rope

    if not _has(form, "rope"):
        return graph
    head = bool(form.heads)
    width = L.c_h if head else L.c
    rotated = L.c_r if _has(form, "partial-rope") else width
    if not _has(form, "interleaved-rope"):
        graph = replaced(graph, "Phi", interleaved_rope.interleaved_angles(head, rotated))
        return replaced(graph, "R", interleaved_rope.interleaved_rotation(head, rotated))
    if rotated != width:
        angles, rotation = partial_rope.partial_angles(head), partial_rope.partial_rotation(head)
    else:
        angles, rotation = rope.rope_angles(head), rope.rotate_half(head)
    graph = replaced(graph, "Phi", angles.element.rhs)
    return replaced(graph, "R", rotation.element.rhs)


def rope_not_on_keys(graph: Graph, form: Form) -> Graph:
    r"""$\mathring{k}_{p,j} = k_{p,j}$: the keys left unrotated."""
    if not _has(form, "rope"):
        return graph
    step = graph.step("K_rot" + suffix(form))
    source = next(
        e for e in step.element.rhs.atoms(sp.Indexed) if L.letter_of(e) not in ("Phi", "R")
    )
    return replaced(graph, step.output, source.func(source.base, *step.element.lhs.indices))


def window_off_by_one(graph: Graph, form: Form) -> Graph | None:
    r"""$M_{m,p} = 0$ where $p \le m$ and $p \ge m - w$: w + 1 keys, one more than the window
    (not declared where a given mask folds the window in: M is −∞ on that key already)."""
    if not _has(form, "sliding-window"):
        return graph
    if form.masked:
        return None
    kept = sp.And(sp.Ge(L.m, L.p), sp.Ge(L.p, L.m - L.w))
    return replaced(graph, "M", Piecewise((0, kept), (-sp.oo, True)))


def softcap_missing(graph: Graph, form: Form) -> Graph:
    r"""$\breve\omega_{m,p} = \tilde\omega_{m,p}$: no cap."""
    if not _has(form, "softcap"):
        return graph
    return replaced(graph, "Omega_capped" + suffix(form), entry("omegatilde", form.heads, L.m, L.p))


def sink_missing(graph: Graph, form: Form) -> Graph:
    r"""$a_{m,p} = e^{x_{m,p}} / \sum_r e^{x_{m,r}}$: the sink's $e^{\zeta}$ left out."""
    if not _has(form, "sinks"):
        return graph
    step = graph.step("A" + suffix(form))
    without = step.element.rhs.replace(
        lambda e: isinstance(e, exp) and any(L.letter_of(i) == "Zeta" for i in e.atoms(sp.Indexed)),
        lambda e: sp.S.Zero,
    )
    return replaced(graph, step.output, without)


def qk_norm_per_head(graph: Graph, form: Form) -> Graph:
    r"""$\check{q}_{m,j} = (\gamma_q)_{1,j} q_{m,j} / \sqrt{\sum_{j'} q_{m,j'}^2 / c_h +
    \epsilon}$ over the c_h features $j'$ of the head that holds $j$ (from $c_h \lfloor (j-1)/c_h
    \rfloor + 1$), not over the whole row; the same for the keys."""
    if not _has(form, "whole-qk-norm"):
        return graph
    start = L.c_h * floor((L.j - 1) / L.c_h) + 1
    for which, row in (("q", L.m), ("k", L.p)):
        x = L.base(which)
        square = Sum(x[row, L.j2] ** 2, (L.j2, start, start + L.c_h - 1)) / L.c_h
        rhs = L.base("g" + which)[1, L.j] * x[row, L.j] / sp.sqrt(square + L.eps)
        graph = replaced(graph, which.upper() + "_norm", rhs)
    return graph


def rope_offset(graph: Graph, form: Form) -> Graph:
    r"""$\phi_{m,j}$ read at $m - s$ for the tokens $m > s$ of a call after a cache of $s$
    tokens: each call's queries and keys rotated as if they began the sequence (the cached keys
    keep the angles they were given)."""
    if not _has(form, "rope") or not form.cached:
        return graph
    restarted = Piecewise(
        *((L.m - start, sp.Gt(L.m, start)) for start in sorted(form.cached, reverse=True)),
        (L.m, True),
    )
    return replaced(graph, "Phi", graph.step("Phi").element.rhs.xreplace({L.m: restarted}))
