"""The rules on the scores generated from declarations (`derive.score_mod`) on the fast path,
forward and backward, against plain causal attention and against the hand-written
modifications of `attention.mods` that compute the same numbers.

Each case is causal attention with q, k, v of shape (b, h, n, c_h) requiring grad, C's
backward from a fixed upstream gradient; the cases run one after the other in each round
(interleaved), the median of the rounds is quoted, with the machine's load. "plain" is causal
attention with no other modification: torch's fused kernel forward, our exact blockwise
backward (`attention._fused`). A rule with a learned number per head (ALiBi's slopes) gets its
gradient too.

    PYTHONPATH=. python tests/benchmarks/bench_score_mod.py --n 1024 --rounds 7
"""

import argparse
import os
import statistics

import torch
from bench_modifications import timed  # the same clock as the modifications' benchmark

import derive
from attention import _core
from attention import mods as M

CAP = 50.0


def cases(heads: int) -> dict[str, tuple]:
    """name -> (its modifications, the hand-written case it is compared with, or None)."""
    slopes = M.default_slopes(heads).requires_grad_()
    softcap = derive.score_mod("causal+softcap", kappa=CAP)
    alibi = derive.score_mod("gqa+alibi")
    tuned = derive.score_mod("causal+temperature-tuning", F=256, alpha=0.1)
    return {
        "plain causal": (M.modifications(causal=True), None),
        "softcap, by hand": (M.modifications(causal=True, softcap=CAP), None),
        "softcap, generated": (softcap.mods(), "softcap, by hand"),
        "ALiBi (learned slopes), by hand": (M.modifications(causal=True, alibi=slopes), None),
        "ALiBi (learned slopes), generated": (
            alibi.mods(slopes),
            "ALiBi (learned slopes), by hand",
        ),
        "temperature tuning, by hand": (
            M.modifications(causal=True, temperature=M.Temperature(256.0, 0.1)),
            None,
        ),
        "temperature tuning, generated": (tuned.mods(), "temperature tuning, by hand"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.n, args.width)
    q, k, v = (torch.randn(shape, generator=gen).requires_grad_() for _ in range(3))
    upstream = torch.randn(shape, generator=gen)
    scale = args.width**-0.5
    table = cases(args.heads)

    def run(mods) -> torch.Tensor:
        c = _core.attend(q, k, v, scale=scale, heads=True, mods=mods)
        c.backward(upstream)
        return c.detach()

    outputs = {}
    for name, (mods, _) in table.items():  # each case once (and the generated equal by hand)
        q.grad = k.grad = v.grad = None
        outputs[name] = (run(mods), q.grad.clone())
    for name, (_, twin) in table.items():
        if twin is not None:
            c_error = float((outputs[name][0] - outputs[twin][0]).abs().max())
            g_error = float((outputs[name][1] - outputs[twin][1]).abs().max())
            print(f"{name}: |C − by hand| ≤ {c_error:.1e}, |dQ − by hand| ≤ {g_error:.1e}")
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, (mods, _) in table.items():
            q.grad = k.grad = v.grad = None
            times[name].append(timed(lambda mods=mods: run(mods)))
    print(
        f"\nbatch {args.batch}, {args.heads} heads, n = {args.n}, c_h = {args.width}, causal, "
        f"forward + backward, float32, {torch.get_num_threads()} threads, load "
        f"{load:.2f} → {os.getloadavg()[0]:.2f}, median of {args.rounds} rounds, interleaved"
    )
    plain = statistics.median(times["plain causal"])
    print("| case | fwd + bwd | / plain | generated / by hand |")
    print("|---|--:|--:|--:|")
    for name, (_, twin) in table.items():
        mine = statistics.median(times[name])
        against = f"{mine / statistics.median(times[twin]):.2f}" if twin else ""
        print(f"| {name} | {mine * 1e3:.0f} ms | {mine / plain:.2f} | {against} |")


if __name__ == "__main__":
    main()
