"""The conventions `derive conform` knows: where each keeps W_q, W_k, W_v, W_o, and the heads.

- ``torch-mha``: `torch.nn.MultiheadAttention` (``in_proj_weight`` (3c × d) or ``q_proj_weight``
  …, ``in_proj_bias``, ``out_proj``, ``num_heads``; called as ``mha(x, x, x)``, ``batch_first``
  or not, ``attn_mask`` True = masked; returns a tuple);
- ``gpt2``: Hugging Face GPT-2 attention (``c_attn`` a ``Conv1D`` whose weight is d × 3c, x W + b
  with no transpose; ``c_proj``; ``num_heads``; returns a tuple), called as its model calls it,
  with the model's additive causal mask as ``attention_mask`` (transformers 5's layer applies no
  causal mask of its own: its model builds one); ``gpt2-own-mask``: the same layout with no
  ``attention_mask`` (a layer that masks by its own causal buffer, called as ``layer(x)``);
- ``nanogpt``: nanoGPT / minGPT ``CausalSelfAttention`` (``c_attn`` an ``nn.Linear`` packing
  q, k, v; ``c_proj``; ``n_head``);
- ``huggingface``: Hugging Face's attention layers (Llama, Mistral, Qwen 2/3, Gemma 2/3,
  GPT-OSS, Phi-3, GPT-NeoX, BLOOM, GPT-BigCode, Falcon, BERT, ViT …), with the variants they
  were configured with (`derive.conformance.read.huggingface`);
- ``timm``: timm's ``Attention`` (``qkv`` an ``nn.Linear`` packing q, k, v; ``proj``;
  ``num_heads``; ``attn_mask`` True = may attend, when it takes one), with its QK-norm (an RMS
  norm: the qk-norm variant) and its output gate (the gate variant);
- ``grouped``: the book's `GroupedQueryAttention` and this package's, with the variants it
  was built with (`derive.conformance.read.grouped`); ``grouped-causal``: the same weights with
  a forward that takes no mask (the book's `GroupedQueryAttentionFast`, causal by itself);
- ``latent``: the book's `MultiHeadLatentAttention` and this package's (the mla variant);
- ``book``: the book's classes and this package's (``W_query``, ``W_key``, ``W_value`` as
  ``nn.Parameter`` d × c or ``nn.Linear``; ``out_proj`` and ``num_heads`` with heads; or
  ``heads``, a list of single-head modules side by side; ``mask`` True = may attend);
- ``generated``: a module of `derive.torch_module` (its weights by letter, its variant the one
  it was generated from; ``generated-masked`` when it takes a mask M).

Every matrix is returned as a view of the module's parameter (nn.Linear stores Wᵀ: ``.mT``),
except the heads of a list, which are concatenated.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..checks.cached import with_use_cache
from .adapters import (
    Adapter,
    Weights,
    forward_takes,
    linear_weights,
    norm_gains,
    per_head_parts,
)
from .generated import GENERATED, GENERATED_MASKED
from .grouped import GROUPED, GROUPED_CAUSAL, LATENT
from .huggingface import HUGGING_FACE, layer_call
from .huggingface_tables import LAYOUTS as HUGGING_FACE_LAYOUTS
from .ours import read_modifications
from .target import ConformError

__all__ = ["BUILT_IN"]


def _weights(blocks: list, biases: list, w_o: Any, b_o: Any, heads: int) -> Weights:
    """Weights from the q, k, v blocks and biases (each a list of three), W_o and b_o."""
    b_q, b_k, b_v = biases
    return Weights(*blocks, W_o=w_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o, heads=heads)


def _thirds(matrix: Any, bias: Any) -> tuple[list, list]:
    """A packed (d, 3c) matrix and its (3c,) bias as the q, k, v blocks of columns."""
    width = matrix.shape[1]
    if width % 3:
        raise ConformError(f"a packed q, k, v projection needs 3c columns, got {width}")
    c = width // 3
    blocks = [matrix[:, i * c : (i + 1) * c] for i in range(3)]
    biases = [None] * 3 if bias is None else [bias[i * c : (i + 1) * c] for i in range(3)]
    return blocks, biases


def _heads(module: Any, *names: str) -> int:
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, int):
            return value
    raise ConformError(
        f"{type(module).__name__}: found the projections but no number of heads "
        f"(looked for {' or '.join(names)})"
    )


# -- torch.nn.MultiheadAttention ------------------------------------------------------------


def _is_mha(module: Any) -> bool:

    return isinstance(module, nn.MultiheadAttention)


def _mha_weights(module: Any) -> Weights:
    extra = [name for name in ("bias_k", "bias_v") if getattr(module, name, None) is not None]
    if extra or module.add_zero_attn:
        what = ", ".join(extra + (["add_zero_attn"] if module.add_zero_attn else []))
        raise ConformError(
            f"MultiheadAttention with {what}: extra keys that self-attention "
            "as the book declares it does not have"
        )
    if module.in_proj_weight is not None:
        blocks, biases = _thirds(module.in_proj_weight.mT, module.in_proj_bias)
    else:  # separate q, k, v projections (kdim or vdim given)
        blocks = [getattr(module, f"{w}_proj_weight").mT for w in "qkv"]
        bias = module.in_proj_bias
        biases = [None] * 3 if bias is None else list(bias.chunk(3))
    w_o, b_o = linear_weights(module.out_proj)
    return _weights(blocks, biases, w_o, b_o, module.num_heads)


def _mha_call(module: Any, x: Any, allowed: Any) -> Any:
    x = x if module.batch_first else x.transpose(0, 1)  # (b, n, d) -> (n, b, d)
    masked = None if allowed is None else ~allowed  # torch's attn_mask: True = may not attend
    out = module(x, x, x, need_weights=False, attn_mask=masked)[0]
    return out if module.batch_first else out.transpose(0, 1)


# -- packed q, k, v: nanoGPT, Hugging Face GPT-2, timm ---------------------------------------


def _is_conv1d_packed(module: Any) -> bool:
    packed = getattr(module, "c_attn", None)
    return packed is not None and hasattr(packed, "nf") and hasattr(module, "c_proj")


def _is_gpt2(module: Any) -> bool:
    """Hugging Face's GPT-2 layer: its model gives it the causal mask (`attention_mask`)."""
    return _is_conv1d_packed(module) and bool(forward_takes(module, "attention_mask"))


