"""Time of the symbolic gradient check per size (not a test; run it by hand).

    PYTHONPATH=. python tests/benchmarks/bench_gradients.py                 # n = d = c = 2 … 8
    PYTHONPATH=. python tests/benchmarks/bench_gradients.py --sizes 4 8 --heads 2 --causal

Sizes that the number of heads does not divide are skipped.

For each size it reports, in seconds: deriving `explicit_gradients(n, n, n)` (reverse mode over
the explicit steps, one `sympy.diff` per entry and input), proving the matrix forms and the
rowsum identity (`residuals`, `rowsum_residual`), evaluating the forward and backward steps on
dyadic float64 inputs (30-digit Floats), running autograd through `attention.functional`,
comparing; then the whole check (`check_gradients_against_torch`) end to end, its ratio to n⁴
and the worst error against autograd.
"""

from __future__ import annotations

import argparse
import time


def _timed(call):
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def bench(size: int, *, heads: int = 1, causal: bool = False) -> dict[str, float]:
    import derive
    from derive.bridge.gradients import (
        check_gradients_against_torch,
        gradient_inputs,
        gradients_only,
        torch_gradient_steps,
    )
    from derive.bridge.steps import compare

    name = "+".join(["causal"] * causal + ["multi-head"] * (heads > 1)) or "self-attention"
    own = {"h": heads} if heads > 1 else {}
    g, derive_s = _timed(lambda: derive.explicit_gradients(name, size, size, size, **own))
    proven, prove_s = _timed(lambda: g.proven() and g.rowsum_residual().is_zero_matrix)
    if not proven:
        raise RuntimeError(f"the matrix forms are not proved at n=d=c={size}")
    inputs = gradient_inputs(g, seed=0)
    values, evaluate_s = _timed(lambda: g.evaluate(**inputs))
    tensors, torch_s = _timed(lambda: torch_gradient_steps(g, **inputs))
    report, compare_s = _timed(lambda: compare(gradients_only(values), tensors))
    _, check_s = _timed(lambda: check_gradients_against_torch(name, size, size, size, **own))
    return {
        "derive": derive_s,
        "prove": prove_s,
        "evaluate": evaluate_s,
        "torch": torch_s,
        "compare": compare_s,
        "check": check_s,
        "worst": max(item.max_abs_error for item in report),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs=2, type=int, default=(2, 8), metavar=("FROM", "TO"))
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    columns = ("derive", "prove", "evaluate", "torch", "compare", "check")
    print(f"{'n=d=c':>5} " + " ".join(f"{c:>8}" for c in columns) + "  check/n^4 (us)  worst error")
    for size in range(args.sizes[0], args.sizes[1] + 1):
        if size % args.heads:
            continue  # the heads must divide c = size
        row = bench(size, heads=args.heads, causal=args.causal)
        print(
            f"{size:>5} "
            + " ".join(f"{row[c]:>8.3f}" for c in columns)
            + f"  {1e6 * row['check'] / size**4:>14.1f}  {row['worst']:>11.2e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
