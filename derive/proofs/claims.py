"""The claims of the variants, derived: each claim of `derive.graph.claims` becomes a `Fact`.

- `SameAs`: each declaration of the variant, with the substitutions made and each condition
  the ranges (and the assumed sizes) decide decided, is the other graph's declaration;
- `ReadsRows`: the entry of C composed with the derived causal weights, its sums stopped where
  the weights vanish: row m reads only the keys and values p ≤ m;
- `CacheSize`: the entries of the cached matrices, counted from their declared shapes;
- `DecodeCost`: the FLOPs of one new token (its row against the cache, its own key and value)
  against recomputing the whole graph at length m, from the matrix forms;
- `AllowedPairs`: the (query, key) pairs the declared mask allows, summed under the ranges, and
  the products computed over them only;
- the claims of the later models' variants: `derive.proofs.rope` (RoPE), `.heads` (groups of
  keys and values, caches, weights), `.norm` (QK-norm's bound), `.latent` (latent attention);
- the facts of self-attention: `.softmax` (rows sum to 1, shift invariance, the Jacobian),
  `.variance` (why 1/√c), `.rowsum` (the rowsum identity);
- `Equality`, a user's claim: both sides with every entry of a step replaced by its declared
  formula, limits and derivatives evaluated, the difference simplified by SymPy.

A claim that compares with another graph names it: a graph, an entry of the registry, or
`BEFORE` (the graph the variant was put into, `before`).
"""

from __future__ import annotations

import typing
from dataclasses import replace

import sympy as sp
from sympy import Eq, Sum

from ..calculus import flop_count, under_ranges
from ..calculus.counts import decode_flops
from ..calculus.indices import decide
from ..graph import Graph, variant
from ..graph.claims import (
    BEFORE,
    Absorption,
    AllowedPairs,
    BlockedBackward,
    BlockedCost,
    Bound,
    CacheAgainst,
    CacheSize,
    Claim,
    DecodeCost,
    Equality,
    OnlineSoftmax,
    ReadsRows,
    RelativePosition,
    Rounding,
    RowsSumToOne,
    RowsSumWithSink,
    RowsumIdentity,
    SameAs,
    SameForEveryHead,
    ScaledScoreVariance,
    ScoreBound,
    ScoreVariance,
    ShiftInvariance,
    Streamed,
    WeightCount,
    WeightsJacobian,
    WithoutSoftmax,
    ZeroAngles,
)
from ..notation import latex
from ..notation import letters as L
from . import blocked_backward, linear, online_softmax, rounding_facts, streamed
from .fact import Fact, chain
from .heads import cache_against, same_for_every_head, weight_count
from .latent import absorption
from .norm import score_bound
from .rope import relative_position, zero_angles
from .rowsum import rowsum_identity
from .softmax import (
    rows_sum_to_one,
    rows_sum_with_sink,
    shift_invariance,
    softmax_jacobian,
    weights_element,
)
from .stated import bound, equality, per_head
from .variance import scaled_score_variance, score_variance

__all__ = ["prove", "reads_rows_before"]

_RANGES = {L.m: (sp.S.One, L.n), L.p: (sp.S.One, L.n)}
FLOPS = sp.Function("FLOPs")
ENTRIES = sp.Function("entries")
PAIRS = sp.Function("pairs")


def _assumed(assume: tuple) -> tuple[dict, dict]:
    """Sizes written as bound + a non-negative gap (w = n + κ for w ≥ n), and back."""
    gaps = {size: sp.Symbol(f"kappa_{size}", integer=True, nonnegative=True) for size, _ in assume}
    forward = {size: bound + gaps[size] for size, bound in assume}
    return forward, {gaps[size]: size - bound for size, bound in assume}


def _canonical(expr: sp.Basic) -> sp.Basic:
    """Each condition in its canonical form (p ≤ m and m ≥ p are one condition)."""
    return expr.replace(
        lambda e: isinstance(e, sp.core.relational.Relational), lambda e: e.canonical
    )


