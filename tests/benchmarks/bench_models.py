"""Speed and memory of grouped-query and latent attention, measured in one run (not a test).

    python tests/benchmarks/bench_models.py            # everything, a few minutes on 2 cores
    python tests/benchmarks/bench_models.py --quick    # small sizes only, a smoke run
    python tests/benchmarks/bench_models.py --only memory checks    # some sections only

Prints Markdown tables (the figures in docs/benchmarks.md come from here). Ratios compare two
things timed in the same run, interleaved (A, B, A, B, …), median of the repeats; peak memory is
measured in a fresh process for each path, as the rise of the kernel's high-water mark (VmHWM,
reset through /proc/self/clear_refs).
"""

import argparse
import os
import subprocess
import sys

import torch
import torch.nn.functional as torch_F
from bench_attention import fmt, paired
from llms_from_scratch import llama3
from llms_from_scratch.kv_cache import gpt2 as book_kv

from attention import GroupedQueryAttention, MultiHeadLatentAttention, compute_rope_params
from attention.grouped import grouped_query_attention


def gqa_modules(d, heads, groups, n):
    torch.manual_seed(0)
    ours = GroupedQueryAttention(d, d_out=d, num_heads=heads, num_kv_groups=groups).eval()
    book = llama3.GroupedQueryAttention(d, d, heads, groups).eval()
    book.load_state_dict(ours.state_dict())
    cos, sin = compute_rope_params(d // heads, 500_000.0, n)
    blocked = torch.ones(n, n, dtype=torch.bool).triu(1)
    return ours, book, cos, sin, blocked


def repeat_kv(module, x, cos, sin):
    """The same module's computation with K and V repeated to every head (repeat_interleave)
    before the same fused kernel: what the fast path avoids."""
    b, n, _ = x.shape
    h, g, c_h = module.num_heads, module.num_kv_groups, module.head_dim
    q = module.W_query(x).view(b, n, h, c_h).transpose(1, 2)  # -> (b, h, n, c_h)
    k = module.W_key(x).view(b, n, g, c_h).transpose(1, 2)  # -> (b, g, n, c_h)
    v = module.W_value(x).view(b, n, g, c_h).transpose(1, 2)
    q, k = llama3.apply_rope(q, cos, sin), llama3.apply_rope(k, cos, sin)
    k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
    out = torch_F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return module.out_proj(out.transpose(1, 2).reshape(b, n, h * c_h))


def gqa_speed(batch, n, d, heads, groups, repeats):
    print(
        f"\n### Grouped-query attention, forward (batch {batch}, n = {n}, d = {d}, {heads} query"
        f" heads, {groups} groups, causal, RoPE, float32, no grad)\n"
    )
    ours, book, cos, sin, blocked = gqa_modules(d, heads, groups, n)
    x = torch.randn(batch, n, d)
    with torch.no_grad():
        mine, books = paired(
            lambda: ours(x, blocked, cos, sin),
            lambda: book(x, blocked, cos, sin),
            max(2, repeats // 3),
        )
        again, repeated = paired(
            lambda: ours(x, blocked, cos, sin), lambda: repeat_kv(ours, x, cos, sin), repeats
        )
    print(
        "| ours (checks on) | the book's `llama3.GroupedQueryAttention` | ours / book |"
        " repeat-KV + fused kernel | ours / repeat-KV |"
    )
    print("|---|---|---|---|---|")
    print(
        f"| {fmt(mine)} | {fmt(books)} | {mine / books:.3f} | {fmt(repeated)} |"
        f" {again / repeated:.3f} |"
    )


PEAK_PROGRAM = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from bench_models import gqa_modules, repeat_kv

def status(field):  # kB
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))

batch, n, d, heads, groups = (int(a) for a in sys.argv[2:7])
path = sys.argv[7]
backward = path.endswith("+backward")
ours, book, cos, sin, blocked = gqa_modules(d, heads, groups, n)
ours.train(backward), book.train(backward)
x = torch.randn(batch, n, d)

def run(x, cos, sin, blocked):
    if path.startswith("ours"):
        out = ours(x, blocked, cos, sin)
    elif path.startswith("repeat"):
        out = repeat_kv(ours, x, cos, sin)
    else:
        out = book(x, blocked, cos, sin)
    if backward:
        torch.autograd.grad(out.sum(), list((book if path.startswith("book") else ours).parameters()))

with torch.set_grad_enabled(backward):
    run(x[:, :8], cos, sin, blocked[:8, :8])  # warm up the libraries
    with open("/proc/self/clear_refs", "w") as reset:
        reset.write("5")
    before = status("VmRSS")
    run(x, cos, sin, blocked)
    print((status("VmHWM") - before) / 1024)