def _is_gpt2_own_mask(module: Any) -> bool:
    """A GPT-2 layer that takes no mask: it masks by its own causal buffer."""
    return _is_conv1d_packed(module) and not forward_takes(module, "attention_mask")


def _gpt2_weights(module: Any) -> Weights:
    blocks, biases = _thirds(module.c_attn.weight, module.c_attn.bias)  # Conv1D: x W + b
    w_o, b_o = module.c_proj.weight, module.c_proj.bias  # Conv1D: already (c, d_out)
    return _weights(blocks, biases, w_o, b_o, _heads(module, "num_heads"))


def _is_nanogpt(module: Any) -> bool:

    packed = getattr(module, "c_attn", None)
    name = type(module).__name__  # GPT-BigCode: a layout of its own
    huggingface = any(name in row.classes for row in HUGGING_FACE_LAYOUTS)
    return isinstance(packed, nn.Linear) and hasattr(module, "c_proj") and not huggingface


def _nanogpt_weights(module: Any) -> Weights:
    blocks, biases = _thirds(*linear_weights(module.c_attn))
    w_o, b_o = linear_weights(module.c_proj)
    return _weights(blocks, biases, w_o, b_o, _heads(module, "n_head", "num_heads"))


def _is_timm(module: Any) -> bool:

    return isinstance(getattr(module, "qkv", None), nn.Linear) and hasattr(module, "proj")


def _timm_weights(module: Any) -> Weights:
    """timm's ``Attention`` (timm.layers.attention): q, k, v packed in ``qkv``, then ``proj``;
    ``q_norm``, ``k_norm`` an RMS norm (the qk-norm variant) or ``nn.Identity``; ``gate`` an
    ``nn.Linear`` whose sigmoid scales the merged heads (the gate variant), or None. A
    LayerNorm as QK-norm and ``scale_norm`` are refused: no registered variant declares them.
    ``scale`` is not read: another scale is a mistake for the checks to find and name."""
    name, heads = type(module).__name__, _heads(module, "num_heads")
    blocks, biases = _thirds(*linear_weights(module.qkv))
    width = blocks[0].shape[1] // heads
    if type(getattr(module, "norm", None)).__name__ not in ("NoneType", "Identity"):
        raise ConformError(
            f"{name} with scale_norm (norm={type(module.norm).__name__}): a norm "
            "of the merged heads is not in the registered variants"
        )
    parts, values, inputs = [], {}, {}
    norms = [getattr(module, f"{w}_norm", None) for w in "qk"]
    if any(type(norm).__name__ not in ("NoneType", "Identity") for norm in norms):
        (inputs["G_q"], values["epsilon"]), (inputs["G_k"], _) = (
            norm_gains(norm, width) for norm in norms
        )
        parts.append("qk-norm")
    gate = getattr(module, "gate", None)
    if gate is not None:
        if gate.bias is not None:
            raise ConformError(
                f"{name}: a gate with a bias (qkv_bias=True): the gate variant "
                "declares no bias of its logits"
            )
        parts.append("gate")
        inputs["W_g"] = gate.weight.mT
    w_o, b_o = linear_weights(module.proj)
    b_q, b_k, b_v = biases
    return Weights(
        *blocks,
        W_o=w_o,
        b_q=b_q,
        b_k=b_k,
        b_v=b_v,
        b_o=b_o,
        heads=heads,
        variant="+".join(parts),
        values=values,
        inputs=inputs,
    )


# -- the book's classes (and this package's) -------------------------------------------------