def _same_as(graph: Graph, claim: SameAs) -> Fact:
    other = typing.cast(Graph, claim.other)  # a graph: `prove` puts it in (_resolved)
    forward, back = _assumed(claim.assume)
    substitute = dict(claim.substitute)
    bases = {k: v for k, v in substitute.items() if isinstance(k, sp.IndexedBase)}
    sizes = {k: v for k, v in substitute.items() if not isinstance(k, sp.IndexedBase)}
    lines, residual = [], []
    for step in graph.declarations:
        counterpart = other.producer(step.output)
        if counterpart is None:
            residual.append(False)
            continue
        # k_{p,j} and k_{m,j}: one step
        rename = dict(zip(step.free, counterpart.free, strict=True))
        put = step.element.rhs.xreplace(bases).xreplace(sizes).xreplace(forward)
        decided = under_ranges(put, _RANGES).xreplace(back)
        theirs = counterpart.element.rhs
        if step.element.rhs.xreplace(rename) != theirs:
            lines.append(Eq(step.element.lhs, step.element.rhs, evaluate=False))
            lines.append(Eq(step.element.lhs, decided, evaluate=False))
        residual.append(_canonical(decided.xreplace(rename)) == _canonical(theirs))
    # what is put in, said first: g = h, s_{1,1} = 1/log n, w ≥ n
    said = [Eq(old, new, evaluate=False) for old, new in claim.substitute]
    said += [sp.Ge(size, bound, evaluate=False) for size, bound in claim.assume]
    at = ", ".join(latex(x) for x in said).replace("&", "")
    where = rf"\big|_{{{at}}}" if at else ""
    statement = Eq(
        sp.Symbol(r"\text{" + graph.name + "}" + where),
        sp.Symbol(r"\text{" + other.name + "}"),
        evaluate=False,
    )
    reached = statement if all(residual) else Eq(statement.lhs, sp.nan, evaluate=False)
    return Fact(
        "same_as",
        f"When it is {other.name}",
        (*said, *lines, reached),
        statement,
        tuple(s.output for s in graph.declarations),
        "each declaration with the substitution made, its conditions decided under the "
        "index ranges and the assumed sizes",
    )


def reads_rows_before(graph: Graph, letter: str = "C") -> bool:
    """True where SymPy shows that row m of `letter` reads only the rows p ≤ m of the keys and
    values (the `ReadsRows` claim): a graph causal by its own weights (stick-breaking's, the
    Forgetting Transformer's on causal attention)."""
    try:
        fact = _reads_rows(graph, ReadsRows(letter=letter))
    except (ValueError, KeyError, StopIteration):  # no weights to read, or no such step
        return False
    return fact.claim.rhs is not sp.nan


def _reads_rows(graph: Graph, claim: ReadsRows) -> Fact:
    weights, sources = weights_element(graph)
    context = graph.step(claim.letter)
    if sources[0] not in context.inputs:  # with heads, each head's context reads the weights
        context = next(s for s in graph.declarations if sources[0] in s.inputs)
    free = graph.step(sources[0]).element.lhs.indices  # (m, p), or (ℓ, m, p) for a head
    a = L.base("a")
    composed = context.element.rhs.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == a,
        lambda e: weights.xreplace(dict(zip(free, e.indices, strict=True))),
    )
    decided = under_ranges(composed, _RANGES)
    limits = [limit for s in decided.atoms(Sum) for limit in s.limits]
    keys = [high for variable, _, high in limits if variable in (L.p, L.r)]
    within = keys and all(decide(sp.Le(high, L.m), _RANGES) is sp.true for high in keys)
    bound = sp.S.One if within else sp.nan  # up to m (causal), or m − 1 (the keys before m)
    lhs = context.element.lhs
    return Fact(
        "reads_rows",
        "Row m reads the rows before it",
        chain(lhs, composed, decided),
        Eq(lhs, decided if bound == 1 else sp.nan, evaluate=False),
        (claim.letter, *sources),
        "the derived causal weights put into the context, the sums stopped where they vanish",
    )


def _cache_size(graph: Graph, claim: CacheSize) -> Fact:
    shapes = graph.shapes
    counted = sp.Add(*[shapes[letter][0] * shapes[letter][1] for letter in claim.letters])
    lhs = ENTRIES(*[sp.Symbol(L.MATRIX_LATEX[letter]) for letter in claim.letters])
    kept = _rows_read_last(graph)
    lines = (Eq(lhs, counted, evaluate=False),)
    if kept != L.n:  # a window: the last token reads (and the cache keeps) fewer than n rows
        lines += (Eq(lhs, sp.factor(counted.xreplace({L.n: kept})), evaluate=False),)
    return Fact(
        "cache_size",
        "What the cache holds",
        lines,
        lines[-1],
        claim.letters,
        "the entries of the cached matrices, from their declared shapes, kept for the rows "
        "the last of n tokens reads (its sums' ranges, derived)",
    )


