"""What a variant claims, declared: each claim names what SymPy is to derive, and
`derive.proofs.claims` derives it (or finds that it does not hold)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .declaration import Graph

__all__ = ["Claim", "SameAs", "ReadsRows", "CacheSize", "DecodeCost", "AllowedPairs"]


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


Claim = SameAs | ReadsRows | CacheSize | DecodeCost | AllowedPairs
