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
        """(*batch, n, d) -> (*batch, n, num_heads · d_out); masks as in CausalAttention."""
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
    `mask` (*batch, n, n) and a `key_padding_mask` (*batch, n) as CausalAttention does, shared by
    all heads.

    Generation (the book's KV-cache class, ch. 4): `forward(x, use_cache=True)` attends the new
    tokens x to themselves and to every token since `reset_cache()`, and caches their keys and
    values (`cache_k`, `cache_v`, non-persistent buffers; `ptr_current_pos` counts the tokens),
    so the book's `GPTModel` with KV cache runs with this class in place of its own. The cached
    tokens and the new ones together may not pass `context_length`. The state_dicts of both
    book classes load: chapter 3's (with `mask`) and the KV-cache one's (without).

    Beyond the book, keyword-only: `softcap` κ (Gemma 2's logit softcapping, each scaled score
    ω̃ replaced by κ tanh(ω̃/κ)); `alibi` (BLOOM's and MPT's linear biases, −μ_ℓ (m − p) added to
    head ℓ's scores: True for Press et al.'s slopes, or a tensor of h slopes); `sinks` (GPT-OSS's
    attention sinks: a learned logit per head in each row's softmax, the parameter `sinks`);
    `gate` (Qwen 3.5's sigmoid output gate: `W_query` twice as wide, each head's queries then its
    gate's logits, the merged heads multiplied by their sigmoid before `out_proj`);
    `query_pre_attn_scalar` (Gemma 2's and 3's query scale 1/√query_pre_attn_scalar in place of
    1/√head_dim); `mods`, more modifications as objects (`attention.mods`: `Chunked`,
    `Temperature`, a researcher's own subclass of `Modification`; without tensors).
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
        """(*batch, n, d) -> (*batch, n, d_out); with `return_weights`, also A (*batch, h, n, n).
        With `use_cache`, x holds the new tokens only (see the class docstring)."""
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