def _is_book(module: Any) -> bool:
    if all(hasattr(module, name) for name in ("W_query", "W_key", "W_value")):
        return True
    heads = getattr(module, "heads", None)
    return heads is not None and len(heads) > 0 and all(_is_book(head) for head in heads)


def _book_projection(module: Any, name: str) -> tuple[Any, Any]:

    layer = getattr(module, name)
    if isinstance(layer, nn.Parameter):
        return layer, None  # SelfAttention_v1 stores W_q itself, d × c
    return linear_weights(layer)


def _book_weights(module: Any) -> Weights:
    if not hasattr(module, "W_query"):  # a list of heads, side by side: W_o = I
        parts = [_book_weights(head) for head in module.heads]
        if any(part.heads != 1 or part.W_o is not None for part in parts):
            raise ConformError("a list of heads must hold single-head modules without W_o")
        join = lambda xs: None if xs[0] is None else torch.cat(xs, dim=-1)  # noqa: E731
        return Weights(
            *(join([getattr(p, w) for p in parts]) for w in ("W_q", "W_k", "W_v")),
            b_q=join([p.b_q for p in parts]),
            b_k=join([p.b_k for p in parts]),
            b_v=join([p.b_v for p in parts]),
            heads=len(parts),
        )
    (w_q, b_q), (w_k, b_k), (w_v, b_v) = (
        _book_projection(module, name) for name in ("W_query", "W_key", "W_value")
    )
    if not hasattr(module, "out_proj"):
        return Weights(w_q, w_k, w_v, b_q=b_q, b_k=b_k, b_v=b_v)
    w_o, b_o = linear_weights(module.out_proj)
    weights = _weights([w_q, w_k, w_v], [b_q, b_k, b_v], w_o, b_o, _heads(module, "num_heads"))
    return _with_our_modifications(module, weights)


def _with_our_modifications(module: Any, weights: Weights) -> Weights:
    """This package's multi-head modules (`score_mods`): their window, gate and score
    modifications, read from the objects their forward uses (`ours.read_modifications`)."""
    if not hasattr(module, "score_mods"):
        return weights
    parts, values, inputs = read_modifications(module)
    window = getattr(module, "sliding_window_size", None)
    if window is not None:
        parts.insert(0, "sliding-window")
        values["w"] = window
    if getattr(module, "gate", False):  # each head's queries, then its gate's columns
        columns = per_head_parts(weights.W_q, weights.heads, 2)
        weights.W_q, inputs["W_g"] = columns
        if weights.b_q is not None:
            weights.b_q, _ = per_head_parts(weights.b_q[None], weights.heads, 2)
            weights.b_q = weights.b_q[0]
        parts.append("gate")
    weights.variant = "+".join(parts)
    weights.values, weights.inputs = values, inputs
    return weights


_PROJECTIONS = (
    ("W_query", "output", ("Q",)),
    ("W_key", "output", ("K",)),
    ("W_value", "output", ("V",)),
    ("out_proj", "input", ("C_concat",)),
)

#: GPT-2 and nanoGPT: q, k, v packed in the output of c_attn, the heads concatenated into c_proj.
_C_ATTN_C_PROJ = (("c_attn", "output", ("Q", "K", "V")), ("c_proj", "input", ("C_concat",)))

BUILT_IN: tuple[Adapter, ...] = (
    Adapter(
        "torch-mha",
        _is_mha,
        _mha_weights,
        call=_mha_call,
        mask="attn_mask",
        looks_for="nn.MultiheadAttention",
    ),
    Adapter(
        "gpt2",
        _is_gpt2,
        _gpt2_weights,
        call=layer_call,
        mask="attention_mask",
        dropout="attn_dropout",
        observe=_C_ATTN_C_PROJ,
        looks_for="c_attn as a Conv1D, c_proj, num_heads",
    ),
    Adapter(
        "gpt2-own-mask",
        _is_gpt2_own_mask,
        _gpt2_weights,
        dropout="attn_dropout",
        observe=_C_ATTN_C_PROJ,
        looks_for="the same with no attention_mask",
    ),
    Adapter(
        "nanogpt",
        _is_nanogpt,
        _nanogpt_weights,
        dropout="attn_dropout",
        observe=_C_ATTN_C_PROJ,
        looks_for="c_attn as an nn.Linear, c_proj, n_head",
    ),
    HUGGING_FACE,
    Adapter(
        "timm",
        _is_timm,
        _timm_weights,
        mask="attn_mask",
        dropout="attn_drop",
        observe=(("qkv", "output", ("Q", "K", "V")), ("proj", "input", ("C_concat",))),
        looks_for="qkv, proj, num_heads",
    ),
    GROUPED,
    GROUPED_CAUSAL,
    LATENT,
    Adapter(
        "book",
        _is_book,
        _book_weights,
        mask="mask",
        dropout="dropout",
        observe=_PROJECTIONS,
        looks_for="W_query, W_key, W_value (+ out_proj, num_heads), or heads",
        decode=with_use_cache,
    ),
    GENERATED,
    GENERATED_MASKED,
)
