"""`derive check --variant NAME`: a registered variant against `attention`, step by step.

Generic over the registry: the variant's graph written out at the check's sizes
(`ExplicitGraph`), every step evaluated by SymPy and by its `attention.functional` twin of the
same name (projection, scores, scaled_scores, weights, context) on the same seeded dyadic
inputs; then C from the variant's own entry point (its `Twin`: called once on the whole
sequence, or one new row at a time with the cache it returns); then every gradient derived by
the chain rule against autograd through the same steps.
"""

from __future__ import annotations

import importlib
from typing import Any

import sympy as sp

from ..explicit import MAX_GRADIENT_SIZE
from ..explicit.forward import ExplicitGraph
from ..explicit.gradients import ExplicitGradients
from ..graph.variants import Variant, variant
from ..notation import letters as L
from .check import GRADIENT_TOLERANCE, TOLERANCE, Row
from .steps import compare

__all__ = ["variant_sizes", "variant_rows", "torch_graph_steps"]


def variant_sizes(found: Variant, n: int, d: int, c: int, given: dict[str, int]) -> dict:
    """n, d, c and the variant's own sizes (given, or its defaults)."""
    sizes = {L.n: n, L.d: d, L.c: c}
    return sizes | {symbol: given.get(str(symbol), default) for symbol, default in found.sizes}


def _inputs(explicit: ExplicitGraph, seed: int) -> dict[str, Any]:
    """Seeded float64 inputs, every entry k/8 with -16 ≤ k ≤ 16 (exact in float64)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return {
        letter: torch.randint(-16, 17, symbols.shape, generator=generator).double() / 8
        for letter, symbols in explicit.inputs.items()
    }


def _allowed(explicit: ExplicitGraph) -> Any:
    """The mask the graph declares, as booleans (True = may attend), or None."""
    import torch

    mask = L.base("mask")
    entries = {e: v for e, v in explicit.instance.folded.items() if e.base == mask}
    if not entries:
        return None
    rows = max(int(e.indices[0]) for e in entries)
    cols = max(int(e.indices[1]) for e in entries)
    allowed = torch.zeros(rows, cols, dtype=torch.bool)
    for entry, value in entries.items():
        allowed[int(entry.indices[0]) - 1, int(entry.indices[1]) - 1] = bool(value == 0)
    return allowed


def torch_graph_steps(explicit: ExplicitGraph, inputs: dict[str, Any]) -> dict[str, Any]:
    """Each explicit step by the `attention.functional` function of its name."""
    from attention import functional as F

    width = explicit.sizes[L.c]
    values = dict(inputs)
    mask = _allowed(explicit)
    for step in explicit.steps:
        declaration = step.step.declaration
        read = [values[letter] for letter in declaration.inputs if letter in values]
        if step.name == "projection":
            values[step.output] = F.projection(*read)
        elif step.name == "scores":
            values[step.output] = F.scores(*read)
        elif step.name == "scaled_scores":
            values[step.output] = F.scaled_scores(*read, width)
        elif step.name == "weights":  # softmax(Ω̃ / √1): the same weights, and Ω̃ gets a gradient
            values[step.output] = F.weights(values["Omega_scaled"], 1, mask=mask)
        elif step.name == "context":
            values[step.output] = F.context(*read)
        else:
            raise ValueError(f"no attention.functional twin for step {step.name!r}")
    return values


def _twin(found: Variant, explicit: ExplicitGraph, inputs: dict[str, Any]) -> Any:
    """C from the variant's own entry point."""
    import torch

    module, _, name = found.twin.function.rpartition(".")
    function = getattr(importlib.import_module(module), name)
    sizes = {str(symbol): value for symbol, value in explicit.sizes.items()}
    options = {key: sizes[str(value)] if isinstance(value, sp.Symbol) else value
               for key, value in found.twin.options}  # fmt: skip
    arguments = [inputs[letter] for letter in found.twin.arguments]
    if not found.twin.incremental:
        return function(*arguments, **options)
    x, weights = arguments[0], arguments[1:]
    rows, cache = [], None
    for t in range(x.shape[-2]):  # one new token at a time, with the cache it returned
        row, cache = function(x[..., t : t + 1, :], *weights, cache=cache, **options)
        rows.append(row)
    return torch.cat(rows, dim=-2)


def _row(label: str, expected: Any, got: Any, limit: float) -> Row:
    difference = float((got.detach() - expected).abs().max())
    return Row(label, tuple(expected.shape), difference, False, difference <= limit, limit)


def variant_rows(name: str, n: int, d: int, c: int, given: dict[str, int], *, seed: int,
                 forward_only: bool = False) -> tuple[list[Row], str]:  # fmt: skip
    """Every row of one trial of `derive check --variant NAME`, and a note on what was not
    checked (or "")."""
    import torch

    found = variant(name)
    explicit = ExplicitGraph(found.graph, variant_sizes(found, n, d, c, given))
    inputs = _inputs(explicit, seed)
    values = explicit.evaluate(**inputs)
    exact = {step.output for step in explicit.steps if step.polynomial}
    rows = []
    for item in compare(values, torch_graph_steps(explicit, inputs)):
        passed = item.exact if item.output in exact else item.max_abs_error <= TOLERANCE
        shape = values.matrices[item.output].shape
        rows.append(Row(item.output, shape, item.max_abs_error, item.output in exact, passed))
    expected = torch.tensor(values.floats("C"), dtype=torch.float64)
    rows.append(_row(f"C · {found.twin.function.rpartition('.')[2]}", expected,
                     _twin(found, explicit, inputs), TOLERANCE))  # fmt: skip
    if forward_only:
        return rows, "backward pass not checked (--forward-only)"
    if max(explicit.sizes.values()) > MAX_GRADIENT_SIZE:
        return rows, f"backward pass not checked: sizes over {MAX_GRADIENT_SIZE}"
    return rows + _gradient_rows(explicit, inputs, seed), ""


def _gradient_rows(explicit: ExplicitGraph, inputs: dict[str, Any], seed: int) -> list[Row]:
    """Every gradient by the chain rule at these sizes against autograd through the steps."""
    import torch

    gradients = ExplicitGradients.of(explicit)
    generator = torch.Generator().manual_seed(seed + 1)
    upstream = torch.randint(-16, 17, gradients.dC.shape, generator=generator).double() / 8
    values = gradients.evaluate_inputs(**inputs, dC=upstream)
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    steps = torch_graph_steps(explicit, leaves)
    for tensor in steps.values():
        if tensor.requires_grad and not tensor.is_leaf:
            tensor.retain_grad()
    steps["C"].backward(upstream)
    rows = []
    for step in gradients.steps:
        tensor = steps.get(step.of)
        if tensor is None or tensor.grad is None:
            continue
        expected = torch.tensor(values.floats(step.output), dtype=torch.float64)
        rows.append(_row(step.output, expected, tensor.grad, GRADIENT_TOLERANCE))
    return rows
