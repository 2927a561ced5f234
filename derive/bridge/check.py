"""`derive check`: the symbolic derivation against the torch implementation, step by step.

For each trial: sizes (those given, the others drawn with the seed), inputs drawn with the seed as
dyadic rationals k/8 (exact in float64), every step evaluated by `derive` (exact for Q, K, V and
Ω; 30 significant digits for the rest) and by `attention.functional`, then one table row per
step: its shape, the largest absolute difference, the tolerance and the verdict. The polynomial
steps must agree exactly, the others to 1e-12. Then C from the entry points people call (the
fused path, the explicit path, the book's class with the same weights). Then the backward pass:
every gradient derived by SymPy (`derive.explicit_gradients`) against `torch.autograd` through
the same steps, for an upstream gradient dC drawn the same way, and (single head)
`self_attention_backward`, to 1e-10 (sizes up to `MAX_GRADIENT_SIZE`; skipped, and
said so, above it or with `--forward-only`).

This is the one command that needs torch; it is imported here, when the command runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..explicit import MAX_GRADIENT_SIZE, MAX_SIZE, explicit_attention, explicit_gradients
from .gradients import gradient_inputs, gradients_only, torch_gradient_steps
from .steps import compare, dyadic_inputs, torch_steps

__all__ = [
    "TOLERANCE", "GRADIENT_TOLERANCE", "Row", "draw_sizes", "check_rows", "implementation_rows",
    "gradient_rows", "format_table", "trial_rows",
]  # fmt: skip

#: The largest absolute difference allowed where the values are not exact rationals.
TOLERANCE = 1e-12
#: The same for the gradients (sums of more products, and what issue 6 asks of them).
GRADIENT_TOLERANCE = 1e-10
#: Random sizes are drawn from 1 … RANDOM_MAX (and c from multiples of the heads).
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


def draw_sizes(
    rng: random.Random, n: int | None, d: int | None, c: int | None, heads: int
) -> tuple[int, int, int]:
    """The given sizes, and the missing ones drawn: pairwise distinct where that is possible,
    so that a swapped axis cannot pass by coincidence; c a multiple of `heads`."""
    taken = {size for size in (n, d, c) if size is not None}
    if c is None:
        multiples = [m * heads for m in range(1, MAX_SIZE // heads + 1)]
        fresh = [m for m in multiples[: max(1, RANDOM_MAX // heads)] if m not in taken]
        c = rng.choice(fresh or multiples[:1])
        taken.add(c)
    drawn = []
    for given in (n, d):
        if given is None:
            fresh = [size for size in range(1, RANDOM_MAX + 1) if size not in taken]
            given = rng.choice(fresh or list(range(1, RANDOM_MAX + 1)))
            taken.add(given)
        drawn.append(given)
    return drawn[0], drawn[1], c


def check_rows(n: int, d: int, c: int, *, causal: bool, heads: int, seed: int) -> list[Row]:
    """Evaluate every step both ways on the same seeded dyadic inputs and compare."""
    ea = explicit_attention(n, d, c, causal=causal, heads=heads)
    inputs = dyadic_inputs(ea, seed=seed)
    values = ea.evaluate(**inputs)
    exact_outputs = {step.output for step in ea.steps if step.polynomial}
    rows = []
    for item in compare(values, torch_steps(ea, **inputs)):
        must_be_exact = item.output in exact_outputs
        passed = item.exact if must_be_exact else item.max_abs_error <= TOLERANCE
        shape = values.matrices[item.output].shape
        rows.append(Row(item.output, shape, item.max_abs_error, must_be_exact, passed))
    return rows


def _tensor(values, name: str):
    """One derived value as a float64 tensor (`Values.floats`: rounded once, at the end)."""
    import torch

    return torch.tensor(values.floats(name), dtype=torch.float64)


def _row(label: str, expected, got, limit: float) -> Row:
    difference = float((got.detach() - expected).abs().max())
    return Row(label, tuple(expected.shape), difference, False, difference <= limit, limit)


def _module_output(n: int, d: int, c: int, heads: int, causal: bool, inputs: dict):
    """(name, C) from the book's class for this variant, holding the derivation's weights."""
    import torch

    import attention

    if heads > 1:
        module = attention.MultiHeadAttention(d, c, n, 0.0, heads).double()
        with torch.no_grad():
            for name, key in (("W_query", "W_q"), ("W_key", "W_k"), ("W_value", "W_v")):
                getattr(module, name).weight.copy_(inputs[key].T)  # (d, c) -> (c, d)
            module.out_proj.weight.copy_(inputs["W_o"].T)
            module.out_proj.bias.zero_()
    else:
        seed = attention.SelfAttentionV1(d, c).double()
        with torch.no_grad():
            for name, key in (("W_query", "W_q"), ("W_key", "W_k"), ("W_value", "W_v")):
                getattr(seed, name).copy_(inputs[key])
        module = attention.CausalAttention(d, c, n, 0.0).double() if causal else seed
        attention.copy_weights(seed, module)
    return type(module).__name__, module.eval()(inputs["X"])


def implementation_rows(
    n: int, d: int, c: int, *, causal: bool, heads: int, seed: int
) -> list[Row]:
    """C from the entry points people call, against the derived C: the fused path, the explicit
    path, and the book's class (the multi-head class is causal only, as in the book)."""
    from attention import functional as F

    ea = explicit_attention(n, d, c, causal=causal, heads=heads)
    inputs = dyadic_inputs(ea, seed=seed)
    expected = _tensor(ea.evaluate(**inputs), "C")
    x, w = inputs["X"], (inputs["W_q"], inputs["W_k"], inputs["W_v"])
    if heads > 1:
        fused = F.multi_head_attention(x, *w, inputs["W_o"], heads=heads, causal=causal)
        explicit, _ = F.multi_head_attention(
            x, *w, inputs["W_o"], heads=heads, causal=causal, return_weights=True
        )
    else:
        fused = F.self_attention(x, *w, causal=causal)
        explicit, _ = F.self_attention(x, *w, causal=causal, return_weights=True)
    rows = [
        _row("C · fused path", expected, fused, TOLERANCE),
        _row("C · explicit path", expected, explicit, TOLERANCE),
    ]
    if heads == 1 or causal:
        name, output = _module_output(n, d, c, heads, causal, inputs)
        rows.append(_row(f"C · {name}", expected, output, TOLERANCE))
    return rows


