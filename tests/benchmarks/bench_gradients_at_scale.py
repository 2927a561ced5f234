"""How exact are the weight gradients of attention at large scores? (not a test: nothing asserts)

    python tests/benchmarks/bench_gradients_at_scale.py

X = randn(2, 5, 3) · s with random 3×4 weights and a random upstream gradient (the issue's
example), over 20 seeds; the largest error of dWq, dWk, dWv (float32) against float64, relative
to the largest gradient, for five backward passes:

- torch's fused kernel with its own backward (P = exp(S − lse), D = rowsum(dC ∘ C));
- the same formulas recomputed by hand from the kernel's float32 log-sum-exp;
- from the log-sum-exp, with D = rowsum(P ∘ dA) instead;
- ours (`attention._fused`): each block's softmax recomputed with its row maximum;
- the explicit path (autograd through the steps).

Prints a Markdown table (the one in docs/benchmarks.md comes from here).
"""

import statistics

import torch
import torch.nn.functional as torch_F

from attention import functional as F

SCALES = [1, 30, 100, 1000, 10000]
SEEDS = range(20)
FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def inputs(seed, s):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 3, generator=g) * s
    weights = [torch.randn(3, 4, generator=g) for _ in range(3)]
    return x, weights, torch.randn(2, 5, 4, generator=g)


def by_autograd(kind, x, weights, upstream, dtype):
    leaves = [t.to(dtype).requires_grad_() for t in weights]
    x = x.to(dtype)
    if kind == "torch":
        q, k, v = (x @ w for w in leaves)  # (2, 5, 4) -> (2, 1, 5, 4) below
        out = torch_F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
    else:
        out = F.self_attention(x, *leaves, return_weights=kind == "explicit")
        out = out[0] if kind == "explicit" else out
    return torch.autograd.grad(out, leaves, upstream.to(dtype))


def from_logsumexp(rowsum, x, weights, upstream):
    """dWq, dWk, dWv from the kernel's (out, lse), by the FlashAttention formulas, float32."""
    leaves = [w.clone().requires_grad_() for w in weights]
    q, k, v = (x @ w for w in leaves)
    with torch.no_grad():
        q4, k4, v4 = (t[:, None] for t in (q, k, v))  # (2, 5, 4) -> (2, 1, 5, 4)
        out, lse = FLASH(q4, k4, v4, scale=0.5)
        g = upstream[:, None]
        p = torch.exp(q4 @ k4.mT * 0.5 - lse[..., None])  # P = exp(S − lse)
        d_a = g @ v4.mT
        d = (g * out).sum(-1, keepdim=True) if rowsum == "dC∘C" else (p * d_a).sum(-1, True)
        d_s = p * (d_a - d) * 0.5
        grads = (d_s @ k4)[:, 0], (d_s.mT @ q4)[:, 0], (p.mT @ g)[:, 0]
    return torch.autograd.grad((q, k, v), leaves, grads)


def error(got, reference):
    largest = max(r.abs().max().item() for r in reference)
    worst = max((g.double() - r).abs().max().item() for g, r in zip(got, reference, strict=True))
    return worst / largest


def main():
    kinds = {
        "torch's fused backward": lambda *a: by_autograd("torch", *a, torch.float32),
        "from lse, D = rowsum(dC∘C)": lambda *a: from_logsumexp("dC∘C", *a),
        "from lse, D = rowsum(P∘dA)": lambda *a: from_logsumexp("P∘dA", *a),
        "ours (blockwise, row max)": lambda *a: by_autograd("fast", *a, torch.float32),
        "explicit path": lambda *a: by_autograd("explicit", *a, torch.float32),
    }
    print(
        f"torch {torch.__version__}; median (max) over {len(SEEDS)} seeds of the largest "
        "weight-gradient error relative to the largest gradient\n"
    )
    print("| s | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for s in SCALES:
        cells = []
        for run in kinds.values():
            errors = []
            for seed in SEEDS:
                x, weights, upstream = inputs(seed, s)
                reference = by_autograd("explicit", x, weights, upstream, torch.float64)
                errors.append(error(run(x, weights, upstream), reference))
            cells.append(f"{statistics.median(errors):.1e} ({max(errors):.1e})")
        print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
