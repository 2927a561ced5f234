"""Hugging Face's attention layers, recognised by what they hold (transformers is never imported).

The decoder layers of Llama, Mistral, Qwen 2, Qwen 3, Qwen 3.5 (its full-attention layers),
Gemma 2, Gemma 3, GPT-OSS, OLMo 2 and 3 and their kin, and ViT's, keep ``q_proj``, ``k_proj``,
``v_proj`` (``nn.Linear``, W = weight.mT, biases where the config has them) and ``o_proj``, with
the sizes in ``config`` (``num_attention_heads``; ``num_key_value_heads`` makes ``k_proj`` narrower:
grouped-query attention). Phi-3 packs the three in ``qkv_proj``; GPT-NeoX and BLOOM pack each
head's query, key and value in turn in ``query_key_value`` (their output projection: ``dense``);
BERT's self-attention names them ``query``, ``key``, ``value`` and leaves the output projection
to the next module (W_o = I).
The variant is read from the layer and its config, each as the model itself uses it:

- RoPE: ``config.rope_parameters`` (per layer type where it has one per type), ``rope_theta``
  its base β; the model passes the tables to the layer, so the call builds the model's own
  rotary embedding (the class beside the layer's, ``LlamaRotaryEmbedding`` for
  ``LlamaAttention``) and passes its tables at the positions 0 … n − 1 (``default`` rope, or
  ``llama3``: the llama3-rope variant; the other scaled kinds change the angles in ways no
  registered variant declares);
  ``partial_rotary_factor`` (GPT-NeoX's ``rotary_pct``) below 1 rotates each head's first
  c_r = int(head_dim · factor) features: the partial-rope variant; where the model's own
  ``rotate_half`` pairs neighbouring features (Cohere, GLM; a probe tells), the
  interleaved-rope variant;
- QK-norm: ``q_norm``, ``k_norm`` (gains ``weight``, ε ``variance_epsilon`` or ``eps``); Gemma 3
  and Qwen 3.5 multiply by 1 + weight, which a probe of the norm tells apart; a ``q_norm`` of
  all heads' features (OLMo 2 and 3, which normalise before splitting the heads) is the
  whole-qk-norm variant;
- a window: the layer's ``sliding_window`` (None on its full-attention layers), or the config's
  where the layer has no attribute of that name (Mistral);
- RoPE or none asked of the layer: its family's rule where the layer decides from its window
  (`huggingface_reading.ROTATES`: Cohere 2's and EXAONE 4's global layers do not rotate; EXAONE
  4's keep the config's window unused, ``is_sliding`` False), else ``use_rope`` (Llama 4's and
  SmolLM3's ``no_rope_layers``); the model's tables are given to every layer of a model that
  has them, as the model gives them;
- Llama 4: its complex tables e^{iθ} on neighbouring pairs (the interleaved-rope variant), its
  ``qk_norm`` without gains (l2-qk-norm), its chunks (``attention_chunk_size`` on a
  ``chunked_attention`` layer: the chunked variant, and the model's mask cut at the chunks) and
  its temperature (``attn_temperature_tuning`` on a layer without RoPE: temperature-tuning, F
  ``floor_scale``, α ``attn_scale``);
- softcapping: ``attn_logit_softcapping`` (Gemma 2 and 3);
- ALiBi: a layer whose forward takes ``alibi`` (BLOOM); its bias μ_ℓ p, from its model's own
  ``build_alibi_tensor`` (the same softmax as −μ_ℓ (m − p): a row's constant cancels), and its
  residual given as zeros (BLOOM adds it inside the layer);
- sinks: the parameter ``sinks`` (GPT-OSS); the output gate: a ``q_proj`` twice as wide, each
  head's queries then its gate's logits (Qwen 3.5);
- the scale: ``scaling`` must be 1/√c_h (Gemma's ``query_pre_attn_scalar`` equal to
  ``head_dim``): another scale is declared by no registered variant, and is refused.

After a cache (`derive.bridge.conform.cached`), the decoder layers are given their tokens in
turn, one ``DynamicCache`` carried from call to call (the full cache, not a sliding window's
trimmed one), each call at its tokens' positions.

The call builds the mask the model would build (causal where the layer's ``is_causal`` says
so, the window, and the checks' own mask), additive with ``finfo.min`` where a query may not
attend, as Hugging Face's masks are; a query with nothing to attend then gets uniform
weights, finite.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from . import huggingface_reading as H
from .adapters import Adapter, Weights, norm_gains, per_head_parts
from .target import ConformError

__all__ = ["HUGGING_FACE"]

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
_BERT = ("query", "key", "value")  # BERT's self-attention: no output projection of its own


def _heads_then_two(w: Any, heads: int, groups: int, width: int) -> list:
    """[Q | K | V]: the queries of every head, then the groups' keys, then their values
    (GPT-BigCode's and Falcon's multi-query layers, one group)."""
    c, kv = heads * width, groups * width
    return [w[..., :c], w[..., c : c + kv], w[..., c + kv : c + 2 * kv]]


def _each_head_three(w: Any, heads: int, groups: int, width: int) -> list:
    """Each head's q, k, v in turn (GPT-BigCode's and Falcon's layers without grouping)."""
    return per_head_parts(w, heads, 3)


