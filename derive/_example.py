"""The worked example: "the fat cat sat on the mat", computed by torch and by the formulas.

A bridge module: torch and `attention` are imported inside `worked_example` only. The embeddings
and weights are seeded (float64), `attention.functional.self_attention` computes A and C, and
`explicit_attention(...).evaluate` reproduces them from the symbolic steps (the float64 inputs
are read exactly). `worked_example` raises if the two disagree by more than `TOLERANCE`, so a
document never shows numbers that the formulas do not reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ._explicit import explicit_attention
from ._values import Values

__all__ = ["TOKENS", "SEED", "TOLERANCE", "WorkedExample", "worked_example"]

TOKENS = ("the", "fat", "cat", "sat", "on", "the", "mat")
SEED = 123
TOLERANCE = 1e-12


@dataclass(frozen=True)
class WorkedExample:
    """Inputs, torch's results and the symbolic values of the worked example."""

    tokens: tuple[str, ...]
    inputs: dict[str, list[list[float]]]  # X, W_q, W_k, W_v as float64 values
    torch_a: list[list[float]]
    torch_c: list[list[float]]
    values: Values
    max_error: float
    causal: bool

    @property
    def d(self) -> int:
        return len(self.inputs["X"][0])

    @property
    def c(self) -> int:
        return len(self.inputs["W_q"][0])


def worked_example(*, d: int = 4, c: int = 3, causal: bool = False, seed: int = SEED):
    """Run the example through torch and through the symbolic steps; check they agree."""
    import torch

    from attention import functional as F

    generator = torch.Generator().manual_seed(seed)
    vocabulary = sorted(set(TOKENS))
    ids = torch.tensor([vocabulary.index(token) for token in TOKENS])
    n = len(TOKENS)
    token_table = torch.randn(len(vocabulary), d, generator=generator, dtype=torch.float64)
    position_table = torch.randn(n, d, generator=generator, dtype=torch.float64)
    x = token_table[ids] + position_table  # (n, d): token embedding + position embedding
    w_q, w_k, w_v = (torch.rand(d, c, generator=generator, dtype=torch.float64) for _ in "qkv")
    context, weights = F.self_attention(x, w_q, w_k, w_v, causal=causal, return_weights=True)
    values = explicit_attention(n, d, c, causal=causal).evaluate(x, w_q, w_k, w_v)
    errors = [
        abs(float(entry) - number)
        for symbolic, numeric in ((values.A, weights), (values.C, context))
        for entry, number in zip(symbolic, numeric.flatten().tolist(), strict=True)
    ]
    max_error = max(errors)
    if max_error > TOLERANCE:
        raise RuntimeError(
            f"worked example: torch and the symbolic formulas differ by {max_error:.3g} "
            f"(more than {TOLERANCE})"
        )
    return WorkedExample(
        tokens=TOKENS,
        inputs={
            "X": x.tolist(),
            "W_q": w_q.tolist(),
            "W_k": w_k.tolist(),
            "W_v": w_v.tolist(),
        },
        torch_a=weights.tolist(),
        torch_c=context.tolist(),
        values=values,
        max_error=max_error,
        causal=causal,
    )


def rounded(rows: list[list[float]] | sp.MatrixBase, digits: int = 4) -> sp.Matrix:
    """A matrix of SymPy Floats rounded to `digits` decimals, for printing."""
    numbers = rows.tolist() if isinstance(rows, sp.MatrixBase) else rows
    return sp.Matrix([[sp.Float(f"{float(v):.{digits}f}") for v in row] for row in numbers])
