"""Mamba-2's SSD (`attention.linear.ssd`, `attention.ssm.Mamba2`): speed, memory and generation.

Speed: forward + backward of the chunked form (chunks of 64 and of 256), the recurrence (a
Python loop over the tokens) and transformers' own torch scan (`mamba2_chunk_scan`, what
Mamba2Mixer runs without its CUDA kernels; chunks of 256) on the same inputs: batch 1, 8 heads
of width 64, d_state 64, one group, Δ ∈ (0.01, 0.1], A < 0. Each round times them one after the
other (interleaved); the median of the rounds is reported, and each ratio against the chunked
form of 64.

Memory (--memory): the peak resident memory of one forward + backward, chunked (64) and
quadratic (the n × n form), each in a fresh process.

Generation (--generation): `Mamba2` with its cache, one token at a time after prompts of
growing length, against the whole sequence computed again for each new token.

    PYTHONPATH=. python tests/benchmarks/bench_ssd.py --n 4096 --rounds 5
    PYTHONPATH=. python tests/benchmarks/bench_ssd.py --memory
    PYTHONPATH=. python tests/benchmarks/bench_ssd.py --generation
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from attention import linear as L


def inputs(n, heads=8, width=64, state=64, batch=1, grad=True):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, n, heads, width, generator=gen)
    dt = torch.rand(batch, n, heads, generator=gen) * 0.09 + 0.01
    A = -torch.rand(heads, generator=gen) - 0.5
    B = torch.randn(batch, n, 1, state, generator=gen) / state**0.5
    C = torch.randn(batch, n, 1, state, generator=gen) / state**0.5
    D = torch.ones(heads)
    return [t.requires_grad_(grad) for t in (x, dt, A, B, C, D)]


def transformers_scan():
    try:
        from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan
    except ImportError:
        return None

    def run(x, dt, A, B, C, D):
        return mamba2_chunk_scan(x, dt, A, B, C, chunk_size=256, D=D)

    return run


def ours(**options):
    def run(x, dt, A, B, C, D):
        return L.ssd(x, dt, A, B, C, D=D, **options)

    return run


def timed(function, tensors):
    for t in tensors:
        t.grad = None
    start = time.perf_counter()
    function(*tensors).square().sum().backward()
    return time.perf_counter() - start


def speed(n, rounds):
    tensors = inputs(n)
    forms = {
        "chunked, C = 64": ours(chunk_size=64),
        "chunked, C = 256": ours(chunk_size=256),
        "recurrence": ours(),
    }
    theirs = transformers_scan()
    if theirs is not None:
        forms["transformers' torch scan (C = 256)"] = theirs
    for function in forms.values():  # warm-up
        timed(function, tensors)
    times = {name: [] for name in forms}
    for _ in range(rounds):
        for name, function in forms.items():
            times[name].append(timed(function, tensors))
    base = statistics.median(times["chunked, C = 64"])
    print(f"n = {n}, {rounds} rounds, load {os.getloadavg()[0]:.2f}; fwd + bwd, median")
    print("| form | seconds | / chunked (64) |")
    print("|---|---|---|")
    for name, found in times.items():
        median = statistics.median(found)
        print(f"| {name} | {median:.3f} | {median / base:.2f} |")


def peak(form, n):
    """One forward + backward in this process; prints the peak resident memory in MiB."""
    import resource

    tensors = inputs(n)
    options = dict(chunk_size=64) if form == "chunked" else dict(parallel=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ours(**options)(*tensors).square().sum().backward()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{(after - before) / 1024:.0f}")


def memory(sizes):
    print("| n | chunked (64), MiB | quadratic (n × n), MiB |")
    print("|---|---|---|")
    for n in sizes:
        found = []
        for form in ("chunked", "quadratic"):
            if form == "quadratic" and n > 4096:  # 8 heads of n × n: over 8 GiB a copy
                found.append("—")
                continue
            run = [sys.executable, __file__, "--peak", form, "--n", str(n)]
            out = subprocess.run(run, capture_output=True, text=True, check=True)
            found.append(out.stdout.strip())
        print(f"| {n} | {found[0]} | {found[1]} |")


def generation(positions, rounds):
    from attention.ssm import Mamba2

    torch.manual_seed(0)
    module = Mamba2(512, num_heads=8, head_dim=64, state_size=64).eval()
    print("| position | one token with the cache, ms | the whole sequence again, ms |")
    print("|---|---|---|")
    with torch.no_grad():
        for position in positions:
            x = torch.randn(1, position + 1, 512)
            cached, whole = [], []
            for _ in range(rounds):
                module.reset_cache()
                module(x[:, :position], use_cache=True)
                start = time.perf_counter()
                module(x[:, position:], use_cache=True)
                cached.append(time.perf_counter() - start)
                start = time.perf_counter()
                module(x)
                whole.append(time.perf_counter() - start)
            one, again = statistics.median(cached), statistics.median(whole)
            print(f"| {position} | {1000 * one:.2f} | {1000 * again:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--generation", action="store_true")
    parser.add_argument("--peak", choices=("chunked", "quadratic"))
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    if args.peak:
        peak(args.peak, args.n)
    elif args.memory:
        memory((1024, 4096, 16384))
    elif args.generation:
        generation((64, 512, 2048), args.rounds)
    else:
        speed(args.n, args.rounds)


if __name__ == "__main__":
    main()
