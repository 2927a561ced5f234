"""The attention classes, checked: the book's chapter 3 (`SelfAttentionV1` …
`MultiHeadAttention`, the last with chapter 4's key-value cache), chapter 4's sliding-window
attention (`MultiHeadAttentionWithSWA`), its later models' grouped-query attention with RMS norm
(`GroupedQueryAttention`, `RMSNorm`: Llama 3, Qwen 3) and multi-head latent attention
(`MultiHeadLatentAttention`), and `CrossAttention`. Every multi-head class calls the one layer
(`attention._layer`) through `_common.forward_layer`."""

from ._cross import CrossAttention
from ._grouped import GroupedQueryAttention, RMSNorm
from ._latent import MultiHeadLatentAttention
from ._multi_head import MultiHeadAttention, MultiHeadAttentionWrapper
from ._single_head import CausalAttention, SelfAttentionV1, SelfAttentionV2, copy_weights
from ._sliding_window import MultiHeadAttentionWithSWA

__all__ = [
    "SelfAttentionV1",
    "SelfAttentionV2",
    "CausalAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
    "MultiHeadAttentionWithSWA",
    "CrossAttention",
    "GroupedQueryAttention",
    "RMSNorm",
    "MultiHeadLatentAttention",
    "copy_weights",
]
