"""Where a modification of the scores goes: after the last step that computes them before the
masks, each later step reading the modified scores (temperature tuning, softcapping, clamping,
ALiBi). The steps that compute them are the scaled scores and every step placed here: a rule
placed by `after_scores` is where the next one (of a higher rank) goes after, so that adding a
rule on the scores takes no list of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import sympy as sp

from ...notation import letters as L
from ..declaration import Declaration, Graph

__all__ = ["SCORES", "after_scores"]

#: The steps that compute a row's scores before the masks: the scaled scores, then each step
#: `after_scores` has placed that computes the modified scores (added as it places them, not
#: the helper steps placed with it, ALiBi's distances; a rule is placed in its rank's order, so
#: a rule of a lower rank is in it before one of a higher rank looks).
SCORES: set[str] = {"scaled_scores"}


def after_scores(
    graph: Graph,
    made: Callable[[str, bool, sp.Expr, sp.Expr], Iterable[Declaration]],
    entry: str,
    what: str,
) -> Graph:
    """`graph` with the steps ``made(source, head, rows, keys)`` right after the last of its
    `SCORES` steps (`source`: the entry name that step computes), every later step reading
    `entry` (the modified scores) in place of it, the new steps among `SCORES` from then on; a
    ValueError naming the graph where it has no scaled scores (`what` ends the sentence:
    ``"to softcap"``)."""
    sources = [step for step in graph.declarations if step.name in SCORES]
    if not sources:
        raise ValueError(f"{graph.name} has no scaled scores {what}")
    last = sources[-1]
    source = L.name_of(last.output)
    rows, keys = last.shapes[last.output]
    at = graph.declarations.index(last) + 1
    new = tuple(made(source, last.head, rows, keys))
    SCORES.update(step.name for step in new if L.name_of(step.output) == entry)
    later = tuple(step.reading({source: entry}) for step in graph.declarations[at:])
    return Graph(graph.name, (*graph.declarations[:at], *new, *later), graph.relations)
