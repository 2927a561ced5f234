r"""Grouped-query attention (the book's Llama 3 and Qwen 3), declared.

h query heads share g groups of keys and values (g divides h; h/g heads per group): K and V
are n × g c_h (W_k, W_v are d × g c_h), and head ℓ reads the block of its group,

    k^{(ℓ)}_{m,j} = k_{m, ⌊(ℓ−1) g / h⌋ c_h + j}

(the book repeats each group's keys h/g times, `repeat_interleave`: heads 1 … h/g read group
1, and so on). With g = h it is multi-head attention, with g = 1 multi-query attention (every
head reads the same keys and values). Its twin: `attention.grouped.grouped_query_attention`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, floor

from ...notation import letters as L
from ...notation.letters import Name
from .. import attention as S
from ..claims import BEFORE, CacheAgainst, RowsSumToOne, SameAs, SameForEveryHead, WeightCount
from ..declaration import Declaration, Graph
from ..sizes import Divides, Size
from ..twins import Twin
from ..variant import Variant

NAMES = (Name(L.nu, "a group of keys and values (grouped-query attention)", "index"),)

__all__ = ["VARIANT", "GROUPED", "group_of", "split_groups", "grouped"]

#: The sizes of grouped-query attention: K and V are g c_h wide.
GROUPED = S.Dims(kv_width=L.g * L.c_h)
GROUPS_DIVIDE = Divides(L.g, L.h, "each group serves h / g heads")


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
        "Split the keys into groups" if which == "k" else "Split the values into groups",
        Eq(base[L.ell, L.m, L.j], rhs, evaluate=False),
        GROUPED.shapes(letter, letter + "_l"),
        requires=(GROUPS_DIVIDE,),
    )


def grouped(graph: Graph) -> Graph:
    """Multi-head `graph` with g groups of keys and values: K, V (and W_k, W_v) g c_h wide,
    head ℓ reading its group's block."""
    replaced = {
        "K": S.projection("k", GROUPED),
        "V": S.projection("v", GROUPED),
        "K_l": split_groups("k"),
        "V_l": split_groups("v"),
    }
    for letter in replaced:
        graph.step(letter)  # a KeyError naming what the graph has
    steps = tuple(replaced.get(step.output, step) for step in graph.declarations)
    return Graph("grouped-query attention", steps, graph.relations)


VARIANT = Variant(
    "gqa",
    "Grouped-query attention",
    "In grouped-query attention (the book's Llama 3 and Qwen 3) the $h$ query heads "
    "share $g$ groups of keys and values: $h/g$ heads read the same keys and values. "
    "The keys and values, and the cache that keeps them, shrink by $g/h$; with $g = h$ "
    "it is multi-head attention, with $g = 1$ multi-query attention.",
    base="causal+multi-head",
    build=grouped,
    claims=(
        RowsSumToOne(),
        SameAs(BEFORE, substitute=((L.g, L.h),)),
        SameForEveryHead(("K_l", "V_l"), ((L.g, 1),)),
        CacheAgainst(("K", "V")),
        WeightCount(("W_k", "W_v")),
    ),
    sizes=(
        Size(
            L.g,
            1,
            "groups of keys and values",
            meaning="groups of keys and values (grouped-query attention): $h/g$ heads share one",
        ),
    ),
    twin=Twin("attention.grouped.grouped_query_attention", ("X", "W_q", "W_k", "W_v", "W_o?")),
    options=(("groups", L.g),),
    rank=20,
    notation=NAMES,
)
