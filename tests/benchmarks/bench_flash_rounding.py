"""How far are the two backward routes of FlashAttention from exact, in float32, as the scores
grow? (not a test: nothing asserts; the derived bounds are in derive/proofs/rounding.py)

    python tests/benchmarks/bench_flash_rounding.py           # prints the table
    python tests/benchmarks/bench_flash_rounding.py --write   # and writes the figure's data

For each scale s = 1 … 10⁴ and each of 20 seeded draws (`derive.render.rounding_data.rounding_inputs`:
rows of 4 keys, scores s + z with z standard normal, values and upstream gradient of width 8, all
float32), the largest error of each route against the exact values (float64, from the same
float32 inputs):

- the stored log-sum-exp (FlashAttention's, PyTorch's fused kernels): P = exp(S − L̂) with L̂
  the exact log-sum-exp rounded to float32 once, dA = dC Vᵀ, D = rowsum(dC ∘ Ĉ) with Ĉ the exact
  context rounded once, dS = P ∘ (dA − D);
- the recomputed maximum (our fast path, `attention._fused`): A = torch.softmax(S) (the row
  maximum subtracted), dA = dC Vᵀ, D = rowsum(A ∘ dA), dS = A ∘ (dA − D).

The weights' error is absolute (a weight is at most 1); the scores' gradient's is over the
largest β = |dC| |V|ᵀ of the draw, the size its dot products' roundings are relative to. The
largest over the draws is printed, and with --write stored in the package
(derive/render/assets/flash-rounding-measured.csv), where the figure reads it: float32 kernels
may round differently on another CPU, so the measured points are data, not recomputed with each
figure.
"""

import sys
from pathlib import Path

import numpy as np
import torch

from derive.render.rounding_data import (
    MEASURED,
    ROUNDING_SCALES,
    ROUNDING_SEEDS,
    ROUNDING_SERIES,
    rounding_exact,
    rounding_inputs,
)

DATA = Path(__file__).resolve().parents[2] / "derive" / "render" / "assets" / MEASURED


def measured_stored(scores, values, upstream, exact):
    """(P, dS) from the stored log-sum-exp and context, float32."""
    lse = torch.from_numpy(exact["L"]).float()[:, None]
    context = torch.from_numpy(exact["C"]).float()
    weights = torch.exp(scores - lse)
    rowsum = (upstream * context).sum(dim=-1, keepdim=True)
    return weights, weights * (upstream @ values.T - rowsum)


def measured_maximum(scores, values, upstream, exact):
    """(A, dS) from the recomputed row maximum, float32."""
    weights = torch.softmax(scores, dim=-1)
    d_a = upstream @ values.T
    rowsum = (weights * d_a).sum(dim=-1, keepdim=True)
    return weights, weights * (d_a - rowsum)


def errors(seed, s):
    """{series: error} for one draw."""
    inputs = rounding_inputs(seed, s)
    exact = rounding_exact(inputs)
    tensors = [torch.from_numpy(inputs[k]) for k in ("scores", "V", "dC")]
    found = {}
    for name, route in (("stored", measured_stored), ("maximum", measured_maximum)):
        weights, gradient = route(*tensors, exact)
        found[f"weights {name}"] = np.abs(weights.double().numpy() - exact["A"]).max()
        worst = np.abs(gradient.double().numpy() - exact["dS"]).max()
        found[f"gradient {name}"] = worst / exact["beta"].max()
    return found


def main():
    torch.set_num_threads(1)  # one summation order for torch's reductions
    table = {}
    for s in ROUNDING_SCALES:
        draws = [errors(seed, s) for seed in range(ROUNDING_SEEDS)]
        table[s] = {name: max(float(d[name]) for d in draws) for name in ROUNDING_SERIES}
    print(f"torch {torch.__version__}; the largest error over {ROUNDING_SEEDS} draws\n")
    print("| s | " + " | ".join(ROUNDING_SERIES) + " |")
    print("|---|" + "---|" * len(ROUNDING_SERIES))
    for s, row in table.items():
        print(f"| {s} | " + " | ".join(f"{row[name]:.2e}" for name in ROUNDING_SERIES) + " |")
    if "--write" in sys.argv[1:]:
        lines = ["s," + ",".join(name.replace(" ", "_") for name in ROUNDING_SERIES)]
        lines += [
            f"{s}," + ",".join(f"{row[name]:.6g}" for name in ROUNDING_SERIES)
            for s, row in table.items()
        ]
        DATA.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"\nwrote {DATA.relative_to(DATA.parents[2])}")


if __name__ == "__main__":
    main()
