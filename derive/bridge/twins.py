"""The entry points of an entry run on the check's inputs: its twins (`Entry.twins`), each where
it applies (every option of the entry one it takes or implies), called with the graph's inputs,
a module built and given the derivation's weights, a function one new token at a time."""

from __future__ import annotations

import inspect
from typing import Any

import sympy as sp
import torch

from ..explicit.forward import ExplicitGraph
from ..graph import Entry
from ..graph.twins import GradientTwin, ModuleTwin, StateTwin, Twin
from .evaluate import Reader, callee_name, number, resolve

__all__ = [
    "applies",
    "lacks",
    "unfit",
    "refused",
    "arguments",
    "options",
    "module_output",
    "twin_output",
    "label",
    "outputs",
    "states",
]


def lacks(
    twin: Twin | ModuleTwin | GradientTwin | StateTwin, options: dict[str, object]
) -> list[str]:
    """The options of the entry the twin neither takes (its signature) nor implies."""
    wanted = [key for key in options if key not in twin.implies]
    callee = twin.cls if isinstance(twin, ModuleTwin) else twin.function
    try:
        parameters = inspect.signature(resolve(callee, f"twin {label(twin)}")).parameters
    except (TypeError, ValueError):
        return wanted
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    return [key for key in wanted if key not in parameters]


def applies(twin: Twin | ModuleTwin | GradientTwin | StateTwin, options: dict[str, object]) -> bool:
    """True where every option of the entry is one the twin takes (its signature) or implies."""
    return not lacks(twin, options)


def unfit(entry: Entry) -> str:
    """Why no entry point computes the entry (each function twin and the options it lacks), or
    "" where one does."""
    functions = [t for t in entry.twins if isinstance(t, Twin)]
    if not functions:
        return "no entry point compared: no twin of the whole is declared"
    if any(applies(t, entry.options) for t in functions):
        return ""
    said = "; ".join(f"{label(t)} takes no {', '.join(lacks(t, entry.options))}" for t in functions)
    return f"no entry point computes it: {said}"


def refused(entry: Entry) -> str:
    """Why the entry's own twin of the whole cannot be called, where the variant declares one
    that does not take an option a variant it is built on gives (a user's twin without
    ``causal=`` on causal attention): a mistake in the declaration, never a row left out
    silently. "" where it takes them all, where the twin is another variant's, or in a
    combination asked for on the command line (``mine.py:V+causal``: its note says which
    twins it lacks)."""
    own = entry.chain[-1]
    if "+" in entry.name or not isinstance(own.twin, Twin) or applies(own.twin, entry.options):
        return ""
    missing = lacks(own.twin, entry.options)
    givers = {key: v.title for v in entry.chain for key, _ in v.options}
    said = "; ".join(
        f"{key}={entry.options[key]!r} (from {givers.get(key, 'a variant')})" for key in missing
    )
    return (
        f"variant {own.name}: its twin {label(own.twin)} takes no "
        f"{', '.join(missing)}, which the variants it is built on give to every twin: {said}; "
        f"add the keyword to {label(own.twin)} (it may refuse any other value)"
    )


def arguments(twin: Twin | GradientTwin | StateTwin, explicit: ExplicitGraph, read: Reader) -> list:
    letters = [
        x.removesuffix("?")
        for x in twin.arguments
        if not x.endswith("?") or x.removesuffix("?") in explicit.graph.inputs
    ]
    return [read(letter) for letter in letters]


def options(twin, entry: Entry, read: Reader) -> dict[str, object]:
    own = dict(getattr(twin, "options", ()))
    wanted = {k: v for k, v in entry.options.items() if k not in twin.implies}
    return {key: read.option(value) for key, value in (wanted | own).items()}


def module_output(twin: ModuleTwin, entry: Entry, explicit: ExplicitGraph, read: Reader) -> Any:
    """The module built at the check's sizes (with the entry's options it takes as keywords:
    ``MultiHeadAttention(..., softcap=κ)``), given the derivation's weights, on X."""
    cls = resolve(twin.cls, f"twin {twin.label}")
    init = [number(explicit.sizes[x]) if isinstance(x, sp.Symbol) else x for x in twin.init]
    module = cls(*init, **options(twin, entry, read)).double()
    with torch.no_grad():
        for path, letter, transposed in twin.weights:
            value = read(letter)
            module.get_parameter(path).copy_(value.T if transposed else value)
        for path in twin.zeroed:
            module.get_parameter(path).zero_()
    return module.eval()(read("X"))


def twin_output(twin: Twin, entry: Entry, explicit: ExplicitGraph, read: Reader) -> Any:
    function = resolve(twin.function, f"{entry.name}: twin")
    given = arguments(twin, explicit, read)
    keywords = options(twin, entry, read)
    if not twin.incremental:
        result = function(*given, **keywords)
        return result[twin.output] if twin.output is not None else result
    x, weights = given[0], given[1:]
    rows, cache = [], None
    for t in range(x.shape[-2]):  # one new token at a time, with the cache it returned
        row, cache = function(x[..., t : t + 1, :], *weights, cache=cache, **keywords)
        rows.append(row)
    return torch.cat(rows, dim=-2)


def label(twin) -> str:
    return twin.label or callee_name(twin.function).rpartition(".")[2]


def outputs(entry: Entry, explicit: ExplicitGraph, inputs: dict) -> list[tuple[str, Any]]:
    """C from each entry point of the entry that applies: (its label, its C)."""
    read = Reader(explicit, dict(inputs))
    found = []
    for twin in entry.twins:
        if isinstance(twin, GradientTwin | StateTwin) or not applies(twin, entry.options):
            continue
        if isinstance(twin, ModuleTwin):
            found.append((label(twin), module_output(twin, entry, explicit, read)))
        else:
            found.append((label(twin), twin_output(twin, entry, explicit, read)))
    return found


def states(
    entry: Entry, explicit: ExplicitGraph, read: Reader, matrices: dict, *, backward: bool
) -> list[tuple[str, Any, Any]]:
    """What each state twin that applies holds block by block (those that read dC where
    `backward`, the others where not) beside the values `derive` computes for it from the
    check's explicit `matrices`: (row label, derived rows of numbers, the twin's tensor) for
    each state and block; a block one side has and the other lacks is None on that side."""
    sizes = {str(symbol): number(value) for symbol, value in explicit.sizes.items()}
    found: list[tuple[str, Any, Any]] = []
    for twin in entry.twins:
        if not (
            isinstance(twin, StateTwin)
            and ("dC" in twin.arguments) == backward
            and applies(twin, entry.options)
        ):
            continue
        function = resolve(twin.function, f"{entry.name}: twin")
        got = function(*arguments(twin, explicit, read), **options(twin, entry, read))
        derived = resolve(twin.derived, f"{entry.name}: derived states")(
            explicit.graph, matrices, sizes
        )
        for attribute, name in twin.states:
            ours, theirs = list(derived[attribute]), list(getattr(got, attribute))
            for t in range(max(len(ours), len(theirs))):
                want = ours[t] if t < len(ours) else None
                tensor = theirs[t] if t < len(theirs) else None
                found.append((f"{name}^({t + 1}) · {label(twin)}", want, tensor))
    return found
