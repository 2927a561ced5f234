"""The score modifications on our fast path against PyTorch's FlexAttention, forward only.

FlexAttention (`torch.nn.attention.flex_attention`, compiled) takes a modification as a
`score_mod` (softcapping, ALiBi's bias, Llama 4's temperature) and a mask as a `block_mask`
(causal, a window, chunks): the general answer to "a new modification without a new kernel".
On the CPU it computes no backward pass (torch 2.13 raises NotImplementedError for inputs that
require grad), so this compares forward passes only, under `torch.no_grad()`, one case after the
other in each round (interleaved), median of the rounds: our fast path with the modification
objects (`attention._core.attend`), FlexAttention compiled once per case, and torch's fused
kernel (plain causal) for scale. The first call of each compiled case (its compilation) is
timed apart.

    PYTHONPATH=. python tests/benchmarks/bench_flex.py --n 1024 --rounds 7
"""

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from attention import _core
from attention import mods as M

CAP, WINDOW, CHUNK = 50.0, 256, 256


def cases(heads: int):
    """name -> (our modifications, FlexAttention's score_mod, its mask_mod)."""
    slopes = torch.rand(heads) * 0.1

    def causal(b, h, q, k):
        return q >= k

    def window(b, h, q, k):
        return (q >= k) & (q - k < WINDOW)

    def chunked(b, h, q, k):
        return (q >= k) & (q // CHUNK == k // CHUNK)

    def softcap(score, b, h, q, k):
        return CAP * torch.tanh(score / CAP)

    def alibi(score, b, h, q, k):
        return score - slopes[h] * (q - k)

    return {
        "plain causal": (M.modifications(causal=True), None, causal),
        "softcap 50": (M.modifications(causal=True, softcap=CAP), softcap, causal),
        "alibi": (M.modifications(causal=True, alibi=slopes), alibi, causal),
        "window 256": (M.modifications(causal=True, window=WINDOW), None, window),
        "chunked 256": (M.modifications(causal=True, chunk=CHUNK), None, chunked),
    }


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


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
    q, k, v = (torch.randn(shape, generator=gen) for _ in range(3))
    scale = args.width**-0.5
    compiled = torch.compile(flex_attention)
    table = cases(args.heads)
    masks = {
        name: create_block_mask(mask, B=None, H=None, Q_LEN=args.n, KV_LEN=args.n, device="cpu")
        for name, (_, _, mask) in table.items()
    }
    fused = "torch's fused kernel (causal)"
    calls = {fused: lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    for name, (mods, score_mod, _) in table.items():
        calls[f"ours: {name}"] = lambda mods=mods: _core.attend(
            q, k, v, scale=scale, heads=True, mods=mods
        )
        calls[f"flex: {name}"] = lambda name=name, score_mod=score_mod: compiled(
            q, k, v, score_mod=score_mod, block_mask=masks[name], scale=scale
        )
    with torch.no_grad():
        for name, (mods, _, _) in table.items():  # the two agree, then compile once
            ours = _core.attend(q, k, v, scale=scale, heads=True, mods=mods)
            first = timed(lambda name=name: calls[f"flex: {name}"]())
            flex = calls[f"flex: {name}"]()
            error = float((ours - flex).abs().max())
            print(f"{name}: |ours − flex| ≤ {error:.1e}; flex's first call {first:.1f} s")
        times = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                times[name].append(timed(call))
    print(
        f"\nbatch {args.batch}, {args.heads} heads, n = {args.n}, c_h = {args.width}, forward, "
        f"float32, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}, "
        f"median of {args.rounds} rounds"
    )
    print("| case | ours | FlexAttention | flex / ours |")
    print("|---|---|---|---|")
    kernel = statistics.median(times[fused])
    print(f"| torch's fused kernel, causal | {kernel * 1e3:.1f} ms | | |")
    for name in table:
        mine, theirs = (statistics.median(times[f"{who}: {name}"]) for who in ("ours", "flex"))
        print(f"| {name} | {mine * 1e3:.1f} ms | {theirs * 1e3:.1f} ms | {theirs / mine:.2f} |")


if __name__ == "__main__":
    main()
