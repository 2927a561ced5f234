r"""Score modifications through the online softmax (`derive.proofs.online_softmax`): nothing in
its invariant needs the scores to be q_m · k_p / √c, so a modification that changes each score
before the softmax is streamed as it is, and a mask's blocks can be skipped.

- `streamed`: what a graph's weights exponentiate (ω̃; softcapping's ω̆; the masked ω̂ of
  causal, a window, ALiBi) and what its denominator has besides (a sink's e^ζ);
- `modified_context`: after the last block, o^{(T)}_j / ℓ^{(T)} is the graph's own context,
  a sink's term e^{ζ − μ} in ℓ from the start (ℓ^{(0)} = 1 at μ^{(0)} = ζ);
- `sink_step`: the invariant with the sink's term, carried by the same update;
- `skipped_update`: a block of keys masked for every query of the block (its scores −∞) leaves
  the state as it was;
- `skipped_blocks`: which blocks a mask skips, from its declaration: the keys a row may read,
  solved for p, (L(m), U(m)]; both ends grow with m, so block j of keys is skipped for block i
  of queries when it lies past U of the block's last query or at or below L of its first. The
  rule is checked against the declared mask at every block pair of every split of a few sizes.

`attention.flash` skips the same blocks (`attention.flash.skipped`; a test compares the two).
"""

from __future__ import annotations

import typing

import sympy as sp
from sympy import Eq, Sum, exp

from ..graph import Graph
from ..graph.claims import Streamed
from ..notation import letters as L
from .fact import Fact
from .online_softmax import (
    BLOCK,
    MU,
    MU_T,
    T,
    Update,
    composed_context,
    normal,
    seen_output,
    seen_sum,
    step,
    sum_update,
)
from .softmax import same_dummy

__all__ = [
    "ZETA",
    "streamed",
    "sink_step",
    "modified_context",
    "skipped_update",
    "skipped_blocks",
    "prove",
]

_p = L.p
_t = sp.Symbol("t", integer=True, nonnegative=True)


def _slug(name: str) -> str:
    return "_".join("".join(c if c.isalnum() else " " for c in name).split())


#: ζ, a sink's logit: one more term of every row's denominator (the `sinks` variant).
ZETA = L.base("sink")[1, 1]


def streamed(graph: Graph) -> tuple[sp.IndexedBase, sp.Expr, tuple[str, ...]]:
    """What the online softmax streams for `graph` (one head; a mask, a softcap, a bias or a
    sink allowed): the scores its weights exponentiate (ω̃, or the capped ω̆, the masked ω̂), the
    term its denominator has beside their sum (0, or a sink's e^ζ), and the declarations read."""
    if graph.producer("A") is None:
        raise ValueError(f"the online softmax is derived for one head; {graph.name} has heads")
    step = graph.step("A")
    numerator, denominator = sp.fraction(step.element.rhs)
    (power,) = [e for e in numerator.atoms(sp.exp)]
    (score,) = power.args[0].atoms(sp.Indexed)
    sums = [term for term in sp.Add.make_args(denominator) if isinstance(term, Sum)]
    besides = sp.Add(*(t for t in sp.Add.make_args(denominator) if not isinstance(t, Sum)))
    if len(sums) != 1:
        raise ValueError(f"{graph.name}'s weights are not one softmax over the keys")
    return score.base, besides, (step.output, graph.step("C").output)


def sink_step(update: Update = sum_update) -> Fact:
    """With a sink ζ the invariant has one more term, ℓ^{(t)} = e^{ζ − μ^{(t)}} + Σ_{p ≤ t B}
    e^{ω̃_{m,p} − μ^{(t)}} (ℓ^{(0)} = 1 at μ^{(0)} = ζ): the same update carries it."""
    return step(update, lambda mu, keys: exp(ZETA - mu) + seen_sum(mu, keys), name="sink")


def modified_context(graph: Graph, *, start: sp.Expr | None = None) -> Fact:
    """o^{(T)}_j / ℓ^{(T)} = c_{m,j} for a graph whose weights exponentiate other scores (capped,
    biased, masked) or have a sink: the online softmax streams those scores, the sink's term
    e^{ζ − μ} in ℓ from its start (`start`: another term, a test's); after the last block, the
    graph's own context."""
    base, besides, sources = streamed(graph)
    mu, keys = MU_T, T * BLOCK
    # e^ζ e^{−μ}: the sink's share of ℓ, rescaled like the rest
    extra = besides * exp(-mu) if start is None else start
    ratio = seen_output(mu, keys, base) / (extra + seen_sum(mu, keys, base))
    derived = sp.simplify(normal(ratio))
    composed = composed_context(graph, graph.step("A").element.rhs).xreplace({L.n: keys})
    claim = sp.simplify(same_dummy(normal(composed), _p))
    lhs = sp.Symbol("o^(T)_j") / sp.Symbol("ell^(T)")
    return Fact(
        "online_context_" + _slug(graph.name),
        f"After the last block, {graph.name}'s context",
        (Eq(lhs, ratio, evaluate=False), Eq(lhs, derived, evaluate=False)),
        Eq(lhs, claim, evaluate=False),
        sources,
        f"the invariant at the last block over the scores {graph.name} exponentiates"
        + (", its sink's term in the sum from the start" if besides != 0 else "")
        + "; e^{-μ} taken out, and cancelled",
    )


