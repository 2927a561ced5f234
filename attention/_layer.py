"""One attention layer, unchecked: every multi-head function and module of the package goes
through `attention_layer`, called with keywords only, after its own checks.

The steps, in the order today's models take them (each optional but the first, the fourth and the
fifth): project X (and Y, for cross-attention) to Q, K, V (Q's projection may carry the output
gate, Qwen 3.5's layout); split into h query heads and g key/value groups; RMS-normalise each
head's queries and keys (QK-norm); rotate them by their positions (RoPE, all of a head's features
or the first ones only); attend (`_core.attend`: the one fast path or the explicit one, with
softcapping, ALiBi and sinks); merge the heads; gate them, C ∘ σ(X W_g); project by W_o.
"""

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

import torch
from torch import Tensor

from . import _core
from ._masks import silence_isolated
from .rope import rotate

__all__ = [
    "LayerWeights",
    "ScoreOptions",
    "alibi_slopes",
    "slopes_of",
    "attention_layer",
    "split_gate",
]


@dataclass(frozen=True, eq=False)
class LayerWeights:
    """A layer's tensors in the book's orientation (Q = X W_q, W_q of shape d × h·c_h).

    w_g: the gate's own W_g (d × h·c_h), or None; with `gate_in_query`, W_q is d × 2h·c_h and
    each head's 2c_h columns are its queries then its gate (Qwen 3.5's `q_proj`). q_norm, k_norm:
    QK-norm, callables over the last axis (c_h). sinks: σ (h,). slopes: ALiBi's μ (h,), given
    (`ScoreOptions.alibi` asks for the default ones).
    """

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    w_o: Tensor | None = None
    b_q: Tensor | None = None
    b_k: Tensor | None = None
    b_v: Tensor | None = None
    b_o: Tensor | None = None
    w_g: Tensor | None = None
    b_g: Tensor | None = None
    gate_in_query: bool = False
    q_norm: Callable[[Tensor], Tensor] | None = None
    k_norm: Callable[[Tensor], Tensor] | None = None
    sinks: Tensor | None = None
    slopes: Tensor | None = None


@dataclass(frozen=True)
class ScoreOptions:
    """The modifications of the scores that are not tensors: ALiBi (slopes from the number of
    heads), softcapping's cap, and the query scale 1/√query_pre_attn_scalar in place of 1/√c_h
    (Gemma 2 and 3)."""

    alibi: bool = False
    softcap: float | None = None
    query_pre_attn_scalar: float | None = None

    def scale(self, width: int) -> float:
        """The factor of q·k: 1/√c_h, or 1/√query_pre_attn_scalar."""
        if self.query_pre_attn_scalar is None:
            return _core.scale(width)
        return 1.0 / math.sqrt(self.query_pre_attn_scalar)


NO_OPTIONS = ScoreOptions()


@functools.cache
def _slopes(heads: int) -> tuple[float, ...]:
    """Press et al.'s geometric sequence: for h a power of 2, μ_ℓ = 2^(−8ℓ/h), ℓ = 1 … h; for
    other h, the sequence of the power of 2 below h, then every other slope of the sequence for
    twice that power, as many as are missing (BLOOM's `_get_alibi_slopes`, restated)."""
    below = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * i / below) for i in range(1, below + 1)]
    extra = [2.0 ** (-8.0 * i / (2 * below)) for i in range(1, 2 * below + 1, 2)]
    return tuple(slopes + extra[: heads - below])


