"""The worked example: "the fat cat sat on the mat", computed by torch and by the declarations.

The embeddings and weights are seeded (float64): X from the tokens, then each other input of
the entry's graph in turn. The entry's first twin computes C and the twins of its steps compute
A (`derive.bridge.evaluate`); the entry's graph at these sizes computes them again from the
declarations (the float64 inputs read exactly). `worked_example` raises if the two disagree by
more than `TOLERANCE`, so a document never shows numbers that the declarations do not
reproduce. It needs an entry with one matrix of weights A (one head) that reads X.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..explicit import Values
from ..graph import entry_name, explicit_sizes, variant
from ..graph.registry import ROOT
from ..graph.twins import Twin

__all__ = ["TOKENS", "SEED", "TOLERANCE", "WorkedExample", "worked_example", "example_for"]

TOKENS = ("the", "fat", "cat", "sat", "on", "the", "mat")
SEED = 123
TOLERANCE = 1e-12


@dataclass(frozen=True)
class WorkedExample:
    """Inputs, torch's results and the values SymPy computes from the declarations: `variant`
    is the entry, `twin` the torch function that computed C."""

    tokens: tuple[str, ...]
    inputs: dict[str, list[list[float]]]  # X, W_q, W_k, W_v as float64 values
    torch_a: list[list[float]]
    torch_c: list[list[float]]
    values: Values
    max_error: float
    variant: str = ROOT
    twin: str = "attention.functional.self_attention"

    @property
    def d(self) -> int:
        return len(self.inputs["X"][0])

    @property
    def c(self) -> int:
        return len(self.inputs["W_q"][0])


def worked_example(
    *,
    n: int = len(TOKENS),
    d: int = 4,
    c: int = 3,
    causal: bool = False,
    seed: int = SEED,
    variant_name: str | None = None,
) -> WorkedExample:
    """The first `n` tokens of the sentence at widths d and c, through torch and through the
    declarations of an entry (self-attention, or causal attention with `causal`; or the entry
    `variant_name`); raises ValueError for sizes the sentence cannot have or an entry it cannot
    show, RuntimeError if the two computations disagree by more than `TOLERANCE`."""
    from .evaluate import Reader, callee_name, torch_values
    from .twins import applies, twin_output

    if not 1 <= n <= len(TOKENS):
        raise ValueError(f"the worked example has 1 to {len(TOKENS)} tokens, got n={n}")
    entry = variant(entry_name(variant_name, causal=causal))
    if "A" not in entry.graph.shapes or entry.graph.inputs[0] != "X":
        raise ValueError(f"{entry.name}: the worked example shows one matrix of weights A")
    tokens = TOKENS[:n]
    generator = torch.Generator().manual_seed(seed)
    vocabulary = sorted(set(TOKENS))
    ids = torch.tensor([vocabulary.index(token) for token in tokens])
    token_table = torch.randn(len(vocabulary), d, generator=generator, dtype=torch.float64)
    position_table = torch.randn(len(TOKENS), d, generator=generator, dtype=torch.float64)
    x = token_table[ids] + position_table[:n]  # (n, d): token embedding + position embedding
    from ..explicit.forward import ExplicitGraph

    sizes = explicit_sizes(entry, n, d, c, {})
    explicit = ExplicitGraph(entry.graph, sizes)
    inputs = {"X": x} | {
        letter: torch.rand(*symbols.shape, generator=generator, dtype=torch.float64)
        for letter, symbols in explicit.inputs.items()
        if letter != "X"
    }
    twin = next(
        (
            t
            for t in entry.twins
            if isinstance(t, Twin) and not t.incremental and applies(t, entry.options)
        ),
        None,
    )
    if twin is None:
        raise ValueError(f"{entry.name}: no twin computes the worked example")
    context = twin_output(twin, entry, explicit, Reader(explicit, dict(inputs)))
    weights = torch_values(explicit, inputs)["A"]
    values = explicit.evaluate(**inputs)  # pyright: ignore[reportArgumentType]  # letters, never `digits`
    errors = [
        abs(float(entry) - number)
        for symbolic, numeric in ((values.A, weights), (values.C, context))
        for entry, number in zip(symbolic, numeric.flatten().tolist(), strict=True)
    ]
    max_error = max(errors)
    if max_error > TOLERANCE:
        raise RuntimeError(
            f"worked example: torch and the declarations differ by {max_error:.3g} "
            f"(more than {TOLERANCE})"
        )
    return WorkedExample(
        tokens=tokens,
        inputs={name: tensor.tolist() for name, tensor in inputs.items()},
        torch_a=weights.tolist(),
        torch_c=context.tolist(),
        values=values,
        max_error=max_error,
        variant=entry.name,
        twin=callee_name(twin.function),
    )


def example_for(options):
    """The worked example a document's options ask for: the sentence's first n tokens at widths
    d and c when sizes are given (the explicit section's sizes), else the whole sentence at 4,
    3; None when the options ask for none."""
    if not options.example:
        return None
    name = options.entry.name
    if options.sizes is None:
        return worked_example(variant_name=name)
    n, d, c = options.sizes
    return worked_example(n=n, d=d, c=c, variant_name=name)
