"""`derive check`: an entry of the registry against its torch twins, step by step.

For each trial of an entry (self-attention by default, any variant, a user's): sizes (those
given, the others drawn with the seed, every condition the entry states holding), inputs drawn
with the seed as dyadic rationals k/8 (exact in float64), every step evaluated by `derive`
(exact where a step is a polynomial with rational coefficients; 30 significant digits for the
rest) and by its twin (`derive.bridge.evaluate`), then one table row per step: its shape, the
largest absolute difference, the tolerance and the verdict. The polynomial steps must agree
exactly, the others to 1e-12. Then C from the entry's own entry points (`Entry.twins`: the fused
path, the explicit path, the book's classes, as they apply). Then the backward pass: every
gradient derived by SymPy at these sizes against `torch.autograd` through the same twins, for an
upstream gradient drawn the same way, each gradient as the documents print it (its form derived at
symbolic sizes, evaluated at these: ``dQ · printed``) against the same, and the entry's
written-out backward passes, to 1e-10
(sizes up to `MAX_GRADIENT_SIZE`; skipped, and said so, above it or with `forward_only`).

Nothing here names a variant: the sizes, their conditions and the twins come from the entry.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy as sp
import torch

from ..explicit import MAX_GRADIENT_SIZE, MAX_SIZE
from ..explicit.checked import printed_gradients
from ..explicit.forward import ExplicitGraph
from ..explicit.gradients import ExplicitGradients
from ..graph import Entry, explicit_sizes
from ..graph.errors import DeclarationError, DerivationError
from ..graph.fitting import drawn_sizes
from ..graph.registry import ROOT
from ..graph.twins import GradientTwin
from ..notation import letters as L
from ..notation.plain import plain
from . import twins
from .evaluate import Reader, constant_of, dyadic, resolve, torch_values
from .steps import compare

__all__ = [
    "TOLERANCE",
    "GRADIENT_TOLERANCE",
    "RANDOM_MAX",
    "Row",
    "draw_sizes",
    "explicit_of",
    "trial_rows",
    "format_table",
    "Trial",
    "Checked",
    "check",
    "run_trials",
    "SEED_LIMIT",
]

#: The largest absolute difference allowed where the values are not exact rationals.
TOLERANCE = 1e-12
#: The same for the gradients (sums of more products).
GRADIENT_TOLERANCE = 1e-10
#: Random sizes are drawn from 1 … RANDOM_MAX where the entry's conditions allow it (then up to
#: MAX_SIZE).
RANDOM_MAX = 6


@dataclass(frozen=True)
class Row:
    """One step compared: the symbolic value against torch's."""

    step: str
    shape: tuple[int, int]
    difference: float
    exact: bool  # required to be exactly equal (the polynomial steps)
    passed: bool
    limit: float = TOLERANCE

    @property
    def tolerance(self) -> str:
        return "exact" if self.exact else f"{self.limit:.0e}"


def draw_sizes(entry: Entry, rng: random.Random, given: Mapping[str, object]) -> dict[str, Any]:
    """The sizes of a trial (`derive.graph.fitting.drawn_sizes`, from 1 … RANDOM_MAX, then up to
    MAX_SIZE): those given, the others drawn, every condition of the entry holding."""
    return drawn_sizes(entry, rng, given, limits=(RANDOM_MAX, MAX_SIZE))


def _mask(shape: tuple[int, int], generator: Any) -> dict:
    """A drawn mask for a graph whose mask M is an input: each entry 0 (may attend) or −∞."""
    rows, cols = shape
    allowed = torch.rand(rows, cols, generator=generator) < 0.7
    return {
        L.base("mask")[m + 1, p + 1]: sp.S.Zero if allowed[m, p] else -sp.oo
        for m in range(rows)
        for p in range(cols)
    }


def explicit_of(entry: Entry, sizes: dict[str, Any], seed: int) -> ExplicitGraph:
    """The entry's graph at these sizes (a mask that is an input drawn with the seed)."""
    n, d, c = sizes["n"], sizes["d"], sizes["c"]
    given = {k: v for k, v in sizes.items() if k not in ("n", "d", "c")}
    at = explicit_sizes(entry, n, d, c, given)
    masks = {}
    if "M" in entry.graph.inputs:
        generator = torch.Generator().manual_seed(seed + 2)
        rows, cols = (int(sp.sympify(x).xreplace(at)) for x in entry.graph.shapes["M"])
        masks = _mask((rows, cols), generator)
    return ExplicitGraph(entry.graph, at, heads=int(at.get(L.h, 1)), given=masks)


