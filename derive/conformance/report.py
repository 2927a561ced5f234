"""The report of `derive conform`: one row per check, the diagnosis, and three ways to print it.

`Report.table()` for a terminal (colour only when asked: the command asks when stdout is a
terminal), `Report.markdown()` for a bug report (formulas as LaTeX), `Report.as_json()` for tools:
``{"conforms": bool, "kind": ..., "checks": [...], "diagnosis": "<id or null>", ...}``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import sympy as sp

__all__ = ["Check", "Diagnosis", "Report"]

_COLOURS = {"PASS": "\033[32m", "FAIL": "\033[31m", "n/a": "\033[2m"}
_RESET = "\033[0m"


@dataclass(frozen=True)
class Check:
    """One property of the implementation, checked.

    Attributes:
        name: the check (``"forward values"``).
        status: ``"PASS"``, ``"FAIL"``, or ``"n/a"`` (the target offers nothing to check it on;
            `why` says what).
        property: what is checked, in words.
        formula: the derived or declared formula it tests, plain text; `latex` the same.
        error: the error at the entry nearest its tolerance (or None).
        tolerance: the tolerance at that entry (or None).
        why: why that tolerance (or why not applicable).
        note: anything else the check found.
    """

    name: str
    status: str
    property: str
    formula: str
    latex: str
    error: float | None
    tolerance: float | None
    why: str
    note: str = ""


@dataclass(frozen=True)
class Diagnosis:
    """Which mistake of the catalogue the implementation computes, or where it first differs.

    Attributes:
        id: the mistake's id, or None when none matches.
        title: a few words on it.
        wrong, wrong_latex: the formula the implementation computes (the mistaken declaration).
        right, right_latex: the formula the derivation declares.
        also: other ids that match too (the same formula at these sizes).
        matched_on: the scenarios compared.
        first_difference: where the values first differ, when no mistake matches.
        assumed: how the implementation was read when not as probed (causal or not).
    """

    id: str | None
    title: str = ""
    wrong: str = ""
    wrong_latex: str = ""
    right: str = ""
    right_latex: str = ""
    also: tuple[str, ...] = ()
    matched_on: tuple[str, ...] = ()
    first_difference: str = ""
    assumed: str = ""


@dataclass(frozen=True)
class Report:
    """What `derive.conform` found.

    Args:
        target: how the report names what was checked (the TARGET string, or its name).
        kind: what it was checked as: ``"sdpa"``, ``"module"`` or ``"self"``; for a recurrent
            layer, its kind with the reader's name.
        convention: the name of the adapter that read a module's weights; None for a function
            or a recurrent layer.
        causal: whether it was checked as causal.
        causal_how: how that was known (``"as told"``, what the probe found, ``"a
            recurrence"``).
        dtype: the dtype it was checked in, as text (``"float32"``).
        sizes: the sizes it was shown, by name (n, d, c, h, …).
        checks: one `Check` per property, in the table's order.
        diagnosis: the mistake of the catalogue it computes, or where it first differs; None
            when no check fails.
        notes: lines printed after the diagnosis, before the verdict (findings, how the target
            was read).
        unchecked: the checks the target could have run but did not, and why (``"the mask
            checks did not run: …"``): the verdict line says it.
        variant: the registered variants it was checked for, joined by ``+``; empty for none.
        precision: the dtype it computes in where that is coarser than its inputs' (a float64
            layer that casts to float32 inside), found by conform: its checks are then within
            that dtype's rounding; None otherwise.
    """

    target: str
    kind: str
    convention: str | None
    causal: bool
    causal_how: str
    dtype: str
    sizes: dict
    checks: tuple[Check, ...]
    diagnosis: Diagnosis | None = None
    notes: tuple[str, ...] = field(default=())
    unchecked: tuple[str, ...] = field(default=())
    variant: str = ""
    #: The dtype it computes in where that is coarser than its inputs' (a float64 layer that
    #: casts to float32 inside), found by conform: its checks are within that dtype's rounding.
    precision: str | None = None

    @property
    def conforms(self) -> bool:
        """True when no check fails."""
        return all(check.status != "FAIL" for check in self.checks)

    def _header(self) -> list[str]:
        kind = self.kind + (f" ({self.convention})" if self.convention else "")
        causal = ("causal" if self.causal else "not causal") + f" ({self.causal_how})"
        sizes = ", ".join(f"{k} = {v}" for k, v in self.sizes.items())
        variant = f", variant {self.variant}" if self.variant else ""
        head = f"derive conform {self.target}: {kind}{variant}, {causal}, {self.dtype}"
        return [head, f"sizes: {sizes}"]

    def _verdict(self) -> str:
        counts = {s: sum(c.status == s for c in self.checks) for s in ("PASS", "FAIL", "n/a")}
        tally = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        verdict = ("conforms" if self.conforms else "does not conform") + f" ({tally})"
        if self.precision is not None and self.conforms:
            verdict = f"conforms at {self.precision}'s precision, not {self.dtype}'s ({tally})"
        return verdict + "".join(f", but {what}" for what in self.unchecked)

    def table(self, colour: bool = False) -> str:
        """A table for a terminal, with the formulas and tolerances under each row.

        Args:
            colour: colour each row's result (PASS, FAIL, n/a) with ANSI escape codes.

        Returns:
            The table, its lines joined by newlines, the verdict last.
        """
        lines = self._header() + [""]
        width = max(len(c.name) for c in self.checks)
        lines.append(
            f"  result  {'check':<{width}}  {'worst error':>11}  {'tolerance':>9}  property"
        )
        for check in self.checks:
            status = f"{check.status:<6}"
            if colour:
                status = _COLOURS[check.status] + status + _RESET
            lines.append(
                f"  {status}  {check.name:<{width}}  {_number(check.error):>11}  "
                f"{_number(check.tolerance):>9}  {check.property}"
            )
            indent = " " * (12 + width)
            if check.formula:
                lines.append(f"{indent}formula: {check.formula}")
            lines.append(f"{indent}{'tolerance' if check.status != 'n/a' else 'why'}: {check.why}")
            if check.note:
                lines.append(f"{indent}note: {check.note}")
        lines += ["", *self._diagnosis_lines(), *self.notes, self._verdict()]
        return "\n".join(lines)

    def _diagnosis_lines(self) -> list[str]:
        found = self.diagnosis
        if found is None:
            return []
        if found.id is None:
            return [
                "diagnosis: no mistake in the catalogue matches",
                f"  {found.first_difference}",
                "",
            ]
        lines = [
            f"diagnosis: {found.id} ({found.title})",
            f"  the implementation computes  {found.wrong}",
            f"  the derivation declares      {found.right}",
        ]
        if found.also:
            lines.append(f"  the same values as: {', '.join(found.also)}")
        lines.append(f"  matched on: {'; '.join(found.matched_on)}")
        if found.assumed:
            lines.append(f"  read {found.assumed}")
        return [*lines, ""]

    def markdown(self) -> str:
        """The report as Markdown: a table, then the diagnosis with its formulas in LaTeX.

        Returns:
            The Markdown text, ending in a newline.
        """
        head = self._header()
        lines = [
            f"**{head[0]}**",
            "",
            head[1],
            "",
            "| result | check | worst error | tolerance | property | formula |",
            "|---|---|---|---|---|---|",
        ]
        for c in self.checks:
            formula = f"${c.latex}$" if c.latex else ""
            lines.append(
                f"| {c.status} | {c.name} | {_number(c.error)} | "
                f"{_number(c.tolerance)} | {c.property} | {formula} |"
            )
        lines += ["", "Tolerances:", ""]
        lines += [f"- {c.name}: {c.why}" + (f" ({c.note})" if c.note else "") for c in self.checks]
        found = self.diagnosis
        if found is not None and found.id is not None:
            lines += [
                "",
                f"**Diagnosis: `{found.id}`** ({found.title}). The implementation computes",
                "",
                f"$${found.wrong_latex}$$",
                "",
                "where the derivation declares",
                "",
                f"$${found.right_latex}$$",
            ]
            if found.also:
                lines += ["", f"The same values as: {', '.join(found.also)}."]
        elif found is not None:
            lines += [
                "",
                "**Diagnosis:** no mistake in the catalogue matches. " + found.first_difference,
            ]
        lines += ["", *self.notes, self._verdict()]
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict:
        """The report as plain data, for tools.

        Returns:
            ``{"conforms", "kind", "checks", "diagnosis", …}``, ready for `json.dumps`: every
                SymPy number as a Python one (a size given by ``--value w=3`` is an Integer).
        """
        found = self.diagnosis
        return _plain(
            {
                "conforms": self.conforms,
                "kind": self.kind,
                "target": self.target,
                "convention": self.convention,
                "variant": self.variant,
                "causal": self.causal,
                "causal_how": self.causal_how,
                "dtype": self.dtype,
                "precision": self.precision,
                "sizes": dict(self.sizes),
                "checks": [asdict(check) for check in self.checks],
                "diagnosis": None if found is None else found.id,
                "mistake": None if found is None or found.id is None else asdict(found),
                "first_difference": None if found is None else found.first_difference or None,
                "unchecked": list(self.unchecked),
                "notes": list(self.notes),  # what the table says under its rows, every line of it
            }
        )

    def __str__(self) -> str:
        return self.table()


def _plain(value: Any) -> Any:
    """`value` with SymPy's numbers as Python's (an integer as int, any other number as float)
    and any other SymPy expression as its text, in dicts, lists and tuples at any depth."""
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, sp.Basic):
        if value.is_Integer:
            return int(value)
        return float(value) if value.is_number and value.is_real else str(value)
    return value


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}" if value else "0"
