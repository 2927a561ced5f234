"""One attention layer, unchecked: every multi-head function and module of the package goes
through `attention_layer`, called with keywords only, after its own checks.

The steps, in the order today's models take them (each optional but the first, the fourth and the
fifth): project X (and Y, for cross-attention) to Q, K, V (Q's projection may carry the output
gate, Qwen 3.5's layout); split into h query heads and g key/value groups; RMS-normalise each
head's queries and keys (QK-norm); rotate them by their positions (RoPE, all of a head's features
or the first ones only); attend (`_core.attend`: the one fast path or the explicit one, with
softcapping, ALiBi and sinks); merge the heads; gate them, C ∘ σ(X W_g); project by W_o.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

from torch import Tensor

from . import _core
from . import mods as M
from ._masks import silence_isolated
from .rope import rotate

__all__ = ["LayerWeights", "attention_layer", "split_gate"]


@dataclass(frozen=True, eq=False)
class LayerWeights:
    """A layer's tensors in the book's orientation (Q = X W_q, W_q of shape d × h·c_h).

    w_g: the gate's own W_g (d × h·c_h), or None; with `gate_in_query`, W_q is d × 2h·c_h and
    each head's 2c_h columns are its queries then its gate (Qwen 3.5's `q_proj`). q_norm, k_norm:
    QK-norm, callables over the last axis (c_h). The modifications' tensors (ALiBi's slopes, the
    sinks) travel in their objects (`attention.mods`).
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
    mods: tuple = ...,
    allowed: Tensor | None = ...,
    dropout_p: float = ...,
    return_weights: Literal[False] = ...,
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
    mods: tuple = ...,
    allowed: Tensor | None = ...,
    dropout_p: float = ...,
    return_weights: bool,
    rope: tuple[Tensor, Tensor] | None = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...
def attention_layer(
    x: Tensor,
    weights: LayerWeights,
    *,
    heads: int,
    groups: int | None = None,
    y: Tensor | None = None,
    mods: tuple = (),
    allowed: Tensor | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    rope: tuple[Tensor, Tensor] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """The layer of the module docstring: x (*batch, n, d) -> (*batch, n, c_out), or (C, A)
    with `return_weights` (A: (*batch, h, n, s)).

    heads: h; groups: g (None: h). y: the keys' sequence (*batch, s, d_y) of cross-attention
    (None: x). mods (`attention.mods`: the masks, the score modifications, the query scale),
    allowed (`_masks.given_masks`), dropout_p: as `_core.attend`.
    rope: (cos, sin), (n_ctx, r) each with r ≤ c_h (r < c_h rotates the first r features only).
    """
    groups = heads if groups is None else groups
    if y is None:
        x = silence_isolated(x, mods, allowed)
    q, k, v, gate = project_heads(x, weights, heads=heads, groups=groups, y=y)
    q, k = normalise_and_rotate(q, k, weights, rope)
    width = q.shape[-1]
    result = _core.attend(
        q,
        k,
        v,
        scale=M.scale_of(mods, width),
        heads=True,
        mods=mods,
        allowed=allowed,
        dropout_p=dropout_p,
        return_weights=return_weights,
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