def gradient_rows(n: int, d: int, c: int, *, causal: bool, heads: int, seed: int) -> list[Row]:
    """Every gradient derived by SymPy against torch.autograd, on seeded dyadic inputs; then,
    single head, against `attention.functional.self_attention_backward` (the matrix formulas)."""
    from attention import functional as F

    g = explicit_gradients(n, d, c, causal=causal, heads=heads)
    inputs = gradient_inputs(g, seed=seed)
    values = gradients_only(g.evaluate(**inputs))
    rows = [
        Row(item.output, values.matrices[item.output].shape, item.max_abs_error, False,
            item.max_abs_error <= GRADIENT_TOLERANCE, GRADIENT_TOLERANCE)
        for item in compare(values, torch_gradient_steps(g, **inputs))
    ]  # fmt: skip
    if heads == 1:
        written_out = F.self_attention_backward(
            inputs["X"], inputs["W_q"], inputs["W_k"], inputs["W_v"], inputs["dC"], causal=causal
        )
        for name, got in zip(("dX", "dW_q", "dW_k", "dW_v"), written_out, strict=True):
            expected = _tensor(values, name)
            label = f"{name} · self_attention_backward"
            rows.append(_row(label, expected, got, GRADIENT_TOLERANCE))
    return rows


def format_table(rows: list[Row]) -> str:
    """A plain-text table: step, shape, max |difference|, tolerance, result."""
    header = ("step", "shape", "max |difference|", "tolerance", "result")
    lines = [
        (row.step, f"{row.shape[0]}×{row.shape[1]}", f"{row.difference:.3g}", row.tolerance,
         "pass" if row.passed else "FAIL")
        for row in rows
    ]  # fmt: skip
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines, strict=True)]
    return "\n".join(
        ("  " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))).rstrip()
        for line in [header, *lines]
    )


def trial_rows(
    n: int, d: int, c: int, *, causal: bool, heads: int, seed: int, forward_only: bool
) -> tuple[list[Row], str]:
    """Every row of one trial, and a note on what was not checked (or "")."""
    rows = check_rows(n, d, c, causal=causal, heads=heads, seed=seed)
    rows += implementation_rows(n, d, c, causal=causal, heads=heads, seed=seed)
    if forward_only:
        return rows, "backward pass not checked (--forward-only)"
    if max(n, d, c) > MAX_GRADIENT_SIZE:
        return rows, f"backward pass not checked: sizes over {MAX_GRADIENT_SIZE}"
    return rows + gradient_rows(n, d, c, causal=causal, heads=heads, seed=seed), ""