def _row(label: str, expected: Any, got: Any, limit: float) -> Row:
    difference = float((got.detach() - expected).abs().max())
    return Row(label, tuple(expected.shape), difference, False, difference <= limit, limit)


def _printed_row(step: Any, shown: Any, autograd: Any) -> Row:
    """A gradient as the documents print it against autograd; failing, the entry that differs
    most is named (``dQ · printed, worst q̄[2,1]``)."""
    row = _row(f"{step.output} · printed", autograd.detach(), shown, GRADIENT_TOLERANCE)
    if row.passed:
        return row
    gap = (shown - autograd.detach()).abs().nan_to_num(nan=float("inf"))
    worst = divmod(int(gap.argmax()), gap.shape[-1])
    entry = step.entries[worst[0], worst[1]]
    label = f"{step.output} · printed, worst {plain(entry)}"
    return Row(label, row.shape, row.difference, False, False, row.limit)


def _generated_output(
    entry: Entry, explicit: ExplicitGraph, inputs: dict, leaves: dict | None = None
) -> Any:
    """C by the torch code generated from the entry's declarations (`derive.codegen`), with the
    derived gradients as its backward; `leaves` (by letter) receive their gradients."""
    from .generated import torch_function

    function = torch_function(entry.name)
    given = dict(inputs) | (leaves or {})
    tensors = []
    for letter in function.inputs:
        if letter in given:
            tensors.append(given[letter])
            continue
        allowed = constant_of(explicit, letter)  # a mask given as booleans: 0 or −∞
        tensors.append(
            torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
        )
    return function.apply(tensors, function.at(explicit.sizes))


def _generated_gradient_rows(
    entry: Entry, explicit: ExplicitGraph, inputs: dict, upstream: Any, values: Any
) -> list[Row]:
    """Each input's gradient by the generated backward pass against the chain rule's; where
    the generated code refuses its backward (a derived gradient failed its check by numbers,
    which the printed rows show), one failing row that says so, in place of the numbers."""
    generated = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    try:
        _generated_output(entry, explicit, inputs, generated).backward(upstream)
    except DerivationError as error:
        return [
            Row(f"backward · generated, refused: {error.doing}", (0, 0), math.inf, False, False)
        ]
    rows = []
    for letter, tensor in generated.items():
        name = L.gradient(letter)
        if tensor.grad is not None and name in values.matrices:
            expected = torch.tensor(values.floats(name), dtype=torch.float64)
            rows.append(_row(f"{name} · generated", expected, tensor.grad, GRADIENT_TOLERANCE))
    return rows


def _gradient_rows(entry: Entry, explicit: ExplicitGraph, inputs: dict, seed: int) -> list[Row]:
    """Every gradient by the chain rule at these sizes against autograd through the twins, and
    the entry's written-out backward passes."""
    gradients = ExplicitGradients(explicit)
    generator = torch.Generator().manual_seed(seed + 1)
    upstream = torch.randint(-16, 17, gradients.dC.shape, generator=generator).double() / 8
    # (the keys are input letters, never `digits`)
    values = gradients.evaluate(**inputs, **{gradients.upstream: upstream})  # pyright: ignore[reportArgumentType]
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    steps = torch_values(explicit, leaves)
    for tensor in steps.values():
        if tensor.requires_grad and not tensor.is_leaf:
            tensor.retain_grad()
    steps[explicit.graph.output].backward(upstream)
    rows = []
    printed = printed_gradients(gradients, dict(inputs) | {gradients.upstream: upstream})
    for step in gradients.steps:
        tensor = steps.get(step.of)
        if tensor is None or tensor.grad is None:
            continue
        expected = torch.tensor(values.floats(step.output), dtype=torch.float64)
        rows.append(_row(step.output, expected, tensor.grad, GRADIENT_TOLERANCE))
        shown = torch.tensor(
            [[float(e) for e in row] for row in printed[step.output].tolist()], dtype=torch.float64
        )
        rows.append(_printed_row(step, shown, tensor.grad))
    rows += _generated_gradient_rows(entry, explicit, inputs, upstream, values)
    read = Reader(explicit, dict(inputs) | {gradients.upstream: upstream})
    for twin in entry.twins:
        if not (isinstance(twin, GradientTwin) and twins.applies(twin, entry.options)):
            continue
        function = resolve(twin.function, f"{entry.name}: twin")
        got = function(*twins.arguments(twin, explicit, read), **twins.options(twin, entry, read))
        picked = [getattr(got, n) for n in twin.returns] if hasattr(got, "_fields") else got
        for name, tensor in zip(twin.returns, picked, strict=True):
            expected = torch.tensor(values.floats(name), dtype=torch.float64)
            rows.append(_row(f"{name} · {twin.label}", expected, tensor, GRADIENT_TOLERANCE))
    matrices = values.matrices | {gradients.upstream: sp.Matrix(upstream.tolist())}
    found = twins.states(entry, explicit, read, matrices, backward=True)
    return rows + _state_rows(found, GRADIENT_TOLERANCE)


