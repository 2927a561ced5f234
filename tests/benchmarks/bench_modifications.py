"""The one fast path with the score modifications: forward + backward against torch's fused kernel.

Each round times, one after the other (interleaved, so that a busy machine slows all alike):
torch's `scaled_dot_product_attention` (causal), the fast path plain (causal, which goes to that
kernel forward and to our exact backward), and the fast path with each modification (softcap,
ALiBi, sinks, a window, chunks, Llama 4's temperature, a clamp, all four), and grouped keys (g = h/4); and plain and softcap with the
blocks' packs one after the other on torch's threads rather than on the pool
(`_fused.blocks.each`). Reports the median of the rounds, each ratio against torch and against our plain path. With --busy loop, a one-core Python busy
loop runs beside the measurement; with --busy torch, another process runs torch's matrix
products with its own threads (as a test suite would). With --memory, the peak extra memory of
one forward + backward at n = 4096 and 16384 with each modification, each in a fresh process.

    PYTHONPATH=. python tests/benchmarks/bench_modifications.py --n 1024 --batch 4
    PYTHONPATH=. python tests/benchmarks/bench_modifications.py --busy loop
    PYTHONPATH=. python tests/benchmarks/bench_modifications.py --memory
    PYTHONPATH=. python tests/benchmarks/bench_modifications.py --breakdown --rounds 7
    PYTHONPATH=. python tests/benchmarks/bench_modifications.py --functions --rounds 9
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from attention import _core, _fused
from attention import mods as M

CASES = {
    "plain": {},
    "softcap 50": {"softcap": 50.0},
    "alibi": {"slopes": True},
    "sinks": {"sinks": True},
    "window 256": {"window": 256},
    "chunked 256": {"chunk": 256},
    "temperature": {"temperature": True},
    "clamp 5": {"clamp": 5.0},
    "all four": {"softcap": 50.0, "slopes": True, "sinks": True, "window": 256},
    "gqa g = h/4": {"groups": 4},
    "plain, packs serial": {"serial": True},
    "softcap 50, packs serial": {"softcap": 50.0, "serial": True},
}


def tensors(batch: int, heads: int, n: int, width: int, groups: int | None = None):
    g = torch.Generator().manual_seed(0)
    kv = heads if groups is None else heads // groups
    q = torch.randn(batch, heads, n, width, generator=g, requires_grad=True)
    k, v = (torch.randn(batch, kv, n, width, generator=g, requires_grad=True) for _ in range(2))
    return q, k, v


def ours(q, k, v, heads, options):
    slopes = torch.rand(heads) * 0.1 if options.get("slopes") else None
    sinks = torch.zeros(heads, requires_grad=True) if options.get("sinks") else None
    _fused.blocks.PACK_THREADS = 1 if options.get("serial") else None  # the packs' pool, or not
    try:
        mods = M.modifications(
            causal=True,
            window=options.get("window"),
            chunk=options.get("chunk"),
            temperature=M.Temperature(64.0, 0.1) if options.get("temperature") else None,
            softcap=options.get("softcap"),
            alibi=False if slopes is None else slopes,
            sinks=sinks,
        )
        if options.get("clamp"):  # the modification added end to end, as an object
            mods = M.ordered((*mods, M.Clamp(options["clamp"])))
        out = _core.attend(q, k, v, scale=q.shape[-1] ** -0.5, heads=True, mods=mods)
        out.sum().backward()
    finally:
        _fused.blocks.PACK_THREADS = None


def torch_fused(q, k, v):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def speed(batch: int, heads: int, n: int, width: int, rounds: int) -> None:
    inputs = {
        name: tensors(batch, heads, n, width, case.get("groups")) for name, case in CASES.items()
    }
    plain_inputs = tensors(batch, heads, n, width)
    times: dict[str, list[float]] = {"torch": [], **{name: [] for name in CASES}}
    for round_ in range(rounds + 1):  # the first round warms up
        spent = {"torch": timed(lambda: torch_fused(*plain_inputs))}
        for name, case in CASES.items():
            spent[name] = timed(lambda name=name, case=case: ours(*inputs[name], heads, case))
        if round_:
            for name, value in spent.items():
                times[name].append(value)
    load = os.getloadavg()[0]
    print(
        f"batch {batch}, {heads} heads, n = {n}, c_h = {width}, causal, float32, "
        f"{torch.get_num_threads()} threads, load {load:.2f}, median of {rounds} rounds"
    )
    print("| path | forward + backward | / torch's fused | / our plain |")
    print("|---|---|---|---|")
    base = statistics.median(times["torch"])
    plain = statistics.median(times["plain"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1e3:.1f} ms | {median / base:.3f} | {median / plain:.3f} |")


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.1f} ms"


def breakdown(batch: int, heads: int, n: int, width: int, rounds: int) -> None:
    """Where a modification's time goes: the forward alone (`_fused._forward`) and the backward
    alone (`_fused.gradients`), plain against softcap 50, interleaved."""
    g = torch.Generator().manual_seed(0)
    q, k, v, dc = (torch.randn(batch, heads, n, width, generator=g) for _ in range(4))
    scale = width**-0.5
    cases = {
        "plain": M.modifications(causal=True),
        "softcap 50": M.modifications(causal=True, softcap=50.0),
    }
    times: dict[str, list[float]] = {f"{c} {p}": [] for c in cases for p in ("fwd", "bwd")}
    for round_ in range(rounds + 1):
        for name, mods in cases.items():
            forward = timed(lambda mods=mods: _fused._forward(q, k, v, scale, mods, None))
            backward = timed(lambda mods=mods: _fused.gradients(q, k, v, dc, scale, mods))
            if round_:
                times[f"{name} fwd"].append(forward)
                times[f"{name} bwd"].append(backward)
    print(f"load {os.getloadavg()[0]:.2f}, median of {rounds} rounds")
    print("| part | time |")
    print("|---|---|")
    for name, values in times.items():
        print(f"| {name} | {median_ms(values)} |")


def functions(rounds: int) -> None:
    """Issue 33's measurement: `multi_head_attention` forward + backward, batch 2, 4 heads,
    n = 1024, c_h = 64, causal, each modification by its keyword (alibi=True: the default
    slopes), interleaved."""
    from attention import functional

    torch.manual_seed(0)
    heads, c = 4, 256
    x = torch.randn(2, 1024, c)
    weights = [(torch.randn(c, c) * c**-0.5).requires_grad_() for _ in range(4)]
    cases = {
        "plain": {},
        "alibi=True": {"alibi": True},
        "softcap=50": {"softcap": 50.0},
        "sinks": {"sinks": torch.zeros(heads, requires_grad=True)},
    }

    def run(options) -> None:
        out = functional.multi_head_attention(x, *weights, heads=heads, causal=True, **options)
        out.sum().backward()

    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(rounds + 1):
        for name, options in cases.items():
            spent = timed(lambda options=options: run(options))
            if round_:
                times[name].append(spent)
    plain = statistics.median(times["plain"])
    print(f"load {os.getloadavg()[0]:.2f}, median of {rounds} rounds")
    print("| keyword | forward + backward | / plain |")
    print("|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {median_ms(values)} | {statistics.median(values) / plain:.3f} |")


BUSY = {
    "loop": "while True: pass",
    "torch": "import torch\nx = torch.randn(1024, 1024)\nwhile True: x @ x",
}


def memory_child(case: str, n: int) -> None:
    q, k, v = tensors(1, 1, n, 64)
    with open("/proc/self/status") as status:
        before = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    ours(q, k, v, 1, CASES[case])
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    square = n * n * 4 / 2**20
    print(f"| {n} | {case} | {(peak - before) / 1024:.0f} MiB | {square:.0f} MiB |")


def memory(sizes: tuple[int, ...] = (4096, 16384)) -> None:
    print("c = 64, one head, float32: peak extra RSS of forward + backward, a fresh process each")
    print("| n | case | peak extra (VmHWM − VmRSS before) | one n × n float32 matrix |")
    print("|---|---|---|---|")
    for n in sizes:
        for case in (name for name in CASES if "serial" not in name and "gqa" not in name):
            child = [sys.executable, __file__, "--memory-child", case, str(n)]
            subprocess.run(child, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--busy", choices=sorted(BUSY))
    parser.add_argument("--memory-child", nargs=2)
    parser.add_argument("--breakdown", action="store_true", help="forward and backward apart")
    parser.add_argument("--functions", action="store_true", help="multi_head_attention's keywords")
    args = parser.parse_args()
    if args.breakdown:
        breakdown(args.batch, args.heads, args.n, args.width, args.rounds)
    elif args.functions:
        functions(args.rounds)
    elif args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
    elif args.memory:
        memory()
    else:
        other = None
        if args.busy:
            other = subprocess.Popen([sys.executable, "-c", BUSY[args.busy]])
            print(f"beside a busy {args.busy} (another process)")
        try:
            speed(args.batch, args.heads, args.n, args.width, args.rounds)
        finally:
            if other is not None:
                other.kill()


if __name__ == "__main__":
    main()
