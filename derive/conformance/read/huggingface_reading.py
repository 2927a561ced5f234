"""What a Hugging Face attention layer and its config say (`derive.conformance.read.huggingface`):
its heads and their width, its scale, its rope parameters and base, its window, whether it
takes ALiBi, and the functions of its own model that the layer is called with (the rotary
embedding, BLOOM's ALiBi bias), found beside the layer's class (already imported)."""

from __future__ import annotations

from typing import Any

import torch

from .target import ConformError

__all__ = [
    "head_width",
    "heads",
    "scaling",
    "takes_alibi",
    "rope",
    "beta",
    "llama3",
    "yarn",
    "linear",
    "layer_type",
    "rotated_width",
    "interleaved",
    "window",
    "alibi",
    "rotary",
]


def library_class(module: Any) -> type:
    """The Hugging Face class a layer is or derives from: the first class of its MRO defined in
    transformers. A user's subclass (a patched ``LlamaAttention`` in the user's own module, its
    forward unchanged or not) is read as its base: its family's row, its rotary embedding and
    its ``rotate_half`` are those beside the base."""
    for kind in type(module).__mro__:
        if kind.__module__.startswith("transformers."):
            return kind
    return type(module)


def library_module(module: Any) -> Any:
    """The module of transformers that defines the layer's class (`library_class`)."""
    import sys

    return sys.modules[library_class(module).__module__]


def head_width(module: Any) -> int:
    for name in ("head_dim", "attention_head_size", "head_size"):
        if getattr(module, name, None):
            return getattr(module, name)
    raise ConformError(f"{type(module).__name__}: no head_dim, attention_head_size, head_size")


def heads(module: Any) -> int:
    config = getattr(module, "config", None)
    return getattr(config, "num_attention_heads", None) or module.num_heads


def scaling(module: Any) -> float:
    return getattr(module, "scaling", None) or module.inv_norm_factor  # BLOOM's name


def takes_alibi(module: Any) -> bool:
    """Whether the layer adds ALiBi's bias: BLOOM's (its forward takes `alibi`), not Falcon's
    RoPE layers (transformers 5.24's forward takes the argument either way; Falcon's ALiBi
    layers are refused, `huggingface_tables.REFUSED`)."""
    import inspect

    if "alibi" not in inspect.signature(module.forward).parameters:
        return False
    return getattr(getattr(module, "config", None), "alibi", None) is not False


def rope(module: Any) -> dict | None:
    """The layer's rope parameters (those of its layer type where there is one per type)."""
    config = getattr(module, "config", None)
    found = getattr(config, "rope_parameters", None)
    if isinstance(found, dict) and layer_type(module) in found:
        found = found[layer_type(module)]
    theta = getattr(config, "rope_theta", None)
    if not found and theta is not None:
        found = {"rope_type": "default", "rope_theta": theta}
    return found or None


#: The families whose layers decide from their window whether they rotate (their config says it
#: for every layer): the layer's class -> the rule, asked of the layer.
ROTATES = {
    "Cohere2Attention": lambda layer: layer.sliding_window is not None,  # global: no RoPE
    "Exaone4Attention": lambda layer: layer.sliding_window is None or layer.is_sliding,
    "FalconAttention": lambda layer: not layer.config.alibi,  # RoPE or ALiBi, one of the two
    "Cohere2MoeAttention": lambda layer: layer.sliding_window is not None or layer.force_rope,
    "ExaoneMoeAttention": lambda layer: layer.sliding_window is None or layer.is_sliding,
    "Kolibri1Attention": lambda layer: layer.sliding_window is None or layer.is_sliding,
    "AfmoeAttention": lambda layer: layer.is_local_attention,  # its local layers only
    "FlintAttention": lambda layer: layer.sliding_window is not None,  # its sliding layers only
}


def rotates(module: Any) -> bool:
    """Whether this layer rotates its queries and keys, asked of the layer: its family's rule
    (`ROTATES`), else its ``use_rope`` (Llama 4's and SmolLM3's layers beside those of
    ``no_rope_layers``), else yes."""
    rule = ROTATES.get(library_class(module).__name__)
    if rule is not None:
        return bool(rule(module))
    return bool(getattr(module, "use_rope", True))


def beta(module: Any) -> float | None:
    """RoPE's base β, None without RoPE; scaled rotations are refused by name."""
    found = rope(module)
    if found is None or not rotates(module):
        return None
    kind = found.get("rope_type", "default")
    name = type(module).__name__
    if kind not in ("default", "llama3", "yarn", "linear"):
        raise ConformError(
            f"{name}: rope_type {kind!r} scales the angles; the registered RoPE "
            "variants declare the default angles, Llama 3.1's (llama3-rope), YaRN's "
            "(yarn-rope) and linear position interpolation's (linear-rope) only"
        )
    return float(found["rope_theta"])


def llama3(module: Any) -> dict | None:
    """The values of the llama3-rope variant where the layer's rope_type is "llama3"."""
    found = rope(module) or {}
    if found.get("rope_type") != "llama3":
        return None
    names = {
        "eta": "factor",
        "alpha_l": "low_freq_factor",
        "alpha_h": "high_freq_factor",
        "L_0": "original_max_position_embeddings",
    }
    return {symbol: float(found[key]) for symbol, key in names.items()}


