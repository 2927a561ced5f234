"""The book's `MultiHeadAttentionWithSWA` (ch. 4's bonus material on sliding-window attention,
*Build a Large Language Model (from Scratch)*), checked.

Query m attends key p iff 0 ≤ m − p < w, w = `sliding_window_size` (None: causal attention).
Without the cache, the fast path runs the fused kernel on blocks of queries against their window
of keys (never an n×n matrix) with the exact blockwise backward (`attention._fused`); with it,
the cache keeps the last w keys and values only, so its memory stays O(w·c) however long the
generation.
"""

from jaxtyping import Float
from torch import Tensor

from .. import mods as M
from .._arguments import check_window
from .._checks import checked_forward
from .._masks import KeyPaddingArg, MaskArg
from .._weights import BookWeights, multi_head_weights
from ._common import MultiHeadModule, OutputProjection, build_heads, forward_layer
from ._kv_cache import KVCache, refuse_masks_with_cache

__all__ = ["MultiHeadAttentionWithSWA"]


class MultiHeadAttentionWithSWA(KVCache, OutputProjection, BookWeights, MultiHeadModule):
    """The book's `MultiHeadAttentionWithSWA`: causal multi-head attention in which each query
    sees its last `sliding_window_size` tokens (all of them when it is None).

    $$a^{(\\ell)}_{m,p} = 0 \\text{ unless } 0 \\le m - p < w,\\qquad
      C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o + b_o$$

    The book's constructor, attributes (`d_out`, `num_heads`, `head_dim`, `W_query`, `W_key`,
    `W_value`, `out_proj`, `dropout`, `sliding_window_size`, `cache_k`, `cache_v`,
    `ptr_current_pos`), creation order and state_dict; no `context_length` and no `mask` buffer.
    `sliding_window_size` may be changed after construction (the book's `GPTModel` does, layer
    by layer); it is checked again at every forward. `forward(x, use_cache=True)`: the new
    tokens against the cache (the last w tokens), as `MultiHeadAttention`'s. `forward` also
    takes `mask` and `key_padding_mask`, combined with the window. Beyond the book,
    keyword-only: `softcap`, `alibi`, `sinks`, `gate`, `query_pre_attn_scalar` and `mods`, as
    `MultiHeadAttention`'s.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of Q, K, V and of the output; num_heads divides it.
        dropout: the rate of dropout on A in training mode, in [0, 1).
        num_heads: h; each head has width c_h = d_out / num_heads.
        qkv_bias: give `W_query`, `W_key` and `W_value` biases (`out_proj` always has one).
        sliding_window_size: w, the tokens each query sees, itself included; None for causal
            attention over all of them.
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
        ValueError: when d_in, d_out or num_heads is not a positive int, num_heads does not
            divide d_out, dropout is not in [0, 1), sliding_window_size is neither a positive
            int nor None, softcap or query_pre_attn_scalar is not a positive number, or a mod is
            a mask (`Causal`, `Window`) or carries a tensor.
        TypeError: when qkv_bias or gate is not a bool, alibi or sinks is neither a bool nor a
            float tensor, or a mod is not a `Modification`.
        ShapeError: when the tensor of alibi or sinks is not `(h,)`.

    >>> import torch
    >>> from attention import MultiHeadAttentionWithSWA
    >>> swa = MultiHeadAttentionWithSWA(d_in=3, d_out=4, dropout=0.0, num_heads=2,
    ...                                 sliding_window_size=2)
    >>> swa(torch.rand(1, 6, 3)).shape
    torch.Size([1, 6, 4])
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        sliding_window_size: int | None = None,
        *,
        softcap: float | None = None,
        alibi: bool | Tensor = False,
        sinks: bool | Tensor = False,
        gate: bool = False,
        query_pre_attn_scalar: float | None = None,
        mods: tuple = (),
    ):
        check_window("MultiHeadAttentionWithSWA", "sliding_window_size", sliding_window_size)
        build_heads(
            self,
            "MultiHeadAttentionWithSWA",
            d_in=d_in,
            d_out=d_out,
            num_heads=num_heads,
            dropout=dropout,
            qkv_bias=qkv_bias,
            softcap=softcap,
            alibi=alibi,
            sinks=sinks,
            gate=gate,
            query_pre_attn_scalar=query_pre_attn_scalar,
            mods=mods,
        )
        self.sliding_window_size = sliding_window_size
        self._init_cache()

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
        """The context vectors C of X, each query reading its last w tokens.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in; with `use_cache`, the new tokens only.
            use_cache: attend the new tokens, within the window, to themselves and to the tokens
                since `reset_cache()`, and cache their keys and values (the last w kept); takes no
                mask and returns no weights.
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
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, a mask does not fit x, or
                x's batch is not the cache's.
            DtypeError: when x is not a float tensor of the weights' (and the cache's) dtype, or
                a mask is not bool.
            DeviceError: when x or a mask is not on the weights' (and the cache's) device.
            ValueError: when sliding_window_size is now neither a positive int nor None, or
                use_cache comes with a mask, a key_padding_mask or return_weights.
        """
        where = "MultiHeadAttentionWithSWA.forward"
        window = self.sliding_window_size
        check_window(where, "sliding_window_size", window)
        if use_cache:
            refuse_masks_with_cache(
                where, mask=mask, key_padding_mask=key_padding_mask, return_weights=return_weights
            )
            return self._cached_forward(where, x, window, None)
        return forward_layer(
            self,
            x,
            masks=M.modifications(causal=True, window=window),
            mask=mask,
            key_padding_mask=key_padding_mask,
            return_weights=return_weights,
        )
