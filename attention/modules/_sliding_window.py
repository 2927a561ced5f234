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
    takes `mask` (*batch, n, n) and `key_padding_mask` (*batch, n), combined with the window.
    Beyond the book, keyword-only: `softcap`, `alibi`, `sinks`, `gate` and
    `query_pre_attn_scalar`, as `MultiHeadAttention`'s.

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
        """(*batch, n, d) -> (*batch, n, d_out); with `return_weights`, also A (*batch, h, n, n).
        With `use_cache`, x holds the new tokens only."""
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