def _each_group(w: Any, heads: int, groups: int, width: int) -> list:
    """Each group's queries, then its key, then its value (Falcon's new decoder layers)."""
    per = heads // groups
    parts = w.unflatten(-1, (groups, per + 2, width))
    queries, keys, values = parts[..., :per, :], parts[..., per, :], parts[..., -1, :]
    return [queries.flatten(-3), keys.flatten(-2), values.flatten(-2)]


#: The families whose q, k, v are packed in one projection: by the layer's class, (the packed
#: projection, the output projection, the layout as the layer reads it, its groups of keys).
PACKED = {
    "GPTBigCodeAttention": (
        "c_attn",
        "c_proj",
        lambda m: _heads_then_two if m.multi_query else _each_head_three,
        lambda m: m.kv_heads,
    ),
    "FalconAttention": (
        "query_key_value",
        "dense",
        lambda m: (
            _each_group
            if m.new_decoder_architecture
            else _heads_then_two
            if m.multi_query
            else _each_head_three
        ),
        lambda m: m.num_kv_heads if m.new_decoder_architecture else 1 if m.multi_query else None,
    ),
}


def _packed(module: Any) -> tuple | None:
    return PACKED.get(type(module).__name__)


def _is_layer(module: Any) -> bool:
    config = getattr(module, "config", None)
    if _packed(module) is not None:
        return hasattr(config, "num_attention_heads")
    packed = hasattr(module, "qkv_proj") and hasattr(module, "o_proj")
    per_head = hasattr(module, "query_key_value") and hasattr(module, "dense")
    separate = all(hasattr(module, name) for name in _PROJECTIONS)
    bert = all(hasattr(module, name) for name in _BERT)
    configured = hasattr(config, "num_attention_heads")
    if per_head:  # BLOOM's layer keeps no config: its forward takes alibi and a residual
        return configured or (H.takes_alibi(module) and isinstance(module.num_heads, int))
    return (separate or packed or bert) and configured


