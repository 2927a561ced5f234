"""What the module classes share: the attributes of a multi-head module (`MultiHeadModule`),
the constructors' prologue (checks, then the layers of multi-head attention in the book's
order), the one call of every forward into the layer (`forward_layer`), the dropout rate a
forward uses, the context-length check, the output projection's W_o."""

import dataclasses
import typing
from typing import Literal, overload

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from .. import _core, _modify
from .. import mods as M
from .._arguments import (
    check_alibi,
    check_cap,
    check_flag,
    check_heads,
    check_per_head,
    check_positive,
    check_probability,
)
from .._layer import LayerWeights, attention_layer
from .._masks import given_masks
from .._shapes import ShapeError

__all__ = [
    "MultiHeadModule",
    "build_heads",
    "add_head_layers",
    "set_score_options",
    "layer_weights",
    "module_mods",
    "forward_layer",
    "dropout_rate",
    "within_context",
    "OutputProjection",
]


class MultiHeadModule(nn.Module):
    """The attributes every multi-head class has, set by `add_head_layers` and
    `set_score_options` (GroupedQueryAttention sets the layers itself), declared once for readers
    and type checkers; nothing of its own at run time."""

    d_out: int
    num_heads: int
    head_dim: int
    W_query: nn.Linear
    W_key: nn.Linear
    W_value: nn.Linear
    out_proj: nn.Linear
    gate: bool
    softcap: float | None
    alibi: bool
    query_pre_attn_scalar: float | None
    score_mods: tuple


def build_heads(
    module: MultiHeadModule,
    where: str,
    *,
    d_in: int,
    d_out: int,
    num_heads: int,
    dropout: float,
    qkv_bias: bool,
    d_kv: int | None = None,
    softcap: float | None = None,
    alibi: bool | Tensor = False,
    sinks: bool | Tensor = False,
    gate: bool = False,
    query_pre_attn_scalar: float | None = None,
    mods: tuple = (),
    **sizes: int,
) -> None:
    """The prologue of the book's multi-head constructors: every size (`sizes` too) a positive
    int, dropout a rate, qkv_bias a bool, num_heads dividing d_out; then the layers
    (`add_head_layers`, keys and values reading d_kv, d_in if None) and the score options
    (`set_score_options`)."""
    d_kv = d_in if d_kv is None else d_kv
    check_positive(
        where,
        d_in=d_in,
        **({"d_kv": d_kv} if d_kv != d_in else {}),
        d_out=d_out,
        **sizes,
        num_heads=num_heads,
    )
    check_probability(where, dropout=dropout)
    check_flag(where, qkv_bias=qkv_bias)
    check_heads(where, num_heads, d_out=d_out)
    check_cap(where, "softcap", softcap)
    check_alibi(where, alibi, num_heads)
    check_sinks(where, sinks, num_heads)
    nn.Module.__init__(module)
    add_head_layers(module, d_in, d_kv, d_out, num_heads, dropout, qkv_bias)
    set_score_options(
        module,
        where,
        softcap=softcap,
        alibi=alibi,
        sinks=sinks,
        gate=gate,
        query_pre_attn_scalar=query_pre_attn_scalar,
        mods=mods,
    )


def check_sinks(where: str, sinks: object, heads: int) -> None:
    """A module's `sinks`: a bool, or a tensor of h initial logits."""
    if not isinstance(sinks, bool):
        check_per_head(where, "sinks", sinks, heads, "sink")


