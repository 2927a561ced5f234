"""One attention layer: `attention`, the checked entry point that every multi-head function and
module of the package goes through, and `attention_layer`, the same layer unchecked.

The steps, in the order today's models take them (each optional but the first, the fourth and the
fifth): project X (and Y, for cross-attention) to Q, K, V (Q's projection may carry the output
gate, Qwen 3.5's layout); split into h query heads and g key/value groups; RMS-normalise each
head's queries and keys (QK-norm); rotate them by their positions (RoPE, all of a head's features
or the first ones only); attend (`_core.attend`: the one fast path or the explicit one, with
every modification of `attention.mods`); merge the heads; gate them, C ∘ σ(X W_g); project by
W_o.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

from jaxtyping import Bool, Float
from jaxtyping import config as jaxtyping_config
from torch import Tensor

from . import _core, _masks, _modify
from ._arguments import check_positive, check_probability
from ._checks import checked
from ._masks import silence_cross, silence_isolated
from ._shapes import OwnDtype, ShapeError
from .rope import check_tables, rotate

__all__ = ["LayerWeights", "attention", "attention_layer", "one_head", "split_gate"]


@dataclass(frozen=True, eq=False)
class LayerWeights:
    """A layer's tensors in the book's orientation (Q = X W_q, W_q of shape d × h·c_h; K = Y W_k
    with Y = X in self-attention, so d_y = d), checked against one another and against the call
    by `attention`. The modifications' tensors (ALiBi's slopes, the sinks) travel in their
    objects (`attention.mods`).

    Args:
        w_q: W_q, `(d, c_q)`: c_q = h·c_h, or 2h·c_h with `gate_in_query`.
        w_k: W_k, `(d_y, c_kv)` with c_kv = g·c_h.
        w_v: W_v, `(d_y, c_kv)`.
        w_o: W_o, `(c, c_out)` with c = h·c_h; None for no output projection (c_out = c).
        b_q: a bias of Q, `(c_q,)`; None for none.
        b_k: a bias of K, `(c_kv,)`; None for none.
        b_v: a bias of V, `(c_kv,)`; None for none.
        b_o: a bias of the output, `(c_out,)`; None for none.
        w_g: the output gate's own W_g, `(d, c)`: the merged heads multiplied by σ(X W_g + b_g)
            before W_o; None for none (not read with `gate_in_query`).
        b_g: the gate's bias, `(c,)`, with w_g only (refused without it, or with
            `gate_in_query`); None for none.
        gate_in_query: the gate in W_q: each head's 2c_h columns are its queries then its gate's
            (Qwen 3.5's `q_proj`).
        q_norm: QK-norm of each head's queries, a callable over the last axis (c_h); None for
            none.
        k_norm: the same of each group's keys; None for none.
    """

    w_q: Float[Tensor, "d c_q"]
    w_k: Float[Tensor, "d_y c_kv"]
    w_v: Float[Tensor, "d_y c_kv"]
    w_o: Float[Tensor, "c c_out"] | None = None
    b_q: Float[Tensor, " c_q"] | None = None
    b_k: Float[Tensor, " c_kv"] | None = None
    b_v: Float[Tensor, " c_kv"] | None = None
    b_o: Float[Tensor, " c_out"] | None = None
    w_g: Float[Tensor, "d c"] | None = None
    b_g: Float[Tensor, " c"] | None = None
    gate_in_query: bool = False
    q_norm: Callable[[Tensor], Tensor] | None = None
    k_norm: Callable[[Tensor], Tensor] | None = None


def scaling_width(weights: LayerWeights, heads: int) -> int:
    """The c of the 1/√c scaling: one head's width, c_h = (the columns of W_q) / h (half of
    them with the gate in W_q)."""
    per_head = weights.w_q.shape[-1] // heads
    return per_head // 2 if weights.gate_in_query else per_head


def one_head(result: Tensor | tuple[Tensor, Tensor]) -> Tensor | tuple[Tensor, Tensor]:
    """`attention_layer`'s result for a single-head function or module: C, or (C, A) with one
    head's A (*batch, 1, n, s) as (*batch, n, s)."""
    if isinstance(result, tuple):
        return result[0], result[1].squeeze(-3)
    return result