def skipped_update(update: Update = sum_update) -> Fact:
    """A block of keys whose every score is −∞ (masked for every row of the query block) leaves
    the state as it was: its exponentials are 0 and the maximum does not move."""
    mu = MU[0]
    before = sp.Symbol("ell^(t)")
    updated = update(before, mu, mu, _t * BLOCK + 1, (_t + 1) * BLOCK)
    masked = updated.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == L.base("omegatilde"), lambda e: -sp.oo
    )
    lhs = sp.Symbol("ell^(t+1)")
    return Fact(
        "skipped_update",
        "A masked block changes nothing",
        (Eq(lhs, updated, evaluate=False), Eq(lhs, masked.doit(), evaluate=False)),
        Eq(lhs, before, evaluate=False),
        ("M",),
        "the update with every score of the block at −∞, so that μ^{(t+1)} = max(μ^{(t)}, −∞) "
        "= μ^{(t)}; the output's update has the same form",
    )


_i, _j = sp.symbols("i j", integer=True, positive=True)


def _allowed(graph: Graph) -> sp.Expr:
    """The condition on (m, p) under which the declared mask lets query m read key p."""
    (mask,) = [s for s in graph.declarations if s.constant and s.output == "M"]
    (_, allowed), _ = mask.element.rhs.args  # Piecewise((0, allowed), (−∞, True))
    return allowed


def skipped_blocks(
    graph: Graph, *, check: tuple[int, ...] = (8, 9), rule: sp.Expr | None = None
) -> Fact:
    """Which blocks a mask lets the blocked algorithm skip: the keys row m may read, solved for
    p from the declared mask, (L(m), U(m)]; both ends grow with m, so the rows of query block i
    read keys in (L((i − 1)B_r + 1), U(i B_r)] only, and key block j is skipped when it lies
    outside. The rule (`rule`: another, a test's) is the claim, and holds when it agrees with
    the declared mask at every block pair, for every n in `check`, every B_r, B_c ≤ n and every
    window 1 … n, entry by entry (and the ends grow with m)."""
    allowed = _allowed(graph)
    m, p = L.m, L.p
    solved = sp.reduce_inequalities(list(sp.And.make_args(allowed)), [p])
    upper = [r.rhs for r in sp.And.make_args(solved) if r.lhs == p and r.rel_op == "<="]
    lower = [r.rhs for r in sp.And.make_args(solved) if r.lhs == p and r.rel_op == ">"]
    (top,) = upper
    bottom = lower[0] if lower else sp.S.Zero
    rising = all(sp.diff(end, m).is_nonnegative for end in (top, bottom))
    first_row, last_row = (_i - 1) * L.B_r + 1, _i * L.B_r
    first_key, last_key = (_j - 1) * L.B_c + 1, _j * L.B_c
    derived = sp.Or(
        first_key > top.xreplace({m: last_row}), last_key <= bottom.xreplace({m: first_row})
    )
    rule = derived if rule is None else rule
    agrees = rising and _rule_agrees(allowed, rule, check)
    skipped = sp.Symbol(r"\text{skipped}(i, j)")
    keys_of = sp.Symbol(r"\text{keys}(m)")
    return Fact(
        "skipped_blocks_" + _slug(graph.name),
        f"The blocks {graph.name} skips",
        (
            Eq(keys_of, sp.Interval.Lopen(bottom, top), evaluate=False),
            Eq(skipped, rule if agrees else sp.false, evaluate=False),
        ),
        Eq(skipped, rule, evaluate=False),
        ("M",),
        "the mask's condition solved for p; its ends grow with m, so a block of rows reads "
        "from the first row's lowest key to the last row's highest; the rule checked against "
        f"the declared mask at every block pair for n in {', '.join(map(str, check))}",
    )


def _rule_agrees(allowed: sp.Expr, rule: sp.Expr, check: tuple[int, ...]) -> bool:
    """True when, at every size in `check` (every B_r, B_c, window), `rule` says a block is
    skipped exactly when the mask allows none of its pairs."""
    free = allowed.free_symbols - {L.m, L.p}
    allow = sp.lambdify((L.m, L.p, *free), allowed)
    skip = sp.lambdify((_i, _j, L.B_r, L.B_c, *free), rule)
    for n in check:
        for width in range(1, n + 1) if free else (None,):
            extra = (width,) if free else ()
            for rows in range(1, n + 1):
                for block in range(1, n + 1):
                    for i in range(1, -(-n // rows) + 1):
                        for j in range(1, -(-n // block) + 1):
                            pairs = [
                                (q, k)
                                for q in range((i - 1) * rows + 1, min(i * rows, n) + 1)
                                for k in range((j - 1) * block + 1, min(j * block, n) + 1)
                            ]
                            none = not any(allow(q, k, *extra) for q, k in pairs)
                            if bool(skip(i, j, rows, block, *extra)) != none:
                                return False
    return True


def prove(graph: Graph, claim: Streamed) -> Fact:
    """The fact a `Streamed` claim names (its `other` resolved to a graph by `prove`)."""
    other = typing.cast(Graph, claim.other)
    found = {
        "context": lambda: modified_context(other),
        "sink": sink_step,
        "skipped-update": skipped_update,
        "skipped-blocks": lambda: skipped_blocks(other),
    }
    if claim.part not in found:
        raise ValueError(
            f"Streamed: part must be one of {', '.join(found)}, got part={claim.part!r}"
        )
    if claim.part in ("context", "skipped-blocks") and claim.other is None:
        raise ValueError(
            f"Streamed({claim.part!r}) names the variant it streams: other=, got other=None"
        )
    return found[claim.part]()