def _state_rows(found: list[tuple[str, Any, Any]], limit: float = TOLERANCE) -> list[Row]:
    """Each block's state against the derived one (a block missing on one side fails)."""
    rows = []
    for label, want, tensor in found:
        if want is None or tensor is None:
            rows.append(
                Row(
                    f"{label} (a block {'derived' if want is None else 'computed'} "
                    "on one side only)",
                    (0, 0),
                    float("inf"),
                    False,
                    False,
                    limit,
                )
            )
            continue
        expected = torch.tensor(want, dtype=torch.float64)
        if tensor.numel() != expected.numel():
            rows.append(
                Row(
                    f"{label} (shape {tuple(tensor.shape)})",
                    (int(expected.shape[0]), -1),
                    float("inf"),
                    False,
                    False,
                    limit,
                )
            )
            continue
        rows.append(_row(label, expected, tensor.reshape(expected.shape), limit))
    return rows


def _shaped(explicit: ExplicitGraph) -> set:
    """The sizes the graph's matrices have (a block's size is none of them)."""
    return {
        s
        for shape in explicit.graph.shapes.values()
        for x in shape
        for s in sp.sympify(x).free_symbols
    }


def _mask_rows(explicit: ExplicitGraph, computed: dict[str, Any]) -> list[Row]:
    """Each declared mask against its twin's booleans (each other constant against its twin's
    numbers): how many entries differ (none may)."""
    rows = []
    for declaration in explicit.graph.declarations:
        if declaration.constant and declaration.output in computed:
            derived = constant_of(explicit, declaration.output)
            differing = int((computed[declaration.output] != derived).sum())
            rows.append(
                Row(
                    declaration.output, tuple(derived.shape), float(differing), True, differing == 0
                )
            )
    return rows


def trial_rows(
    entry: Entry, sizes: dict[str, Any], *, seed: int, forward_only: bool = False
) -> tuple[list[Row], str]:
    """Every row of one trial of `derive check` at these sizes, and a note on what was not
    checked (or "")."""
    refused = twins.refused(entry)
    if refused:
        raise DeclarationError(refused)
    explicit = explicit_of(entry, sizes, seed)
    inputs = dyadic(explicit, seed)
    values = explicit.evaluate(**inputs)
    exact = {step.output for step in explicit.steps if step.polynomial}
    computed = torch_values(explicit, inputs)
    rows = _mask_rows(explicit, computed)
    for item in compare(values, computed):
        passed = item.exact if item.output in exact else item.max_abs_error <= TOLERANCE
        shape = values.matrices[item.output].shape
        rows.append(Row(item.output, shape, item.max_abs_error, item.output in exact, passed))
    expected = torch.tensor(values.floats(explicit.graph.output), dtype=torch.float64)
    rows += [
        _row(f"C · {name}", expected, got, TOLERANCE)
        for name, got in twins.outputs(entry, explicit, inputs)
    ]
    generated = _generated_output(entry, explicit, inputs)
    rows.append(_row("C · generated", expected, generated.detach(), TOLERANCE))
    read = Reader(explicit, dict(inputs))
    rows += _state_rows(twins.states(entry, explicit, read, values.matrices, backward=False))
    notes = [twins.unfit(entry)]
    if forward_only:
        notes.append("backward pass not checked (--forward-only)")
    elif max(v for k, v in explicit.sizes.items() if k in _shaped(explicit)) > MAX_GRADIENT_SIZE:
        notes.append(f"backward pass not checked: sizes over {MAX_GRADIENT_SIZE}")
    else:
        rows += _gradient_rows(entry, explicit, inputs, seed)
    return rows, "; ".join(note for note in notes if note)


def format_table(rows: list[Row]) -> str:
    """A plain-text table: step, shape, max |difference|, tolerance, result."""
    header = ("step", "shape", "max |difference|", "tolerance", "result")
    lines = [
        (
            row.step,
            f"{row.shape[0]}×{row.shape[1]}",
            f"{row.difference:.3g}",
            row.tolerance,
            "pass" if row.passed else "FAIL",
        )
        for row in rows
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines, strict=True)]
    return "\n".join(
        ("  " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))).rstrip()
        for line in [header, *lines]
    )


