"""Hugging Face's attention layers, recognised by what they hold (transformers is never imported).

Where a family keeps W_q, W_k, W_v and W_o is a row of `huggingface_tables.LAYOUTS` (separate
``q_proj`` … ``o_proj`` as Llama's and its kin's, ``out_proj`` as BART's, Phi-3's ``qkv_proj``,
GPT-NeoX's and BLOOM's ``query_key_value``, GPT-BigCode's and Falcon's own packings, BERT's
``query``, ``key``, ``value`` without an output projection); W = weight.mT, biases where the
layer has them, h from the config or the layer (a narrower ``k_proj``: grouped-query attention).
What each key of the config or attribute of the layer says is a row of `READINGS`, each as the
model itself uses it; what is not read is a row of `REFUSED`, with its reason:

- RoPE: ``config.rope_parameters`` (per layer type where it has one per type), ``rope_theta``
  its base β; the model passes the tables to the layer, so the call builds the model's own
  rotary embedding (the class beside the layer's, ``LlamaRotaryEmbedding`` for
  ``LlamaAttention``) and passes its tables at the positions 0 … n − 1 (``default`` rope, or
  ``llama3``: the llama3-rope variant; ``yarn``: the yarn-rope variant, its values read as
  transformers reads them; ``linear``: the linear-rope variant; the other scaled kinds,
  ``dynamic`` and ``longrope``, change the angles with the sequence's length in ways no
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
  head's queries then its gate's logits (Qwen 3.5), or a ``gate_proj`` of its own (AFMoE, HRM);
- the scale: ``scaling`` must be 1/√c_h (Gemma's ``query_pre_attn_scalar`` equal to
  ``head_dim``): another scale is declared by no registered variant, and is refused.

After a cache (`derive.conformance.checks.cached`), the decoder layers are given their tokens in
turn, one ``DynamicCache`` carried from call to call (the full cache, not a sliding window's
trimmed one), each call at its tokens' positions.

The call builds the mask the model would build (causal where the layer's ``is_causal`` says
so, the window, and the checks' own mask), additive with ``finfo.min`` where a query may not
attend, as Hugging Face's masks are; a query with nothing to attend then gets uniform
weights, finite.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from . import huggingface_reading as H
from . import huggingface_tables as T
from .adapters import Adapter, Weights, linear_weights
from .target import ConformError

__all__ = ["HUGGING_FACE", "layer_call"]


def _is_layer(module: Any) -> bool:
    """A layer of a layout the tables know, with its number of heads where its row says, and
    its config where its row needs one (a module of one's own with Llama's names keeps none;
    BLOOM's layer keeps none either: its forward takes alibi, its heads are its own)."""
    layout = T.layout_of(module)
    if layout is None:
        return False
    if layout.needs_config and getattr(module, "config", None) is None:
        return H.takes_alibi(module) and isinstance(getattr(module, "num_heads", None), int)
    try:
        return isinstance(layout.heads(module), int)
    except AttributeError:
        return False


def _refuse(module: Any) -> None:
    """A layer the tables say is not read (`REFUSED`)."""
    name = type(module).__name__
    for test, why in T.REFUSED:
        if test(module):
            raise ConformError(f"{name}: {why}; not read")


def _layer_weights(module: Any) -> Weights:
    """The layer's weights where its row of `LAYOUTS` says, and its variant as each row of
    `READINGS` reads it."""
    layout = T.layout_of(module)
    assert layout is not None  # recognised
    _refuse(module)
    heads, width = layout.heads(module), H.head_width(module)
    found = layout.cut(module, heads, width)
    parts, values, inputs = [], {}, {}
    for _, read in T.READINGS:
        for said in read(module, found, width):
            parts.append(said.variant)
            values |= said.values
            inputs |= said.inputs
    (w_q, w_k, w_v), (b_q, b_k, b_v) = found.weights, found.biases
    output = None if layout.output is None else getattr(module, layout.output)
    w_o, b_o = (None, None) if output is None else linear_weights(output)
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
    # one mask per sequence of the batch, as the model gives it (XGLM checks its shape)
    return torch.where(keep, 0.0, fill).to(like).expand(like.shape[0], 1, n, n)


def layer_call(module: Any, x: Any, allowed: Any) -> Any:
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
    # (a layer that adds it, BLOOM's, is called with its bias by `layer_call`)
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
    call=layer_call,
    mask="attention_mask",
    looks_for="; ".join(row.family for row in T.LAYOUTS),
    conventions=_conventions,
    decode=_layer_decode,
    note="note: the huggingface adapter gives each layer the mask its model would build (causal "
    "where is_causal, the window of sliding_window): the layer's use of a mask is checked, not "
    "its model's making of it",
)
