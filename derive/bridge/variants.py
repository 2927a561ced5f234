"""`derive check --variant NAME`: a registered variant against `attention`, step by step.

Generic over the registry: the variant's graph written out at the check's sizes
(`ExplicitGraph`), every step evaluated by SymPy and by its `attention` twin of the same name
(projection, scores, scaled_scores, weights, context, apply_rope, rms_norm; per head where the
graph has heads, each head's block of columns read as its declaration says) on the same seeded
dyadic inputs; then C from the variant's own entry point (its `Twin`: called once on the whole
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
from ..explicit.instantiate import key_of
from ..graph.variants import Variant, explicit_sizes, variant
from ..notation import letters as L
from .check import GRADIENT_TOLERANCE, TOLERANCE, Row
from .steps import compare

__all__ = ["variant_sizes", "variant_rows", "torch_graph_steps"]


def variant_sizes(found: Variant, n: int, d: int, c: int, given: dict[str, int]) -> dict:
    """n, d, c, the variant's own sizes (given, or its defaults), c_h and its parameters."""
    return explicit_sizes(found, n, d, c, given)


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


def _number(value: object) -> object:
    """A size or parameter as torch takes it: an int, else a float."""
    value = sp.sympify(value)
    return int(value) if value.is_Integer else float(value)


class _Reader:
    """The tensors of one explicit graph, by letter and head: computed steps by their key; a
    folded step (the split into heads, the concatenation) read as its declaration says."""

    def __init__(self, explicit: ExplicitGraph, values: dict[str, Any]) -> None:
        self.explicit, self.values = explicit, values

    def __call__(self, letter: str, head: int | None) -> Any:
        key = key_of(letter, head) if letter.endswith("_l") else letter
        if key in self.values:
            return self.values[key]
        step = self.explicit.graph.step(letter)
        if step.name == "merge_heads":
            import torch

            blocks = [self("C_l", h) for h in range(1, self.explicit.heads + 1)]
            return torch.cat(blocks, dim=-1)
        (source,) = step.inputs  # a block of columns: (ℓ − 1) c_h + j, or a group's block
        column = step.element.rhs.indices[-1]
        at = {L.ell: head or 1, L.j: 1} | self.explicit.sizes
        start = int(sp.sympify(column).xreplace(at)) - 1
        width = int(sp.sympify(step.shapes[letter][1]).xreplace(self.explicit.sizes))
        return self(source, None)[..., start : start + width]


def torch_graph_steps(explicit: ExplicitGraph, inputs: dict[str, Any]) -> dict[str, Any]:
    """Each explicit step by the `attention` function of its name, keyed like `Values`."""
    from attention import functional as F

    sizes = explicit.sizes
    values = dict(inputs)
    read = _Reader(explicit, values)
    mask = _allowed(explicit)
    for step in explicit.steps:
        declaration = step.step.declaration
        head = step.head
        width = sizes[L.c_h] if declaration.head else sizes[L.c]
        letters = [x for x in declaration.inputs if x not in L.CONSTANT_LETTERS]
        read_all = [] if step.name == "weights" else [read(letter, head) for letter in letters]
        if step.name == "projection":
            value = F.projection(*read_all)
        elif step.name == "scores":
            value = F.scores(*read_all)
        elif step.name == "scaled_scores":
            value = F.scaled_scores(*read_all, width)
        elif step.name == "weights":  # softmax(Ω̃ / √1): the same weights, and Ω̃ gets a gradient
            scaled = read("Omega_scaled_l" if declaration.head else "Omega_scaled", head)
            value = F.weights(scaled, 1, mask=mask)
        elif step.name == "context":
            value = F.context(*read_all)
        elif step.name == "apply_rope":
            value = _rope(read_all[0], width, sizes)
        elif step.name == "rms_norm":
            from attention import grouped

            source, gain = read_all
            value = grouped.rms_norm(source, gain.reshape(-1), eps=_number(sizes[L.eps]))
        else:
            raise ValueError(f"no attention twin for step {step.name!r}")
        values[step.output] = value
    return values


def _rope(x: Any, width: int, sizes: dict) -> Any:
    """attention.apply_rope with the book's tables at this width, base and length."""
    import torch

    import attention

    cos, sin = attention.compute_rope_params(
        width, theta_base=_number(sizes[L.beta]), context_length=x.shape[-2],
        dtype=torch.float64,
    )  # fmt: skip
    return attention.apply_rope(x, cos, sin)


def _option(value: object, sizes: dict[str, object], inputs: dict[str, Any]) -> object:
    """A twin's keyword value: a size or parameter at the check's values, an input of one row
    as a vector (QK-norm's gains), or the value itself."""
    if isinstance(value, sp.Symbol):
        return _number(sizes[str(value)])
    if isinstance(value, str):
        return inputs[value].reshape(-1)
    return value


def _twin(found: Variant, explicit: ExplicitGraph, inputs: dict[str, Any]) -> Any:
    """C from the variant's own entry point."""
    import torch

    module, _, name = found.twin.function.rpartition(".")
    function = getattr(importlib.import_module(module), name)
    sizes = {str(symbol): value for symbol, value in explicit.sizes.items()}
    options = {key: _option(value, sizes, inputs) for key, value in found.twin.options}
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
    sizes = variant_sizes(found, n, d, c, given)
    explicit = ExplicitGraph(found.graph, sizes, heads=sizes.get(L.h, 1))
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
    if max(v for k, v in explicit.sizes.items() if k in L.SIZES) > MAX_GRADIENT_SIZE:
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