def _rows_read_last(graph: Graph) -> sp.Expr:
    """How many rows of the keys and values the last of n tokens reads: n − L(n) + 1, L(m) the
    lowest key of row m's sums as `ReadsRows` derives them (min(n, w) with a window of w);
    n where they cannot be read."""
    try:
        fact = _reads_rows(graph, ReadsRows("C"))
    except (ValueError, KeyError, StopIteration):
        return L.n
    lows = {low for s in fact.claim.rhs.atoms(Sum) for v, low, _ in s.limits if v in (L.p, L.r)}
    if len(lows) != 1:
        return L.n
    low = lows.pop().xreplace({L.m: L.n})
    lowest = low.args if isinstance(low, sp.Max) else (low,)  # n + 1 − max(a, b) = min(…)
    return sp.Min(*(sp.expand(L.n - x + 1) for x in lowest))


def _decode_cost(graph: Graph, claim: DecodeCost) -> Fact:
    one = decode_flops(graph)
    full = flop_count(graph).xreplace({L.n: L.m})
    token, whole = FLOPS(sp.Symbol(r"\text{one token}")), FLOPS(sp.Symbol(r"\text{recomputed}"))
    lines = (Eq(token, sp.expand(one), evaluate=False), Eq(whole, full, evaluate=False))
    return Fact(
        "decode_cost",
        "What one token costs",
        lines,
        lines[-1],
        tuple(s.output for s in graph.declarations),
        "counted on the matrix forms of one decoding step and of the whole graph at length m",
    )


def _split(total: Sum, ranges: dict) -> sp.Expr:
    """Σ_m f(m) with a max or min inside, split where it changes argument and each part
    decided under its own range."""
    ((variable, low, high),) = total.limits
    extremes = list(total.function.atoms(sp.Max, sp.Min))
    if not extremes:
        return total.doit()
    a, b = extremes[0].args
    (point,) = sp.solve(sp.Eq(a, b), variable)
    parts = []
    for start, stop in ((low, point), (point + 1, high)):
        inner = {**ranges, variable: (start, stop)}
        parts.append(Sum(under_ranges(total.function, inner), (variable, start, stop)))
    return sp.Add(*parts, evaluate=False)


def _allowed_pairs(graph: Graph, claim: AllowedPairs) -> Fact:
    (mask,) = [s for s in graph.declarations if s.constant]
    (_, allowed), _ = mask.element.rhs.args
    indicator = sp.Piecewise((1, allowed), (0, True))
    total = Sum(Sum(indicator, (L.p, 1, L.n)), (L.m, 1, L.n))
    per_row = under_ranges(Sum(indicator, (L.p, 1, L.n)), _RANGES).doit()
    forward, back = _assumed(claim.assume)
    ranges = {
        variable: (low.xreplace(forward), high.xreplace(forward))
        for variable, (low, high) in _RANGES.items()
    }
    split = _split(Sum(per_row.xreplace(forward), (L.m, 1, L.n.xreplace(forward))), ranges)
    split = split.xreplace(back)
    counted = sp.Add(*[sp.factor_terms(part.doit()) for part in split.args], evaluate=False)
    pairs = PAIRS(sp.Symbol("M"))
    products = sp.expand(4 * L.c * counted)  # 2c a score, 2c a term of a context entry
    lines = (
        Eq(pairs, total, evaluate=False),
        Eq(pairs, Sum(per_row, (L.m, 1, L.n)), evaluate=False),
        Eq(pairs, split, evaluate=False),
        Eq(pairs, counted, evaluate=False),
        Eq(FLOPS(sp.Symbol(r"\Omega, C")), products, evaluate=False),
    )
    return Fact(
        "allowed_pairs",
        "What the window costs",
        lines,
        lines[-1],
        (mask.output,),
        "the mask's allowed pairs summed under the index ranges, split where the max changes",
    )


def _online_softmax(graph: Graph, claim: OnlineSoftmax) -> Fact:
    found = {
        "sum": lambda: online_softmax.step(),
        "output": lambda: online_softmax.step(
            online_softmax.output_update, online_softmax.seen_output
        ),
        "context": lambda: online_softmax.context(graph),
        "log-sum-exp": lambda: online_softmax.log_sum_exp(graph),
    }
    if claim.part not in found:
        raise ValueError(
            f"OnlineSoftmax: part must be one of {', '.join(found)}, got part={claim.part!r}"
        )
    return found[claim.part]()


