"""Cross-attention (the book's ch. 3 bonus): queries from X (n × d), keys and values from another
sequence Y (s × d_y). Every step is self-attention's with Y where X was for the keys and values,
and s keys instead of n. Its twin: `attention.functional.cross_attention`."""

from __future__ import annotations

from dataclasses import replace

import sympy as sp
from sympy import Eq

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from .. import attention as S
from ..claims import BEFORE, RowsSumToOne, SameAs
from ..declaration import Declaration, Graph
from ..sizes import AtLeast, Size
from ..twins import Twin
from ..variant import Variant

#: The sequence the keys and values are read from.
Y = register_letter(
    Letter(
        "Y",
        "y",
        meaning="entry p of the sequence the keys and values come from (cross-attention)",
        indices=(L.p, L.i),
        after="x",
        gradient_after="dx",
    )
)

__all__ = ["VARIANT", "CROSS", "cross_attention"]

CROSS = S.Dims(queries=L.n, keys=L.s, width=L.d, source_width=L.d_y, source="y")


def cross_attention(graph: Graph) -> Graph:
    """`graph` reading its keys and values from Y (s × d_y): K and V projected from Y, every
    step of the keys alone (a head's block, its norm) s rows long, every step of the queries
    and the keys together (the scores, the weights, a given mask) s columns wide, and each
    sum over the keys up to s. What reads the queries alone (RoPE's angles are the
    queries' positions) or a pattern of positions (causal attention, a window) is refused:
    the keys are another sequence."""
    _refuse_positions(graph)
    keys = {"K", "V"}
    both: set[str] = set()
    queries = {"Q"}
    steps: list[Declaration] = []
    for step in graph.declarations:
        read = set(step.inputs)
        if step.output in keys:
            which = step.output.lower()
            kv = graph.shapes[step.output][1]
            steps.append(S.projection(which, replace(CROSS, kv_width=kv)))
            continue
        if read & (both | (keys if read & queries else set())):
            both.add(step.output)
        elif read & keys:
            keys.add(step.output)
        elif read & queries:
            queries.add(step.output)
        steps.append(_to_keys(step, keys, both))
    return Graph(
        graph.name.replace("self-attention", "cross-attention"), tuple(steps), graph.relations
    )


def _refuse_positions(graph: Graph) -> None:
    """A step of positions alone (a mask's pattern, ALiBi's distances, RoPE's angles) reads a
    query's position and a key's in one sequence: refused, naming it."""
    for step in graph.declarations:
        title = f"{step.title[0].lower()}{step.title[1:]} ({step.output})"
        if step.constant:
            raise ValueError(
                f"{title}: a pattern of the queries' and the keys' positions in one sequence, "
                "and cross-attention's keys are another sequence Y (a given mask of n × s is "
                "the masked variant)"
            )
        compared = [  # a condition on the positions themselves, not on a matrix's entries
            r
            for r in step.element.rhs.atoms(sp.core.relational.Relational)
            if {L.m, L.p} <= r.free_symbols and not r.atoms(sp.Indexed)
        ]
        if compared:
            raise ValueError(
                f"{title}: its formula compares a query's position with a key's "
                f"({sp.sstr(compared[0])}, one sequence), and cross-attention's keys are "
                "another sequence Y"
            )


def _to_keys(step: Declaration, keys: set[str], both: set[str]) -> Declaration:
    """A step with s keys: its key-side matrices s rows long, its (query, key) matrices s
    columns wide, its sums over the keys (p, r) up to s."""

    def shape(letter: str, rows: sp.Expr, cols: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
        if letter in keys:
            return (L.s if rows == L.n else rows, cols)
        if letter in both or letter == "M":
            return (rows, L.s if cols == L.n else cols)
        return (rows, cols)

    shapes = {letter: shape(letter, *size) for letter, size in step.shapes.items()}
    rhs = step.element.rhs.replace(
        lambda e: isinstance(e, sp.Sum),
        lambda e: sp.Sum(
            e.function,
            *((v, lo, L.s if v in (L.p, L.r) and hi == L.n else hi) for v, lo, hi in e.limits),
        ),
    )
    return replace(step, element=Eq(step.element.lhs, rhs, evaluate=False), shapes=shapes)


VARIANT = Variant(
    "cross-attention",
    "Cross-attention",
    "In cross-attention the queries come from one sequence $X$ and the keys and values "
    "from another, $Y$, of $s$ entries of width $d_y$: a decoder reading the encoder's "
    "output, or text reading an image. Every step is the one of self-attention, with $Y$ "
    "where $X$ was for the keys and values, and $s$ keys instead of $n$.",
    build=cross_attention,
    claims=(
        RowsSumToOne(),
        SameAs(BEFORE, substitute=((L.base("y"), L.base("x")), (L.s, L.n), (L.d_y, L.d))),
    ),
    sizes=(
        Size(
            L.s,
            4,
            "keys read from Y",
            meaning="keys read from another sequence $Y$ (cross-attention)",
        ),
        Size(L.d_y, 5, "the width of Y", meaning="width of an entry of $Y$ (cross-attention)"),
    ),
    draws=(AtLeast(L.s, 2, "with one key every weight is 1"),),
    twin=Twin("attention.functional.cross_attention", ("X", "Y", "W_q", "W_k", "W_v")),
    also=(
        Twin(
            "attention.grouped.grouped_cross_attention",
            ("X", "Y", "W_q", "W_k", "W_v", "W_o?"),
            label="grouped cross-attention",
        ),
    ),
    rank=85,
    drops=(
        "causal",
    ),  # after every variant that changes the graph: its keys read Y wherever they are
    notation=(Y,),
)