def yarn(module: Any) -> dict | None:
    """The values of the yarn-rope variant where the layer's rope_type is "yarn", read as
    transformers reads them (``_compute_yarn_parameters``): a factor not given is the ratio of
    ``max_position_embeddings`` to the original (DeepSeek V3), β_fast and β_slow 32 and 1 where
    absent, ``truncate`` true where absent, and the attention factor given, or DeepSeek's
    ``mscale`` ratio, or 0.1 ln η + 1 (`attention.rope.attention_factor`)."""
    from attention.rope import attention_factor

    found = rope(module) or {}
    if found.get("rope_type") != "yarn":
        return None
    config = module.config
    original = float(found["original_max_position_embeddings"])
    factor = found.get("factor") or config.max_position_embeddings / original
    read = {**found, "factor": float(factor), "rope_type": "yarn"}
    return {
        "eta": float(factor),
        "beta_f": float(found.get("beta_fast") or 32),
        "beta_s": float(found.get("beta_slow") or 1),
        "L_0": original,
        "tau": 1.0 if found.get("truncate", True) else 0.0,
        "rho_a": float(attention_factor(read)),
    }


def linear(module: Any) -> dict | None:
    """The values of the linear-rope variant where the layer's rope_type is "linear" (position
    interpolation: every frequency divided by the factor η)."""
    found = rope(module) or {}
    if found.get("rope_type") != "linear":
        return None
    return {"eta": float(found["factor"])}


def rotated_width(module: Any) -> int | None:
    """c_r, the features of each head a partial RoPE rotates (the model's own rule:
    int(head_dim · partial_rotary_factor)); None where it rotates them all."""
    found = rope(module) or {}
    width = head_width(module)
    rotated = int(width * found.get("partial_rotary_factor", 1.0))
    return None if rotated == width else rotated


def interleaved(module: Any) -> bool:
    """True where the model's own ``rotate_half`` (beside the layer's class) pairs neighbouring
    features (Cohere, GLM): probed on [1, 2, 3, 4], which it turns into [−2, 1, −4, 3], where
    Llama's turns it into [−3, −4, 1, 2]."""

    turn = getattr(library_module(module), "rotate_half", None)
    if turn is None:  # Llama 4: e^{iθ} on the pairs (2i, 2i + 1), complex tables
        embedding, _ = rotary(module)
        found = embedding(torch.zeros(1, 1, 1), torch.zeros(1, 1, dtype=torch.long))
        return isinstance(found, torch.Tensor) and found.is_complex()  # else (cos, sin): halves
    found = turn(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist()
    if found not in ([-2.0, 1.0, -4.0, 3.0], [-3.0, -4.0, 1.0, 2.0]):
        raise ConformError(
            f"{type(module).__name__}: its model's rotate_half turns [1, 2, 3, 4] "
            f"into {found}, neither pairing of a registered RoPE"
        )
    return found[0] == -2.0


def window(module: Any) -> int | None:
    """The layer's window: its ``sliding_window`` where it says it slides (EXAONE 4's global
    layers keep the config's window, unused: ``is_sliding`` False), else the config's, save on
    the layers whose type is not a sliding one where ``layer_types`` has sliding ones
    (Qwen2-MoE's full layers; MiniMax's, all typed full, slide by the config's window as
    Mistral's do); a window of 0 (Qwen2-MoE's config without sliding) is none."""
    if getattr(module, "is_sliding", True) is False:
        return None
    if hasattr(module, "sliding_window"):
        return module.sliding_window
    config = getattr(module, "config", None)
    sliding = "sliding_attention" in (getattr(config, "layer_types", None) or ())
    if sliding and layer_type(module) != "sliding_attention":  # Qwen2-MoE's full layers
        return None
    return getattr(config, "sliding_window", None) or None


def alibi(module: Any, n: int, dtype: Any, batch: int = 1) -> Any:
    """BLOOM's bias μ_ℓ p (batch·h, 1, n), from its model's own function beside the layer."""

    build = getattr(library_module(module), "build_alibi_tensor", None)
    if build is None:
        raise ConformError(
            f"{type(module).__name__} takes alibi, and no build_alibi_tensor "
            "is beside it to compute it"
        )
    return build(torch.ones(batch, n), heads(module), dtype)


def layer_type(module: Any) -> str | None:
    """The layer's type in its config's ``layer_types`` (``"sliding_attention"``): its
    ``layer_type`` (Gemma 3, Qwen 3.5), or ``attention_type`` (OLMo 3), else its config's
    entry at the layer's index (Llama 4's ``"chunked_attention"``)."""
    for name in ("layer_type", "attention_type"):
        found = getattr(module, name, None)
        if isinstance(found, str):
            return found
    types = getattr(getattr(module, "config", None), "layer_types", None)
    index = getattr(module, "layer_idx", None)
    if types and isinstance(index, int) and index < len(types):
        return types[index]
    return None


def chunk(module: Any) -> int | None:
    """Llama 4's ``attention_chunk_size`` where this layer is a ``chunked_attention`` one."""
    size = getattr(getattr(module, "config", None), "attention_chunk_size", None)
    return int(size) if size is not None and layer_type(module) == "chunked_attention" else None


def temperature(module: Any) -> dict | None:
    """Llama 4's temperature tuning (its layers without RoPE): the values F and α."""
    if not getattr(module, "attn_temperature_tuning", False) or rotates(module):
        return None
    return {"F": float(module.floor_scale), "alpha": float(module.attn_scale)}


def rotary(module: Any) -> Any:
    """The model's own rotary embedding class, from the module that defines the layer (already
    imported: the layer exists), built from the layer's config."""
    import inspect

    home = library_module(module)
    name = library_class(module).__name__.removesuffix("Attention")
    for candidate in (name + "RotaryEmbedding", name + "TextRotaryEmbedding"):
        found = getattr(home, candidate, None)
        if found is not None:
            embedding = found(config=module.config)
            takes_type = "layer_type" in inspect.signature(embedding.forward).parameters
            return embedding, takes_type
    raise ConformError(
        f"{type(module).__name__}: no {name}RotaryEmbedding beside it in "
        f"{home.__name__} to compute the tables the model passes"
    )
