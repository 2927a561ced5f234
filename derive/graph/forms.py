r"""The graphs `derive conform` compares implementations with, by their form.

A `Form` says which graph of self-attention an implementation must compute: one head or several,
causal or not, a mask given as an input, dropout on the weights, and whether Q, K, V come from
X and the weights or are themselves the inputs (a function like torch's
scaled_dot_product_attention). `reference(form)` builds it from `self_attention`'s declarations;
the mistakes of `derive.graph.mistakes` change one declaration of it.

Dropout is declared for what `derive conform` can observe: a dropout that keeps every entry, at
rate ρ, multiplies what it is given by 1/(1 − ρ), the weights in the book's order:
a_{m,p} = exp(ω̃_{m,p}) / ((1 − ρ) Σ_r exp(ω̃_{m,r})).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import sympy as sp
from sympy import Eq, Sum, exp

from ..notation import letters as L
from .declaration import Declaration, Graph
from .errors import DeclarationError
from .registry import self_attention, variant

__all__ = [
    "RHO",
    "combines_with_causal",
    "variant_names",
    "Form",
    "reference",
    "replaced",
    "entry",
    "suffix",
    "softmax_input",
    "softmax_of",
    "dropout_on_weights",
    "own_mask",
    "reads_positions",
]

#: The dropout rate ρ (0 where no dropout is observed).
RHO = sp.Symbol("rho", positive=True)


@dataclass(frozen=True)
class Form:
    """Which graph of self-attention an implementation is compared with.

    Attributes:
        heads: several heads (split, merge, output projection W_o), or one.
        causal: the causal mask declared (M_{m,p} = 0 where p ≤ m).
        masked: a mask M given as an input (a boolean mask; with `causal`, folded into M).
        dropout: dropout on the weights, keeping every entry, at rate ρ.
        projections: Q, K, V from X and the weights; without, Q, K, V are the inputs (a
            function like torch's scaled_dot_product_attention).
        variant: the registered variants it computes besides these, joined by ``+``
            (``"gqa+rope"``; empty: none). Their chains may bring the causal mask (RoPE's
            base is causal attention); without `causal` it is then M = 0, no mask.
        cached: where the implementation was given the tokens in turn with a cache (as in
            generation), how many came before each call after the first (``(2, 4)``: tokens
            1–2, then 3–4, then 5); the graph is the same, a mistake may read it.
    """

    heads: bool = False
    causal: bool = False
    masked: bool = False
    dropout: bool = False
    projections: bool = True
    variant: str = ""
    cached: tuple[int, ...] = ()


def entry(name: str, head: bool, *indices: sp.Expr) -> sp.Indexed:
    return L.base(name)[(L.ell, *indices)] if head else L.base(name)[indices]


def suffix(form: Form) -> str:
    return "_l" if form.heads else ""


def replaced(graph: Graph, output: str, rhs: sp.Expr) -> Graph:
    """`graph` with the step computing `output` declared by `rhs`, which may read matrices the
    step did not read before (their shapes from the graph)."""
    step = graph.step(output)
    shapes = graph.shapes
    element = Eq(step.element.lhs, rhs, evaluate=False)
    letters = {output} | {L.letter_of(e) for e in rhs.atoms(sp.Indexed)}
    changed = Declaration(
        step.name,
        step.output,
        step.title,
        element,
        {x: shapes[x] for x in sorted(letters)},
        step.constant,
    )
    steps = tuple(changed if s.output == output else s for s in graph.declarations)
    return Graph(graph.name, steps, graph.relations)


def softmax_input(form: Form) -> str:
    """The entry the softmax reads: ω̂ (masked scores) or ω̃ (scaled scores)."""
    return "omegahat" if form.causal or form.masked else "omegatilde"


def softmax_of(name: str, form: Form, temperature: sp.Expr = sp.S.One) -> sp.Expr:
    """exp(x_{m,p} / t) / Σ_r exp(x_{m,r} / t): the declared softmax of each row of x."""
    top = exp(entry(name, form.heads, L.m, L.p) / temperature)
    below = Sum(exp(entry(name, form.heads, L.m, L.r) / temperature), (L.r, 1, L.n))
    return top / below


def dropout_on_weights(graph: Graph, form: Form) -> Graph:
    r"""a_{m,p} = softmax_{m,p} / (1 − ρ): the weights as the graph declares them (a sink's
    included), then dropout keeping every one."""
    weights = graph.step("A" + suffix(form)).element.rhs / (1 - RHO)
    return replaced(graph, "A" + suffix(form), weights)


def combines_with_causal(name: str) -> bool:
    """True where the variants `name` combine with causal attention; False where causal
    attention's changes are ones they replace (a user's stick-breaking declares its own
    weights). A causal module is then read as the variants alone, and `derive conform` checks
    that their weights keep row m off the later keys themselves (`reads_rows_before`). Not
    cached: a name registered again is asked afresh (the registry caches its graphs)."""
    try:
        variant(f"{name}+causal")
    except DeclarationError:
        return False
    return True


def variant_names(form: Form) -> str:
    """The registry's name of the form's variants, with multi-head where it has heads (causal
    and a given mask are the form's to add)."""
    return "+".join([*form.variant.split("+"), *(["multi-head"] if form.heads else [])])


def _with_variant(form: Form) -> Graph:
    """The registry's graph of the form's variants (with heads and causality as it says); a
    given mask M replaces the variant's own mask step, which the mask given folds in."""
    names = variant_names(form)
    causal = form.causal and combines_with_causal(names)
    graph = variant(names + ("+causal" if causal else "")).graph
    own = next((s for s in graph.declarations if s.output == "M"), None)
    if own is not None and not form.causal and own.name == "causal_mask":
        graph = graph.replace("M", sp.S.Zero)  # a chain's causal mask the form does not have
    if not form.masked:
        return graph
    if own is None:
        return variant(names + "+masked").graph
    steps = tuple(s for s in graph.declarations if s.output != "M")
    return Graph(graph.name + " with a given mask", steps, graph.relations)


def own_mask(form: Form) -> Declaration | None:
    """The mask step of the form's graph without a given mask (causal, a window), or None."""
    graph = reference(dataclasses.replace(form, masked=False, dropout=False))
    return next((s for s in graph.declarations if s.output == "M"), None)


@functools.cache
def reference(form: Form) -> Graph:
    """The graph an implementation of this form must compute (from the registry)."""
    if form.variant:
        full = _with_variant(form)
    else:
        full = self_attention(
            causal=form.causal and not form.masked, masked=form.masked, heads=form.heads
        )
    steps = full.declarations
    name = full.name
    if not form.projections:
        steps = tuple(s for s in steps if not (s.name == "projection" and s.output in "QKV"))
        name += " of given Q, K, V"
    graph = Graph(name, steps, full.relations)
    return dropout_on_weights(graph, form) if form.dropout else graph


#: The book's token indices; a sum's own index is one where its limits read n or one of them.
_TOKENS = frozenset({L.m, L.p, L.r, L.t})


def _positional(rhs: sp.Expr) -> bool:
    """True where a formula reads the tokens' positions, not only their entries: a sum or a
    product over a range another index sets (Σ_{ℓ=p+1}^{m}), a token index outside an entry
    (a condition p ≤ m, a distance m − p), or a token's row read at an offset (k_{p−m+w,j})."""
    tokens = set(_TOKENS)
    for total in rhs.atoms(sp.Sum, sp.Product):
        for variable, low, high in total.limits:
            limits = sp.sympify(low).free_symbols | sp.sympify(high).free_symbols
            if limits - set(L.SIZES):
                return True
            if L.n in limits:
                tokens.add(variable)
    entries = rhs.atoms(sp.Indexed)
    for entry in entries:
        for index in entry.indices:
            if not index.is_Symbol and sp.sympify(index).free_symbols & tokens:
                return True
    bare = rhs.xreplace({entry: sp.Dummy() for entry in entries})
    return bool(bare.free_symbols & tokens) or any(
        total.function.free_symbols & tokens & set(total.variables)
        for total in bare.atoms(sp.Sum, sp.Product)
    )


def reads_positions(graph: Graph) -> str | None:
    """The title of a step that reads the tokens' positions m or p (RoPE's angles, ALiBi's
    distances, a mask; a user's sum up to the query, Σ_{p=1}^{m}), or None: then permuting
    the tokens permutes the outputs."""
    for step in graph.declarations:
        rhs = step.element.rhs
        if (step.constant and {L.m, L.p} & rhs.free_symbols) or _positional(rhs):
            return step.title.lower().removeprefix("the ")
    return None