def set_score_options(
    module: MultiHeadModule,
    where: str,
    *,
    softcap: float | None = None,
    alibi: bool | Tensor = False,
    sinks: bool | Tensor = False,
    gate: bool = False,
    query_pre_attn_scalar: float | None = None,
    mods: tuple = (),
) -> None:
    """The modifications of the scores a module was built with, checked, kept as
    `module.score_mods` (`attention.mods`; every forward reads them, `module_mods`) and each
    as an attribute of its own (`module.softcap`, as Hugging Face's configurations name it;
    `module.alibi`). Slopes given to ALiBi are a buffer, `alibi_slopes` (not in the
    state_dict: the constructor makes them).
    With `sinks`, the parameter `sinks` (h,), as GPT-OSS names it and initialises it, from
    N(0, 0.02²) (its `initializer_range`), or the logits given; created after every other
    parameter, so that the book's seeds give the book's weights. With `gate`, W_query is made
    again twice as wide (`add_gate`). query_pre_attn_scalar: the query scale
    1/√query_pre_attn_scalar in place of 1/√head_dim (Gemma 2 and 3), kept as an attribute of
    that name."""
    check_cap(where, "softcap", softcap)
    check_cap(where, "query_pre_attn_scalar", query_pre_attn_scalar)
    check_alibi(where, alibi, module.num_heads)
    check_sinks(where, sinks, module.num_heads)
    check_flag(where, gate=gate)
    if gate:
        add_gate(module)
    module.gate = gate
    if isinstance(sinks, Tensor):
        module.sinks = nn.Parameter(sinks.detach().clone())
    elif sinks:
        module.sinks = nn.Parameter(torch.empty(module.num_heads))
        nn.init.normal_(module.sinks, mean=0.0, std=0.02)
    module.softcap = softcap
    module.alibi = alibi is not False
    if isinstance(alibi, Tensor):
        buffer = typing.cast(str, M.ALiBi.buffer)  # where module_mods reads the slopes
        module.register_buffer(buffer, alibi.detach().clone(), persistent=False)
    module.query_pre_attn_scalar = query_pre_attn_scalar
    built = M.modifications(
        softcap=softcap, alibi=alibi is not False, query_pre_attn_scalar=query_pre_attn_scalar
    )  # the tensors (the slopes given, the sinks) are read at each call: `module_mods`
    mods = _modify.check(where, mods, module.num_heads)
    for i, mod in enumerate(mods):
        if mod.of_the_call:
            raise ValueError(
                f"{where}: mods[{i}] ({type(mod).__name__}) is the call's mask, not the "
                f"module's: the forward's mask says it (and `sliding_window=` where the class "
                f"takes one)"
            )
        if mod.parameter is not None and getattr(mod, mod.parameter) is not None:
            raise ValueError(
                f"{where}: mods[{i}] ({type(mod).__name__}) carries a tensor; a module's tensors "
                f"are its parameters and buffers: give them by keyword (alibi=, sinks=)"
            )
    module.score_mods = _modify.check(where, (*built, *mods), module.num_heads)


def add_gate(module: MultiHeadModule) -> None:
    """The output gate in Qwen 3.5's layout: `W_query` (an nn.Linear) replaced by one twice as
    wide, each head's 2·head_dim outputs its queries then its gate's logits (`_layer.split_gate`).
    The merged heads are multiplied by σ(logits) before `out_proj`."""
    old = module.W_query
    module.W_query = nn.Linear(
        old.in_features,
        2 * old.out_features,
        bias=old.bias is not None,
        dtype=old.weight.dtype,
        device=old.weight.device,
    )


def add_head_layers(
    module: MultiHeadModule,
    d_in: int,
    d_kv: int,
    d_out: int,
    num_heads: int,
    dropout: float,
    qkv_bias: bool,
) -> None:
    """The layers of the book's `MultiHeadAttention`, created in its order (the same seed gives
    the same weights): W_query (d_in), W_key and W_value (d_kv), out_proj, dropout."""
    module.d_out = d_out
    module.num_heads = num_heads
    module.head_dim = d_out // num_heads
    module.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
    module.W_key = nn.Linear(d_kv, d_out, bias=qkv_bias)
    module.W_value = nn.Linear(d_kv, d_out, bias=qkv_bias)
    module.out_proj = nn.Linear(d_out, d_out)
    module.dropout = nn.Dropout(dropout)


def _transposed(linear: nn.Module | None, part: str) -> Tensor | None:
    """An `nn.Linear`'s weight in the book's orientation (d × c), or its bias."""
    if linear is None:
        return None
    tensor = linear._parameters[part] if part in linear._parameters else getattr(linear, part)
    return tensor.mT if tensor is not None and part == "weight" else tensor


def _per_head(norm: nn.Module | None, module: nn.Module):
    """QK-norm as the layer applies it, to each head's (*batch, h, n, c_h): the norm itself, or
    one of the whole row (gains wider than a head: OLMo 3's) on the heads merged, then split."""
    gains = None if norm is None else typing.cast("Tensor | None", norm.scale)
    if norm is None or gains is None or gains.shape[-1] == getattr(module, "head_dim", None):
        return norm
    return lambda t: _core.split_heads(norm(_core.merge_heads(t)), t.shape[-3])


