r"""Heads, as a transform of any graph: the steps between the projections and C run per head.

`with_heads(graph)` splits Q, K and V into h blocks of c_h = c / h columns right after they are
projected, makes every step that reads them (and every step that reads those, up to C) a step of
head ℓ (`per_head`: each entry of a split matrix gains the head index ℓ, and the width c becomes
c_h, in the sums and in the scaling 1/√c alike), then puts the heads' contexts side by side and
projects them by W_o. A step that reads none of them (the causal mask) stays shared by the heads.
Written for no step in particular, it gives a variant declared for one head its heads too.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp
from sympy import Eq, Indexed

from ..notation import letters as L
from . import attention as S
from .declaration import Declaration, Graph
from .twins import StepTwin

__all__ = ["one_head", "per_head", "with_heads", "SPLIT"]

#: The matrices split into heads, each right after it is projected.
SPLIT = ("Q", "K", "V")


def _headed(entry: Indexed) -> Indexed:
    return entry.base[(L.ell, *entry.indices)]


def _twin(twin: StepTwin | None, letters: set[str]) -> StepTwin | None:
    if twin is None:
        return None
    arguments = twin.arguments
    if arguments is not None:
        arguments = tuple(x + "_l" if x in letters else x for x in arguments)
    options = tuple(
        (k, sp.sympify(v).xreplace({L.c: L.c_h}) if isinstance(v, sp.Basic) else v)
        for k, v in twin.options
    )
    return StepTwin(twin.function, arguments, options)


def one_head(element: Eq, letters: set[str]) -> Eq:
    """`element` for head ℓ: its entry and each entry of a matrix in `letters` (per head) gain
    ℓ, and c (the width the step sums over, or scales by) becomes c_h."""
    bases = {L.base(L.name_of(letter)) for letter in letters}

    def split(e: sp.Basic) -> bool:
        return isinstance(e, Indexed) and e.base in bases and len(e.indices) == 2

    rhs = element.rhs.xreplace({L.c: L.c_h}).replace(split, _headed)
    return Eq(_headed(element.lhs), rhs, evaluate=False)


def per_head(step: Declaration, letters: set[str]) -> Declaration:
    """`step` for head ℓ (`one_head`), its shapes and its twin's letters those of one head."""
    element = one_head(step.element, letters)
    shapes = {}
    for letter, (rows, cols) in step.shapes.items():
        if letter in letters or letter == step.output:
            shapes[letter + "_l"] = (rows, L.c_h if cols == L.c else cols)
        else:
            shapes[letter] = (rows, cols)
    return replace(
        step,
        output=step.output + "_l",
        element=element,
        shapes=shapes,
        twin=_twin(step.twin, letters),
        text="",
        composed=(),
    )


def with_heads(graph: Graph) -> Graph:
    """`graph` with h heads (see the module docstring)."""
    produced = {step.output for step in graph.declarations}
    missing = [letter for letter in SPLIT if letter not in produced]
    if missing:
        raise ValueError(f"heads split Q, K and V, and {graph.name} computes no {missing[0]}")
    last = max(i for i, s in enumerate(graph.declarations) if s.output in SPLIT)
    per: set[str] = set(SPLIT)
    steps: list[Declaration] = []
    for index, step in enumerate(graph.declarations):
        if step.output in SPLIT or step.constant or not set(step.inputs) & per:
            steps.append(step)
        else:
            steps.append(per_head(step, per))
            per.add(step.output)
        if index == last:
            steps += [S.split_heads(which) for which in "qkv"]
    if graph.output not in per:
        raise ValueError(f"{graph.output}, the output of {graph.name}, does not read Q, K or V")
    steps += [S.merge_heads(), S.output_projection()]
    relations = (*graph.relations, Eq(L.c_h, L.c / L.h))
    return Graph("multi-head " + graph.name, tuple(steps), relations)