def alibi_slopes(heads: int, *, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """ALiBi's default slopes μ (h,) (Press, Smith and Lewis, *Train Short, Test Long*, 2022)."""
    return torch.tensor(_slopes(heads), dtype=dtype, device=device)


def slopes_of(weights: LayerWeights, options: ScoreOptions, heads: int, like: Tensor):
    """The slopes ALiBi adds with: the given ones, else the default ones where `options.alibi`
    asks for them (in `like`'s dtype and device), else None."""
    if weights.slopes is not None:
        return weights.slopes
    return alibi_slopes(heads, dtype=like.dtype, device=like.device) if options.alibi else None


def split_gate(projected: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Qwen 3.5's `q_proj` output (*batch, n, 2h·c_h) -> (Q (*batch, n, h·c_h), the gate's
    input (*batch, n, h·c_h)): each head's first c_h columns are its query, the next its gate."""
    *lead, n, total = projected.shape
    per_head = projected.view(*lead, n, heads, 2, total // (2 * heads))  # -> (…, n, h, 2, c_h)
    return per_head[..., 0, :].flatten(-2), per_head[..., 1, :].flatten(-2)


# What `attention_layer` returns follows `return_weights`: C alone, or (C, A).
@overload
def attention_layer(
    x: Tensor,
    weights: LayerWeights,
    *,
    heads: int,
    groups: int | None = ...,
    y: Tensor | None = ...,
    causal: bool = ...,
    window: int | None = ...,
    allowed: Tensor | None = ...,
    dropout_p: float = ...,
    return_weights: Literal[False] = ...,
    options: ScoreOptions = ...,
    rope: tuple[Tensor, Tensor] | None = ...,
) -> Tensor: ...
@overload
def attention_layer(
    x: Tensor,
    weights: LayerWeights,
    *,
    heads: int,
    groups: int | None = ...,
    y: Tensor | None = ...,
    causal: bool = ...,
    window: int | None = ...,
    allowed: Tensor | None = ...,
    dropout_p: float = ...,
    return_weights: bool,
    options: ScoreOptions = ...,
    rope: tuple[Tensor, Tensor] | None = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...
def attention_layer(
    x: Tensor,
    weights: LayerWeights,
    *,
    heads: int,
    groups: int | None = None,
    y: Tensor | None = None,
    causal: bool = False,
    window: int | None = None,
    allowed: Tensor | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    options: ScoreOptions = NO_OPTIONS,
    rope: tuple[Tensor, Tensor] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """The layer of the module docstring: x (*batch, n, d) -> (*batch, n, c_out), or (C, A)
    with `return_weights` (A: (*batch, h, n, s)).

    heads: h; groups: g (None: h). y: the keys' sequence (*batch, s, d_y) of cross-attention
    (None: x). causal, window, allowed (`_masks.given_masks`), dropout_p: as `_core.attend`.
    rope: (cos, sin), (n_ctx, r) each with r ≤ c_h (r < c_h rotates the first r features only).
    """
    groups = heads if groups is None else groups
    if y is None:
        x = silence_isolated(x, causal, allowed, window)
    q, k, v, gate = project_heads(x, weights, heads=heads, groups=groups, y=y)
    q, k = normalise_and_rotate(q, k, weights, rope)
    width = q.shape[-1]
    result = _core.attend(
        q,
        k,
        v,
        scale=options.scale(width),
        heads=True,
        causal=causal,
        window=window,
        allowed=allowed,
        dropout_p=dropout_p,
        return_weights=return_weights,
        softcap=options.softcap,
        sinks=weights.sinks,
        slopes=slopes_of(weights, options, heads, q),
    )
    if isinstance(result, tuple):  # (C, A): return_weights
        per_head, a = result
        return finish(per_head, gate, weights), a
    return finish(result, gate, weights)


def project_heads(
    x: Tensor, weights: LayerWeights, *, heads: int, groups: int, y: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """(Q (*batch, h, n, c_h), K and V (*batch, g, s, c_h), the gate's input X W_g (*batch, n,
    h·c_h) or None)."""
    source = x if y is None else y
    q = _core.projection(x, weights.w_q, weights.b_q)
    gate = None
    if weights.gate_in_query:
        q, gate = split_gate(q, heads)
    elif weights.w_g is not None:
        gate = _core.projection(x, weights.w_g, weights.b_g)
    k = _core.projection(source, weights.w_k, weights.b_k)
    v = _core.projection(source, weights.w_v, weights.b_v)
    split = _core.split_heads
    return split(q, heads), split(k, groups), split(v, groups), gate


def normalise_and_rotate(
    q: Tensor,
    k: Tensor,
    weights: LayerWeights,
    rope: tuple[Tensor, Tensor] | None,
    offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """QK-norm of each head's queries and keys (the same tokens), then RoPE at their positions
    offset, offset + 1, …"""
    if weights.q_norm is not None:
        q = weights.q_norm(q)
    if weights.k_norm is not None:
        k = weights.k_norm(k)
    if rope is not None:
        q, k = rotate(q, *rope, offset), rotate(k, *rope, offset)
    return q, k


def finish(per_head: Tensor, gate: Tensor | None, weights: LayerWeights) -> Tensor:
    """Merge the heads (*batch, h, n, c_h) -> (*batch, n, h·c_h), gate them by σ(X W_g), project
    by W_o (+ b_o)."""
    out = _core.merge_heads(per_head)
    if gate is not None:
        out = _core.gated(out, gate)
    if weights.w_o is None:
        return out
    return _core.projection(out, weights.w_o, weights.b_o)
