"""The torch code derive generates from a declaration against the hand-written code (not a test;
run it by hand):

    PYTHONPATH=. python tests/benchmarks/bench_generated.py                 # n = 512
    PYTHONPATH=. python tests/benchmarks/bench_generated.py --n 1024 --repeats 5
    PYTHONPATH=. python tests/benchmarks/bench_generated.py --variants causal gqa+rope

For each registered variant (or those named): forward + backward, float32, one sequence of n
tokens, d = c = 64 (h = 4 heads, g = 2 groups where it has them): the generated function
(`derive.torch_function`: its forward printed from the declarations, its backward the derived
gradients) against the variant's hand-written twin of the whole (`Entry.twins`: `attention`'s
function for it, autograd through it), interleaved, the median of `--repeats` rounds each. A
variant whose twin needs what the benchmark does not give (a mask it draws) is listed with the
reason. The machine's load (1-minute average) is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

import sympy as sp
import torch

import derive
from derive.bridge import twins
from derive.bridge.evaluate import Reader
from derive.graph.fitting import explicit_sizes
from derive.graph.twins import GradientTwin, ModuleTwin, StateTwin


def _inputs(entry, at: dict, generator) -> dict[str, torch.Tensor]:
    found = {}
    for letter in entry.graph.inputs:
        rows, cols = (int(sp.sympify(x).xreplace(at)) for x in entry.graph.shapes[letter])
        scale = 1 / rows**0.5 if letter.startswith("W") else 1.0
        found[letter] = torch.randn(rows, cols, generator=generator) * scale
    return found


def _hand_written(entry, at: dict, inputs: dict):
    """A callable of the inputs (leaves) computing C by the entry's first twin of the whole."""
    for twin in entry.twins:
        if isinstance(twin, (GradientTwin, StateTwin, ModuleTwin)):
            continue
        if not twins.applies(twin, entry.options):
            continue
        heads = int(at.get(sp.Symbol("h", integer=True, positive=True), 1))
        explicit = types.SimpleNamespace(sizes=at, graph=entry.graph, heads=heads)

        def run(values, twin=twin, explicit=explicit):
            read = Reader(explicit, dict(values))  # pyright: ignore[reportArgumentType]
            function = twins.resolve(twin.function, entry.name)
            return function(
                *twins.arguments(twin, explicit, read),  # pyright: ignore[reportArgumentType]
                **twins.options(twin, entry, read),
            )

        return run, twins.label(twin)
    return None, "no twin of the whole"


def _timed(function, leaves: dict) -> float:
    for tensor in leaves.values():
        tensor.grad = None
    start = time.perf_counter()
    out = function(leaves)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", nargs="*", default=None)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"load before: {os.getloadavg()[0]:.2f}; threads {torch.get_num_threads()}")
    print(f"n = {args.n}, d = c = 64, float32, forward + backward, median of {args.repeats}")
    print("| variant | generated (ms) | hand-written (ms) | twin | generated / hand-written |")
    print("|---|--:|--:|---|--:|")
    for name in args.variants or derive.variants():
        entry = derive.variant(name)
        own = {str(s.symbol): s.default for s in entry.sizes}
        given = {k: v for k, v in {"h": 4, "g": 2}.items() if k in own}
        for key, value in own.items():  # block sizes, windows: their defaults, if they fit n
            if key not in given and key in ("w", "chi", "B_r", "B_c", "s", "d_y", "d_u", "c_r"):
                given[key] = {"w": 128, "chi": 128, "B_r": 64, "B_c": 64}.get(key, value)
        try:
            at = explicit_sizes(entry, args.n, 64, 64, given)
        except ValueError as error:
            print(f"| {name} | — | — | sizes: {error} | — |")
            continue
        if "M" in entry.graph.inputs:
            print(f"| {name} | — | — | takes a given mask | — |")
            continue
        generator = torch.Generator().manual_seed(0)
        inputs = _inputs(entry, at, generator)
        generated = derive.torch_function(name)
        keywords = generated.at(at)

        def ours(values, generated=generated, keywords=keywords):
            return generated.apply([values[x] for x in generated.inputs], keywords)

        theirs, label = _hand_written(entry, at, inputs)
        leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
        mine, hand = [], []
        try:
            _timed(ours, leaves)
            if theirs is not None:
                _timed(theirs, leaves)
            for _ in range(args.repeats):  # interleaved
                mine.append(_timed(ours, leaves))
                if theirs is not None:
                    hand.append(_timed(theirs, leaves))
        except Exception as error:  # noqa: BLE001 - a benchmark row, not a test
            print(f"| {name} | — | — | {label}: {type(error).__name__}: {error} | — |")
            continue
        a = statistics.median(mine) * 1e3
        if not hand:
            print(f"| {name} | {a:.1f} | — | {label} | — |")
            continue
        b = statistics.median(hand) * 1e3
        print(f"| {name} | {a:.1f} | {b:.1f} | {label} | {a / b:.2f} |")
        sys.stdout.flush()
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
