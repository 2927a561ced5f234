"""A model's attention by its name: a transformers ``model_type`` (its default config) or a
model's own config file (``config.json``, no weights), read as the registry's combination it
computes and the config's values (heads, groups, head width, window, cap, RoPE's base, …).

The model is built as `derive conform`'s sweep builds one (tests/benchmarks/sweep_transformers.py):
from its config, with random weights, small where smallness changes nothing the attention
computes (a vocabulary of 64 tokens, small feed-forward layers and experts, as many layers as
its kinds of layer need, the width d of X cut to 64 where the config states the head width).
Each kind of attention layer (`layers.layer_kinds`: a model's local and global
layers are two kinds) is then read by the Hugging Face adapter, the reading `derive conform`
checks layers with: the variants it computes, its heads, the width of its keys (groups),
whether it is causal, and its numbers. A layer the adapter refuses is refused with its reason
(Ministral 3's queries scaled from position 0: no registered variant declares it).

transformers is imported here only: ``pip install 'attention-derive[huggingface]'``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ModelLayer", "model_layers", "model_reading", "built_model", "ModelError"]

#: The sizes made small: none of them changes what an attention layer computes.
SMALL = {
    "vocab_size": 64,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
}
#: The most layers a model is built with, whatever its pattern of layer kinds.
MOST_LAYERS = 8


class ModelError(ValueError):
    """A model that cannot be read: unknown, not built from its config, or no attention layer
    the adapter reads (the reasons said)."""


@dataclass(frozen=True)
class ModelLayer:
    """One kind of attention layer of a model, as the registry names it.

    Attributes:
        model: the model type (``"gemma2"``) and where its config came from.
        path: its first layer's path (``"model.layers.0.self_attn"``); `layer`, its class.
        variant: the combination it computes (``"gqa+rope+sliding-window+softcap+causal"``).
        heads: h; `values`, the combination's own sizes and parameters as
            `derive.DocumentOptions.extra` takes them (``(("g", 4), ("w", 4096), …)``);
            `width`, each head's c_h.
    """

    model: str
    path: str
    layer: str
    variant: str
    heads: int
    values: tuple[tuple[str, object], ...]
    width: int

    def where(self) -> str:
        """The model and the layer, for a document (its values are listed there by symbol)."""
        return (
            f"{self.model}, its layer {self.layer} ({self.path}) of heads $c_h = {self.width}$ wide"
        )

    def said(self) -> str:
        """The values in a sentence, for a document and the command line."""
        values = ", ".join(f"{name} = {_number(value)}" for name, value in self.values)
        return f"{self.model}, {self.layer} ({self.path}): h = {self.heads}, c_h = {self.width}" + (
            f", {values}" if values else ""
        )


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _config(model: str | None, config: str | Path | None) -> tuple[Any, str]:
    try:
        import transformers
    except ImportError:
        raise ModelError(
            "reading a model's config needs transformers: pip install "
            "'attention-derive[huggingface]'"
        ) from None
    if (model is None) == (config is None):
        raise ModelError("name a model type (model=) or a config file (config=), one of them")
    if config is not None:
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        try:
            given = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ModelError(f"config {str(config)!r} cannot be read: {error}") from None
        kind = given.pop("model_type", None) if isinstance(given, dict) else None
        if not isinstance(kind, str):
            raise ModelError(f"config {str(config)!r} has no model_type")
        return _for_model(transformers, kind, given), f"{kind} (its config {path.name})"
    return _for_model(transformers, str(model), {}), f"{model} (transformers' default config)"


def _for_model(transformers: Any, kind: str, given: dict) -> Any:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    known = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if kind not in known:
        import difflib

        close = difflib.get_close_matches(kind, known, n=1)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        raise ModelError(
            f"unknown model type {kind!r}{guess} (the model types of transformers' causal "
            f"language models: {len(known)} of them, such as llama, gemma2, qwen3)"
        )
    return transformers.AutoConfig.for_model(kind, **given)


def _small(config: Any) -> Any:
    """The config with its sizes cut where cutting changes nothing the attention computes;
    the head width, where the layer reads it from d / h, stated first."""
    heads = getattr(config, "num_attention_heads", None)
    if hasattr(config, "head_dim") and config.head_dim is None and heads:
        config.head_dim = config.hidden_size // heads
    small = dict(SMALL)
    if getattr(config, "head_dim", None):
        small["hidden_size"] = 64
    for key, value in small.items():
        if hasattr(config, key):
            setattr(config, key, value)
    layers = _layers_for_every_kind(config)
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(config, key):
            setattr(config, key, layers)
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and pad >= SMALL["vocab_size"]:
        config.pad_token_id = 0
    return config


def _layers_for_every_kind(config: Any) -> int:
    needed = 1
    for key in ("layer_types", "no_rope_layers"):
        pattern = getattr(config, key, None)
        if isinstance(pattern, list | tuple) and pattern:
            first = {kind: index for index, kind in reversed(list(enumerate(pattern)))}
            needed = max(needed, max(first.values()) + 1)
    return min(needed, MOST_LAYERS)


def model_layers(
    *, model: str | None = None, config: str | Path | None = None
) -> tuple[ModelLayer, ...]:
    """Each kind of attention layer of the model named (a transformers ``model_type``) or of
    the config file given, as the registry's combination and the config's values; a
    `ModelError` saying why where none is read. Read once per process for each model type and
    each content of a config file."""
    return model_reading(model=model, config=config)[0]


def model_reading(
    *, model: str | None = None, config: str | Path | None = None
) -> tuple[tuple[ModelLayer, ...], dict[str, str]]:
    """`model_layers`, and the layers that look like attention and are not read, each with its
    reason (by path): a model page says both."""
    text = None
    if config is not None:
        path = Path(config) / "config.json" if Path(config).is_dir() else Path(config)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ModelError(f"config {str(config)!r} cannot be read: {error}") from None
    kinds, others = _model_reading(model, str(config) if config is not None else None, text)
    return kinds, dict(others)  # a copy: the reading is cached


def built_model(*, model: str | None = None, config: str | Path | None = None) -> tuple[Any, str]:
    """(the causal language model built small from the config, random weights from seed 0, in
    eval mode; where its config came from), as `model_layers` reads it."""
    import torch
    import transformers

    found, source = _config(model, config)
    found = _small(found)
    torch.manual_seed(0)
    try:
        return transformers.AutoModelForCausalLM.from_config(found).eval(), source
    except Exception as error:  # noqa: BLE001 - any failure to build is the model's answer
        said = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        raise ModelError(f"{source} does not build: {said}") from None


@functools.cache
def _model_reading(
    model: str | None, config: str | None, text: str | None
) -> tuple[tuple[ModelLayer, ...], dict[str, str]]:
    from ..recurrent import recognised
    from .layers import layer_kinds
    from .registry import find_adapter

    built, source = built_model(model=model, config=config)
    layers, refused = layer_kinds(built)
    if not layers:
        why = "; ".join(f"{path}: {reason}" for path, reason in refused.items())
        raise ModelError(
            f"{source}: no attention layer is read"
            + (f" ({why})" if why else " (no module of it is an attention layer an adapter reads)")
        )
    readers = {path: recognised(layer) for path, layer in layers.items()}
    kinds = tuple(
        _kind(source, path, layer, find_adapter(layer).read(layer))
        for path, layer in layers.items()
        if readers[path] is None
    )
    others = {
        path: _recurrent(layers[path], found[0].name)
        for path, found in readers.items()
        if found is not None
    } | dict(refused)
    if not kinds:
        raise ModelError(f"{source}: no layer of softmax attention is read ({_said(others)})")
    return kinds, others


def _recurrent(layer: Any, reader: str) -> str:
    """What is done with a linear or state-space layer (Qwen 3.5's Gated DeltaNet, Mamba-2's
    mixer) that `reader` reads: checked, not derived as the layer."""
    return (
        f"{type(layer).__name__}: a recurrent layer ({reader}), which derive conform "
        "checks against its recurrence; the documents derive the registry's rule for one "
        "head, not the whole layer"
    )


def _said(reasons: dict[str, str]) -> str:
    return "; ".join(f"{path}: {reason}" for path, reason in reasons.items())


def _kind(source: str, path: str, layer: Any, weights: Any) -> ModelLayer:
    heads = int(weights.heads)
    width = int(weights.W_q.shape[-1]) // heads
    groups = int(weights.W_k.shape[-1]) // width if weights.W_k is not None else heads
    parts = [part for part in weights.variant.split("+") if part]
    values: dict[str, object] = {}
    if groups != heads and "gqa" not in parts:
        parts.append("gqa")
    if "gqa" in parts:
        values["g"] = groups
    elif heads > 1:
        parts.append("multi-head")
    if getattr(layer, "is_causal", True) and "causal" not in parts:
        parts.append("causal")
    values |= {key: value for key, value in weights.values.items()}
    return ModelLayer(
        source,
        path,
        type(layer).__name__,
        "+".join(parts),
        heads,
        tuple(values.items()),
        width,
    )
