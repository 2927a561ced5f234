"""Hugging Face `transformers` models on this package's fast path: an attention implementation
for `transformers`' `AttentionInterface`, and BLOOM's attention as a module of this package.

`transformers` lets a model's attention layers call an implementation chosen by name
(``attn_implementation="eager"``, ``"sdpa"``, …): each layer projects, normalises and rotates
its queries and keys itself, then hands q (b, h, n, c_h), k and v (b, g, s, c_h) to the
implementation, with its own `scaling` (Gemma's 1/√query_pre_attn_scalar), `sliding_window`,
`softcap` (Gemma 2) and sinks (`s_aux`, GPT-OSS); Qwen 3.5's gate is applied by the layer after
it. `register()` adds this package's under the name ``"attention_derive"``::

    import attention.huggingface as hf
    model = AutoModelForCausalLM.from_config(config, attn_implementation=hf.register())

The model then computes what its eager implementation computes (tests/attention/
test_huggingface.py: Gemma 2, Gemma 3, GPT-OSS and Qwen 3.5, built from small configurations with
random weights; logits and gradients), with the exact backward of `attention._fused` and no n×n
matrix, grouped keys never repeated. The mask `transformers` builds is read as it comes: None
(causal, and the layer's window), or boolean / additive (b, 1, n, s) (True or 0: may attend).

BLOOM's attention does not go through that interface (its layer adds ALiBi and the residual
itself): `from_bloom(layer)` gives a `MultiHeadAttention(alibi=True)` holding its weights, which
computes its output before the residual. BLOOM adds μ_ℓ p to the scores where ALiBi's paper
subtracts μ_ℓ (m − p); the two differ by μ_ℓ m, the same for every key of a row, which leaves
the softmax unchanged (`derive latex --variant alibi`, shift invariance).

`transformers` is not a dependency of this package: it is imported when these functions run.
"""

import typing

import torch
from torch import Tensor

from . import _core
from .modules import MultiHeadAttention

if typing.TYPE_CHECKING:  # for the annotation only: transformers is imported where used
    from transformers.models.bloom.modeling_bloom import BloomAttention

__all__ = ["NAME", "attention_forward", "register", "from_bloom"]

#: The name `register` gives this package's implementation in `transformers`.
NAME = "attention_derive"


def _allowed(mask: Tensor | None, n: int, s: int) -> Tensor | None:
    """`transformers`' attention mask (b, 1, n, s), boolean (True: may attend) or additive (0:
    may attend; a large negative number or −∞: may not), as this package's allowed (b, n, s)."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    return mask[..., -n:, -s:].squeeze(-3)


def attention_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: Tensor | None = None,
    is_causal: bool | None = None,
    **kwargs: object,
) -> tuple[Tensor, Tensor | None]:
    """`transformers`' attention implementation signature: query (b, h, n, c_h), key and value
    (b, g, s, c_h) (after the layer's cache), its mask, and the layer's options -> (attention
    output (b, n, h, c_h), None: the weights are never formed).

    scaling: the factor of q·k (None: 1/√c_h). sliding_window w: query m attends its last w keys
    (used where no mask is given; a given mask already holds it). softcap: Gemma 2's cap.
    s_aux: GPT-OSS's sinks (h,). is_causal: the layer's (default: `module.is_causal`, else True);
    with no mask, causal attention whose new queries are the last n of the s positions."""
    n, s = query.shape[-2], key.shape[-2]
    scale = _core.scale(query.shape[-1]) if scaling is None else float(scaling)
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    allowed = _allowed(attention_mask, n, s)
    if allowed is not None:
        causal, window = False, None  # the mask says it all
    else:
        window = sliding_window if causal else None
    out = _core.attend(
        query,
        key,
        value,
        scale=scale,
        heads=True,
        causal=causal,
        window=window,
        offset=s - n,
        allowed=allowed,
        dropout_p=float(dropout),
        softcap=softcap,
        sinks=None if s_aux is None else s_aux.to(query.dtype),
    )
    return out.transpose(1, 2).contiguous(), None


def register(name: str = NAME) -> str:
    """Add `attention_forward` to `transformers`' attention implementations (and the boolean
    masks of its sdpa implementation, which it reads) under `name`; returns the name, to pass as
    ``attn_implementation=``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


@torch.no_grad()
def from_bloom(layer: "BloomAttention", *, context_length: int = 2048) -> MultiHeadAttention:
    """BLOOM's attention layer (`BloomAttention`) as `MultiHeadAttention(alibi=True)`: the same
    weights, the same slopes (Press et al.'s, BLOOM's `build_alibi_tensor`), causal; its output
    is BLOOM's before the residual is added (BLOOM's `dropout_add` adds it in the layer).

    BLOOM's fused `query_key_value` (3c × d) holds, for each head, its queries, keys and values
    one after the other (c_h rows each); they are split into `W_query`, `W_key`, `W_value`."""
    needed = ("num_heads", "head_dim", "query_key_value", "dense", "attention_dropout")
    missing = [name for name in needed if not hasattr(layer, name)]
    if missing:
        raise TypeError(
            f"from_bloom: layer must be BLOOM's attention layer (transformers' BloomAttention, "
            f"model.transformer.h[i].self_attention), got {type(layer).__name__}, which has no "
            f"{', '.join(missing)}"
        )
    heads, width = layer.num_heads, layer.head_dim
    fused = layer.query_key_value
    d = fused.in_features
    c = heads * width
    module = MultiHeadAttention(
        d,
        c,
        context_length,
        float(layer.attention_dropout.p),
        heads,
        qkv_bias=fused.bias is not None,
        alibi=True,
    )
    module = module.to(dtype=fused.weight.dtype, device=fused.weight.device)
    weight = fused.weight.view(heads, 3, width, d)  # (h, q|k|v, c_h, d)
    for part, linear in enumerate((module.W_query, module.W_key, module.W_value)):
        linear.weight.copy_(weight[:, part].reshape(c, d))
        if fused.bias is not None:
            linear.bias.copy_(fused.bias.view(heads, 3, width)[:, part].reshape(c))
    module.out_proj.weight.copy_(layer.dense.weight)
    module.out_proj.bias.copy_(layer.dense.bias)
    return module
