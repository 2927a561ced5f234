"""The book's attention classes, checked: chapter 3's (`SelfAttentionV1` … `MultiHeadAttention`,
the last with chapter 4's key-value cache), chapter 4's sliding-window attention
(`MultiHeadAttentionWithSWA`), and `CrossAttention`."""

from ._cross import CrossAttention
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
    "copy_weights",
]
