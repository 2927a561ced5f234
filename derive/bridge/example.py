"""The worked example: "the fat cat sat on the mat", computed by torch and by the declarations.

The embeddings and weights are seeded (float64); `attention.functional.self_attention` computes
A and C, and `explicit_attention(...).evaluate` computes them again from the declarations (the
float64 inputs read exactly). `worked_example` raises if the two disagree by more than
`TOLERANCE`, so a document never shows numbers that the declarations do not reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..explicit import Values, explicit_attention

__all__ = ["TOKENS", "SEED", "TOLERANCE", "WorkedExample", "worked_example"]

TOKENS = ("the", "fat", "cat", "sat", "on", "the", "mat")
SEED = 123
TOLERANCE = 1e-12


@dataclass(frozen=True)
class WorkedExample:
    """Inputs, torch's results and the values SymPy computes from the declarations."""

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


def worked_example(
    *, n: int = len(TOKENS), d: int = 4, c: int = 3, causal: bool = False, seed: int = SEED
) -> WorkedExample:
    """The first `n` tokens of the sentence at widths d and c, through torch and through the
    declarations; raises ValueError for sizes the sentence cannot have, RuntimeError if the
    two computations disagree by more than `TOLERANCE`."""
    import torch

    from attention import functional as F

    if not 1 <= n <= len(TOKENS):
        raise ValueError(f"the worked example has 1 to {len(TOKENS)} tokens, got n={n}")
    tokens = TOKENS[:n]
    generator = torch.Generator().manual_seed(seed)
    vocabulary = sorted(set(TOKENS))
    ids = torch.tensor([vocabulary.index(token) for token in tokens])
    token_table = torch.randn(len(vocabulary), d, generator=generator, dtype=torch.float64)
    position_table = torch.randn(len(TOKENS), d, generator=generator, dtype=torch.float64)
    x = token_table[ids] + position_table[:n]  # (n, d): token embedding + position embedding
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
            f"worked example: torch and the declarations differ by {max_error:.3g} "
            f"(more than {TOLERANCE})"
        )
    inputs = {"X": x, "W_q": w_q, "W_k": w_k, "W_v": w_v}
    return WorkedExample(
        tokens=tokens,
        inputs={name: tensor.tolist() for name, tensor in inputs.items()},
        torch_a=weights.tolist(),
        torch_c=context.tolist(),
        values=values,
        max_error=max_error,
        causal=causal,
    )