@dataclass(frozen=True)
class Trial:
    """One trial of `check`: its sizes, the seed of its inputs, its rows, and what it did not
    check (or "")."""

    sizes: dict[str, Any]
    seed: int
    rows: list[Row]
    note: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # each parameter's, given or default

    @property
    def passed(self) -> bool:
        return all(row.passed for row in self.rows)


@dataclass(frozen=True)
class Checked:
    """What `check` found: the entry's name and each trial."""

    name: str
    trials: list[Trial]

    @property
    def passed(self) -> bool:
        """True when every row of every trial passed."""
        return all(trial.passed for trial in self.trials)

    def table(self) -> str:
        """Each trial's sizes and table, as `derive check` prints them."""
        parts = []
        for number, trial in enumerate(self.trials, 1):
            shown = ", ".join(f"{k}={v}" for k, v in (trial.sizes | trial.values).items())
            parts.append(
                f"trial {number}/{len(self.trials)}: {self.name}, {shown}, inputs seed "
                f"{trial.seed}\n{format_table(trial.rows)}"
                + (f"\n  ({trial.note})" if trial.note else "")
            )
        return "\n".join(parts)


#: The largest seed `check` takes (torch's generators take 64-bit seeds; each trial, the
#: upstream gradient and a drawn mask add to it).
SEED_LIMIT = 2**32 - 1


def run_trials(
    entry: Entry, given: Mapping[str, object], *, seed: int, count: int, forward_only: bool = False
):
    """Each trial of a check in turn (its sizes drawn with `seed`, its inputs with seed + its
    number − 1): what `check` gathers and `derive check` prints as it goes."""
    rng = random.Random(seed)
    for number in range(1, count + 1):
        sizes = draw_sizes(entry, rng, given)
        inputs_seed = (seed + number - 1) % (SEED_LIMIT + 1)
        rows, note = trial_rows(entry, sizes, seed=inputs_seed, forward_only=forward_only)
        yield Trial(sizes, inputs_seed, rows, note, parameter_values(entry, sizes))


def parameter_values(entry: Entry, sizes: dict[str, Any]) -> dict[str, Any]:
    """Each parameter of the entry at a trial's sizes: the value given, else its default (a
    number, or its expression in the sizes at these sizes: b = −log n)."""
    own = {k: v for k, v in sizes.items() if k not in ("n", "d", "c")}
    at = explicit_sizes(entry, sizes["n"], sizes["d"], sizes["c"], own)
    return {str(p.symbol): at[p.symbol] for p in entry.parameters}


def check(
    name: str = ROOT,
    *,
    seed: int = 0,
    trials: int = 1,
    forward_only: bool = False,
    **sizes: object,
) -> Checked:
    """`derive check` from Python: the variant named at the sizes given, its every step, entry
    point and gradient compared with its torch twins.

    Args:
        name: a registered name or a combination (``"gqa+rope"``), a user's once loaded
            (`load_variant`); default `"self-attention"`.
        seed: draws the sizes not given, and each trial's inputs (trial k's with seed + k − 1).
        trials: how many trials to run, each at its own drawn sizes (default 1).
        forward_only: compare the forward steps only, not the gradients.
        **sizes: the sizes and parameters given (``n=4, h=2``); the others drawn, every
            condition of the variant holding. No gradient is checked for a size over
            `derive.explicit.MAX_GRADIENT_SIZE`.

    Returns:
        What was found (`Checked`): `passed`, each trial's rows (`trials`), and `table()` as
            `derive check` prints it. A comparison that differs is a failed row, not an error.

    Raises:
        ValueError: when `name` is not registered, `trials` is not a positive int, or a size
            given is not the variant's own or breaks one of its conditions.
        DeclarationError: when the variant's own twin does not take an option a variant it
            is built on gives (a user's twin without `causal=` on causal attention).

    Example:
        >>> import derive
        >>> derive.check(n=3, d=2, c=2).passed
        True
    """
    from ..graph import variant

    entry = variant(name)
    count = trials
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"trials must be a positive int, got trials={count!r}")
    draw_sizes(entry, random.Random(0), sizes)  # the sizes given fit the entry: a ValueError
    found = list(run_trials(entry, sizes, seed=seed, count=count, forward_only=forward_only))
    return Checked(entry.name, found)