def _projections(module: Any, heads: int) -> tuple[list, list, Any]:
    """(W_q, W_k, W_v), their biases, and the gate's W_g (or None)."""
    packed = _packed(module)
    if packed is not None:
        name, _, layout, groups = packed
        layer, width = getattr(module, name), H.head_width(module)
        cut = layout(module)
        kv = groups(module) or heads
        ws = cut(layer.weight.mT, heads, kv, width)
        bs = [None] * 3 if layer.bias is None else cut(layer.bias, heads, kv, width)
        return ws, bs, None
    if hasattr(module, "query_key_value"):  # GPT-NeoX, BLOOM: each head's q, k, v in turn
        layer = module.query_key_value
        bs = [None] * 3 if layer.bias is None else per_head_parts(layer.bias, heads, 3)
        return per_head_parts(layer.weight.mT, heads, 3), bs, None
    if hasattr(module, "qkv_proj"):  # Phi-3: q, then k, then v
        w, b, c = module.qkv_proj.weight.mT, module.qkv_proj.bias, heads * H.head_width(module)
        cuts = (
            slice(0, c),
            slice(c, c + (w.shape[1] - c) // 2),
            slice(c + (w.shape[1] - c) // 2, None),
        )
        return [w[:, cut] for cut in cuts], [None if b is None else b[cut] for cut in cuts], None
    names = _PROJECTIONS[:3] if hasattr(module, "q_proj") else _BERT
    ws = [getattr(module, name).weight.mT for name in names]
    bs = [getattr(module, name).bias for name in names]
    w_q, c = ws[0], heads * H.head_width(module)
    if w_q.shape[1] == 2 * c:  # each head's queries, then its gate's logits
        if bs[0] is not None:
            raise ConformError(
                f"{type(module).__name__}: a gated q_proj with a bias: the gate "
                "variant declares no bias of its logits"
            )
        ws[0], w_g = per_head_parts(w_q, heads, 2)
        return ws, bs, w_g
    return ws, bs, None


def _layer_weights(module: Any) -> Weights:
    name = type(module).__name__
    heads, width = H.heads(module), H.head_width(module)
    if not math.isclose(H.scaling(module), width**-0.5, rel_tol=1e-9):
        raise ConformError(
            f"{name} scales the scores by {H.scaling(module):.6g}, not 1/√c_h = "
            f"1/√{width}: no registered variant declares that scale"
        )
    (w_q, w_k, w_v), (b_q, b_k, b_v), w_g = _projections(module, heads)
    parts, values, inputs = [], {}, {}
    beta = H.beta(module)
    if beta is not None:
        parts.append("rope")
        values["beta"] = beta
        if H.rotated_width(module) is not None:  # GPT-NeoX's rotary_pct, Qwen 3.5's factor
            parts.append("partial-rope")
            values["c_r"] = H.rotated_width(module)
        if H.interleaved(module):  # Cohere, GLM: neighbouring features paired
            parts.append("interleaved-rope")
        smoothing = H.llama3(module)
        if smoothing is not None:  # Llama 3.1's frequencies
            parts.append("llama3-rope")
            values |= smoothing
    if getattr(module, "q_norm", None) is not None:
        widths = (width, w_q.shape[1], w_k.shape[1])
        parts.append(_qk_norm(module, widths, inputs, values))
    if getattr(module, "qk_norm", None) is not None:  # Llama 4's L2Norm: no gains
        parts.append("l2-qk-norm")
        values["epsilon"] = float(module.qk_norm.eps)
    if H.chunk(module) is not None:
        parts.append("chunked")
        values["chi"] = H.chunk(module)
    tempered = H.temperature(module)
    if tempered is not None:
        parts.append("temperature-tuning")
        values |= tempered
    if H.window(module) is not None:
        parts.append("sliding-window")
        values["w"] = H.window(module)
    if getattr(module, "attn_logit_softcapping", None) is not None:
        parts.append("softcap")
        values["kappa"] = module.attn_logit_softcapping
    if H.takes_alibi(module):  # BLOOM: its model's slopes, read off its bias at position 1
        parts.append("alibi")
        inputs["Mu"] = H.alibi(module, 2, torch.float64)[:, 0, 1][None]
    if getattr(module, "sinks", None) is not None:
        parts.append("sinks")
        inputs["Zeta"] = module.sinks[None]
    if w_g is not None:
        parts.append("gate")
        inputs["W_g"] = w_g
    packed = _packed(module)
    o_proj = getattr(module, packed[1]) if packed else None
    o_proj = o_proj or getattr(module, "o_proj", None) or getattr(module, "dense", None)
    w_o, b_o = (None, None) if o_proj is None else (o_proj.weight.mT, o_proj.bias)
    return Weights(
        w_q,
        w_k,
        w_v,
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


def _qk_norm(module: Any, widths: tuple[int, int, int], inputs: dict, values: dict) -> str:
    """QK-norm's gains and ε put in `inputs` and `values`, and its variant: qk-norm where
    ``q_norm`` normalises one head's c_h features (Qwen 3, Gemma 3), whole-qk-norm where it
    normalises the h·c_h of all heads (OLMo 2 and 3) and ``k_norm`` the g·c_h of all keys.
    `widths`: (c_h, h·c_h, g·c_h)."""
    width, c, c_kv = widths
    features = module.q_norm.weight.shape[-1]
    if features not in (width, c):
        raise ConformError(
            f"{type(module).__name__}: q_norm normalises {features} features, "
            f"neither one head's {width} (qk-norm) nor all heads' {c} "
            "(whole-qk-norm)"
        )
    whole = features != width
    k_width = c_kv if whole else width
    if module.k_norm.weight.shape[-1] != k_width:
        raise ConformError(
            f"{type(module).__name__}: k_norm normalises "
            f"{module.k_norm.weight.shape[-1]} features, q_norm {features}: "
            f"expected {k_width}, the keys normalised as the queries"
        )
    inputs["G_q"], values["epsilon"] = norm_gains(module.q_norm, features)
    inputs["G_k"], _ = norm_gains(module.k_norm, k_width)
    return "whole-qk-norm" if whole else "qk-norm"


def _mask(module: Any, n: int, allowed: Any, like: Any) -> Any:
    """The additive mask the model would give: causal, windowed, and `allowed`."""
    m, p = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = torch.ones(n, n, dtype=torch.bool)
    if getattr(module, "is_causal", True):
        keep &= p <= m
    window = H.window(module)
    if window is not None:
        keep &= p > m - window
    size = H.chunk(module)
    if size is not None:  # Llama 4's chunks: the keys of the query's own
        keep &= p // size == m // size
    if allowed is not None:
        keep &= allowed.cpu()
    # finfo.min, as Hugging Face fills; float32's in a float64 layer, whose eager softmax
    # runs in float32 (float64's would overflow there)
    fill = max(torch.finfo(like.dtype).min, torch.finfo(torch.float32).min)
    return torch.where(keep, 0.0, fill).to(like)[None, None]


def _layer_call(module: Any, x: Any, allowed: Any) -> Any:
    """The layer as its model calls it: the rotary tables at positions 0 … n − 1 (the model's
    own embedding, in float32 like the model's, then x's dtype) and the model's mask."""
    if x.ndim == 2:
        raise ValueError(f"Hugging Face layers take a batch (batch, n, d), not {tuple(x.shape)}")
    n = x.shape[-2]
    mask = _mask(module, n, allowed, x)
    if H.takes_alibi(module):  # BLOOM adds the residual itself: give it zeros
        bias = H.alibi(module, n, x.dtype, x.shape[0]).to(x.device)
        return module(x, residual=torch.zeros_like(x), alibi=bias, attention_mask=mask)
    positions = torch.arange(n, device=x.device)[None]
    return module(x, attention_mask=mask, **_positions_given(module, x, positions))


def _positions_given(module: Any, x: Any, positions: Any) -> dict:
    """The rotary tables as the model gives them to this layer: those of its model's rotary
    embedding where the model has one, even to a layer that does not rotate (it decides itself:
    Cohere 2's and EXAONE 4's global layers unpack them first); None where the forward names
    them and the model has none; nothing where the forward takes none; and `alibi=None` to a
    forward that takes it without adding it (Falcon's RoPE layers)."""

    parameters = inspect.signature(module.forward).parameters
    # Falcon's forward takes `alibi` whether its layer adds ALiBi or not: None where not
    # (a layer that adds it, BLOOM's, is called with its bias by `_layer_call`)
    given = {"alibi": None} if "alibi" in parameters else {}
    takes = "position_embeddings" in parameters
    if H.beta(module) is not None or (takes and H.rope(module) is not None):
        return given | {"position_embeddings": _tables(module, x, positions)}
    return given | ({"position_embeddings": None} if takes else {})


def _tables(module: Any, x: Any, positions: Any) -> Any:
    """The model's own rotary tables at `positions` (1, n'): computed in float32 as the
    model's are, then in x's dtype ((cos, sin); Llama 4's complex e^{iθ} as it is)."""
    embedding, takes_type = H.rotary(module)
    embedding.to(x.device)
    extra = {"layer_type": H.layer_type(module)} if takes_type else {}
    found = embedding(x.float(), positions, **extra)
    if isinstance(found, torch.Tensor):  # Llama 4's e^{iθ}: complex, kept so
        return found.to(x.device)
    return tuple(t.to(x.dtype) for t in found)


def _layer_decode(module: Any, x: Any, parts: tuple[slice, ...]) -> Any:
    """The layer given its tokens in turn: one DynamicCache (from transformers as the caller
    imported it: it is never imported here) carried from call to call, each call at its
    tokens' positions with its rows of the model's mask; why not, for a layer that takes no
    cache, an encoder's, or one that adds its ALiBi and residual itself (BLOOM)."""
    import sys

    takes = inspect.signature(module.forward).parameters
    keyword = next((k for k in ("cache", "past_key_values", "layer_past") if k in takes), None)
    library = sys.modules.get("transformers")
    if keyword is None or library is None:
        return f"{type(module).__name__}.forward takes no cache"
    if H.takes_alibi(module) or not getattr(module, "is_causal", True):
        return "the adapter gives a cache to causal layers without ALiBi only (not BLOOM's)"
    cache, n = library.DynamicCache(), x.shape[-2]
    mask, outs = _mask(module, n, None, x), []
    for part in parts:
        given = {keyword: cache, "attention_mask": mask[..., part, : part.stop]}
        positions = torch.arange(n, device=x.device)[None, part]
        given |= _positions_given(module, x, positions)
        out = module(x[:, part], **given)
        outs.append(out[0] if isinstance(out, tuple) else out)
    return torch.cat(outs, dim=1)


def _conventions(module: Any) -> dict:
    """What Hugging Face's models do whatever the layer's dtype: the rotary tables computed in
    float32 (their rotary embeddings turn autocast off and compute in float32), and the softmax
    of the eager implementation (and of BLOOM's layer) in float32."""
    found = {}
    if H.beta(module) is not None:
        found["tables"] = "float32"
    implementation = getattr(getattr(module, "config", None), "_attn_implementation", "eager")
    if H.takes_alibi(module) or implementation in (None, "eager"):
        found["softmax"] = "float32"
    return found


HUGGING_FACE = Adapter(
    "huggingface",
    _is_layer,
    _layer_weights,
    call=_layer_call,
    mask="attention_mask",
    looks_for="q_proj, k_proj, v_proj, o_proj (or qkv_proj, query_key_value and dense, or "
    "query, key, value) and config.num_attention_heads",
    conventions=_conventions,
    decode=_layer_decode,
    note="note: the huggingface adapter gives each layer the mask its model would build (causal "
    "where is_causal, the window of sliding_window): the layer's use of a mask is checked, not "
    "its model's making of it",
)
