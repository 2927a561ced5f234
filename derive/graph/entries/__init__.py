"""The built-in entries of the registry, one module each (its declarations, claims, sizes,
twins and words), registered by one line here: the order of `derive.variants()`; and the titles
of the combinations that have a name of their own."""

# self-attention's letters first (X, W_q, …, C), then the masks' and the heads': the others'
# declarations read them when they are imported
from . import self_attention  # isort: skip
from . import causal, multi_head  # isort: skip
from . import (
    alibi,
    chunked,
    clamp,
    cross_attention,
    deltanet,
    flash,
    gate,
    gqa,
    interleaved_rope,
    kda,
    kv_cache,
    l2_qk_norm,
    linear_attention,
    linear_rope,
    llama3_rope,
    masked,
    mla,
    partial_rope,
    qk_norm,
    query_scale,
    rope,
    selective_scan,
    sinks,
    sliding_window,
    softcap,
    ssd,
    temperature,
    whole_qk_norm,
    yarn_rope,
)

BUILT_IN = (
    self_attention.VARIANT,
    causal.VARIANT,
    masked.VARIANT,
    multi_head.VARIANT,
    kv_cache.VARIANT,
    sliding_window.VARIANT,
    chunked.VARIANT,
    cross_attention.VARIANT,
    rope.VARIANT,
    partial_rope.VARIANT,
    interleaved_rope.VARIANT,
    llama3_rope.VARIANT,
    yarn_rope.VARIANT,
    linear_rope.VARIANT,
    gqa.VARIANT,
    qk_norm.VARIANT,
    whole_qk_norm.VARIANT,
    l2_qk_norm.VARIANT,
    mla.VARIANT,
    query_scale.VARIANT,
    temperature.VARIANT,
    softcap.VARIANT,
    clamp.VARIANT,
    alibi.VARIANT,
    sinks.VARIANT,
    gate.VARIANT,
    flash.VARIANT,
    linear_attention.VARIANT,
    deltanet.DELTANET,
    deltanet.GATED_DELTANET,
    ssd.VARIANT,
    kda.VARIANT,
    selective_scan.VARIANT,
)

#: Combinations whose title names the model that uses them (parts in their order).
MODELS = {
    ("gqa", "rope"): "Llama 3",
    ("gqa", "qk-norm", "rope"): "Qwen 3",
    ("gqa", "qk-norm", "partial-rope", "gate"): "Qwen 3.5 (its full-attention layers)",
    ("gqa", "sliding-window", "sinks"): "GPT-OSS (its sliding layers, without RoPE)",
    ("gqa", "sliding-window", "sinks", "rope"): "GPT-OSS (its sliding layers, without YaRN)",
    ("gqa", "sliding-window", "sinks", "yarn-rope"): "GPT-OSS (its sliding layers)",
    ("gqa", "sinks", "yarn-rope"): "GPT-OSS (its full layers)",
    ("gqa", "llama3-rope", "kv-cache"): "Llama 3.1, decoding",
    ("gqa", "sliding-window", "softcap", "rope", "kv-cache"): "Gemma 2 (local layers), decoding",
    ("gqa", "sliding-window", "sinks", "yarn-rope", "kv-cache"): (
        "GPT-OSS (sliding layers), decoding"
    ),
    ("multi-head", "cross-attention"): "Whisper and BART (their cross layers)",
    ("gqa", "qk-norm", "cross-attention"): "Llama 3.2 Vision (its cross layers)",
    ("gqa", "temperature-tuning"): "Llama 4 (its global layers, without RoPE)",
    ("gqa", "chunked", "l2-qk-norm", "rope"): "Llama 4 (its chunked layers, with RoPE)",
    ("gqa", "sliding-window", "qk-norm", "rope"): "Gemma 3 (its local layers)",
    ("gqa", "whole-qk-norm", "rope"): "OLMo 3 (its full-attention layers)",
    ("gqa", "sliding-window", "whole-qk-norm", "rope"): "OLMo 3 (its sliding layers)",
}
#: Combinations with a title of their own.
TITLES: dict[tuple[str, ...], str] = {
    ("multi-head", "causal"): "Causal multi-head attention",
    ("multi-head", "masked"): "Masked multi-head attention",
}
