"""A variant's torch code as text, printed from its declarations: the forward pass (every
step's formula, `printer`) and the backward pass (every gradient derive derives and checks,
`derive.explicit.checked`), each one Python function. Running it is torch's side
(`derive.bridge.generated`); documents print it as it is."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy as sp

from ..graph import Entry
from ..notation import letters as L
from .printer import Printer

__all__ = ["Program", "forward_program", "program", "step_source"]


@dataclass(frozen=True)
class Program:
    """The two generated functions of one entry, their source and what they read."""

    inputs: tuple[str, ...]
    output: str
    forward_source: str
    backward_source: str
    gradients: tuple[str, ...]  # the inputs the backward pass gives a gradient of
    forward_sizes: tuple[str, ...]  # the keyword sizes and parameters each function reads
    backward_sizes: tuple[str, ...]


def _source(name: str, arguments: str, printer: Printer, body: list[str], result: str) -> str:
    used = sorted(printer.used)
    keywords = f", *, {', '.join(used)}" if used else ""
    body = list(body)
    for prelude in ("batch", "X0"):  # the names the lines share, where a line reads them
        first = next(i for i, line in enumerate(body) if line.startswith(f"{prelude} = "))
        if not any(re.search(rf"\b{prelude}\b", line) for line in body[first + 1 :]):
            del body[first]
    lines = [f"def {name}({arguments}{keywords}):", *("    " + line for line in body)]
    lines.append(f"    return {result}")
    return "\n".join(lines) + "\n"


def _dictionary(items: Mapping[str, str]) -> str:
    """A dict of the function's results, one per line, as a formatter lays it out."""
    lines = "".join(f'        "{key}": {value},\n' for key, value in items.items())
    return "{\n" + lines + "    }"


def _forward(entry: Entry) -> tuple[str, Printer]:
    graph = entry.graph
    printer = Printer(graph.shapes, _sizes(entry))
    first = graph.inputs[0]
    printer.lines += [f"X0 = {first}", "batch = X0.shape[:-2]"]
    for step in graph.declarations:
        printer.lines.append(f"# {step.output}: {step.title}")
        printer.equation(step.element, variable=step.output)
    steps = _dictionary({s.output: s.output for s in graph.declarations})
    source = _source("forward", ", ".join(graph.inputs), printer, printer.lines, steps)
    return source, printer


def _backward(entry: Entry) -> tuple[str, Printer, tuple[str, ...]]:
    from ..explicit.checked import checked_backward

    graph = entry.graph
    gradients = checked_backward(entry)
    printer = Printer(graph.shapes, _sizes(entry))
    upstream = L.gradient(graph.output)
    computed = {upstream} | {g.output for g in gradients}
    read: list[str] = []
    for gradient in gradients:
        for atom in sorted(gradient.element.rhs.atoms(sp.Indexed), key=L.reading_key):
            letter = L.letter_of(atom)
            if letter not in computed and letter not in read:
                read.append(letter)
    body = [f"X0 = {upstream}", "batch = X0.shape[:-2]"]
    body += [f'{letter} = values["{letter}"]' for letter in read]
    printer.lines = body
    for gradient in gradients:
        printer.lines.append(f"# {gradient.output}")
        printer.equation(gradient.element, variable=gradient.output)
    given = tuple(g.of for g in gradients if g.of in graph.inputs)
    result = _dictionary({letter: L.gradient(letter) for letter in given})
    source = _source("backward", f"{upstream}, values", printer, printer.lines, result)
    return source, printer, given


def _sizes(entry: Entry) -> frozenset[sp.Symbol]:
    """The symbols of an entry that are numbers, not indices: the book's sizes, its own sizes
    and its parameters."""
    own = {x.symbol for x in (*entry.sizes, *entry.parameters)}
    return frozenset({*L.SIZES, *own})


@functools.cache
def forward_program(entry: Entry) -> tuple[str, tuple[str, ...]]:
    """The forward pass alone: its source and the keyword sizes it reads (no gradient derived,
    so that running the forward pass never waits for the backward's derivation and check)."""
    forward, printer = _forward(entry)
    return forward, tuple(sorted(printer.used))


@functools.cache
def program(entry: Entry) -> Program:
    """Both functions of the entry: the forward pass, and the backward pass of the gradients
    derive derives and checks (a `DerivationError` where one fails its check)."""
    forward, forward_sizes = forward_program(entry)
    backward, backward_printer, given = _backward(entry)
    graph = entry.graph
    return Program(
        graph.inputs,
        graph.output,
        forward,
        backward,
        given,
        forward_sizes,
        tuple(sorted(backward_printer.used)),
    )


def step_source(
    declaration: Any, shapes: Mapping[str, Any], sizes: Iterable[sp.Symbol]
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """One step's code, a function ``step(<the letters it reads>, *, <sizes>)``: (its source,
    the letters in order, the sizes by keyword), given the graph's shapes and the symbols that
    are sizes or parameters; a per-head letter is taken as every head's (h, rows, cols)."""
    letters = (declaration.output, *declaration.inputs)
    found = {x: shapes[x] for x in letters}
    printer = Printer(found, frozenset({*L.SIZES, *sizes}))
    inputs = declaration.inputs
    printer.lines += [f"X0 = {inputs[0]}", "batch = X0.shape[:-2]"]
    printer.equation(declaration.element, variable=declaration.output)
    source = _source("step", ", ".join(inputs), printer, printer.lines, declaration.output)
    return source, inputs, tuple(sorted(printer.used))
