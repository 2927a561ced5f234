"""What a variant claims, declared: each claim names what SymPy is to derive, and
`derive.proofs.claims` derives it (or finds that it does not hold)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .declaration import Graph

__all__ = [
    "Claim", "SameAs", "ReadsRows", "CacheSize", "DecodeCost", "AllowedPairs", "RelativePosition",
    "ZeroAngles", "SameForEveryHead", "CacheAgainst", "WeightCount", "ScoreBound", "Absorption",
    "On",
]  # fmt: skip


@dataclass(frozen=True)
class SameAs:
    """Step for step the same as `other`, after `substitute` (entries or sizes, in the
    variant's declarations) and where each size in `assume` is at least its bound."""

    other: Graph
    substitute: tuple[tuple[sp.Basic, sp.Basic], ...] = ()
    assume: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()


@dataclass(frozen=True)
class ReadsRows:
    """Row m of `letter` reads only the rows p ≤ m of the keys and values."""

    letter: str = "C"


@dataclass(frozen=True)
class CacheSize:
    """How many numbers a cache of these matrices holds (per head and layer)."""

    letters: tuple[str, ...]


@dataclass(frozen=True)
class DecodeCost:
    """FLOPs of one new token: `attend` (its row against a cache of m rows) plus `append` (its
    own key and value), against recomputing the whole graph at length m."""

    attend: Graph
    append: Graph


@dataclass(frozen=True)
class AllowedPairs:
    """How many (query, key) pairs the mask allows, and the products computed over them only,
    where each size in `assume` is at least its bound."""

    assume: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()


@dataclass(frozen=True)
class RelativePosition:
    """The rotated score depends on the positions only through p − m."""


@dataclass(frozen=True)
class ZeroAngles:
    """With every rotary angle 0 the score is the score of `other`."""

    other: Graph


@dataclass(frozen=True)
class SameForEveryHead:
    """After `substitute`, each of `letters` (per-head declarations) reads the same entries for
    every head ℓ = 1 … h (multi-query attention: one group of keys and values)."""

    letters: tuple[str, ...]
    substitute: tuple[tuple[sp.Basic, sp.Basic], ...]


@dataclass(frozen=True)
class CacheAgainst:
    """The entries a cache of `letters` holds, against a cache of `theirs` in `other`."""

    letters: tuple[str, ...]
    other: Graph
    theirs: tuple[str, ...] = ("K", "V")


@dataclass(frozen=True)
class WeightCount:
    """How many entries (trainable numbers) the weights `letters` have."""

    letters: tuple[str, ...]


@dataclass(frozen=True)
class ScoreBound:
    """With queries and keys RMS-normalised, every score is bounded by the width and the gains."""


@dataclass(frozen=True)
class Absorption:
    """A head's scores computed from the latent U, W_q and W_uk, without K."""


@dataclass(frozen=True)
class On:
    """`claim` proved on `graph` (one stage of a combination: QK-norm's bound on the graph
    before RoPE rotates the normalised queries and keys)."""

    graph: Graph
    claim: object


Claim = (On | SameAs | ReadsRows | CacheSize | DecodeCost | AllowedPairs | RelativePosition
         | ZeroAngles | SameForEveryHead | CacheAgainst | WeightCount | ScoreBound
         | Absorption)  # fmt: skip
