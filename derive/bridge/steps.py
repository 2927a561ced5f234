"""The bridge: the derived steps evaluated next to `attention.functional`, step by step.

The only part of `derive` that touches torch and `attention`, and only inside its functions
(``import derive`` stays torch-free). `torch_steps` runs the numeric half, one
`attention.functional` call per step, keyed like `Values`; `check_against_torch` feeds both
halves the same dyadic inputs (k/8, exact in float64) and reports, per step, whether the
polynomial steps agree exactly and how far the others are apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy as sp

from ..explicit import ExplicitAttention, Values, explicit_attention

__all__ = ["Comparison", "torch_steps", "dyadic_inputs", "compare", "check_against_torch"]


@dataclass(frozen=True)
class Comparison:
    """One step compared: `exact` (every entry equal as a rational) or the largest error."""

    output: str
    exact: bool
    max_abs_error: float


def _mask_tensor(ea: ExplicitAttention) -> Any:
    import torch

    return torch.tensor(ea.allowed, dtype=torch.bool) if ea.masked else None


def torch_steps(ea: ExplicitAttention, X: Any, W_q: Any, W_k: Any, W_v: Any, W_o: Any = None):
    """Each step computed by `attention.functional`, keyed like `ExplicitAttention.evaluate`.

    X, W_q, W_k, W_v (, W_o): torch tensors of one float dtype. Returns key -> tensor.
    """
    from attention import functional as F

    mask = _mask_tensor(ea)
    out = {"Q": F.projection(X, W_q), "K": F.projection(X, W_k), "V": F.projection(X, W_v)}
    if ea.heads == 1:
        out["Omega"] = F.scores(out["Q"], out["K"])
        out["Omega_scaled"] = F.scaled_scores(out["Omega"], ea.c)
        out["A"] = F.weights(out["Omega"], ea.c, causal=ea.causal, mask=mask)
        out["C"] = F.context(out["A"], out["V"])
        return out
    q, k, v = (F.split_heads(out[name], ea.heads) for name in "QKV")  # (n, c) -> (h, n, c_h)
    if mask is not None:
        mask = mask.expand(ea.heads, ea.n, ea.n)  # (n, n) -> (h, n, n): one mask per head
    omega = F.scores(q, k)  # (h, n, n)
    scaled = F.scaled_scores(omega, ea.width)
    a = F.weights(omega, ea.width, causal=ea.causal, mask=mask)
    per_head = F.context(a, v)  # (h, n, c_h)
    for head in range(ea.heads):
        label = f"_{head + 1}"
        out["Omega" + label] = omega[head]
        out["Omega_scaled" + label] = scaled[head]
        out["A" + label] = a[head]
        out["C" + label] = per_head[head]
    out["C_concat"] = F.merge_heads(per_head)  # (h, n, c_h) -> (n, c)
    out["C"] = F.projection(out["C_concat"], W_o)
    return out


def dyadic_inputs(ea: ExplicitAttention, *, seed: int = 0, dtype: Any = None) -> dict[str, Any]:
    """Seeded float64 inputs whose entries are k/8, -16 ≤ k ≤ 16: floats represent them exactly,
    so the polynomial steps can be compared exactly."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    dtype = torch.float64 if dtype is None else dtype
    return {
        name: torch.randint(-16, 17, symbols.shape, generator=generator).to(dtype) / 8
        for name, symbols in ea.inputs.items()
    }


def compare(values: Values, tensors: dict[str, Any]) -> list[Comparison]:
    """Step by step: exact equality of rationals where the symbolic value is exact, else the
    largest absolute difference between the symbolic value (rounded once) and torch's."""
    report = []
    for output, matrix in values.matrices.items():
        numeric = tensors[output].detach().cpu().tolist()
        pairs = [
            (entry, number)
            for row_s, row_t in zip(matrix.tolist(), numeric, strict=True)
            for entry, number in zip(row_s, row_t, strict=True)
        ]
        error = max(abs(float(entry) - number) for entry, number in pairs)
        if all(isinstance(entry, sp.Rational) for entry, _ in pairs):
            equal = all(entry == sp.Rational(number) for entry, number in pairs)
            report.append(Comparison(output, equal, error))
        else:
            report.append(Comparison(output, False, error))
    return report


def check_against_torch(
    n: int, d: int, c: int, *, causal: bool = False, heads: int = 1, mask: Any = None,
    key_padding_mask: Any = None, seed: int = 0, digits: int = 30,
) -> list[Comparison]:  # fmt: skip
    """Build `explicit_attention(n, d, c, ...)`, evaluate it and `attention.functional` on the
    same seeded dyadic float64 inputs, and compare every step (see `compare`)."""
    ea = explicit_attention(n, d, c, causal=causal, heads=heads, mask=mask,
                            key_padding_mask=key_padding_mask)  # fmt: skip
    inputs = dyadic_inputs(ea, seed=seed)
    values = ea.evaluate(**inputs, digits=digits)
    return compare(values, torch_steps(ea, **inputs))
