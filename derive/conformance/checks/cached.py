"""Tokens given in turn with a cache: a causal module run on the first tokens with its cache
empty, then on the next ones with what it cached, then on the last one alone (a token generated
on its own), must give the derivation's rows.

Generation computes each new token's row against the keys and values kept from the tokens
before it; nothing in the derivation changes (causal attention's row m reads rows p ≤ m only),
so the calls' outputs side by side are compared with C of all n tokens, entry by entry, within
the forward's tolerance. What goes wrong here and nowhere else is named: ``rope-offset``, the
positions of each call's tokens counted from 0 again (`derive.graph.port_mistakes`).

An adapter says how its modules use a cache by its ``decode``: ``decode(module, x, parts)``
runs the module on ``x[..., part, :]`` for each slice in `parts` in turn, its cache carried
from one call to the next, and returns the outputs joined along the tokens (batch, n, c_out);
None (or a sentence saying why) where the module keeps no cache it can use. The built-in ones:

- `with_use_cache` (this package's `MultiHeadAttention` and `MultiHeadLatentAttention`, the
  book's KV-cache classes of ch. 4): ``reset_cache()``, then ``forward(x_part,
  use_cache=True)`` for each part;
- `with_start_pos` (the book's KV-cache Llama 3 and Qwen 3 layers, ``forward(x, mask, cos,
  sin, start_pos=0, cache=None)`` returning the output and the cache): each part with
  ``start_pos`` its first token, the cache the call before returned, and its rows of the
  causal mask.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from typing import Any

import torch

from ...graph.forms import reference
from ...graph.registry import declared
from ...graph.twins import Given
from ..evaluate.formulas import composed
from ..read.harness import _first_tensor
from ..read.target import ConformError
from ..report import Check

__all__ = ["after_a_cache", "with_use_cache", "with_start_pos", "rope_tables"]

_NAME = "after a cache"
_WHAT = "tokens given in turn with a cache: C equals the derivation's rows"


def with_use_cache(module: Any, x: Any, parts: tuple[slice, ...]) -> Any:
    """``reset_cache()``, then ``module(x[..., part, :], use_cache=True)`` for each part; None
    where the module keeps no such cache."""
    takes = inspect.signature(module.forward).parameters
    if "use_cache" not in takes or not hasattr(module, "reset_cache"):
        return None
    module.reset_cache()
    outs = [_first_tensor(module(x[..., part, :], use_cache=True)) for part in parts]
    module.reset_cache()
    return torch.cat(outs, dim=-2)


def with_start_pos(
    module: Any, x: Any, parts: tuple[slice, ...], variant: str = "", values: Any = None
) -> Any:
    """The book's KV-cache layers: ``(out, cache) = module(x[part], mask[part, :end], cos, sin,
    start_pos=part.start, cache=cache)`` for each part, the cache of one call given to the
    next; None where ``forward`` takes no ``start_pos`` and ``cache``, or returns no cache."""
    takes = inspect.signature(module.forward).parameters
    if "start_pos" not in takes or "cache" not in takes:
        return None
    n = x.shape[-2]
    blocked = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
    tables, cache, outs = rope_tables(module, x, variant, values), None, []
    for part in parts:
        given = blocked[part, : part.stop]
        found = module(x[..., part, :], given, *tables, start_pos=part.start, cache=cache)
        if not (isinstance(found, tuple) and len(found) == 2):  # no cache returned: none kept
            return None
        out, cache = found
        outs.append(_first_tensor(out))
    return torch.cat(outs, dim=-2)


def rope_tables(module: Any, x: Any, variant: str, values: Any) -> tuple:
    """(cos, sin) of β for n tokens where the variant has RoPE, the book's tables (of width c_r
    with partial RoPE: the module rotates as many features as its tables are wide; at Llama
    3.1's frequencies with llama3-rope, YaRN's with yarn-rope; how it pairs the features is
    the module's); ()
    otherwise."""
    if "rope" not in variant.split("+"):
        return ()
    from attention.rope import compute_rope_params

    parts, values = variant.split("+"), values or {}
    beta, rotated = values.get("beta", 10_000), values.get("c_r", module.head_dim)
    smoothing = None
    for part in parts:  # a scaling's freq_config (Llama 3.1's, YaRN's), as its twins get it
        told = dict(declared(part).options).get("freq_config")
        if isinstance(told, tuple):  # ((key, symbol), ...)
            smoothing = {
                key: v.value if isinstance(v, Given) else float(values[str(v)]) for key, v in told
            }
    cos, sin = compute_rope_params(
        rotated, theta_base=beta, context_length=x.shape[-2], freq_config=smoothing, dtype=x.dtype
    )
    return cos.to(x.device), sin.to(x.device)


def _parts(n: int) -> tuple[slice, ...]:
    """The calls: the first ⌊n/2⌋ tokens, then the others but the last, then the last alone (a
    token generated on its own: the path of generation)."""
    start = max(1, n // 2)
    cuts = (0, start, n - 1, n) if n - 1 > start else (0, start, n)
    return tuple(slice(a, b) for a, b in zip(cuts, cuts[1:], strict=False))


def _decoded(run: Any, parts: tuple[slice, ...]) -> Any:
    """The adapter's cached calls on conform's own copy of the module (its cache starts empty
    and is thrown away), in the module's dtype: float64 on the CPU, or why there is none."""
    h = run.h
    decode = h.adapter.decode
    told = h.told(decode)
    module = copy.deepcopy(h.module)
    x = run.x.to(h.dtype).to(h.device)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = decode(module, x, parts, **told)
    return out if out is None or isinstance(out, str) else out.detach().double().cpu()


def after_a_cache(run: Any, form: Any, graph: Any) -> Check:
    """The check's row: n/a where the adapter has no cached call or the module keeps no cache;
    else C of the calls against causal attention's (generation is causal: a layer given its
    mask by its model, as the book's are, is given the causal one here)."""
    formula = composed(graph)
    adapter, name = run.h.adapter, type(run.h.module).__name__
    if adapter.decode is None:
        return run.missing(
            _NAME, _WHAT, formula, f"adapter {adapter.name} gives no cached call (decode=)"
        )
    parts = _parts(run.n)
    try:
        got = _decoded(run, parts)
    except ConformError as error:  # the adapter cannot run it so
        return run.missing(_NAME, _WHAT, formula, str(error))
    except Exception as error:  # noqa: BLE001 - the target's own failure
        failed = run.missing(_NAME, _WHAT, formula, "the module fails where it uses its cache")
        note = f"the cached call failed: {type(error).__name__}: {error}"
        return dataclasses.replace(failed, status="FAIL", note=note)
    if got is None or isinstance(got, str):
        why = got or f"{name} keeps no cache that adapter {adapter.name} uses"
        return run.missing(_NAME, _WHAT, formula, why)
    starts = tuple(part.start for part in parts[1:])
    generating = dataclasses.replace(form, causal=True, cached=starts)
    scenario = run.scenario(_NAME, generating, run.x, got)
    return run.value_row(_NAME, _WHAT, composed(reference(generating)), scenario)
