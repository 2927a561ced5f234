"""Modules made by `derive.torch_module`: their weights are the graph's inputs by letter, their
variant the entry they were generated from, so conform reads them with no adapter written."""

from __future__ import annotations

from typing import Any

import torch

from ...bridge.generated import GeneratedModule
from .adapters import Adapter, Weights

__all__ = ["GENERATED", "GENERATED_MASKED"]

#: The letters `Weights` holds by name; every other weight is one of its `inputs`.
_NAMED = ("W_q", "W_k", "W_v", "W_o")
#: The parts conform reads off the module's behaviour and widths, not off its variant.
_FOUND = ("self-attention", "multi-head", "causal", "gqa", "masked")


def _weights(module: Any) -> Weights:
    entry = module.function.entry
    own = dict(module.own)
    heads = {str(s.symbol): s.default for s in entry.sizes}.get("h", 1)
    heads = int(own.get("h", heads)) if entry.heads else 1
    parts = [v.name for v in entry.parts if v.name not in _FOUND]
    named = {x: getattr(module, x) for x in _NAMED if x in module.weights}
    return Weights(
        named.get("W_q"),
        named.get("W_k"),
        named.get("W_v"),
        named.get("W_o"),
        heads=heads,
        variant="+".join(parts),
        values={k: v for k, v in own.items() if k not in ("h", "g")},
        inputs={x: getattr(module, x) for x in module.weights if x not in _NAMED},
    )


def _masked_call(module: Any, x: Any, allowed: Any) -> Any:
    """A given mask M (0 where allowed, −∞ elsewhere), every key allowed when none is given."""
    n = x.shape[-2]
    if allowed is None:
        allowed = torch.ones(n, n, dtype=torch.bool, device=x.device)
    mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
    return module(x, mask.masked_fill(~allowed, float("-inf")))


GENERATED = Adapter(
    "generated",
    lambda module: isinstance(module, GeneratedModule) and module.data == ("X",),
    _weights,
    looks_for="a module of derive.torch_module",
)

GENERATED_MASKED = Adapter(
    "generated-masked",
    lambda module: isinstance(module, GeneratedModule) and module.data == ("X", "M"),
    _weights,
    call=_masked_call,
    mask="M",
    looks_for="a module of derive.torch_module taking a mask",
)
