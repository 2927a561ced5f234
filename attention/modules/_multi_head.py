"""The book's multi-head attention classes (section 3.6 of *Build a Large Language Model (from
Scratch)*), checked: the wrapper of `CausalAttention` heads, and `MultiHeadAttention`, which also
has the key-value cache of ch. 4's bonus material (`forward(x, use_cache=True)`,
`reset_cache()`). Faithful as the single-head classes are (same seeds, same numbers, the book's
state_dicts load).
"""

import typing
from collections.abc import Iterable

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from .. import mods as M
from .._arguments import check_flag, check_positive
from .._checks import checked_forward
from .._masks import KeyPaddingArg, MaskArg
from .._weights import BookWeights, heads_weights, multi_head_weights
from ._common import (
    MultiHeadModule,
    OutputProjection,
    build_heads,
    forward_layer,
    within_context,
)
from ._kv_cache import KVCache, refuse_masks_with_cache
from ._single_head import CausalAttention

__all__ = ["MultiHeadAttentionWrapper", "MultiHeadAttention"]


class MultiHeadAttentionWrapper(nn.Module):
    """The book's `MultiHeadAttentionWrapper`: `num_heads` independent `CausalAttention` heads,
    run one after the other and concatenated; output width num_heads · d_out.

    Its `forward` checks every head's weights itself, so an error names the wrapper and the head
    (`heads[2].W_query.weight has d=3 but x has d=4`), not the inner `CausalAttention`.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of each head's Q, K, V and output.
        context_length: the most tokens an input may have.
        dropout: the rate of dropout on each head's A in training mode, in [0, 1).
        num_heads: h, the number of `CausalAttention` heads.
        qkv_bias: give each head's `W_query`, `W_key` and `W_value` biases.

    Raises:
        ValueError: when d_in, d_out, context_length or num_heads is not a positive int, or
            dropout is not in [0, 1).
        TypeError: when qkv_bias is not a bool.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
    ):
        check_positive("MultiHeadAttentionWrapper", num_heads=num_heads)
        check_flag("MultiHeadAttentionWrapper", qkv_bias=qkv_bias)
        super().__init__()
        self.heads = nn.ModuleList(
            [
                CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                for _ in range(num_heads)
            ]
        )

    @checked_forward(heads_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        *,
        mask: MaskArg = None,
        key_padding_mask: KeyPaddingArg = None,
    ) -> Float[Tensor, "*batch n c_out"]:
        """The heads' context vectors, side by side.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in and n ≤ context_length.
            mask: True where query m may attend key p, `(*batch, n, n)` (its batch broadcasts
                against x's), for every head; None for none.
            key_padding_mask: True where key p exists, `(*batch, n)` (the opposite of
                torch.nn.MultiheadAttention's); None for none.

        Returns:
            The heads' C concatenated, `(*batch, n, num_heads · d_out)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, n passes context_length, or
                a mask does not fit x.
            DtypeError: when x is not a float tensor of the weights' dtype, or a mask is not bool.
            DeviceError: when x or a mask is not on the weights' device.
        """
        heads = typing.cast("Iterable[CausalAttention]", self.heads)  # the heads built above
        for index, head in enumerate(heads):
            where = "MultiHeadAttentionWrapper.forward"
            within_context(where, x.shape[-2], head.mask.shape[-1], f"heads[{index}] has ")
        return torch.cat(
            [head(x, mask=mask, key_padding_mask=key_padding_mask) for head in self.heads], dim=-1
        )


class MultiHeadAttention(KVCache, OutputProjection, BookWeights, MultiHeadModule):
    """The book's `MultiHeadAttention`: h fused causal heads of width c_h = d_out / num_heads,
    concatenated and projected by `out_proj`; with the key-value cache of ch. 4.

    $$C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o + b_o,\\qquad
      A_i = \\operatorname{dropout}\\!\\big(\\operatorname{softmax}(\\text{masked } Q_i K_i^\\top /
      \\sqrt{c_h})\\big)$$

    Head i uses columns i·c_h … (i+1)·c_h−1 of Q, K, V. Without weights or dropout, all heads run in
    one fused `scaled_dot_product_attention` call with its causal flag. `forward` also takes a
    `mask` and a `key_padding_mask` as CausalAttention does, shared by all heads.

    Generation (the book's KV-cache class, ch. 4): `forward(x, use_cache=True)` attends the new
    tokens x to themselves and to every token since `reset_cache()`, and caches their keys and
    values (`cache_k`, `cache_v`, non-persistent buffers; `ptr_current_pos` counts the tokens),
    so the book's `GPTModel` with KV cache runs with this class in place of its own. The cached
    tokens and the new ones together may not pass `context_length`. The state_dicts of both
    book classes load: chapter 3's (with `mask`) and the KV-cache one's (without).

    Beyond the book, keyword-only: `softcap`, `alibi`, `sinks`, `gate`, `query_pre_attn_scalar`
    and `mods`.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of Q, K, V and of the output; num_heads divides it.
        context_length: the most tokens an input, or the cache and the new tokens, may have.
        dropout: the rate of dropout on A in training mode, in [0, 1).
        num_heads: h; each head has width c_h = d_out / num_heads.
        qkv_bias: give `W_query`, `W_key` and `W_value` biases (`out_proj` always has one).
        softcap: κ, Gemma 2's logit softcapping: each scaled score ω̃ replaced by κ tanh(ω̃/κ);
            None for none.
        alibi: BLOOM's and MPT's linear biases, −μ_ℓ (m − p) added to head ℓ's scores: True for
            Press et al.'s slopes, a float tensor of h slopes `(h,)`, False for none.
        sinks: GPT-OSS's attention sinks, a learned logit per head in each row's softmax (the
            parameter `sinks`): True to draw them from N(0, 0.02²), a float tensor `(h,)` of
            initial logits, False for none.
        gate: Qwen 3.5's sigmoid output gate: `W_query` twice as wide, each head's queries then
            its gate's logits, the merged heads multiplied by their sigmoid before `out_proj`.
        query_pre_attn_scalar: Gemma 2's and 3's query scale 1/√query_pre_attn_scalar in place
            of 1/√c_h; None for 1/√c_h.
        mods: more modifications of the scores as objects (`attention.mods`: `Chunked`,
            `Temperature`, a researcher's own subclass of `Modification`), without tensors.

    Raises:
        ValueError: when d_in, d_out, context_length or num_heads is not a positive int,
            num_heads does not divide d_out, dropout is not in [0, 1), softcap or
            query_pre_attn_scalar is not a positive number, or a mod is a mask (`Causal`,
            `Window`) or carries a tensor.
        TypeError: when qkv_bias or gate is not a bool, alibi or sinks is neither a bool nor a
            float tensor, or a mod is not a `Modification`.
        ShapeError: when the tensor of alibi or sinks is not `(h,)`.
    """

    mask: Tensor
    dropout: nn.Dropout

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        *,
        softcap: float | None = None,
        alibi: bool | Tensor = False,
        sinks: bool | Tensor = False,
        gate: bool = False,
        query_pre_attn_scalar: float | None = None,
        mods: tuple = (),
    ):
        build_heads(
            self,
            "MultiHeadAttention",
            d_in=d_in,
            d_out=d_out,
            num_heads=num_heads,
            dropout=dropout,
            qkv_bias=qkv_bias,
            context_length=context_length,
            softcap=softcap,
            alibi=alibi,
            sinks=sinks,
            gate=gate,
            query_pre_attn_scalar=query_pre_attn_scalar,
            mods=mods,
        )
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )
        self._init_cache()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        # The KV-cache class of ch. 4 registers `mask` as non-persistent, so its state_dicts
        # have none: the mask being a constant of context_length, ours stands in for it.
        state_dict.setdefault(prefix + "mask", self.mask)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @checked_forward(multi_head_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        use_cache: bool = False,
        *,
        mask: MaskArg = None,
        key_padding_mask: KeyPaddingArg = None,
        return_weights: bool = False,
    ) -> (
        Float[Tensor, "*batch n c_out"]
        | tuple[Float[Tensor, "*batch n c_out"], Float[Tensor, "*batch h n n"]]
    ):
        """The context vectors C of X, causal, the heads mixed by `out_proj`.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in; with `use_cache`, the new tokens only.
            use_cache: attend the new tokens to themselves and to every token since
                `reset_cache()`, and cache their keys and values (see the class docstring); takes
                no mask and returns no weights.
            mask: True where query m may attend key p, `(*batch, n, n)` (its batch broadcasts
                against x's), shared by the heads; None for none. A query left with no key gets
                a row of zeros.
            key_padding_mask: True where key p exists, `(*batch, n)` (the opposite of
                torch.nn.MultiheadAttention's); None for none.
            return_weights: also return the attention weights A (after dropout, in training mode).

        Returns:
            C, `(*batch, n, d_out)`; with `return_weights=True`, the pair (C, A), A
                `(*batch, h, n, n)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, a mask does not fit x, the
                tokens (with the cached ones) pass context_length, or x's batch is not the
                cache's.
            DtypeError: when x is not a float tensor of the weights' (and the cache's) dtype, or
                a mask is not bool.
            DeviceError: when x or a mask is not on the weights' (and the cache's) device.
            ValueError: when use_cache comes with a mask, a key_padding_mask or return_weights.
        """
        where = "MultiHeadAttention.forward"
        if use_cache:
            refuse_masks_with_cache(
                where, mask=mask, key_padding_mask=key_padding_mask, return_weights=return_weights
            )
            return self._cached_forward(where, x, None, self.mask.shape[-1])
        within_context(where, x.shape[-2], self.mask.shape[-1])
        return forward_layer(
            self,
            x,
            masks=(M.Causal(),),
            mask=mask,
            key_padding_mask=key_padding_mask,
            return_weights=return_weights,
        )
