"""The bridge for the backward pass: derived gradients next to `torch.autograd`, step by step.

Like `derive.bridge.steps`, this module imports torch and `attention` only inside its functions.
`torch_gradient_steps` runs the forward pass one `attention.functional` call per step, keeps
every intermediate (`retain_grad`), and back-propagates the upstream gradient dC with autograd;
its keys are those of `ExplicitGradients.evaluate` (``dA``, ``dOmega_2``, ``dW_q`` …).
`check_gradients_against_torch` feeds both the same seeded dyadic float64 inputs and compares
every gradient.
"""

from __future__ import annotations

from typing import Any

from ..explicit import ExplicitGradients, Values, explicit_gradients
from .steps import Comparison, compare, dyadic_inputs

__all__ = [
    "gradient_inputs", "gradients_only", "torch_gradient_steps", "check_gradients_against_torch",
]  # fmt: skip


def gradient_inputs(g: ExplicitGradients, *, seed: int = 0) -> dict[str, Any]:
    """Seeded float64 X, weights (as `dyadic_inputs`) and an upstream gradient dC, all k/8."""
    import torch

    inputs = dyadic_inputs(g.forward, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    draw = torch.randint(-16, 17, (g.n, g.c), generator=generator)
    return inputs | {"dC": draw.to(torch.float64) / 8}


def torch_gradient_steps(
    g: ExplicitGradients, X: Any, W_q: Any, W_k: Any, W_v: Any, dC: Any, W_o: Any = None
) -> dict[str, Any]:
    """Every gradient by `torch.autograd` through the steps of `attention.functional`.

    The weights are computed from the scaled scores (``weights(scaled_scores(Ω, c), 1)``, the
    same softmax) so that dΩ̃ is an autograd gradient too. Returns key -> tensor.
    """
    from attention import functional as F

    x, w_q, w_k, w_v = (t.detach().clone().requires_grad_() for t in (X, W_q, W_k, W_v))
    kept: dict[str, Any] = {}

    def keep(key: str, tensor: Any) -> Any:
        tensor.retain_grad()
        kept[key] = tensor
        return tensor

    q, k, v = (keep(key, F.projection(x, w)) for key, w in zip("QKV", (w_q, w_k, w_v), strict=True))
    leaves = {"X": x, "W_q": w_q, "W_k": w_k, "W_v": w_v}
    if g.heads > 1:
        q, k, v = (F.split_heads(t, g.heads) for t in (q, k, v))  # (n, c) -> (h, n, c_h)
    omega = keep("Omega", F.scores(q, k))  # (n, n), or (h, n, n) per head
    scaled = keep("Omega_scaled", F.scaled_scores(omega, g.width))
    a = keep("A", F.weights(scaled, 1, causal=g.causal))  # softmax(Ω̃ / √1)
    context = keep("C_heads", F.context(a, v))
    if g.heads > 1:
        w_o = W_o.detach().clone().requires_grad_()
        leaves["W_o"] = w_o
        merged = keep("C_concat", F.merge_heads(context))  # (h, n, c_h) -> (n, c)
        context = F.projection(merged, w_o)
    context.backward(dC)
    grads = {"d" + key: tensor.grad for key, tensor in (kept | leaves).items()}
    if g.heads == 1:
        return grads
    for key in ("dOmega", "dOmega_scaled", "dA", "dC_heads"):
        per_head = grads.pop(key)  # (h, n, ·) -> one (n, ·) per head
        for head in range(g.heads):
            grads[f"{key.removesuffix('_heads')}_{head + 1}"] = per_head[head]
    return grads


def gradients_only(values: Values) -> Values:
    """The gradient entries of a `Values` (keys starting with ``d``), without the forward."""
    kept = {key: matrix for key, matrix in values.matrices.items() if key.startswith("d")}
    return Values(kept, values.heads, values.digits)


def check_gradients_against_torch(
    n: int,
    d: int,
    c: int,
    *,
    causal: bool = False,
    heads: int = 1,
    seed: int = 0,
    digits: int = 30,
) -> list[Comparison]:
    """Derive the gradients at (n, d, c), evaluate them and autograd on the same seeded dyadic
    float64 inputs (`gradient_inputs`), and compare every gradient (see `derive.compare`)."""
    g = explicit_gradients(n, d, c, causal=causal, heads=heads)
    inputs = gradient_inputs(g, seed=seed)
    values = g.evaluate(**inputs, digits=digits)
    return compare(gradients_only(values), torch_gradient_steps(g, **inputs))
