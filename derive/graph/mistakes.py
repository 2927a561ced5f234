r"""The catalogue of classic mistakes in attention code, each declared as a change to the steps.

`derive conform` shows an implementation inputs, compares what it computes with the graph of
self-attention (`reference`), and when they differ evaluates every entry of this catalogue on the
same inputs to name the one it computes. A mistake is the correct graph with one declaration
changed: a new right-hand side (`Graph.replace`) or a new `Declaration`. Its formula is printed
from SymPy like any other, its matrix form derived like any other; none is typed twice.

=========================  ===================================================================
``no-scale``               ω̃_{m,p} = ω_{m,p}: softmax(Ω), no 1/√c
``scale-by-c``             ω̃_{m,p} = ω_{m,p} / c: the width, not its square root
``scale-by-model-width``   ω̃^{(ℓ)}_{m,p} = ω^{(ℓ)}_{m,p} / √c: the model's width, not the head's
``scale-by-head-width``    ω̃^{(ℓ)}_{m,p} = ω^{(ℓ)}_{m,p} / c_h: the head width, not its root
                           (the same as 1/√c_h applied twice)
``softmax-over-queries``   the softmax of each column (over the queries), not each row
``values-are-keys``        z_{m,j} = Σ_p a_{m,p} k_{p,j}: C = A K
``causal-diagonal-masked`` M_{m,p} = 0 only where p < m: a token may not see itself
``causal-leaks-future``    M_{m,p} = 0 where p ≤ m + 1: each token sees the next one
``mask-inverted``          a boolean mask read with True as masked
``mask-after-softmax``     the weights zeroed where masked after the softmax, not renormalised
``dropout-before-softmax`` dropout on the scores, not on the weights
``heads-mixed``            the heads merged by a reshape without the transpose
…                          and the mistakes of ports (`derive.graph.port_mistakes`):
                           heads split without the transpose, masked scores set to 0, GQA's
                           repeat order, RoPE's pairing and keys, a window off by one, a
                           softcap or a sink left out
``nan-on-empty-rows``      a query with no key to attend to gets NaN (0/0), not zero weights
=========================  ===================================================================

With one head c_h = c, so ``scale-by-c`` and ``scale-by-head-width`` are the same formula there and
``scale-by-model-width`` is no mistake at all; an implementation is told apart from a mistake only
where their formulas differ.

Each mistake changes the correct graph of a `Form` (`derive.graph.forms`); dropout is declared
there for what `derive conform` can observe.
``nan-on-empty-rows`` changes no formula: it is the weights' declaration read in IEEE arithmetic,
where a row with no key divides 0 by 0, instead of with derive's convention that such a row has
zero weights (`Mistake.rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp
from sympy import Eq, Piecewise, Sum, exp, floor, sqrt

from ..notation import letters as L
from . import port_mistakes as P
from .attention import SELF
from .declaration import Declaration, Graph
from .forms import RHO, Form, entry, reference, replaced, softmax_input, softmax_of, suffix

__all__ = ["Mistake", "MISTAKES", "mistake"]

# -- the mistakes, each a function of the correct graph ----------------------------------------


def _scaled_by(width: Callable[[Form], sp.Expr]) -> Callable[[Graph, Form], Graph]:
    def change(graph: Graph, form: Form) -> Graph:
        omega = entry("omega", form.heads, L.m, L.p)
        return replaced(graph, "Omega_scaled" + suffix(form), omega / width(form))

    return change


def _head_width(form: Form) -> sp.Expr:
    return L.c_h if form.heads else L.c


def model_width(graph: Graph, form: Form) -> Graph:
    """ω̃^{(ℓ)} = ω^{(ℓ)} / √c with heads; with one head c_h = c and nothing changes."""
    return _scaled_by(lambda f: sqrt(L.c))(graph, form) if form.heads else graph


def softmax_over_queries(graph: Graph, form: Form) -> Graph:
    r"""a_{m,p} = exp(x_{m,p}) / Σ_r exp(x_{r,p}): each column sums to one, not each row."""
    name = softmax_input(form)
    top = exp(entry(name, form.heads, L.m, L.p))
    below = Sum(exp(entry(name, form.heads, L.r, L.p)), (L.r, 1, L.n))
    weights = top / below / (1 - RHO) if form.dropout else top / below
    return replaced(graph, "A" + suffix(form), weights)


def values_are_keys(graph: Graph, form: Form) -> Graph:
    r"""z_{m,j} = Σ_p a_{m,p} k_{p,j}: the keys weighed where the values belong — the keys as
    the scores read them (rotated, with RoPE: a port takes the keys it has at hand)."""
    head = form.heads
    keys = entry("k", head, L.p, L.j)
    scores = graph.producer("Omega" + suffix(form))
    if scores is not None:  # k_{p,j}, or the rotated k̃_{p,j} the scores read
        read = [e for e in scores.element.rhs.atoms(sp.Indexed) if L.p in e.indices]
        keys = read[0] if len(read) == 1 else keys
    rhs = Sum(entry("a", head, L.m, L.p) * keys, (L.p, 1, L.n))
    return replaced(graph, "C" + suffix(form), rhs)


def _diagonal_hidden(graph: Graph, form: Form) -> Graph:
    r"""ω̂ = ω̃ + M + (−∞ where p = m): the causal mask folded into the given M, and the
    diagonal hidden besides (whatever fills it: −∞, or a finite −finfo.max)."""
    scaled = next(s for s in graph.declarations if s.name == "masked_scores").element.rhs
    hidden = Piecewise((-sp.oo, Eq(L.p, L.m)), (0, True))
    return replaced(graph, "Omega_masked" + suffix(form), scaled + hidden)


def _causal_mask(
    allowed: sp.Basic, folded: Callable[[Graph, Form], Graph] | None = None
) -> Callable[[Graph, Form], Graph | None]:
    def change(graph: Graph, form: Form) -> Graph | None:
        if form.causal and form.masked:  # the causal mask is folded into the given M
            return None if folded is None else folded(graph, form)
        if not form.causal:
            return graph  # no causal mask to get wrong
        return replaced(graph, "M", Piecewise((0, allowed), (-sp.oo, True)))

    return change


def mask_inverted(graph: Graph, form: Form) -> Graph:
    r"""ω̂ = ω̃ + M' with M' = −∞ where M allows and 0 where it masks (inside the causal
    triangle when causal): the boolean mask read with True as masked."""
    if not form.masked:
        return graph
    mask = entry("mask", False, L.m, L.p)
    if form.causal:
        inverted = Piecewise((0, sp.And(sp.Ne(mask, 0), sp.Le(L.p, L.m))), (-sp.oo, True))
    else:
        inverted = Piecewise((-sp.oo, Eq(mask, 0)), (0, True))
    scaled = entry("omegatilde", form.heads, L.m, L.p)
    return replaced(graph, "Omega_masked" + suffix(form), scaled + inverted)


def mask_after_softmax(graph: Graph, form: Form) -> Graph:
    r"""a_{m,p} = exp(ω̂_{m,p}) / Σ_r exp(ω̃_{m,r}): masked after the softmax, the rows no longer
    summing to one."""
    if not (form.causal or form.masked):
        return graph
    top = exp(entry("omegahat", form.heads, L.m, L.p))
    below = Sum(exp(entry("omegatilde", form.heads, L.m, L.r)), (L.r, 1, L.n))
    weights = top / below / (1 - RHO) if form.dropout else top / below
    return replaced(graph, "A" + suffix(form), weights)


def dropout_before_softmax(graph: Graph, form: Form) -> Graph:
    r"""a_{m,p} = softmax of x / (1 − ρ): the kept scores scaled by 1/(1 − ρ), then the
    softmax, where the book drops weights after it."""
    if not form.dropout:
        return graph
    weights = softmax_of(softmax_input(form), form, temperature=1 - RHO)
    return replaced(graph, "A" + suffix(form), weights)


def heads_mixed(graph: Graph, form: Form) -> Graph:
    r"""ẑ_{m,i} = the entry of [C^{(1)}; …; C^{(h)}] (h × n × c_h) at the same place in memory:
    the heads reshaped to n × c without moving the head axis next to the columns first."""
    if not form.heads:
        return graph
    flat = (L.m - 1) * L.c + L.i - 1  # 0-based offset of ẑ_{m,i} in an n × c block
    head = floor(flat / (L.n * L.c_h)) + 1
    row = sp.Mod(floor(flat / L.c_h), L.n, evaluate=False) + 1
    column = sp.Mod(flat, L.c_h, evaluate=False) + 1
    rhs = L.base("ctx")[head, row, column]
    step = graph.step("C_concat")
    element = Eq(L.base("ctxcat")[L.m, L.i], rhs, evaluate=False)
    merged = Declaration(
        step.name, step.output, step.title, element, SELF.shapes("C_l", "C_concat")
    )
    steps = tuple(merged if s.output == "C_concat" else s for s in graph.declarations)
    return Graph(graph.name, steps, graph.relations)


def unchanged(graph: Graph, form: Form) -> Graph:
    """The correct declarations (what changes is how a row with no key is read)."""
    return graph


@dataclass(frozen=True)
class Mistake:
    """One classic mistake: its id, a few words, and the change it makes to a correct graph.

    Attributes:
        id: its name in reports (``"no-scale"``).
        title: what an implementation does wrong, in a few words.
        change: (correct graph, its form) -> the mistaken graph; the graph itself where the form
            leaves nothing to get wrong, None where the change cannot be declared on that form.
        rows: how a row of weights with no key is read: ``"zero"`` (derive's convention) or
            ``"nan"`` (0/0 in IEEE arithmetic).
        row_by_row: whether each row of C still reads its own row of Q only (False for a
            mistake that mixes the rows: the softmax over the queries, a reshape without the
            transpose); a layer given its tokens in turn with a cache then makes the mistake
            within each call as it would on the tokens up to the call's last.
    """

    id: str
    title: str
    change: Callable[[Graph, Form], Graph | None]
    rows: str = "zero"
    row_by_row: bool = True

    def graph(self, form: Form) -> Graph | None:
        """The mistaken graph of `form`."""
        return self.change(reference(form), form)

    def changed(self, form: Form) -> tuple[Declaration, Declaration] | None:
        """(correct declaration, mistaken declaration) of the one step it changes, or None."""
        wrong = self.graph(form)
        if wrong is None:
            return None
        for right, mistaken in zip(reference(form).declarations, wrong.declarations, strict=True):
            if right.element != mistaken.element:
                return right, mistaken
        return None


#: The catalogue, in the order a diagnosis prefers them when several fit.
MISTAKES: tuple[Mistake, ...] = (
    Mistake("no-scale", "no scaling: softmax(Ω), not softmax(Ω/√c)", _scaled_by(lambda f: 1)),
    Mistake("scale-by-c", "scaled by the width c, not by √c", _scaled_by(lambda f: L.c)),
    Mistake("scale-by-model-width", "scaled by √c (the model's width), not √c_h", model_width),
    Mistake(
        "scale-by-head-width",
        "divided by the head width c_h, not √c_h (as 1/√c_h applied twice)",
        _scaled_by(_head_width),
    ),
    Mistake(
        "softmax-over-queries",
        "softmax over the queries (columns)",
        softmax_over_queries,
        row_by_row=False,
    ),
    Mistake("values-are-keys", "the keys weighed for the values: C = A K", values_are_keys),
    Mistake(
        "causal-diagonal-masked",
        "causal mask hides the diagonal: p < m",
        _causal_mask(sp.Lt(L.p, L.m), _diagonal_hidden),
    ),
    Mistake(
        "causal-leaks-future",
        "causal mask lets a token see the next: p ≤ m + 1",
        _causal_mask(sp.Le(L.p, L.m + 1)),
    ),
    Mistake("mask-inverted", "boolean mask read with True as masked", mask_inverted),
    Mistake("mask-filled-with-zero", "masked scores set to 0, not −∞", P.mask_filled_with_zero),
    Mistake(
        "mask-after-softmax",
        "weights zeroed after the softmax, not renormalised",
        mask_after_softmax,
    ),
    Mistake(
        "dropout-before-softmax",
        "dropout on the scores, before the softmax",
        dropout_before_softmax,
    ),
    Mistake(
        "heads-mixed",
        "heads merged by a reshape without the transpose",
        heads_mixed,
        row_by_row=False,
    ),
    Mistake(
        "heads-split-without-transpose",
        "heads split by a reshape to (h, n, c_h) without the transpose",
        P.heads_split_without_transpose,
        row_by_row=False,
    ),
    Mistake(
        "gqa-repeat-order",
        "groups repeated whole: repeat, not repeat_interleave",
        P.gqa_repeat_order,
    ),
    Mistake(
        "rope-pairing",
        "RoPE's pairs interleaved where the halves are paired, or the reverse",
        P.rope_pairing,
    ),
    Mistake("rope-not-on-keys", "RoPE on the queries, not on the keys", P.rope_not_on_keys),
    Mistake("rope-offset", "after a cache, RoPE's positions start at 0 again", P.rope_offset),
    Mistake("window-off-by-one", "the window lets each query see w + 1 keys", P.window_off_by_one),
    Mistake("softcap-missing", "the scores not softcapped", P.softcap_missing),
    Mistake("sink-missing", "the sink left out of the softmax", P.sink_missing),
    Mistake(
        "qk-norm-per-head",
        "QK-norm of each head's features, where the whole row is normalised",
        P.qk_norm_per_head,
    ),
    Mistake("nan-on-empty-rows", "NaN for a query with no key to attend to", unchanged, "nan"),
)


def mistake(id: str) -> Mistake:
    """The catalogue entry `id`; a ValueError naming the known ids otherwise."""
    for found in MISTAKES:
        if found.id == id:
            return found
    raise ValueError(f"unknown mistake {id!r}; known: {', '.join(m.id for m in MISTAKES)}")
