"""Speed and memory of `attention`, measured in one run (not a test: nothing here asserts).

    python tests/benchmarks/bench_attention.py            # everything, about 2 minutes on 2 cores
    python tests/benchmarks/bench_attention.py --quick    # small sizes only, a smoke run

Prints Markdown tables (the figures in docs/benchmarks.md come from here). Every ratio compares
two things timed in the same run, interleaved (A, B, A, B, …), median of the repeats, so a busy
machine slows both sides alike.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import jaxtyping
import torch
import torch.nn as nn
import torch.nn.functional as torch_F

from attention import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
)
from attention import functional as F


def paired(first, second, repeats, number=1, *, second_unchecked=False):
    """Median seconds of one call of `first` and of `second`, timed alternately (`number` calls
    per sample) after one warm-up each; with `second_unchecked`, the checks are off (jaxtyping's
    switch) while the second's sample runs, switched outside the timed loop."""
    first(), second()
    times = ([], [])
    for _ in range(repeats):
        for k, (fn, bucket) in enumerate(((first, times[0]), (second, times[1]))):
            off = second_unchecked and k == 1
            jaxtyping.config.update("jaxtyping_disable", off)
            start = time.perf_counter()
            for _ in range(number):
                fn()
            bucket.append((time.perf_counter() - start) / number)
    jaxtyping.config.update("jaxtyping_disable", False)
    return statistics.median(times[0]), statistics.median(times[1])


def weights(d, c, heads=1):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(d, c, generator=g) / d**0.5 for _ in range(3)]


def check_overhead(sizes, repeats):
    print("\n### Runtime checks: checked / unchecked (checks off with jaxtyping's switch)\n")
    print("| (n, d, c) | what | checked | unchecked | ratio |")
    print("|---|---|---|---|---|")
    for n, d, c in sizes:
        overhead_rows(n, d, c, repeats if n < 1000 else repeats // 2)


def overhead_rows(n, d, c, repeats):
    x = torch.randn(n, d)
    w_q, w_k, w_v = weights(d, c)
    module = SelfAttentionV1(d, c).eval()
    causal = CausalAttention(d, c, n, 0.0).eval()
    cases = {
        "functional.self_attention": lambda: F.self_attention(x, w_q, w_k, w_v),
        "SelfAttentionV1.forward": lambda: module(x),
        "CausalAttention.forward": lambda: causal(x),
    }
    number = max(1, 2000 // n)  # calls per sample: about 100 at the book's size
    with torch.no_grad():
        for name, call in cases.items():
            on, off = paired(call, call, repeats, number, second_unchecked=True)
            print(f"| ({n}, {d}, {c}) | {name} | {fmt(on)} | {fmt(off)} | {on / off:.3f} |")


IMPORT_PROGRAM = """
import sys, time
start = time.perf_counter()
import torch
middle = time.perf_counter()
import attention
end = time.perf_counter()
print(middle - start, end - middle, "torch._dynamo" in sys.modules)
"""


def import_cost(repeats):
    print("\n### Import time (fresh processes, median)\n")
    torch_alone, extra, dynamo = [], [], set()
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_PROGRAM], capture_output=True, text=True, check=True
        )
        first, second, loaded = done.stdout.split()
        torch_alone.append(float(first))
        extra.append(float(second))
        dynamo.add(loaded)
    print("| `import torch` | then `import attention` | torch._dynamo imported |")
    print("|---|---|---|")
    print(
        f"| {statistics.median(torch_alone):.2f} s | +{statistics.median(extra):.3f} s |"
        f" {', '.join(sorted(dynamo))} |"
    )


