"""The kinds of attention layer of a model: the modules an adapter recognises (not those inside
one), a kind being the layer's class, the variant the adapter reads and its values; those an
adapter recognises and refuses, with the reason; and those named like an attention layer (its
class's name says attention) or a state-space layer (…Mixer) that nothing recognises and that
hold no layer an adapter reads, with what was looked for: a layer no adapter reads is never
silently left out (MiniMax's lightning layers beside its softmax ones, Falcon Mamba's Mamba-1
mixers, Falcon H1's). `derive.testing` and `models` read them."""

from __future__ import annotations

from typing import Any

from ..recurrent import recognised
from .registry import find_adapter
from .target import ConformError

__all__ = ["layer_kinds"]


def layer_kinds(model: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The attention layers of `model` an adapter reads, each kind once, by the path of its
    first layer, and those an adapter recognises and refuses, each kind once, with the reason
    (`derive.testing.attention_layers` and `refused_layers`)."""

    found: dict[str, Any] = {}
    refused: dict[str, str] = {}
    kinds: set = set()
    inside: list[str] = []
    unread: dict[str, tuple[Any, str]] = {}  # named like attention, no adapter recognises it
    for path, module in model.named_modules():
        if any(path.startswith(prefix + ".") for prefix in inside):
            continue
        found_here = recognised(module)  # a recurrent layer: Gated DeltaNet's, Mamba-2's
        if found_here is not None:
            reader, _ = found_here
            inside.append(path)
            if (type(module).__name__, reader.name) not in kinds:
                kinds.add((type(module).__name__, reader.name))
                found[path] = module
            continue
        if _named_like_a_mixer(module):  # a state-space layer no reader reads (Mamba-1's)
            unread[path] = (module, _unread_mixer(module))
            continue
        try:
            adapter = find_adapter(module)
        except ConformError as error:  # not an attention layer any adapter recognises
            if _named_like_attention(module):
                unread[path] = (module, str(error))
            continue
        inside.append(path)
        try:
            weights = adapter.read(module)
        except ConformError as error:  # recognised, and refused by name
            kind = (type(module).__name__, str(error))
            if kind not in kinds:
                kinds.add(kind)
                refused[path] = str(error)
            continue
        values = tuple(sorted((k, str(v)) for k, v in weights.values.items()))
        kind = (type(module).__name__, adapter.name, weights.variants, values)
        if kind not in kinds:
            kinds.add(kind)
            found[path] = module
    read = [*inside]
    for path, (module, why) in unread.items():
        holds = any(other.startswith(path + ".") for other in read)  # BERT's BertAttention
        within = any(path.startswith(other + ".") for other in read)
        kind = (type(module).__name__, "unread")
        if not holds and not within and kind not in kinds:
            kinds.add(kind)
            named = "a state-space layer" if _named_like_a_mixer(module) else "an attention layer"
            refused[path] = f"{type(module).__name__} is named like {named}: {why}"
    return found, refused


def _named_like_attention(module: Any) -> bool:
    """Whether a module's class is named as an attention layer (…Attention, …Attn), not a part
    of one (…AttentionOutput, …RotaryEmbedding, a norm)."""
    name = type(module).__name__.lower()
    return name.endswith(("attention", "attn"))


def _named_like_a_mixer(module: Any) -> bool:
    """Whether a module's class is named as a state-space layer (Mamba's …Mixer)."""
    return type(module).__name__.lower().endswith("mixer")


def _unread_mixer(module: Any) -> str:
    from ..ssm import read_families

    return (
        f"no reader reads {type(module).__name__}: read are the mixers of Mamba-2 and Mamba "
        f"({', '.join(read_families())}) and modules with Mamba-2's parameter names"
    )
