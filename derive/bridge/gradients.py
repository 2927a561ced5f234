"""The bridge for the backward pass: derived gradients next to `torch.autograd`, step by step.

Like `derive.bridge.steps`, this module touches torch and `attention`.
`torch_gradient_steps` runs the forward pass through the twins of the steps, keeps every
intermediate (`retain_grad`), and back-propagates the upstream gradient dC with autograd;
its keys are those of `ExplicitGradients.evaluate` (``dA``, ``dOmega_2``, ``dW_q`` …).
`check_gradients_against_torch` feeds both the same seeded dyadic float64 inputs and compares
every gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from ..explicit import ExplicitGradients, Values
from ..graph.registry import ROOT
from .steps import Comparison, compare, dyadic_inputs

__all__ = [
    "gradient_inputs",
    "gradients_only",
    "torch_gradient_steps",
    "check_gradients_against_torch",
]


def gradient_inputs(g: ExplicitGradients, *, seed: int = 0) -> dict[str, Any]:
    """Seeded float64 inputs (as `dyadic_inputs`) and an upstream gradient dC, all k/8."""
    inputs = dyadic_inputs(g.forward, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    draw = torch.randint(-16, 17, tuple(g.dC.shape), generator=generator)
    return inputs | {g.upstream: draw.to(torch.float64) / 8}


def torch_gradient_steps(g: ExplicitGradients, **given: Any) -> dict[str, Any]:
    """Every gradient by `torch.autograd` through the twins of the steps
    (`derive.bridge.evaluate`): the inputs by letter (``X=…, W_q=…``) and the upstream
    gradient ``dC``, each intermediate kept (`retain_grad`), dC back-propagated. Returns key
    -> tensor, keyed like `ExplicitGradients.evaluate` (``dA``, ``dOmega_2``, ``dW_q`` …)."""
    from .evaluate import torch_values

    upstream = given.pop(g.upstream)
    leaves = {k: v.detach().clone().requires_grad_() for k, v in given.items() if v is not None}
    values = torch_values(g.forward, leaves)
    for tensor in values.values():
        if not tensor.is_leaf:
            tensor.retain_grad()
    values[g.forward.graph.output].backward(upstream)
    return {"d" + key: tensor.grad for key, tensor in values.items() if tensor.grad is not None}


def gradients_only(values: Values) -> Values:
    """The gradient entries of a `Values` (keys starting with ``d``), without the forward."""
    kept = {key: matrix for key, matrix in values.matrices.items() if key.startswith("d")}
    return Values(kept, values.heads, values.digits)


def check_gradients_against_torch(
    name: str = ROOT,
    n: int = 3,
    d: int = 4,
    c: int = 2,
    *,
    seed: int = 0,
    digits: int = 30,
    **sizes: Any,
) -> list[Comparison]:
    """Derive the variant's gradients at (n, d, c) and its own sizes, evaluate them and autograd
    on the same seeded dyadic float64 inputs (`gradient_inputs`), and compare every gradient
    (see `compare`)."""
    from ..explicit.named import explicit_gradients

    g = explicit_gradients(name, n, d, c, **sizes)
    inputs = gradient_inputs(g, seed=seed)
    values = g.evaluate(**inputs, digits=digits)
    return compare(gradients_only(values), torch_gradient_steps(g, **inputs))
