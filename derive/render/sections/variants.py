"""The sections on the forms of the mechanism: causal attention and masks, several heads,
batches. Each is read off its own graph of declarations."""

from __future__ import annotations

import sympy as sp
from sympy import Indexed

from ... import calculus, proofs
from ...graph import Graph
from ...notation import latex
from ...notation import letters as L
from .. import prose as P
from ..blocks import Block, Display, Heading, Prose, declared, derived
from ..lines import equation, fact_lines
from .forward import MATRIX_FORM

__all__ = ["causal", "multi_head", "batches", "batched", "PER_SEQUENCE"]


def causal(graph: Graph) -> list[Block]:
    """The declared mask and masked scores, and the causal weights SymPy derives from them."""
    chain = {s.output: s for s in calculus.steps(graph)}
    mask, masked, weights = chain["M"], chain["Omega_masked"], chain["A"]
    element, sources = proofs.weights_element(graph)
    rows = proofs.rows_sum_to_one(graph)
    return [
        Heading("Causal attention and masks"),
        Prose(P.CAUSAL_TEXT),
        Display((equation(mask.element), equation(masked.element)), declared("M", "Omega_masked")),
        Display(
            (equation(masked.matrix), equation(weights.matrix)),
            derived(MATRIX_FORM, "Omega_masked", "A"),
        ),
        Prose(P.CAUSAL_DERIVED),
        Display(
            (f"{equation(sp.Eq(weights.element.lhs, element, evaluate=False))}",),
            derived(
                "the mask put into the weights, conditions decided under the index ranges", *sources
            ),
        ),
        Display(fact_lines(rows), derived(rows.how, *rows.sources)),
        Prose(P.CAUSAL_EMPTY),
    ]


def multi_head(graph: Graph) -> list[Block]:
    """The head width, the split, the per-head steps, the concatenation, the output projection."""
    chain = calculus.steps(graph)
    per_head = [s for s in chain if s.head or s.name == "merge_heads" or s.output == "C"]
    split = [s for s in per_head if s.name == "split_heads"]
    rest = [s for s in per_head if s.name != "split_heads"]
    relations = tuple(equation(relation) for relation in graph.relations)
    flops = rf"\text{{FLOPs}} &= {latex(calculus.flop_count(graph))}"
    shown = split[:1] + rest
    return [
        Heading("Multi-head attention"),
        Prose(P.MULTI_HEAD_TEXT),
        Display(relations, declared("c_h")),
        Prose(P.MULTI_HEAD_STEPS),
        Display(tuple(equation(s.element) for s in shown), declared(*(s.output for s in shown))),
        Display(
            tuple(equation(s.matrix) for s in shown if s.matrix is not None),
            derived(MATRIX_FORM, *(s.output for s in shown)),
        ),
        Display(
            (flops,), derived("counted on the composed expression of C", *(s.output for s in chain))
        ),
    ]


#: The entries that belong to one sequence of a batch (the weights are shared by all).
PER_SEQUENCE = ("x", "q", "k", "v", "omega", "omegatilde", "omegahat", "mask", "a", "ctx",
                "ctxcat")  # fmt: skip


def batched(eq: sp.Eq) -> sp.Eq:
    """An equation for sequence b of a batch: each per-sequence entry gains the index b first
    (x_{b,m,i}, q_{b,m,j}, …); the weights keep their two indices."""

    def per_sequence(expr: sp.Basic) -> bool:
        return isinstance(expr, Indexed) and expr.base.label.name in PER_SEQUENCE

    return eq.replace(per_sequence, lambda e: e.base[(L.b, *e.indices)])


def batches(graph: Graph) -> list[Block]:
    shown = [s for s in calculus.steps(graph) if s.output in ("Q", "Omega", "A", "C")]
    lines = tuple(equation(batched(s.element)) for s in shown)
    how = "each declaration with the batch index b given to every per-sequence entry"
    return [
        Heading("Batches"),
        Prose(P.BATCH_TEXT),
        Display(lines, derived(how, *(s.output for s in shown))),
    ]