def layer_weights(module: nn.Module) -> LayerWeights:
    """A multi-head module's tensors for `attention`: W_query, W_key, W_value, out_proj (as
    d × c matrices, with their biases), and where it has them, QK-norm's `q_norm`, `k_norm`, the
    sinks σ (`sinks`) and the gate carried by W_query (`gate`)."""
    layers = module._modules
    linears = [layers.get(name) for name in ("W_query", "W_key", "W_value", "out_proj")]
    w_q, w_k, w_v, w_o = (_transposed(linear, "weight") for linear in linears)
    b_q, b_k, b_v, b_o = (_transposed(linear, "bias") for linear in linears)
    # W_query, W_key and W_value are there, each with a weight, in every multi-head module
    w_q, w_k, w_v = typing.cast("tuple[Tensor, Tensor, Tensor]", (w_q, w_k, w_v))
    return LayerWeights(
        w_q,
        w_k,
        w_v,
        w_o,
        b_q,
        b_k,
        b_v,
        b_o,
        gate_in_query=getattr(module, "gate", False),
        q_norm=_per_head(layers.get("q_norm"), module),
        k_norm=_per_head(layers.get("k_norm"), module),
    )


def module_mods(module: nn.Module, *masks: M.Modification) -> tuple:
    """The modifications of one call of a module: those it was built with (`score_mods`), its
    tensors read now (they follow `.to()` and training: ALiBi's given slopes, the buffer
    `alibi_slopes`; the parameter `sinks`), and the call's `masks`."""
    sinks = module._parameters.get("sinks")
    heads = typing.cast("int", module.num_heads)
    if sinks is not None and sinks.shape != (heads,):  # reassigned since it was built
        check_per_head(type(module).__name__, "sinks", sinks, heads, "sink")
    mods = [_with_buffer(module, mod, heads) for mod in getattr(module, "score_mods", ())]
    if sinks is not None:
        mods.append(M.Sinks(sinks))
    return M.ordered((*mods, *masks))


def _with_buffer(module: nn.Module, mod: M.Modification, heads: int) -> M.Modification:
    """`mod` with the tensor the module keeps for it now (`Modification.buffer`: ALiBi's given
    slopes), checked against the heads (it may have been reassigned since the module was
    built); `mod` itself where the module keeps none."""
    if mod.buffer is None or mod.parameter is None:
        return mod
    value = module._buffers.get(mod.buffer)
    if value is None:
        return mod
    if value.shape != (heads,):  # "slopes" -> one slope per head
        check_per_head(type(module).__name__, mod.buffer, value, heads, mod.parameter[:-1])
    return dataclasses.replace(mod, **{mod.parameter: value})


# What `forward_layer` returns follows `return_weights`: C alone, or (C, A).
@overload
def forward_layer(
    module: MultiHeadModule,
    x: Tensor,
    *,
    y: Tensor | None = ...,
    masks: tuple = ...,
    mask: Tensor | None = ...,
    key_padding_mask: Tensor | None = ...,
    return_weights: Literal[False] = ...,
    rope: tuple[Tensor, Tensor] | None = ...,
) -> Tensor: ...
@overload
def forward_layer(
    module: MultiHeadModule,
    x: Tensor,
    *,
    y: Tensor | None = ...,
    masks: tuple = ...,
    mask: Tensor | None = ...,
    key_padding_mask: Tensor | None = ...,
    return_weights: bool,
    rope: tuple[Tensor, Tensor] | None = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...
def forward_layer(
    module: MultiHeadModule,
    x: Tensor,
    *,
    y: Tensor | None = None,
    masks: tuple = (),
    mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    return_weights: bool = False,
    rope: tuple[Tensor, Tensor] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Every multi-head module's forward after its checks: `attention` with the module's
    weights, heads (`num_heads`, and `num_kv_groups` where it groups them), dropout rate and
    modifications (`module_mods`: its own and the call's `masks`)."""
    return attention_layer(
        x,
        layer_weights(module),
        heads=module.num_heads,
        groups=getattr(module, "num_kv_groups", None),
        y=y,
        mods=module_mods(module, *masks),
        allowed=given_masks(mask, key_padding_mask),
        dropout_p=dropout_rate(module),
        return_weights=return_weights,
        rope=rope,
    )


def dropout_rate(module: nn.Module) -> float:
    """The module's dropout rate in training mode, 0 in eval mode (and without dropout)."""
    dropout = getattr(module, "dropout", None)
    return dropout.p if dropout is not None and module.training else 0.0


def within_context(where: str, n: int, context_length: int, owner: str = "") -> None:
    """ShapeError unless n ≤ context_length."""
    if n > context_length:
        raise ShapeError(
            f"{where}: x has n={n} tokens but {owner}context_length={context_length}; "
            f"inputs may have at most context_length tokens"
        )


class OutputProjection:
    """W_o of a module whose heads are mixed by `out_proj` (an nn.Linear, which stores W_oᵀ)."""

    out_proj: nn.Linear

    @property
    def w_o(self) -> Float[Tensor, "c c_out"]:
        """W_o as the book's formulas write it (c×c_out): C = [heads] W_o + b_o."""
        return self.out_proj.weight.mT
