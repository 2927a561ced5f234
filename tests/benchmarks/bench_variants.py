"""Speed and memory of the variants (KV cache, sliding window, cross-attention), in one run (not a
test: nothing here asserts).

    python tests/benchmarks/bench_variants.py            # everything, 5-12 minutes on 2 cores
    python tests/benchmarks/bench_variants.py --quick    # small sizes only, a smoke run

Prints Markdown tables (the figures in docs/benchmarks.md come from here). Ratios compare two
things timed in the same run, interleaved (A, B, A, B, …), median of the repeats.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the book's GPT, restated

import book_generation  # noqa: E402
from bench_attention import fmt, paired, peak_memory  # noqa: E402
from book_generation import GPTModel, generate_text_simple_cached  # noqa: E402

from attention import MultiHeadAttention, MultiHeadAttentionWithSWA  # noqa: E402
from attention import functional as F  # noqa: E402

BOOK = (book_generation.BookKVMultiHeadAttention, book_generation.BookMultiHeadAttentionWithSWA)
OURS = (MultiHeadAttention, MultiHeadAttentionWithSWA)


def gpt(classes, config):
    """The book's GPT (seed 123) built with the given attention classes."""
    book_generation.MultiHeadAttention, book_generation.MultiHeadAttentionWithSWA = classes
    torch.manual_seed(123)
    return GPTModel(config).eval()


def generation(config, prompt_length, new_tokens, repeats):
    """Tokens per second generating `new_tokens` greedily, with and without the cache, ours and
    the book's class in the same GPT; and whether every run gave the same tokens."""
    name = "sliding window" if "sliding_window_size" in config else "KV cache"
    print(
        f"\n### Generation: {config['n_layers']}-layer GPT ({name}), {new_tokens} new tokens"
        f" after {prompt_length}, emb {config['emb_dim']}, {config['n_heads']} heads,"
        f" vocab {config['vocab_size']}, batch 1, no grad\n"
    )
    models = {"book's class": gpt(BOOK, config), "ours": gpt(OURS, config)}
    prompt = torch.randint(
        0, config["vocab_size"], (1, prompt_length), generator=torch.Generator().manual_seed(0)
    )
    outputs = {}

    def run(label, use_cache):
        def call():
            outputs[label, use_cache] = generate_text_simple_cached(
                models[label], prompt, new_tokens, use_cache=use_cache
            )

        return call

    print(
        "| cache | ours | book's class | ours / book's (time) | ours, tokens/s | book's, tokens/s |"
    )
    print("|---|---|---|---|---|---|")
    times = {}
    for use_cache in (True, False):
        mine, theirs = paired(
            run("ours", use_cache),
            run("book's class", use_cache),
            repeats if use_cache else max(1, repeats // 5),
        )
        times[use_cache] = mine, theirs
        print(
            f"| {'yes' if use_cache else 'no'} | {fmt(mine)} | {fmt(theirs)} |"
            f" {mine / theirs:.3f} | {new_tokens / mine:.0f} | {new_tokens / theirs:.0f} |"
        )
    first = outputs["ours", True]
    same = all(torch.equal(first, tokens) for tokens in outputs.values())
    print(
        f"\ncached / uncached, tokens/s: ours {times[False][0] / times[True][0]:.1f}×, the "
        f"book's {times[False][1] / times[True][1]:.1f}×; every run gave the same "
        f"{first.shape[1] - prompt_length} tokens: {same}"
    )
    checked, bare = paired(run("ours", True), run("ours", True), repeats, second_unchecked=True)
    print(
        f"ours with the cache, checks on / off: {checked / bare:.3f} ({fmt(checked)}, {fmt(bare)})"
    )


def window_speed(sizes, d, c, window, repeats):
    """Sliding-window attention against causal attention, the same inputs, forward alone and
    forward + backward."""
    print(f"\n### Sliding window (w = {window}) against causal (d = {d}, c = {c}, float32)\n")
    print("| n | pass | window | causal | window / causal |")
    print("|---|---|---|---|---|")
    for n in sizes:
        window_rows(n, d, c, window, max(2, repeats // (1 + n // 4096)))


def window_rows(n, d, c, window, repeats):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    w = [(torch.randn(d, c, generator=g) / d**0.5).requires_grad_() for _ in range(3)]
    upstream = torch.randn(n, c, generator=g)

    def forward(options):
        def call():
            with torch.no_grad():
                return F.self_attention(x, *w, causal=True, **options)

        return call

    def training(options):
        def call():
            out = F.self_attention(x, *w, causal=True, **options)
            return torch.autograd.grad(out, w, upstream)

        return call

    for name, make in (("forward", forward), ("forward + backward", training)):
        windowed, causal = paired(make({"window": window}), make({}), repeats)
        print(f"| {n} | {name} | {fmt(windowed)} | {fmt(causal)} | {windowed / causal:.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    started = time.perf_counter()
    # GPT-2 small's widths, 2 layers; a vocabulary of 1024, not 50257: the output layer's
    # 50257 × 768 weights (154 MB, read once a token) would make the figures its own
    gpt2 = {
        "vocab_size": 1024,
        "context_length": 1024,
        "emb_dim": 768,
        "n_heads": 12,
        "n_layers": 2,
        "drop_rate": 0.0,
        "qkv_bias": False,
    }
    if args.quick:
        small = gpt2 | {"vocab_size": 500, "emb_dim": 96}
        generation(small, 4, 32, 3)
        generation(small | {"sliding_window_size": 8, "sliding_window_stride": -1}, 4, 32, 3)
        window_speed([1024], 64, 16, 64, 3)
        peak_memory(2048, 64, 16, ["fast", "fast+backward"], ["causal", "window=64", "mask=64"])
    else:
        generation(gpt2, 4, 256, 7)
        swa = gpt2 | {"sliding_window_size": 64, "sliding_window_stride": -1}
        generation(swa, 4, 256, 7)
        window_speed([4096, 16384], 768, 64, 512, 6)
        peak_memory(16384, 768, 64, ["fast", "fast+backward"], ["causal", "window=512", "mask=512"])
    print(f"\n({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