def _without_softmax(graph: Graph, claim: WithoutSoftmax) -> Fact:
    parts = {"written": linear.written, "state": linear.state, "output": linear.output}
    parts["carried"] = linear.carried
    # SSD's own: what it is at a ≡ 1 and Δ ≡ 1, and beside the gated delta rule
    ssd = {
        "linear": linear.as_linear_attention,
        "delta": linear.without_correction,
        "shared": linear.shares_the_state,
    }
    if claim.rule == "ssd" and claim.part in ssd:
        return ssd[claim.part]()
    if claim.part not in parts or claim.rule not in linear.RULES:
        raise ValueError(
            f"WithoutSoftmax: part must be one of {', '.join(parts)} (for ssd also "
            f"{', '.join(ssd)}) and rule one of {', '.join(linear.RULES)}, got "
            f"part={claim.part!r}, rule={claim.rule!r}"
        )
    return parts[claim.part](linear.RULES[claim.rule])


def _blocked_backward(graph: Graph, claim: BlockedBackward) -> Fact:
    if claim.part == "weights":
        return blocked_backward.recomputed_weights(graph)
    if claim.part == "rowsum":
        return blocked_backward.gradient_with_rowsum(graph)
    if claim.part in ("V", "K", "Q"):
        return blocked_backward.accumulated(graph, claim.part)
    raise ValueError(
        f"BlockedBackward: part must be weights, rowsum, V, K or Q, got part={claim.part!r}"
    )


_PROVERS = {
    SameAs: _same_as,
    ReadsRows: _reads_rows,
    CacheSize: _cache_size,
    DecodeCost: _decode_cost,
    AllowedPairs: _allowed_pairs,
    SameForEveryHead: same_for_every_head,
    CacheAgainst: cache_against,
    WeightCount: weight_count,
    RelativePosition: lambda graph, claim: relative_position(graph),
    ZeroAngles: lambda graph, claim: zero_angles(graph, claim.other),
    ScoreBound: lambda graph, claim: score_bound(graph),
    Absorption: lambda graph, claim: absorption(graph),
    RowsSumToOne: lambda graph, claim: rows_sum_to_one(graph),
    RowsSumWithSink: lambda graph, claim: rows_sum_with_sink(graph),
    ShiftInvariance: lambda graph, claim: shift_invariance(graph),
    ScoreVariance: lambda graph, claim: score_variance(graph, claim.assumptions),
    ScaledScoreVariance: lambda graph, claim: scaled_score_variance(graph, claim.assumptions),
    WeightsJacobian: lambda graph, claim: softmax_jacobian(graph),
    RowsumIdentity: lambda graph, claim: rowsum_identity(graph),
    OnlineSoftmax: _online_softmax,
    BlockedBackward: _blocked_backward,
    BlockedCost: lambda graph, claim: blocked_backward.cost(graph),
    Rounding: rounding_facts.prove,
    Streamed: streamed.prove,
    WithoutSoftmax: _without_softmax,
    Equality: equality,
    Bound: bound,
}


def _resolved(claim: Claim, before: Graph | None) -> Claim:
    """The claim with the graph it compares with put in (an entry's name, or `BEFORE`)."""
    other = getattr(claim, "other", None)
    if other is None or isinstance(other, Graph):
        return claim
    if other == BEFORE:
        if before is None:
            raise ValueError(
                f"{type(claim).__name__} compares with the graph before the variant: give before="
            )
        return replace(claim, other=before)
    return replace(claim, other=variant(other).graph)


def prove(graph: Graph, claim: Claim, before: Graph | None = None) -> Fact:
    """The fact SymPy derives for one claim of a variant's graph; `before` is the graph the
    variant was put into, for a claim that compares with it (`BEFORE`). The entries a claim
    names (`Equality`, `Bound`) are head ℓ's where the graph has heads."""
    if isinstance(claim, Equality):
        claim = replace(claim, lhs=per_head(claim.lhs, graph), rhs=per_head(claim.rhs, graph))
    elif isinstance(claim, Bound):
        claim = replace(
            claim, smaller=per_head(claim.smaller, graph), larger=per_head(claim.larger, graph)
        )
    elif isinstance(claim, SameAs):
        claim = replace(
            claim, substitute=tuple((per_head(old, graph), new) for old, new in claim.substitute)
        )
    return _PROVERS[type(claim)](graph, _resolved(claim, before))