def split_gate(projected: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Qwen 3.5's `q_proj` output (*batch, n, 2h·c_h) -> (Q (*batch, n, h·c_h), the gate's
    input (*batch, n, h·c_h)): each head's first c_h columns are its query, the next its gate."""
    *lead, n, total = projected.shape
    per_head = projected.view(*lead, n, heads, 2, total // (2 * heads))  # -> (…, n, h, 2, c_h)
    return per_head[..., 0, :].flatten(-2), per_head[..., 1, :].flatten(-2)


@checked
def attention(
    x: Float[Tensor, "*batch n d"],
    weights: LayerWeights,
    *,
    heads: int = 1,
    groups: int | None = None,
    mods: tuple = (),
    mask: Bool[Tensor, "*#batch n s"] | None = None,
    key_padding_mask: Bool[Tensor, "*#batch s"] | None = None,
    y: Float[Tensor, "*batch s d_y"] | None = None,
    rope: tuple[OwnDtype[Float[Tensor, "n_ctx c_r"]], OwnDtype[Float[Tensor, "n_ctx c_r"]]]
    | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> (
    Float[Tensor, "*batch n c_out"]
    | tuple[Float[Tensor, "*batch n c_out"], Float[Tensor, "*batch h n s"]]
):
    """One attention layer, every variant of this package: the entry point that
    `self_attention`, `multi_head_attention`, `grouped_query_attention` and the modules call.

    $$C = \\big[A_1 V_{\\gamma(1)} \\,|\\, \\cdots \\,|\\, A_h V_{\\gamma(h)}\\big] W_o,
      \\qquad A_\\ell = \\operatorname{softmax}\\!\\big(\\mu(Q_\\ell K_{\\gamma(\\ell)}^\\top
      / \\sqrt{c_h})\\big)$$

    with μ the modifications `mods` (`attention.mods`: `Causal`, `Window`, `Chunked`,
    `Temperature`, `Softcap`, `ALiBi`, `Sinks`, `QueryScale`, or a researcher's own
    `Modification`), and γ(ℓ) the key/value group head ℓ reads.

    Args:
        x: the input X, `(*batch, n, d)`.
        weights: the layer's tensors (`LayerWeights`: W_q `(d, h·c_h)`, W_k and W_v
            `(d_y, g·c_h)`, optional W_o, biases, the output gate and QK-norm).
        heads: h, the number of query heads.
        groups: g, the key/value groups, a divisor of h; None for g = h (multi-head
            attention), 1 for multi-query attention.
        mods: the modifications μ, as objects (`attention.mods`), at most one of each kind.
        mask: True where query m may attend key p, `(*batch, n, s)` (its batch broadcasts
            against x's), shared by the heads; None for none.
        key_padding_mask: True where key p exists, `(*batch, s)`; None for none.
        y: the keys' sequence Y of cross-attention, `(*batch, s, d_y)`; None for
            self-attention (s = n, d_y = d).
        rope: the tables (cos, sin) of `rope.compute_rope_params`, `(n_ctx, c_r)` each with
            n_ctx ≥ n and c_r ≤ c_h even (c_r < c_h rotates each head's first c_r features),
            in any float dtype; positions 0 … n − 1. None for no RoPE.
        dropout_p: dropout on A after the softmax, applied whenever > 0.
        return_weights: return the heads' A with C.

    Returns:
        The output C, `(*batch, n, c_out)` (c_out = h·c_h without W_o); with
            `return_weights=True`, the pair (C, A), A `(*batch, h, n, s)` after dropout.

    Raises:
        ValueError: when heads or groups is not a positive integer, dropout_p is not in
            [0, 1), a kind of modification is given twice in mods, or weights.b_g comes
            without weights.w_g (or with `gate_in_query`).
        TypeError: when an argument is not of its annotated type (weights not a
            `LayerWeights`, mods not a tuple, a flag not a bool), or a mod is not a
            `Modification`.
        ShapeError: when h is not divisible by g, W_q's columns by h (by 2h with
            `gate_in_query`), W_k's columns are not g·c_h, W_o's rows, W_g's or b_g's columns
            are not h·c_h, in self-attention W_k's rows are not d or a mask's keys not n,
            rope's tables have fewer than n rows or an odd number of columns or more than
            c_h, a mod's tensor does not have h entries, or the tensors' shapes otherwise
            disagree.
        DtypeError: when x, y or a weight is not float or not x's dtype (rope's tables may
            keep their own), or a mask is not bool.
        DeviceError: when a tensor is not on x's device.

    >>> import torch
    >>> from attention import mods
    >>> from attention.functional import LayerWeights, attention
    >>> W_q, W_kv, W_o = torch.rand(8, 16), torch.rand(8, 8), torch.rand(16, 8)
    >>> layer = LayerWeights(W_q, W_kv, W_kv, W_o)
    >>> attention(torch.rand(5, 8), layer, heads=4, groups=2, mods=(mods.Causal(),)).shape
    torch.Size([5, 8])
    """
    where = "attention"
    groups = heads if groups is None else groups
    check_positive(where, heads=heads, groups=groups)
    check_probability(where, dropout_p=dropout_p)
    if not jaxtyping_config.jaxtyping_disable:  # the shapes' checks, which that switches off
        _check_layer(where, x, weights, heads, groups, y, mask, key_padding_mask, rope)
    mods = _modify.check(where, mods, heads)
    return attention_layer(
        x,
        weights,
        heads=heads,
        groups=groups,
        y=y,
        mods=mods,
        allowed=_masks.given_masks(mask, key_padding_mask),
        dropout_p=dropout_p,
        return_weights=return_weights,
        rope=rope,
    )


def _check_layer(
    where: str,
    x: Tensor,
    weights: LayerWeights,
    heads: int,
    groups: int,
    y: Tensor | None,
    mask: Tensor | None,
    key_padding_mask: Tensor | None,
    rope: tuple[Tensor, Tensor] | None,
) -> None:
    """What the letters of `attention`'s annotations cannot say: the heads' widths, the gate's
    layout, self-attention's d_y = d and s = n, and RoPE's tables. ShapeError naming both
    sizes."""
    c_q, c_kv = weights.w_q.shape[-1], weights.w_k.shape[-1]
    if c_q % (2 * heads if weights.gate_in_query else heads):
        per_head = (
            "2 · heads (each head's query, then its gate)" if weights.gate_in_query else "heads"
        )
        raise ShapeError(
            f"{where}: weights.w_q has {c_q} columns, not divisible by {per_head}, heads={heads}"
        )
    if heads % groups:
        raise ShapeError(f"{where}: heads={heads} is not divisible by groups={groups}")
    width = scaling_width(weights, heads)  # c_h
    c = heads * width
    if c_kv != groups * width:
        raise ShapeError(
            f"{where}: weights.w_k has c_kv={c_kv} columns but groups · c_h = {groups} · {width}"
            f" = {groups * width} (c_h = {c} / heads = {width})"
        )
    if weights.w_o is not None and weights.w_o.shape[0] != c:
        raise ShapeError(
            f"{where}: weights.w_o has {weights.w_o.shape[0]} rows but the heads give c = "
            f"heads · c_h = {c}"
        )
    if weights.b_g is not None and (weights.w_g is None or weights.gate_in_query):
        raise ValueError(  # it would be read by nothing: a bias with no gate of its own
            f"{where}: weights.b_g is given but "
            + ("the gate is in w_q (gate_in_query)" if weights.gate_in_query else "w_g is None")
            + "; b_g is the bias of w_g's gate"
        )
    for name in ("w_g", "b_g"):
        tensor = getattr(weights, name)
        if tensor is not None and tensor.shape[-1] != c:
            raise ShapeError(
                f"{where}: weights.{name} has {tensor.shape[-1]} columns, expected c = {c}"
            )
    d, n = x.shape[-1], x.shape[-2]
    if y is None:
        if weights.w_k.shape[0] != d:
            raise ShapeError(
                f"{where}: weights.w_k has d_y={weights.w_k.shape[0]} rows but x has d={d}: "
                f"in self-attention the keys are read from x (give y for cross-attention)"
            )
        for name, given in (("mask", mask), ("key_padding_mask", key_padding_mask)):
            if given is not None and given.shape[-1] != n:
                raise ShapeError(
                    f"{where}: {name} has s={given.shape[-1]} keys but x has n={n} tokens "
                    f"(self-attention: s = n)"
                )
    if rope is not None:
        table = rope[0]
        check_tables(where, "rope's tables", table.shape[-1], table.shape[0], ("c_h", width), n)


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
    else:
        x, y = silence_cross(x, y, allowed)
    q, k, v, gate = project_heads(x, weights, heads=heads, groups=groups, y=y)
    q, k = normalise_and_rotate(q, k, weights, rope)
    result = _core.attend(
        q,
        k,
        v,
        scale=_core.scale(_modify.scaled_width(mods, scaling_width(weights, heads))),
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
