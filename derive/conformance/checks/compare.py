"""Comparing what the target computed with what the derivation gives, within a stated tolerance.

A `Scenario` is one thing the target was shown (inputs, a mask, a stand-in dropout, changed
weights) with what it returned and which graph it must compute (its `Form`). `predict` evaluates a
graph on the scenario's inputs; `agree` compares entry by entry against the rounding bound of
each entry (`Rounding` of the target's dtype, plus the float64 reference's own), and names the
entry nearest its bound.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ...graph import Graph
from ...graph.forms import RHO, Form, reference
from ..evaluate.matrices import Evaluation, Rounding

__all__ = [
    "Scenario",
    "Agreement",
    "predict",
    "expect",
    "flipped",
    "agree",
    "rounding_for",
    "dtype_name",
    "why",
]

#: (unit roundoff of a stored result, of the sums inside products): torch accumulates float16
#: and bfloat16 products in float32.
_UNITS = {
    "float64": (2.0**-53, 2.0**-53),
    "float32": (2.0**-24, 2.0**-24),
    "float16": (2.0**-11, 2.0**-24),
    "bfloat16": (2.0**-8, 2.0**-24),
}
_REFERENCE = 2.0**-53


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _computed(name: str, told: dict) -> tuple[str, float, float]:
    """(what it computes in, its stored result's and its sums' unit roundoffs): the target's
    dtype, or, where the convention ``"precision"`` says a coarser one (a float64 layer that
    casts to float32 inside), that one's, named with its inputs'."""
    store, sums = _UNITS[name]
    precision = told.get("precision")
    if precision is None or _UNITS[precision][0] <= store:
        return name, store, sums
    coarse_store, coarse_sums = _UNITS[precision]
    return f"{precision} (its inputs {name})", coarse_store, max(sums, coarse_sums)


def rounding_for(dtype: Any, *, conventions: dict | None = None) -> Rounding:
    """The target's unit roundoffs plus the float64 reference's own; `conventions` may say the
    dtype its ``"softmax"`` and its ``"tables"`` (RoPE's angles) are computed in, where that is
    coarser (``"float32"`` in a float64 layer)."""
    from ..read.target import ConformError

    name, told = dtype_name(dtype), conventions or {}
    for given in (name, told.get("softmax"), told.get("tables"), told.get("precision")):
        if given is not None and given not in _UNITS:
            raise ConformError(f"dtype {given}: expected one of {', '.join(_UNITS)}")
    _, store, sums = _computed(name, told)

    def coarser(key: str) -> float:
        unit = _UNITS[told[key]][0] + _REFERENCE if key in told else 0.0
        return unit if unit > store + _REFERENCE else 0.0

    return Rounding(store + _REFERENCE, sums + _REFERENCE, coarser("softmax"), coarser("tables"))


def why(dtype: Any, what: str = "forward", conventions: dict | None = None) -> str:
    """Why the tolerance is what it is, in one line."""
    name, store, sums = _computed(dtype_name(dtype), conventions or {})
    unit = f"u = 2^{round(math.log2(store))}"
    inside = "" if store == sums else ", sums in float32"
    for key, words in (("softmax", "softmax"), ("tables", "RoPE's tables")):
        given = (conventions or {}).get(key)
        if given is not None and _UNITS[given][0] > store:
            inside += f", {words} in {given}"
    return (
        f"{name} rounding ({unit}{inside}) through the derived {what} steps, first order, "
        "entry by entry, plus the float64 reference's"
    )


@dataclass
class Scenario:
    """One showing: the graph inputs (float64), what the target returned, the graph it must
    compute, the output bias added after the graph, and what was seen inside the target."""

    name: str
    form: Form
    inputs: dict[str, Any]
    got: Any
    sizes: dict
    b_o: Any = None
    rho: float = 0.0
    observed: dict[str, Any] = field(default_factory=dict)

    def all_sizes(self) -> dict:
        return {**self.sizes, RHO: self.rho}


def predict(
    scenario: Scenario,
    graph: Graph | None = None,
    rounding: Rounding | None = None,
    empty_rows: str = "nan",
) -> Evaluation:
    """The scenario's inputs through `graph` (the correct one of its form by default)."""
    evaluation = Evaluation(scenario.all_sizes(), rounding, empty_rows)
    for letter, tensor in scenario.inputs.items():
        evaluation.give(letter, tensor)
    return evaluation.forward(graph if graph is not None else reference(scenario.form))


def output(evaluation: Evaluation, scenario: Scenario, letter: str = "C") -> tuple[Any, Any]:
    """C (+ the output bias) and its bound (None without rounding)."""
    value = evaluation[letter]
    bound = evaluation.bound(letter) if evaluation.rounding is not None else None
    if scenario.b_o is not None and letter == "C":
        value = value + scenario.b_o
        if bound is not None and evaluation.rounding is not None:  # (bounds come with rounding)
            bound = bound + evaluation.rounding.store * value.abs()
    return value, bound


def expect(scenario: Scenario, rounding: Rounding) -> tuple[Any, Any]:
    """The correct graph's output for a scenario (NaN where a row has no key: IEEE) and its
    rounding bound (that of derive's convention, zero weights, finite everywhere); once."""
    if "expected" not in scenario.observed:
        evaluation = predict(scenario, rounding=rounding)
        zero = predict(scenario, rounding=rounding, empty_rows="zero")
        scenario.observed["expected"] = (output(evaluation, scenario)[0], output(zero, scenario)[1])
        scenario.observed["evaluation"] = zero
    return scenario.observed["expected"]


def flipped(scenario: Scenario) -> Scenario:
    """The same showing compared with the other causality (a given mask refolded from the
    boolean one it was built from); tokens given in turn with a cache stay causal, as
    generation is."""
    causal = scenario.form.causal if scenario.form.cached else not scenario.form.causal
    form = dataclasses.replace(scenario.form, causal=causal)
    inputs = dict(scenario.inputs)
    if form.masked:
        allowed = scenario.observed["allowed"]
        if form.causal:
            allowed = allowed & torch.ones_like(allowed).tril()
        inputs["M"] = torch.where(allowed, 0.0, -torch.inf).double()
    seen = {k: v for k, v in scenario.observed.items() if k not in ("expected", "evaluation")}
    return Scenario(
        scenario.name, form, inputs, scenario.got, scenario.sizes, scenario.b_o, scenario.rho, seen
    )


@dataclass(frozen=True)
class Agreement:
    """Entry by entry within the bound? The entry nearest its bound: its error and bound."""

    passed: bool
    error: float
    tolerance: float
    where: tuple[int, ...] | None
    got: float | None = None
    expected: float | None = None

    @property
    def ratio(self) -> float:
        """error / tolerance at that entry (how near its bound; above 1 fails)."""
        if self.tolerance:
            return self.error / self.tolerance
        return float("inf") if self.error else 0.0


def agree(got: Any, expected: Any, bound: Any, rows: str = "zero") -> Agreement:
    """Entries where `expected` is NaN read a row with no key: there `got` must be finite
    (``rows="zero"``, derive's convention, whatever finite value) or NaN (``rows="nan"``);
    elsewhere |got − expected| ≤ bound."""
    got, expected, bound = torch.broadcast_tensors(got, expected, bound)
    empty = expected.isnan()
    empty_ok = bool((got[empty].isfinite() if rows == "zero" else got[empty].isnan()).all())
    difference = torch.where(empty, 0.0, (got - expected).abs()).nan_to_num(torch.inf)
    ratio = torch.where(difference == 0, 0.0, difference / bound)
    index = int(ratio.argmax())
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(index), ratio.shape))
    passed = empty_ok and bool((ratio <= 1).all())
    if not empty_ok and bool((ratio <= 1).all()):
        entries = (~got[empty].isfinite()) if rows == "zero" else got[empty].isfinite()
        where = tuple(int(i) for i in torch.nonzero(empty)[int(entries.nonzero()[0])])
    return Agreement(
        passed,
        float(difference[where]),
        float(bound[where]),
        where,
        float(got[where]),
        float(expected[where]),
    )