"""


def gqa_memory(batch, n, d, heads, groups, paths):
    print(
        f"\n### Grouped-query attention, peak extra memory (batch {batch}, n = {n}, d = {d},"
        f" {heads} heads, {groups} groups, float32)\n"
    )
    print("| path | peak extra RSS (VmHWM − VmRSS) |")
    print("|---|---|")
    here = os.path.dirname(os.path.abspath(__file__))
    kv = batch * n * d // heads * 4 / 2**20
    for path in paths:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                PEAK_PROGRAM,
                here,
                *(str(v) for v in (batch, n, d, heads, groups)),
                path,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        print(f"| {path} | {float(done.stdout.strip()):.0f} MiB |")
    print(
        f"\nOne head's K (or V) is {kv:.0f} MiB; repeating K and V from {groups} groups to"
        f" {heads} heads adds {2 * (heads - groups) * kv:.0f} MiB."
    )


def mla_cache(batch, d, heads, layers, prompt, new, latent_dim):
    print(
        f"\n### Latent cache against multi-head attention's KV cache (d = {d}, {heads} heads,"
        f" {layers} layers, batch {batch}, {prompt} prompt + {new} generated tokens,"
        f" float32)\n"
    )
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(d, d, 0.0, heads, latent_dim=latent_dim).eval()
    mha = book_kv.MultiHeadAttention(d, d, prompt + new, 0.0, heads).eval()
    x = torch.randn(batch, prompt + new, d)
    with torch.no_grad():
        mla(x[:, :prompt], use_cache=True)
        for t in range(prompt, prompt + new):  # then one token at a time
            mla(x[:, t : t + 1], use_cache=True)
        _, cache = mha(x, use_cache=True)  # K and V for the same tokens, (b, h, T, c_h) each
    ours = mla.cache_c_kv.numel() * mla.cache_c_kv.element_size() * layers
    theirs = sum(t.numel() * t.element_size() for t in cache) * layers
    print("| cache | per token and layer | whole cache | / multi-head attention's |")
    print("|---|---|---|---|")
    print(
        f"| the book's `kv_cache` MultiHeadAttention (K and V) | {2 * d} floats |"
        f" {theirs / 2**20:.1f} MiB | 1 |"
    )
    print(
        f"| MultiHeadLatentAttention (latent_dim = {mla.latent_dim}) | {mla.latent_dim} floats"
        f" | {ours / 2**20:.1f} MiB | {ours / theirs:.4f} |"
    )


def check_overhead(sizes, repeats):
    print("\n### Runtime checks: checked / unchecked\n")
    print("| (batch, n, d, h, g) | what | checked | unchecked | ratio |")
    print("|---|---|---|---|---|")
    for batch, n, d, heads, groups in sizes:
        overhead_rows(batch, n, d, heads, groups, repeats if n < 1000 else 3)


def overhead_rows(batch, n, d, heads, groups, repeats):
    ours, _, cos, sin, blocked = gqa_modules(d, heads, groups, n)
    mla = MultiHeadLatentAttention(d, d, 0.0, heads).eval()
    x = torch.randn(batch, n, d)
    w = [p.weight.T for p in (ours.W_query, ours.W_key, ours.W_value, ours.out_proj)]
    cases = {
        "GroupedQueryAttention.forward": lambda: ours(x, blocked, cos, sin),
        "grouped_query_attention": lambda: grouped_query_attention(
            x, *w, heads=heads, groups=groups, causal=True, theta_base=500_000.0
        ),
        "MultiHeadLatentAttention.forward": lambda: mla(x),
    }
    number = max(1, 400 // (batch * n))  # calls per sample
    with torch.no_grad():
        for name, call in cases.items():
            on, off = paired(call, call, repeats, number, second_unchecked=True)
            print(
                f"| ({batch}, {n}, {d}, {heads}, {groups}) | {name} | {fmt(on)} |"
                f" {fmt(off)} | {on / off:.3f} |"
            )


SECTIONS = ("speed", "memory", "cache", "checks")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    quick = args.quick
    if "speed" in args.only:
        gqa_speed(*((2, 128, 96, 12, 4, 3) if quick else (8, 1024, 768, 12, 4, 10)))
    if "memory" in args.only:
        paths = ["ours", "repeat-KV", "book", "ours+backward", "repeat-KV+backward"]
        gqa_memory(*((2, 128, 96, 12, 4) if quick else (8, 1024, 768, 12, 4)), paths)
    if "cache" in args.only:
        mla_cache(*((1, 96, 12, 2, 16, 4, None) if quick else (1, 768, 12, 12, 1000, 24, None)))
    if "checks" in args.only:
        sizes = [(1, 8, 24, 6, 2)] + ([] if quick else [(2, 128, 256, 8, 2), (8, 1024, 768, 12, 4)])
        check_overhead(sizes, 10 if quick else 30)


if __name__ == "__main__":
    main()
