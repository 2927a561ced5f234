"""The gated delta rule (`attention.linear`): speed, memory and rounding of its forms.

Speed: forward + backward of the chunked form (C = 64), the recurrence (a Python loop over the
tokens; ours, and the book's loop as ch04/08 writes it) and transformers' own torch fallback (`torch_chunk_gated_delta_rule`, Qwen 3.5's, when
transformers is installed) on the same inputs: batch 1, 8 heads, d_k = d_v = 64, q and k of unit
length, g ≤ 0, β ∈ (0, 1). Each round times them one after the other (interleaved); the median
of the rounds is reported, and each ratio against the chunked form.

Generation: `GatedDeltaNet` with its cache, one token at a time after prompts of growing length:
the time is the same at every position, O(d_k d_v) a head.

Memory (--memory): the peak resident memory of one forward + backward, chunked and parallel
(the n × n form), each in a fresh process.

Rounding (--rounding): outputs and gradients of each form in float32 against the recurrence in
float64, at growing n, relative to the largest entry: a gated state decays (|α| < 1), so its
rounding stays bounded as n grows; an ungated one (g = 0, the delta rule) need not.

    PYTHONPATH=. python tests/benchmarks/bench_linear.py --n 4096 --rounds 5
    PYTHONPATH=. python tests/benchmarks/bench_linear.py --generation
    PYTHONPATH=. python tests/benchmarks/bench_linear.py --memory
    PYTHONPATH=. python tests/benchmarks/bench_linear.py --rounding
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from attention import linear as L


def inputs(n, heads=8, width=64, batch=1, dtype=torch.float32, gated=True, grad=True):
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(batch, heads, n, width, generator=gen), dim=-1) / width**0.5
    k = F.normalize(torch.randn(batch, heads, n, width, generator=gen), dim=-1)
    v = torch.randn(batch, heads, n, width, generator=gen)
    g = -torch.rand(batch, heads, n, generator=gen) * 0.1 if gated else torch.zeros(batch, heads, n)
    beta = torch.rand(batch, heads, n, generator=gen)
    return [t.to(dtype).requires_grad_(grad) for t in (q, k, v, g, beta)]


def transformers_chunked():
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    except ImportError:
        return None

    def run(q, k, v, g, beta):
        t = lambda x: x.transpose(1, 2)  # noqa: E731  (b, n, h, ·), theirs
        out, _ = qwen.torch_chunk_gated_delta_rule(t(q), t(k), t(v), t(g), t(beta), chunk_size=64)
        return t(out)

    return run


def book_loop(q, k, v, g, beta):
    """The loop of the book's ch04/08 GatedDeltaNet, restated: each token's q, k, v read by
    indexing the whole tensors (which costs autograd's backward a whole tensor per token), the
    state updated with broadcast products."""
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    rows = []
    for t in range(q.shape[-2]):
        state = state * g[..., t, None, None].exp()
        remembered = (state * k[..., t, :, None]).sum(dim=-2)
        written = (v[..., t, :] - remembered) * beta[..., t, None]
        state = state + k[..., t, :, None] * written[..., None, :]
        rows.append((state * q[..., t, :, None]).sum(dim=-2))
    return torch.stack(rows, dim=-2)


def timed(function, tensors):
    for t in tensors:
        t.grad = None
    start = time.perf_counter()
    out = function(*tensors)
    out.square().sum().backward()
    return time.perf_counter() - start


def speed(n, rounds, recurrent):
    tensors = inputs(n)
    cases = {"chunked (ours, C = 64)": lambda *t: L.gated_delta_rule(*t, chunk_size=64)}
    theirs = transformers_chunked()
    if theirs is not None:
        cases["transformers' torch_chunk_gated_delta_rule"] = theirs
    if recurrent:
        cases["recurrent (ours, a loop over tokens)"] = lambda *t: L.gated_delta_rule(*t)
        cases["the book's loop (each token indexed)"] = book_loop
    times = {name: [] for name in cases}
    for function in cases.values():  # warm up
        timed(function, tensors)
    for _ in range(rounds):
        for name, function in cases.items():
            times[name].append(timed(function, tensors))
    base = statistics.median(times["chunked (ours, C = 64)"])
    print(f"n = {n}, 8 heads, d_k = d_v = 64, forward + backward, median of {rounds} rounds")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:48s} {median * 1e3:9.1f} ms  {median / base:6.2f}× chunked")


def generation(positions, steps):
    """`GatedDeltaNet(..., use_cache=True)` (8 heads of 64, d = 512): the sequence read up to
    each position in one chunked call, then `steps` tokens one at a time, each timed."""
    from attention import GatedDeltaNet

    torch.manual_seed(0)
    layer = GatedDeltaNet(512, 512, 0.0, 8, beta="head", conv_size=4).eval()
    x = torch.randn(1, max(positions) + steps, 512)
    print(f"GatedDeltaNet, one token with the cache (8 heads of 64), median of {steps} tokens")
    with torch.no_grad():
        layer(x[:, :64], use_cache=True)  # warm up: threads, allocator, the checks' memory
        for t in range(64, 264):
            layer(x[:, t : t + 1], use_cache=True)
        for position in positions:
            layer.reset_cache()
            layer(x[:, :position], use_cache=True)  # the prompt, chunked
            times = []
            for t in range(position, position + steps):
                start = time.perf_counter()
                layer(x[:, t : t + 1], use_cache=True)
                times.append(time.perf_counter() - start)
            print(f"  after {position:6d} tokens: {statistics.median(times) * 1e6:8.1f} µs a token")


def memory_child(n, form):
    import resource

    tensors = inputs(n)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    options = dict(chunk_size=64) if form == "chunked" else dict(parallel=True)
    L.gated_delta_rule(*tensors, **options).square().sum().backward()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  n = {n:6d} {form:8s} peak extra {(after - before) / 1024:9.1f} MiB")


def memory(sizes):
    print("one forward + backward, 8 heads, d_k = d_v = 64: peak resident memory above the inputs")
    for n in sizes:
        for form in ("chunked", "parallel"):
            if form == "parallel" and n > 8192:
                size = 8 * 4 * n * n * 4 / 2**30  # 8 heads, 4 n × n float32 matrices
                print(
                    f"  n = {n:6d} parallel  not run: its n × n matrices alone are {size:.1f} GiB"
                )
                continue
            env = {**os.environ, "PYTHONPATH": "."}
            child = [sys.executable, __file__, "--memory-child", str(n), form]
            subprocess.run(child, check=True, env=env)


def rounding(sizes):
    print("float32 against the recurrence in float64, max |error| / max |exact| (outputs; dq)")
    rules = {
        "gated delta rule (g ≤ 0: the state decays)": (L.gated_delta_rule, True, True),
        "delta rule (g = 0)": (L.gated_delta_rule, False, True),
        "linear attention (no decay, no delta: the state grows as n)": (L.linear_attention, 0, 0),
    }
    for title, (function, gated, delta) in rules.items():
        print(f"  {title}")
        for n in sizes:
            exact = inputs(n, heads=2, dtype=torch.float64, gated=gated)
            used = exact if delta else exact[:3]
            out = function(*used)
            out.square().sum().backward()
            reference, dq = out.detach(), exact[0].grad
            line = f"    n = {n:5d}"
            for name, options in (("recurrent", {}), ("chunked", dict(chunk_size=64))):
                low = [t.detach().float().requires_grad_() for t in used]
                got = function(*low, **options)
                got.square().sum().backward()
                error = float((got.detach().double() - reference).abs().max())
                grad = float((low[0].grad.double() - dq).abs().max() / dq.abs().max())
                line += f"   {name}: {error / float(reference.abs().max()):.1e}; {grad:.1e}"
            print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-recurrent", action="store_true", help="leave the loop out")
    parser.add_argument("--generation", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--rounding", action="store_true")
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_grad_enabled(True)
    if args.memory_child:
        memory_child(int(args.memory_child[0]), args.memory_child[1])
    elif args.generation:
        generation([128, 1024, 4096, 16384], steps=100)
    elif args.memory:
        memory([1024, 4096, 16384])
    elif args.rounding:
        rounding([256, 1024, 4096])
    else:
        speed(args.n, args.rounds, not args.no_recurrent)


if __name__ == "__main__":
    main()