def paths(sizes, d, c, repeats):
    print(f"\n### Fast path, raw fused kernel, explicit path (d = {d}, c = {c}, float32)\n")
    print(
        "| n | fast path | raw fused SDPA | fast / raw | explicit | explicit / fast |"
        " fast path GFLOP/s |"
    )
    print("|---|---|---|---|---|---|---|")
    return {n: paths_row(n, d, c, max(3, repeats // (1 + n // 1024))) for n in sizes}


def paths_row(n, d, c, repeats):
    """One row of the paths table; returns the fast path's FLOP/s."""
    x = torch.randn(n, d)
    w_q, w_k, w_v = weights(d, c)

    def raw():
        q, k, v = (x @ w for w in (w_q, w_k, w_v))
        return torch_F.scaled_dot_product_attention(q[None, None], k[None, None], v[None, None])

    def fast():
        return F.self_attention(x, w_q, w_k, w_v)

    def explicit():
        return F.self_attention(x, w_q, w_k, w_v, return_weights=True)

    with torch.no_grad():
        fast_time, fused = paired(fast, raw, repeats)
        explicit_time, fast_again = paired(explicit, fast, max(2, repeats // 2))
    flops = 6 * n * d * c + 4 * n * n * c
    print(
        f"| {n} | {fmt(fast_time)} | {fmt(fused)} | {fast_time / fused:.3f} |"
        f" {fmt(explicit_time)} | {explicit_time / fast_again:.2f} |"
        f" {flops / fast_time / 1e9:.1f} |"
    )
    return flops / fast_time


def training(sizes, repeats):
    """Forward + backward of the fast path against torch's fused kernel with its own backward,
    the same projections on both sides (the weights' gradients are what training needs)."""
    print("\n### Forward + backward, fast path against torch's fused kernel (float32)\n")
    print("| batch | heads | n | d | c | causal | ours | torch's fused | ours / torch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for batch, heads, n, d, c, causal in sizes:
        repeat = max(3, repeats // (1 + batch * heads * n // 4096))
        training_row(batch, heads, n, d, c, causal, repeat)


def training_row(batch, heads, n, d, c, causal, repeats):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, n, d, generator=g)
    w = [(torch.randn(d, c, generator=g) / d**0.5).requires_grad_() for _ in range(3)]
    w_o = (torch.randn(c, c, generator=g) / c**0.5).requires_grad_()
    upstream = torch.randn(batch, n, c, generator=g)
    leaves = [*w, w_o] if heads > 1 else w

    def ours():
        if heads == 1:
            out = F.self_attention(x, *w, causal=causal)
        else:
            out = F.multi_head_attention(x, *w, w_o, heads=heads, causal=causal)
        torch.autograd.grad(out, leaves, upstream)

    def theirs():
        q, k, v = (  # (B, n, c) -> (B, h, n, c_h)
            (x @ weight).view(batch, n, heads, c // heads).transpose(1, 2) for weight in w
        )
        out = torch_F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out = out.transpose(1, 2).reshape(batch, n, c)  # (B, h, n, c_h) -> (B, n, c)
        if heads > 1:
            out = out @ w_o
        torch.autograd.grad(out, leaves, upstream)

    mine, torchs = paired(ours, theirs, repeats)
    print(
        f"| {batch} | {heads} | {n} | {d} | {c} | {'yes' if causal else 'no'} | {fmt(mine)} |"
        f" {fmt(torchs)} | {mine / torchs:.3f} |"
    )


def matmul_throughput(repeats):
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - start)
    return 2 * 2048**3 / statistics.median(times)


PEAK_PROGRAM = """
import sys, torch
from attention import functional as F

def status(field):  # kB, from the kernel's view of this process
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))

n, d, c, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
backward = path.endswith("+backward")
# sys.argv[5], if given: "causal", "window=W" (causal within a window of W), or "mask=W" (the
# same window given as an n×n boolean mask: what the kernel gets without blocks)
options = {}
if len(sys.argv) > 5 and sys.argv[5]:
    options["causal"] = True
    kind, _, size = sys.argv[5].partition("=")
    if kind == "window":
        options["window"] = int(size)
    elif kind == "mask":
        options["mask"] = F.sliding_window_mask(n, int(size))  # an input: before the peak
x = torch.randn(n, d); w = [(torch.randn(d, c) / d**0.5).requires_grad_(backward) for _ in range(3)]

def run(x):
    if path.startswith("torch"):
        q, k, v = (x @ weight for weight in w)
        out = torch.nn.functional.scaled_dot_product_attention(q[None, None], k[None, None],
                                                               v[None, None])[0, 0]
    else:
        given = options if len(x) == n else {k: v for k, v in options.items() if k != "mask"}
        out = F.self_attention(x, *w, return_weights=path.startswith("explicit"), **given)
        out = out[0] if isinstance(out, tuple) else out
    if backward:
        torch.autograd.grad(out, w, torch.ones_like(out))

with torch.set_grad_enabled(backward):
    run(x[:8])  # warm up libraries
    with open("/proc/self/clear_refs", "w") as reset:
        reset.write("5")  # the peak (VmHWM) starts again from the current RSS
    before = status("VmRSS")
    run(x)
    print((status("VmHWM") - before) / 1024)  # kB -> MiB
"""


def peak_memory(n, d, c, paths, options=()):
    """Peak memory of each path (a fresh process each); `options`: "", "causal", "window=W"
    (a row per path and option)."""
    print(f"\n### Peak extra memory (n = {n}, d = {d}, c = {c}, float32)\n")
    print("| path | peak extra RSS (VmHWM − VmRSS) | n·c floats | n² floats |")
    print("|---|---|---|---|")
    for path in paths:
        for option in options or ("",):
            done = subprocess.run(
                [sys.executable, "-c", PEAK_PROGRAM, str(n), str(d), str(c), path, option],
                capture_output=True,
                text=True,
                check=True,
            )
            mib = float(done.stdout.strip())
            name = f"{path}, {option}" if option else path
            print(
                f"| {name} | {mib:.0f} MiB | {n * c * 4 / 2**20:.0f} MiB |"
                f" {n * n * 4 / 2**20:.0f} MiB |"
            )


def multi_head(batch, n, d, heads, repeats):
    print(
        f"\n### Multi-head, causal (batch {batch}, n = {n}, d = {d}, {heads} heads, float32,"
        " no grad, eval mode)\n"
    )
    torch.manual_seed(0)
    ours = MultiHeadAttention(d, d, n, 0.0, heads).eval()
    wrapper = MultiHeadAttentionWrapper(d, d // heads, n, 0.0, heads).eval()
    twin = nn.MultiheadAttention(d, heads, batch_first=True).eval()
    x = torch.randn(batch, n, d)
    blocked = torch.ones(n, n, dtype=torch.bool).triu(1)

    def theirs():
        return twin(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)

    with torch.no_grad():
        mine, torchs = paired(lambda: ours(x), theirs, repeats)
        mine_again, wrapped = paired(lambda: ours(x), lambda: wrapper(x), repeats)
    print(
        "| ours (checks on) | torch.nn.MultiheadAttention | ours / torch | wrapper of heads |"
        " ours / wrapper |"
    )
    print("|---|---|---|---|---|")
    print(
        f"| {fmt(mine)} | {fmt(torchs)} | {mine / torchs:.3f} | {fmt(wrapped)} |"
        f" {mine_again / wrapped:.3f} |"
    )


def fmt(seconds):
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    if args.quick:
        check_overhead([(6, 3, 2), (128, 64, 64)], 50)
        import_cost(3)
        paths([256, 512], 64, 16, 5)
        training([(1, 1, 256, 64, 16, False), (2, 4, 128, 48, 48, True)], 5)
        peak_memory(1024, 64, 16, ["fast+backward"])
        multi_head(2, 64, 48, 4, 5)
        return
    check_overhead([(6, 3, 2), (128, 64, 64), (1024, 768, 64)], 200)
    import_cost(9)
    matmul = matmul_throughput(10)
    throughput = paths([1024, 4096, 16384], 768, 64, 20)
    print(
        f"\nfloat32 matmul 2048³: {matmul / 1e9:.1f} GFLOP/s; fast path at n = 16384: "
        f"{throughput[16384] / matmul:.0%} of it."
    )
    training(
        [
            (1, 1, 1024, 768, 64, False),
            (1, 1, 4096, 768, 64, False),
            (1, 1, 4096, 768, 64, True),
            (4, 12, 1024, 768, 768, True),  # GPT-2 small's attention: 12 heads of 64
        ],
        10,
    )
    peak_memory(16384, 768, 64, ["fast", "explicit", "fast+backward", "torch+backward"])
    multi_head(8, 1024, 768, 12, 10)


if __name__ == "__main__":
    main()
