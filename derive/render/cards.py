"""A variant of the registry in plain text, for a terminal (`derive variants --show NAME`) and
the reference: its base and what it changes, its steps each with its formula and the call of its
twin (argument order, names, options: the twins' contract made visible), its sizes and
parameters with their defaults, what SymPy is to prove, and the twins of the whole."""

from __future__ import annotations

import re

import sympy as sp

from ..graph import Entry
from ..graph.registry import ROOT, registered
from ..graph.twins import GradientTwin, ModuleTwin, StateTwin, Twin, step_twin, twin_letters
from ..notation import letters as L
from ..notation.plain import plain

__all__ = ["summary", "card", "step_call"]


def _callee(function: object) -> str:
    if isinstance(function, str):
        return function
    return getattr(function, "__qualname__", None) or getattr(function, "__name__", repr(function))


def _option(value: object) -> str:
    if isinstance(value, sp.Basic):
        return plain(value)
    if isinstance(value, tuple):
        return "{" + ", ".join(f"{k}: {_option(v)}" for k, v in value) + "}"
    return repr(value)


def step_call(step) -> str:
    """How `derive check` calls a step's twin: ``scores(Q, K)``, ``weights(Omega_scaled, M,
    sink=ζ[1,1])`` (by default the function of `attention.functional` named after the step,
    given the matrices it reads in the book's order, constants left out)."""
    twin = step_twin(step)
    arguments = twin_letters(step, twin)
    options = [f"{k}={_option(v)}" for k, v in twin.options]
    return f"{_callee(twin.function)}({', '.join([*arguments, *options])})"


def _whole(twin, options: dict) -> str:
    if isinstance(twin, ModuleTwin):
        return f"{twin.cls} (the class, given the derivation's weights)"
    if isinstance(twin, GradientTwin | StateTwin):
        return f"{_callee(twin.function)}({', '.join(twin.arguments)})"
    assert isinstance(twin, Twin)
    told = {**options, **dict(twin.options)}
    keywords = [f"{k}={_option(v)}" for k, v in told.items() if k not in twin.implies]
    return f"{_callee(twin.function)}({', '.join([*twin.arguments, *keywords])})"


def _words(kind: str) -> str:
    """A kind of claim in words: ``RowsSumToOne`` -> ``rows sum to one``."""
    return re.sub(r"(?<!^)([A-Z])", r" \1", kind).lower()


def summary(names: tuple[str, ...]) -> str:
    """One line per variant: its name, its title, what it is built on, the values it adds."""
    from ..graph import declared

    rows = []
    for name in names:
        found = declared(name)
        own = [f"{s.symbol}={s.default}" for s in (*found.sizes, *found.parameters)]
        base = f"on {found.base}" if found.base else "the root"
        mine = " (yours)" if registered(name) is not None else ""
        rows.append((name + mine, found.title, base, ", ".join(own)))
    width = [max(len(row[k]) for row in rows) for k in range(3)]
    return "\n".join(
        f"{a:<{width[0]}}  {b:<{width[1]}}  {c:<{width[2]}}  {d}".rstrip() for a, b, c, d in rows
    )


def card(entry: Entry) -> str:
    """Every part of one entry a user declares or reads (see the module docstring)."""
    lines = [f"{entry.name}: {entry.title}"]
    base = entry.base.name if entry.base is not None else "none (the root)"
    lines.append(
        f"  built on: {base}" if entry.name != ROOT else "  the entry every other is built on"
    )
    lines.append("  steps (output = formula; the twin derive check calls):")
    for step in entry.graph.declarations:
        lines.append(f"    {step.output}: {plain(step.element)}")
        if not step.constant:
            lines.append(f"        twin: {step_call(step)}")
    sizes = [f"{s.symbol} (default {s.default}; {s.text})" for s in entry.sizes]
    values = [
        f"{p.symbol} (default {plain(sp.sympify(p.default))}; {p.text or 'a number'})"
        for p in entry.parameters
    ]
    lines.append("  sizes: " + ("; ".join(sizes) or "n, d, c only"))
    lines.append("  parameters: " + ("; ".join(values) or "none"))
    inputs = [x for x in entry.graph.inputs if x not in L.CONSTANT_LETTERS]
    shapes = entry.graph.shapes
    shown = [f"{x} ({plain(shapes[x][0])} × {plain(shapes[x][1])})" for x in inputs]
    lines.append("  inputs: " + ", ".join(shown))
    requires = [c.why for c in entry.requires if getattr(c, "why", "")]
    if requires:
        lines.append("  requires: " + "; ".join(requires))
    titles = [
        getattr(claim, "title", "") or _words(type(claim).__name__) for claim, _ in entry.claims
    ]
    lines.append("  claims: " + ("; ".join(titles) or "none"))
    twins = [_whole(t, entry.options) for t in entry.twins]
    lines.append("  twins of the whole: " + ("; ".join(twins) or "none"))
    return "\n".join(lines)
