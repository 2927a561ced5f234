"""The formula each check tests, printed from the graph (plain text and LaTeX), never typed."""

from __future__ import annotations

import hashlib

import sympy as sp

from ...graph import Declaration, Graph
from ...notation import latex
from ...notation.letters import LETTERS
from ...notation.plain import plain
from .cache import cached
from .matrices import gradients, graph_forms

__all__ = ["Formula", "composed", "declared", "softmax_gradient"]

Formula = tuple[str, str]  # (plain text, LaTeX)

#: Letters left as they are when composing C: the inputs of attention proper and the mask.
_KEPT = {"Q", "K", "V", "Q_l", "K_l", "V_l", "M"}


def _both(expr: sp.Basic) -> Formula:
    return plain(expr), latex(expr)


def composed(graph: Graph) -> Formula:
    """C as one derived expression in Q, K, V (per head) and W_o: each step's matrix form put
    into the next, C = softmax(Q Kᵀ/√c) V (C's entries as declared, where SymPy finds C no
    matrix form). Printed once per graph and kept between runs with
    what SymPy derives (`cache`): printing it is a third of a first check's time. The key holds
    the letters the printers read, which a user's file may add to."""
    return cached(f"composed-{_letters()}", graph, lambda: _composed(graph))


def _letters() -> str:
    table = repr(sorted((name, repr(letter)) for name, letter in LETTERS.items()))
    return hashlib.sha256(table.encode()).hexdigest()[:12]


def _composed(graph: Graph) -> Formula:
    forms = {}
    for step, form in zip(graph.declarations, graph_forms(graph), strict=True):
        if form is not None and step.output not in _KEPT:
            forms[step.output] = form
    if graph.output not in forms:  # C has no matrix form: its entries, as declared
        return declared(graph, graph.output)
    symbols = {s for form in forms.values() for s in form.atoms(sp.MatrixSymbol)}
    by_name = {str(s.name): s for s in symbols}
    expr = forms[graph.output]
    for _ in forms:
        expr = expr.xreplace({by_name[k]: v for k, v in forms.items() if k in by_name})
    lhs = sp.MatrixSymbol(graph.output, *expr.shape)
    return _both(sp.Eq(lhs, expr, evaluate=False))


def declared(graph: Graph, output: str) -> Formula:
    """The declaration of one step, as declared."""
    return _both(graph.step(output).element)


def weights(graph: Graph, otherwise: Graph) -> Formula:
    """The weights as `graph` declares them (a variant's own, per head where it has heads), or
    as `otherwise` does where `graph` names no A."""
    letter = next((x for x in ("A", "A_l") if graph.producer(x) is not None), None)
    return declared(graph, letter) if letter else declared(otherwise, "A")


def declaration(step: Declaration) -> Formula:
    return _both(step.element)


def softmax_gradient(graph: Graph) -> Formula:
    """The gradient through the softmax, as reverse mode derives it: Ω̄̃ = (Ā − (A ∘ Ā) J) ∘ A."""
    softmax = next(s for s in graph.declarations if s.output.startswith("A"))
    read = softmax.inputs[0]
    found = next(g for g in gradients(graph) if g.of == read)
    return _both(sp.Eq(found.lhs, found.rhs, evaluate=False))
