"""The tokens after a cache: a causal module run on the first s tokens with its cache empty,
then on the others with what it cached, must give the derivation's rows s + 1 … n.

Generation computes each new token's row against the keys and values kept from the tokens
before it; nothing in the derivation changes (causal attention's row m reads rows p ≤ m only),
so the two calls side by side are compared with C of all n tokens, entry by entry, within the
forward's tolerance. What goes wrong here and nowhere else is named: ``rope-offset``, the
positions of the new tokens counted from 0 again instead of from s (`derive.graph.port_mistakes`).

An adapter says how its modules use a cache by its ``decode``: ``decode(module, x, start)``
returns the two outputs side by side (batch, n, c_out), or None where the module keeps no
cache. The built-in ones:

- `with_use_cache` (this package's `MultiHeadAttention` and `MultiHeadLatentAttention`, the
  book's KV-cache classes of ch. 4): ``reset_cache()``, then ``forward(x, use_cache=True)``
  on each part;
- `with_start_pos` (the book's KV-cache Llama 3 and Qwen 3 layers, ``forward(x, mask, cos,
  sin, start_pos=0, cache=None)`` returning the output and the cache): the part after the cache
  given ``start_pos=s``, the cache the first call returned, its causal mask's rows s + 1 … n.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from typing import Any

from ...graph.forms import reference
from .formulas import composed
from .harness import _first_tensor
from .report import Check

__all__ = ["after_a_cache", "with_use_cache", "with_start_pos", "rope_tables"]

_NAME = "after a cache"
_WHAT = "the tokens after a cache (s of n): C equals the derivation's rows s + 1 … n"


def with_use_cache(module: Any, x: Any, start: int) -> Any:
    """``reset_cache()``, then ``module(x[..., :s, :], use_cache=True)`` and the rest likewise;
    None where the module keeps no such cache."""
    import torch

    takes = inspect.signature(module.forward).parameters
    if "use_cache" not in takes or not hasattr(module, "reset_cache"):
        return None
    module.reset_cache()
    parts = [_first_tensor(module(part, use_cache=True)) for part in _parts(x, start)]
    module.reset_cache()
    return torch.cat(parts, dim=-2)


def with_start_pos(module: Any, x: Any, start: int, variant: str = "", values: Any = None) -> Any:
    """The book's KV-cache layers: ``(out, cache) = module(x_1…s, mask, cos, sin, start_pos=0)``
    then ``module(x_s+1…n, mask rows s + 1 … n, cos, sin, start_pos=s, cache=cache)``; None
    where ``forward`` takes no ``start_pos`` and ``cache``, or returns no cache."""
    import torch

    takes = inspect.signature(module.forward).parameters
    if "start_pos" not in takes or "cache" not in takes:
        return None
    n = x.shape[-2]
    blocked = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
    tables = rope_tables(module, x, variant, values)
    first = module(x[..., :start, :], blocked[:start, :start], *tables, start_pos=0)
    if not (isinstance(first, tuple) and len(first) == 2):  # no cache returned: none kept
        return None
    first, cache = first
    rest = module(x[..., start:, :], blocked[start:], *tables, start_pos=start, cache=cache)
    return torch.cat([_first_tensor(first), _first_tensor(rest)], dim=-2)


def rope_tables(module: Any, x: Any, variant: str, values: Any) -> tuple:
    """(cos, sin) of β for n tokens where the variant has RoPE (of width c_r with partial
    RoPE: the module rotates as many features as its tables are wide); () otherwise."""
    if "rope" not in variant.split("+"):
        return ()
    from attention.rope import compute_rope_params

    beta, rotated = (values or {}).get("beta", 10_000), (values or {}).get("c_r", module.head_dim)
    cos, sin = compute_rope_params(rotated, theta_base=beta, context_length=x.shape[-2],
                                   dtype=x.dtype)  # fmt: skip
    return cos.to(x.device), sin.to(x.device)


def _parts(x: Any, start: int) -> tuple[Any, Any]:
    return x[..., :start, :], x[..., start:, :]


def _decoded(run: Any, start: int) -> Any:
    """The adapter's cached call on conform's own copy of the module (its cache starts empty
    and is thrown away), in the module's dtype; float64 on the CPU, or None."""
    import torch

    h = run.h
    decode = h.adapter.decode
    wants = inspect.signature(decode).parameters
    told = {"variant": h.variant, "values": dict(h.values)}
    told = {key: value for key, value in told.items() if key in wants}
    module = copy.deepcopy(h.module)
    x = run.x.to(h.dtype).to(h.device)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = decode(module, x, start, **told)
    return None if out is None else out.detach().double().cpu()


def after_a_cache(run: Any, form: Any, graph: Any) -> Check:
    """The check's row: n/a where the adapter has no cached call or the module keeps no cache;
    else C of the two calls against causal attention's (generation is causal: a layer given
    its mask by its model, as the book's are, is given the causal one here)."""
    formula = composed(graph)
    adapter = run.h.adapter
    if adapter.decode is None:
        return run.missing(_NAME, _WHAT, formula, f"adapter {adapter.name} gives no cached "
                           "call (decode=)")  # fmt: skip
    start = max(1, run.n // 2)
    try:
        got = _decoded(run, start)
    except Exception as error:  # noqa: BLE001 - the target's own failure
        failed = run.missing(_NAME, _WHAT, formula, "the module fails where it uses its cache")
        note = f"the cached call failed: {type(error).__name__}: {error}"
        return dataclasses.replace(failed, status="FAIL", note=note)
    if got is None:
        why = f"{type(run.h.module).__name__} keeps no cache that adapter {adapter.name} uses"
        return run.missing(_NAME, _WHAT, formula, why + " (or is not causal)")
    generating = dataclasses.replace(form, causal=True, cached=start)
    scenario = run.scenario(_NAME, generating, run.x, got)
    return run.value_row(_NAME, _WHAT, composed(reference(generating)), scenario)
