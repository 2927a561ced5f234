"""The built-in entries of the registry, one module each (its declarations, claims, sizes,
twins and words), registered by one line here: the order of `derive.variants()`."""

from . import (
    causal,
    cross_attention,
    gqa,
    kv_cache,
    masked,
    mla,
    multi_head,
    qk_norm,
    rope,
    self_attention,
    sliding_window,
)

BUILT_IN = (
    self_attention.VARIANT,
    causal.VARIANT,
    masked.VARIANT,
    multi_head.VARIANT,
    kv_cache.VARIANT,
    sliding_window.VARIANT,
    cross_attention.VARIANT,
    rope.VARIANT,
    gqa.VARIANT,
    qk_norm.VARIANT,
    mla.VARIANT,
)
