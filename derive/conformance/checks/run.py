"""What a run of `derive conform` shares, whatever the target: its options, its inputs (dyadic
rationals, exact in every float dtype), the rows it writes, and the report with its diagnosis."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ...graph.mistakes import MISTAKES, Mistake
from ..diagnosis import diagnose
from ..evaluate.formulas import Formula
from ..read.target import Target
from ..report import Check, Report
from .compare import Scenario, agree, expect, output, predict, rounding_for, why

__all__ = ["Options", "Run"]


@dataclass(frozen=True)
class Options:
    """What `derive.conform` accepts besides the target (see its docstring)."""

    kind: str | None = None
    causal: bool | None = None
    n: int | None = None
    seed: int = 0
    dtype: Any = None
    width: int = 8
    heads: int = 3
    batch: int | None = None
    adapter: str | None = None
    variant: str = ""
    values: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    strict: bool = False
    conventions: dict[str, str] = field(default_factory=dict)
    mistakes: tuple[Mistake, ...] = MISTAKES


def fresh_size(taken: set[int], start: int = 2) -> int:
    """The smallest size from `start` on that is none of `taken`: a swapped axis cannot pass."""
    size = start
    while size in taken:
        size += 1
    return size


class Run:
    """One run: the scenarios the target was shown, the rows written, the report."""

    kind = ""
    convention: str | None = None
    variant = ""

    def __init__(
        self, target: Target, options: Options, dtype: Any, *, known: dict | None = None
    ) -> None:
        self.target, self.options = target, options
        #: the conventions the tolerances follow: those the adapter knows its modules keep
        #: (`known`; none when strict), under those the caller told
        self.conventions = {**({} if options.strict else known or {}), **options.conventions}
        self.dtype, self.rounding = dtype, rounding_for(dtype, conventions=self.conventions)
        self.generator = torch.Generator().manual_seed(options.seed)
        self.scenarios: list[Scenario] = []
        self.rows: list[Check] = []
        self.causal, self.causal_how = False, ""
        self.notes: list[str] = list(target.notes)
        self.unchecked: list[str] = []  # checks it could have run, and why not: the verdict's

    def dyadic(self, shape: tuple[int, ...], top: int) -> Any:
        """Entries k/8 with |k| ≤ top, from the run's own generator (float64, exact in any
        float dtype for top ≤ 32)."""
        return torch.randint(-top, top + 1, shape, generator=self.generator).double() / 8

    # -- rows ----------------------------------------------------------------------------------

    def expected(self, scenario: Scenario) -> tuple[Any, Any]:
        """The correct output of a scenario and its bound (see `compare.expect`)."""
        return expect(scenario, self.rounding)

    def value_row(self, name: str, what: str, formula: Formula, scenario: Scenario) -> Check:
        """The target's output against the derivation, entry by entry within the bound."""
        self.scenarios.append(scenario)
        value, bound = self.expected(scenario)
        found = agree(scenario.got, value, bound)
        note = "" if found.passed else self._entry(found)
        return Check(
            name,
            "PASS" if found.passed else "FAIL",
            what,
            *formula,
            found.error,
            found.tolerance,
            why(self.dtype, conventions=self.conventions),
            note,
        )

    def same_row(self, name: str, what: str, formula: Formula, pairs: list) -> Check:
        """Two outputs of the target that must be equal: (got, same, bound of one) each."""
        found = [agree(got, same, 2 * bound, rows="nan") for got, same, bound in pairs]
        failing = [item for item in found if not item.passed]
        worst = max(failing or found, key=lambda item: item.ratio)
        passed = not failing
        reason = "twice the forward bound: two computations of the same exact values"
        note = "" if passed else self._entry(worst)
        return Check(
            name,
            "PASS" if passed else "FAIL",
            what,
            *formula,
            worst.error,
            worst.tolerance,
            reason,
            note,
        )

    def empty_row(self, what: str, formula: Formula, scenario: Scenario) -> Check:
        """A query with no key: every other row as derived, within its bound; its own row is a
        convention the derivation leaves open (derive's: zero weights; torch's: NaN; a finite
        fill's: uniform weights), stated, and held to derive's zeros only when strict or told
        (``conventions={"empty rows": "zero"}``, or ``"nan"``)."""
        self.scenarios.append(scenario)
        value, bound = self.expected(scenario)  # NaN in the row with no key (IEEE 0/0)
        empty = value.isnan()
        got = scenario.got
        others = agree(torch.where(empty, 0.0, got), torch.where(empty, 0.0, value), bound)
        zero = predict(scenario, rounding=self.rounding, empty_rows="zero")
        as_derived = agree(got, *output(zero, scenario)).passed
        nan = bool(got[empty].isnan().any())
        found = (
            "zero weights, derive's convention"
            if as_derived
            else "NaN (IEEE 0/0, torch's convention)"
            if nan
            else "finite weights other than derive's zeros (a finite fill's)"
        )
        rule = "zero" if self.options.strict else self.conventions.get("empty rows", "any")
        own = as_derived if rule == "zero" else nan if rule == "nan" else True
        if own and not as_derived:
            self.notes.append(f"convention: a query with no key gets {found}")
        note = f"its row: {found}" + ("" if others.passed else "; " + self._entry(others))
        return Check(
            "query with no key",
            "PASS" if own and others.passed else "FAIL",
            what,
            *formula,
            others.error,
            others.tolerance,
            why(self.dtype, conventions=self.conventions),
            note,
        )

    @staticmethod
    def missing(name: str, what: str, formula: Formula, reason: str) -> Check:
        return Check(name, "n/a", what, *formula, None, None, reason)

    @staticmethod
    def _entry(found: Any) -> str:
        if found.got is None:
            return ""
        return (
            f"entry {found.where}: got {found.got:.6g}, expected {found.expected:.6g} "
            f"(|Δ| {found.error:.2g} > {found.tolerance:.2g})"
        )

    # -- the report ----------------------------------------------------------------------------

    def sizes(self) -> dict:
        raise NotImplementedError

    def report(self) -> Report:
        failing = [row for row in self.rows if row.status == "FAIL"]
        diagnosis = None
        if failing:
            for scenario in self.scenarios:
                self.expected(scenario)
            either = self.options.causal is None  # probed: a mistake may have fooled the probe
            diagnosis = diagnose(self.scenarios, self.options.mistakes, self.rounding, either)
        return Report(
            self.target.name,
            self.kind,
            self.convention,
            self.causal,
            self.causal_how,
            str(self.dtype).removeprefix("torch."),
            self.sizes(),
            tuple(self.rows),
            diagnosis,
            tuple(self.notes),
            tuple(self.unchecked),
            self.variant,
        )


def moved(after: Any, before: Any) -> float:
    """The largest change between two outputs, NaN where it was NaN counting as no change."""
    both = after.isnan() & before.isnan()
    return float(torch.where(both, 0.0, (after - before).abs()).nan_to_num(torch.inf).max())
