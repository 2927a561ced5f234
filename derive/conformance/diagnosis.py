"""Which mistake the implementation computes: the catalogue evaluated on what it was shown.

The scenarios where the implementation's output differs from the derivation are the ones to
explain. Each mistake of `derive.graph.mistakes` changes the graph of each such scenario's form;
it explains the implementation when on every one of them its output matches what the
implementation returned, within the tolerance of the correct output there (a scenario whose form
the mistake cannot be declared on, a window one key wider under a given mask that hides that
key, asks nothing of it; at least one must be matched). Scenarios where the
implementation agrees with the derivation ask nothing of a mistake: a bug may live on one code
path (the mask) and not on another (is_causal). A row of weights with no key is read the
mistake's way ("zero", derive's convention, or "nan"); a mistake that matches only when its
empty rows are read as NaN is reported with ``nan-on-empty-rows``. Where several match (the same
formula at these sizes: ``scale-by-c`` and ``scale-twice`` with one head), the first in the
catalogue is the diagnosis and the others are named with it.

When none matches, the report says where the values first differ: the first scenario whose output
differs, and in it the first matrix the target let us see (Q, K, V from its projections, Ĉ going
into its output projection) that differs, or else C, at the entry nearest its tolerance.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..graph.forms import reference
from ..graph.mistakes import Mistake
from ..notation import latex
from ..notation import letters as L
from ..notation.plain import plain
from .checks.compare import Scenario, agree, expect, flipped, output, predict
from .evaluate.matrices import Rounding
from .report import Diagnosis

__all__ = ["diagnose", "first_difference"]

_SEEN = {
    "Q": "the output of the query projection",
    "K": "the output of the key projection",
    "V": "the output of the value projection",
    "C_concat": "Ĉ, the input of the output projection",
}


def _explains(mistake: Mistake, failing: list[Scenario], rows: str, cache: dict) -> bool:
    """Does the mistake's output match the implementation's on every failing scenario? A
    mistake that leaves every one of their graphs as it is explains nothing (save the one whose
    point is reading empty rows as NaN)."""
    unchanged = all(_mistaken(mistake, s.form) == reference(s.form) for s in failing)
    if mistake.rows == "zero" and unchanged:
        return False
    tested = 0
    for scenario in failing:
        key = (mistake.id, scenario.name)
        if key not in cache:
            cache[key] = _predicted(mistake, scenario)
        if cache[key] is None:  # not declared on this form: the scenario asks nothing of it
            continue
        if not agree(scenario.got, cache[key], _tolerance(scenario, cache[key]), rows).passed:
            return False
        tested += 1
    return tested > 0


def _predicted(mistake: Mistake, scenario: Scenario) -> Any:
    """C as the mistake computes it on the scenario's inputs; None where the scenario asks
    nothing of it. Tokens given in turn with a cache (``form.cached``): a mistake of the cache
    (its graph reads the calls) is its graph on the whole sequence; any other is made within
    each call, so each call's rows are its graph on the tokens up to the call's last, which is
    what a call computes for a mistake that reads each row's own query only. One that mixes the
    rows of a call (`Mistake.row_by_row` False: the softmax over the queries, a merge or split
    without the transpose) gives rows that depend on where each call starts, which no graph of
    the sequence states: the scenario asks nothing of it."""
    graph = _mistaken(mistake, scenario.form)
    if graph is None:
        return None
    starts = scenario.form.cached
    if not starts or graph != _mistaken(mistake, dataclasses.replace(scenario.form, cached=())):
        return output(predict(scenario, graph), scenario)[0]
    n = scenario.sizes[L.n]
    others = (v for k, v in scenario.inputs.items() if k != "X")
    if not mistake.row_by_row or any(n in tuple(v.shape) for v in others):
        return None  # an input with a row per token (a user's variant) is not cut per call
    rows = []
    for start, stop in zip((0, *starts), (*starts, n), strict=True):
        inputs = {**scenario.inputs, "X": scenario.inputs["X"][..., :stop, :]}
        call = dataclasses.replace(scenario, inputs=inputs, sizes={**scenario.sizes, L.n: stop})
        rows.append(output(predict(call, graph), call)[0][..., start:stop, :])
    return torch.cat(rows, dim=-2)


def _mistaken(mistake: Mistake, form: Any) -> Any:
    """The mistake's graph of a form; None where it cannot be declared there (a variant's
    step it reads by name is another's)."""
    try:
        return mistake.change(reference(form), form)
    except (ValueError, KeyError, StopIteration):
        return None


def _tolerance(scenario: Scenario, predicted: Any) -> Any:
    """A mistake's tolerance: the correct output's bound, and nowhere less than its largest bound
    (scaled by how much larger the mistake's values are): where a mistake computes what the
    correct graph does not (a row the correct one masks), its entry's own bound says nothing."""
    value, bound = scenario.observed["expected"]
    bound = bound.nan_to_num(0.0)
    largest = max(float(value.nan_to_num(0.0).abs().max()), 1e-300)
    scale = max(1.0, float(torch.nan_to_num(predicted, 0.0).abs().max()) / largest)
    return torch.clamp(bound, min=float(bound.max()) * scale)


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


def _explanations(failing: list[Scenario], mistakes: tuple[Mistake, ...]) -> list:
    explained: list[tuple[Mistake, str]] = []
    cache: dict = {}
    for mistake in mistakes:
        conventions = ("nan",) if mistake.rows == "nan" else ("zero", "nan")
        for rows in conventions:
            if _explains(mistake, failing, rows, cache):
                explained.append((mistake, rows))
                break
    return explained


def _failing(scenarios: list[Scenario], rounding: Rounding) -> list[Scenario]:
    return [s for s in scenarios if not agree(s.got, *expect(s, rounding)).passed]


def diagnose(
    scenarios: list[Scenario], mistakes: tuple[Mistake, ...], rounding: Rounding, either: bool
) -> Diagnosis:
    """The catalogue's first explanation of what the implementation returned, or where it first
    differs when none explains it. With `either` (causality was probed, not told), a mistake
    that makes causal attention read a later token (the softmax over the queries) is looked for
    with the other causality too."""
    failing = _failing(scenarios, rounding)
    explained = _explanations(failing, mistakes) if failing else []
    assumed = ""
    if failing and not explained and either:
        try:
            other = [flipped(s) for s in scenarios]
            failing_other = _failing(other, rounding)
        except ValueError:  # a variant with no graph of the other causality (sigmoid's)
            other, failing_other = [], []
        explained = _explanations(failing_other, mistakes) if failing_other else []
        if explained:
            failing = failing_other
            causal = other[0].form.causal
            assumed = f"as {'causal' if causal else 'not causal'} attention, which the probe missed"
    if not explained:
        return Diagnosis(None, first_difference=first_difference(scenarios))
    mistake, rows = next(((m, r) for m, r in explained if r == m.rows), explained[0])
    also = [m.id for m, _ in explained if m is not mistake]
    if rows == "nan" and mistake.rows != "nan" and "nan-on-empty-rows" not in also:
        also.append("nan-on-empty-rows")
    wrong, wrong_tex, right, right_tex = _formulas(mistake, failing)
    names = tuple(s.name for s in failing)
    return Diagnosis(
        mistake.id,
        mistake.title,
        wrong,
        wrong_tex,
        right,
        right_tex,
        tuple(also),
        names,
        assumed=assumed,
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
