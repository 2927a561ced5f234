"""What a variant claims, declared: each claim names what SymPy is to derive, and
`derive.proofs.claims` derives it (or finds that it does not hold).

A claim is proved at its variant's stage: on the graph right after the variant's declarations
are put in (`here`), the graph before them being `before` (in a combination such as
``gqa+qk-norm+rope``, QK-norm's bound is proved before RoPE rotates the normalised queries).
A claim that compares with another graph names it: a `Graph`, an entry of the registry by name
(``"causal"``), or `BEFORE`.

Every claim takes `heading` (None: the fact's own title; "": none), `text` (the words before
it; None: the registry's words for its kind) and `then` (for a claim with stated assumptions,
the words between the assumptions and the derivation), keyword-only.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

import sympy as sp

from .assumptions import ASSUMPTIONS, Assumptions
from .declaration import Graph

__all__ = [
    "Claim",
    "BEFORE",
    "Presented",
    "SameAs",
    "ReadsRows",
    "CacheSize",
    "DecodeCost",
    "AllowedPairs",
    "RelativePosition",
    "ZeroAngles",
    "SameForEveryHead",
    "CacheAgainst",
    "WeightCount",
    "ScoreBound",
    "OnlineSoftmax",
    "BlockedBackward",
    "BlockedCost",
    "Rounding",
    "Streamed",
    "WithoutSoftmax",
    "Absorption",
    "RowsSumToOne",
    "RowsSumWithSink",
    "ShiftInvariance",
    "ScoreVariance",
    "ScaledScoreVariance",
    "WeightsJacobian",
    "RowsumIdentity",
    "Equality",
    "Bound",
]

#: The graph a variant's declarations were put into (its base, or the stage before it).
BEFORE = "before"

#: Where a claim compares with another graph: the graph, an entry's name, or `BEFORE`.
Other = Graph | str


@dataclass(frozen=True, kw_only=True)
class Presented:
    """How a document shows a claim (see the module docstring)."""

    heading: str | None = None
    text: str | None = None
    then: str | None = None


@dataclass(frozen=True)
class SameAs(Presented):
    """Step for step the same as `other`, after `substitute` (entries or sizes, in the
    variant's declarations) and where each size in `assume` is at least its bound.

    Args:
        other: the graph it is compared with: a `Graph`, a registered entry's name
            (``"causal"``), or `BEFORE`.
        substitute: pairs (old, new) put into the variant's declarations: a matrix's entries
            for another's (``(y, x)``) or a size for a value (``(g, h)``); empty by default.
        assume: pairs (size, bound), each size taken to be at least its bound (``(w, n)``:
            w ≥ n); empty by default.
        heading: the heading documents print; None (the default): the fact's own title;
            ``""``: none.
        text: the words before it; None (the default): the registry's words for its kind.
        then: the words between stated assumptions and the derivation; unused here, as
            this kind states none.
    """

    other: Other
    substitute: tuple[tuple[sp.Basic, sp.Basic], ...] = ()
    assume: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()


@dataclass(frozen=True)
class ReadsRows(Presented):
    """Row m of `letter` reads only the rows p ≤ m of the keys and values.

    Args:
        letter: the matrix whose rows are read; ``"C"`` by default.
        heading: the heading documents print; None (the default): the fact's own title;
            ``""``: none.
        text: the words before it; None (the default): the registry's words for its kind.
        then: the words between stated assumptions and the derivation; unused here, as
            this kind states none.
    """

    letter: str = "C"


@dataclass(frozen=True)
class CacheSize(Presented):
    """How many numbers a cache of these matrices holds (per head and layer)."""

    letters: tuple[str, ...]


@dataclass(frozen=True)
class DecodeCost(Presented):
    """FLOPs of one new token (its query, key and value, its row against a cache of m rows),
    against recomputing the whole graph at length m: counted on the graph the claim is proved
    on, so that a combination (a cache of grouped keys, a gate) counts what it computes."""


@dataclass(frozen=True)
class AllowedPairs(Presented):
    """How many (query, key) pairs the mask allows, and the products computed over them only,
    where each size in `assume` is at least its bound."""

    assume: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()


@dataclass(frozen=True)
class RelativePosition(Presented):
    """The rotated score depends on the positions only through p − m."""


@dataclass(frozen=True)
class ZeroAngles(Presented):
    """With every rotary angle 0 the score is the score of `other`."""

    other: Other = BEFORE


@dataclass(frozen=True)
class SameForEveryHead(Presented):
    """After `substitute`, each of `letters` (per-head declarations) reads the same entries for
    every head ℓ = 1 … h (multi-query attention: one group of keys and values)."""

    letters: tuple[str, ...]
    substitute: tuple[tuple[sp.Basic, sp.Basic], ...]


@dataclass(frozen=True)
class CacheAgainst(Presented):
    """The entries a cache of `letters` holds, against a cache of `theirs` in `other`."""

    letters: tuple[str, ...]
    other: Other = BEFORE
    theirs: tuple[str, ...] = ("K", "V")


@dataclass(frozen=True)
class WeightCount(Presented):
    """How many entries (trainable numbers) the weights `letters` have."""

    letters: tuple[str, ...]


@dataclass(frozen=True)
class ScoreBound(Presented):
    """With queries and keys RMS-normalised, every score is bounded by the width and the gains."""


@dataclass(frozen=True)
class OnlineSoftmax(Presented):
    """The online softmax over blocks of keys (FlashAttention's forward pass): `part` is
    ``"sum"`` or ``"output"`` (the running state carried from block t to t + 1), ``"context"``
    or ``"log-sum-exp"`` (what the state gives after the last block)."""

    part: str


@dataclass(frozen=True)
class BlockedBackward(Presented):
    """FlashAttention's backward pass: `part` is ``"weights"`` (recomputed from the
    log-sum-exp), ``"rowsum"`` (the scores' gradient with D = rowsum(dC ∘ C)), or ``"V"``,
    ``"K"``, ``"Q"`` (that gradient gathered block by block)."""

    part: str


@dataclass(frozen=True)
class BlockedCost(Presented):
    """What FlashAttention holds and computes: its state against the matrix of weights, the
    FLOPs of its forward pass, its rescaling, its backward pass and its recomputation."""


@dataclass(frozen=True)
class Streamed(Presented):
    """A score modification through the online softmax (`derive.proofs.online_softmax`):
    `part` is ``"context"`` (the online softmax over `other`'s own scores, a sink's term in ℓ
    from the start, gives `other`'s context), ``"sink"`` (the invariant with a sink's term,
    carried by the same update), ``"skipped-update"`` (a block masked for every row changes
    nothing) or ``"skipped-blocks"`` (which blocks `other`'s mask skips)."""

    part: str
    other: Other | None = None


@dataclass(frozen=True)
class Rounding(Presented):
    """The first-order float32 rounding of the two backward routes (`derive.proofs.rounding`):
    `part` is ``"stored-weights"``, ``"maximum-weights"``, ``"bounded-product"``,
    ``"scale-stored"``, ``"scale-maximum"``, ``"cancellation-stored"`` or
    ``"cancellation-maximum"``."""

    part: str


@dataclass(frozen=True)
class Absorption(Presented):
    """A head's scores computed from the latent U, W_q and W_uk, without K."""


@dataclass(frozen=True)
class RowsSumToOne(Presented):
    """Σ_p a_{m,p} = 1 over the keys, for every row m (with a declared mask, over its limits).

    Args:
        heading: the heading documents print; None (the default): the fact's own title;
            ``""``: none.
        text: the words before it; None (the default): none.
        then: the words between stated assumptions and the derivation; unused here, as
            this kind states none.
    """


@dataclass(frozen=True)
class WithoutSoftmax(Presented):
    """Attention without the softmax (`derive.proofs.linear`): `rule` is ``"linear-attention"``,
    ``"deltanet"``, ``"gated-deltanet"`` or ``"ssd"``; `part` is ``"written"`` (what token m
    writes into the state: a row of the delta rule's triangular system), ``"state"`` (the
    recurrence keeps the invariant), ``"output"`` (a token's read is the parallel form's row),
    ``"carried"`` (a state carried from chunk to chunk is the unsplit one: the chunked form),
    and for SSD ``"linear"`` (with a ≡ 1 and Δ ≡ 1 it is causal linear attention) or
    ``"delta"`` (its write is the gated delta rule's without the correction) or ``"shared"``
    (with that write, the gated delta rule's state step is SSD's). In a combination they stand
    for every part's `RowsSumToOne`: without the softmax nothing makes a row sum to one."""

    supersedes: typing.ClassVar[tuple[type, ...]] = (RowsSumToOne,)
    part: str
    rule: str


@dataclass(frozen=True)
class RowsSumWithSink(Presented):
    """Σ_p a_{m,p} = 1 − the sink's weight < 1: an attention sink takes the rest of a row. In
    a combination it stands for every part's `RowsSumToOne` (what the rows sum to changes)."""

    supersedes: typing.ClassVar[tuple[type, ...]] = (RowsSumToOne,)


@dataclass(frozen=True)
class ShiftInvariance(Presented):
    """A constant added to every score of a row leaves the weights unchanged.

    Args:
        heading: the heading documents print; None (the default): the fact's own title;
            ``""``: none.
        text: the words before it; None (the default): none.
        then: the words between stated assumptions and the derivation; unused here, as
            this kind states none.
    """


@dataclass(frozen=True)
class ScoreVariance(Presented):
    """Var(ω_{m,p}) = c, from the stated assumptions (shown first, as declared)."""

    assumptions: Assumptions = ASSUMPTIONS


@dataclass(frozen=True)
class ScaledScoreVariance(Presented):
    """Var(ω̃_{m,p}) = 1: the scaling undoes the width."""

    assumptions: Assumptions = ASSUMPTIONS


@dataclass(frozen=True)
class WeightsJacobian(Presented):
    """∂a_{m,p}/∂x_{m,t} of the weights with respect to the scores they read, in the weights:
    a_{m,p}(δ_{p,t} − a_{m,t}) for the softmax.

    Args:
        heading: the heading documents print; None (the default): the fact's own title;
            ``""``: none.
        text: the words before it; None (the default): none.
        then: the words between stated assumptions and the derivation; unused here, as
            this kind states none.
    """


@dataclass(frozen=True)
class RowsumIdentity(Presented):
    """Σ_r a_{m,r} ā_{m,r} = Σ_j z̄_{m,j} z_{m,j} (from the derived gradient of A).

    Args:
        heading: the heading documents print; None (the default): the fact's own title;
            ``""``: none.
        text: the words before it; None (the default): none.
        then: the words between stated assumptions and the derivation; unused here, as
            this kind states none.
    """


@dataclass(frozen=True)
class Equality(Presented):
    """`lhs` = `rhs`, proved by SymPy: every entry of a step in `lhs` and `rhs` replaced by its
    declared formula (repeatedly, down to the graph's inputs where needed), limits and
    derivatives evaluated, and the difference simplified to 0.

    Attributes:
        lhs, rhs: SymPy expressions in the entries of the graph (``sympy.Limit(a[m, p], b,
            -sympy.oo)`` and ``0``).
        title: the heading of the fact.
        how: a few words on what SymPy did, for the provenance (default: as above).
    """

    lhs: sp.Expr
    rhs: sp.Expr
    title: str
    how: str = ""


@dataclass(frozen=True)
class Bound(Presented):
    """`smaller` ≤ `larger`, proved by SymPy: the formulas of the steps they name put in, the
    difference simplified (exponentials written out) and found non-negative from what is known
    of its symbols (real entries, positive sizes).

    Attributes:
        smaller, larger: SymPy expressions in the entries of the graph (``a[m, p]``, ``1``).
        title: the heading of the fact.
    """

    smaller: sp.Expr
    larger: sp.Expr
    title: str


Claim = (
    Bound
    | SameAs
    | ReadsRows
    | CacheSize
    | DecodeCost
    | AllowedPairs
    | RelativePosition
    | ZeroAngles
    | SameForEveryHead
    | CacheAgainst
    | WeightCount
    | ScoreBound
    | Absorption
    | RowsSumToOne
    | RowsSumWithSink
    | ShiftInvariance
    | ScoreVariance
    | ScaledScoreVariance
    | WeightsJacobian
    | RowsumIdentity
    | Equality
    | OnlineSoftmax
    | BlockedBackward
    | BlockedCost
    | Rounding
    | Streamed
    | WithoutSoftmax
)
