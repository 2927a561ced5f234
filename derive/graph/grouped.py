r"""Grouped-query attention (the book's Llama 3 and Qwen 3), declared.

h query heads share g groups of keys and values (g divides h; h/g heads per group): K and V
are n × g c_h (W_k, W_v are d × g c_h), and head ℓ reads the block of its group,

    k^{(ℓ)}_{m,j} = k_{m, ⌊(ℓ−1) g / h⌋ c_h + j}

(the book repeats each group's keys h/g times, `repeat_interleave`: heads 1 … h/g read group
1, and so on). With g = h it is multi-head attention, with g = 1 multi-query attention (every
head reads the same keys and values).
"""

from __future__ import annotations

import functools

import sympy as sp
from sympy import Eq, floor

from ..notation import letters as L
from . import attention as S
from .declaration import Declaration, Graph

__all__ = ["GROUPED", "group_of", "split_groups", "grouped_query_attention"]

#: The sizes of grouped-query attention: K and V are g c_h wide.
GROUPED = S.Dims(kv_width=L.g * L.c_h)


def group_of(head: sp.Expr) -> sp.Expr:
    """The group (0-based) whose keys head ℓ reads: ⌊(ℓ − 1) g / h⌋."""
    return floor((head - 1) * L.g / L.h)


def split_groups(which: str) -> Declaration:
    r"""Head ℓ reads its group's block: $k^{(\ell)}_{m,j} = k_{m,\lfloor (\ell-1) g/h \rfloor
    c_h + j}$ (`which`: ``"k"`` or ``"v"``)."""
    letter = which.upper()
    base = L.base(which)
    rhs = base[L.m, group_of(L.ell) * L.c_h + L.j]
    return Declaration(
        "split_heads",
        letter + "_l",
        "Split into groups",
        Eq(base[L.ell, L.m, L.j], rhs, evaluate=False),
        GROUPED.shapes(letter, letter + "_l"),
    )


@functools.cache
def grouped_query_attention() -> Graph:
    """Causal grouped-query attention: h query heads, g groups of keys and values."""
    steps = (
        S.projection("q", GROUPED), S.projection("k", GROUPED), S.projection("v", GROUPED),
        S.split_heads("q"), split_groups("k"), split_groups("v"),
        S.scores(head=True), S.scaled_scores(head=True), S.causal_mask(),
        S.masked_scores(head=True), S.weights(head=True, masked=True), S.context(head=True),
        S.merge_heads(), S.output_projection(),
    )  # fmt: skip
    return Graph("grouped-query attention", steps, (Eq(L.c_h, L.c / L.h),))
