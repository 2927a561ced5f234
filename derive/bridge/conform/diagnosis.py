"""Which mistake the implementation computes: every catalogue entry evaluated on what it was shown.

Each mistake of `derive.graph.mistakes` changes the graph of each scenario's form (or leaves it, or
cannot be declared there: that scenario is then not compared for it). It explains the
implementation when, on every scenario it is declared on, its output matches what the
implementation returned within the tolerance of the correct output there, and when on one of
them at least it predicts something other than the correct graph (a mistake that changes nothing
at these sizes, such as scaling by the model's width with one head, explains nothing). A row of
weights with no key is read the mistake's way ("zero", derive's convention, or "nan"); a mistake
that matches only when its empty rows are read as NaN is reported with ``nan-on-empty-rows``.

When none matches, the report says where the values first differ: the first scenario whose output
differs, and in it the first matrix the target let us see (Q, K, V from its projections, Ĉ going
into its output projection) that differs, or else C, at the entry nearest its tolerance.
"""

from __future__ import annotations

from typing import Any

from ...graph.forms import reference
from ...graph.mistakes import Mistake
from ...notation import latex
from ...notation.plain import plain
from .compare import Scenario, agree, output, predict
from .report import Diagnosis

__all__ = ["diagnose", "first_difference"]

_SEEN = {
    "Q": "the output of the query projection",
    "K": "the output of the key projection",
    "V": "the output of the value projection",
    "C_concat": "Ĉ, the input of the output projection",
}


def _differs(candidate: Any, correct: Any, bound: Any, rows: str) -> bool:
    """Does the candidate predict something else than the correct graph?"""
    if not bool((candidate.isnan() == correct.isnan()).all()):
        return True
    if rows == "nan" and bool(candidate.isnan().any()):
        return True
    both = ~candidate.isnan()
    return bool(((candidate - correct).abs()[both] > bound[both]).any())


def _predictions(mistake: Mistake, scenarios: list[Scenario]) -> dict[str, tuple]:
    found = {}
    for scenario in scenarios:
        graph = mistake.change(reference(scenario.form), scenario.form)
        if graph is None:
            continue
        value, _ = output(predict(scenario, graph), scenario)
        _, bound = scenario.observed["expected"]
        if "ieee" not in scenario.observed:  # the correct graph, empty rows NaN
            scenario.observed["ieee"] = output(predict(scenario), scenario)[0]
        found[scenario.name] = (scenario, value, bound, scenario.observed["ieee"])
    return found


def _explains(predictions: dict, rows: str) -> bool:
    matches = all(
        agree(s.got, value, bound, rows).passed for s, value, bound, _ in predictions.values()
    )
    differs = any(
        _differs(value, ieee, bound, rows) for _, value, bound, ieee in predictions.values()
    )
    return matches and differs


def _formulas(mistake: Mistake, scenarios: list[Scenario]) -> tuple[str, str, str, str]:
    if mistake.rows == "nan" and mistake.changed(scenarios[0].form) is None:
        step = next(
            s for s in reference(scenarios[0].form).declarations if s.output.startswith("A")
        )
        rule = "a row with no key: 0/0 = NaN", "a row with no key: zero weights (derive's)"
        element = plain(step.element)
        return (
            f"{element}  ({rule[0]})",
            latex(step.element) + rf"\quad\text{{({rule[0]})}}",
            f"{element}  ({rule[1]})",
            latex(step.element) + rf"\quad\text{{({rule[1]})}}",
        )
    for scenario in scenarios:
        changed = mistake.changed(scenario.form)
        if changed is not None:
            right, wrong = changed
            return (
                plain(wrong.element),
                latex(wrong.element),
                plain(right.element),
                latex(right.element),
            )
    return "", "", "", ""


def diagnose(scenarios: list[Scenario], mistakes: tuple[Mistake, ...]) -> Diagnosis:
    """The catalogue's first explanation of what the implementation returned, or where it
    first differs when none explains it."""
    explained: list[tuple[Mistake, str, tuple[str, ...]]] = []
    for mistake in mistakes:
        predictions = _predictions(mistake, scenarios)
        if not predictions:
            continue
        conventions = ("nan",) if mistake.rows == "nan" else ("zero", "nan")
        for rows in conventions:
            if _explains(predictions, rows):
                explained.append((mistake, rows, tuple(predictions)))
                break
    if not explained:
        return Diagnosis(None, first_difference=first_difference(scenarios))
    best = next(((m, r, on) for m, r, on in explained if r == m.rows), explained[0])
    mistake, rows, matched_on = best
    also = [m.id for m, _, _ in explained if m is not mistake]
    if rows == "nan" and mistake.rows != "nan" and "nan-on-empty-rows" not in also:
        also.append("nan-on-empty-rows")
    wrong, wrong_tex, right, right_tex = _formulas(mistake, scenarios)
    return Diagnosis(
        mistake.id, mistake.title, wrong, wrong_tex, right, right_tex, tuple(also), matched_on
    )


def first_difference(scenarios: list[Scenario]) -> str:
    """The first scenario whose output differs, and the first matrix seen in it that differs."""
    for scenario in scenarios:
        value, bound = scenario.observed["expected"]
        found = agree(scenario.got, value, bound)
        if found.passed:
            continue
        evaluation = scenario.observed["evaluation"]
        agreeing = []
        for letter in ("Q", "K", "V", "C_concat"):
            seen = scenario.observed.get(letter)
            if seen is None or letter not in evaluation.values:
                continue
            inner = agree(seen, evaluation[letter], evaluation.bound(letter))
            if not inner.passed:
                return (
                    f"the values first differ in scenario '{scenario.name}' at {letter} "
                    f"({_SEEN[letter]}), entry {inner.where}: got {inner.got:.6g}, derived "
                    f"{inner.expected:.6g}" + (f"; {', '.join(agreeing)} agree" if agreeing else "")
                )
            agreeing.append(letter)
        before = f" ({', '.join(agreeing)} agree)" if agreeing else ""
        return (
            f"the values first differ in scenario '{scenario.name}' at C (the output){before}, "
            f"entry {found.where}: got {found.got:.6g}, derived {found.expected:.6g}"
        )
    return "every output agrees with the derivation; the failing check is a property of the calls"
