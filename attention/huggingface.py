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

`from_hf(layer, rotary)` reads any layer of the families in its table (`FAMILIES`: Llama,
Qwen 3, Gemma 2 and 3, Llama 4's four kinds of layer, Qwen 3.5's full-attention layers; BLOOM's
through `from_bloom`) into this package's `GroupedQueryAttention`, with what the layer and its
config say about that layer (its window, chunks, RoPE or none, temperature, QK-norm, scale,
softcap, gate); ``from_hf(layer, rotary)(x)`` gives the layer's output on its input x (tests:
every layer of each model). A family not in the table, or a layer with what the module cannot
hold (GPT-OSS's biases), is refused by name.

`transformers` is not a dependency of this package: it is imported when these functions run.
"""

import dataclasses
import inspect
import typing

import torch
from torch import Tensor

from . import _core, _modify
from . import mods as M
from .modules import MultiHeadAttention

if typing.TYPE_CHECKING:  # for the annotation only: transformers is imported where used
    from transformers.models.bloom.modeling_bloom import BloomAttention

__all__ = ["NAME", "attention_forward", "register", "from_bloom", "from_hf", "FromHF", "FAMILIES"]

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
    """`transformers`' attention implementation signature: the layer's queries, keys and values
    (after its cache), its mask and its options, attended on this package's fast path. Inputs
    are not checked as this package's functions check theirs: `transformers` built them.

    Args:
        module: the attention layer that calls it; its `is_causal` is read.
        query: the queries, `(b, h, n, c_h)`, projected, normalised and rotated by the layer.
        key: the keys, `(b, g, s, c_h)` (g divides h), the cache's included.
        value: the values, `(b, g, s, c_h)`.
        attention_mask: the mask `transformers` built, `(b, 1, n, s)` (its last n rows and s
            columns read): boolean (True: may attend) or additive (0: may attend; a large
            negative number or −∞: may not); None for causal attention (if the layer is) with
            the window.
        scaling: the factor of q·k (Gemma's 1/√query_pre_attn_scalar); None: 1/√c_h.
        dropout: the rate of dropout on the weights, applied as given (the layers pass 0.0
            outside training).
        sliding_window: w: query m attends its last w keys, where no mask is given (a given
            mask already holds it); None for none.
        softcap: κ, Gemma 2's cap: each scaled score ω̃ replaced by κ tanh(ω̃/κ); None for none.
        s_aux: GPT-OSS's sinks, one logit per head `(h,)`; None for none.
        is_causal: whether the layer is causal; None: `module.is_causal`, else True. With no
            mask, causal attention whose new queries are the last n of the s positions.
        **kwargs: the layer's other keywords, ignored.

    Returns:
        The pair (the attention output `(b, n, h, c_h)`, None: the weights are never formed).

    Raises:
        ValueError: when sliding_window is not a positive int, softcap is not a positive
            number, or, with no mask and a causal layer, s < n.
    """
    n, s = query.shape[-2], key.shape[-2]
    scale = _core.scale(query.shape[-1]) if scaling is None else float(scaling)
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    allowed = _allowed(attention_mask, n, s)
    if allowed is not None:
        causal, window = False, None  # the mask says it all
    else:
        window = sliding_window if causal else None
    mods = M.modifications(
        causal=causal,
        offset=s - n,
        window=window,
        softcap=softcap,
        sinks=None if s_aux is None else s_aux.to(query.dtype),
    )
    out = _core.attend(
        query,
        key,
        value,
        scale=scale,
        heads=True,
        mods=mods,
        allowed=allowed,
        dropout_p=float(dropout),
    )
    return out.transpose(1, 2).contiguous(), None


def register(name: str = NAME) -> str:
    """Add `attention_forward` to `transformers`' attention implementations (and the boolean
    masks of its sdpa implementation, which it reads) under `name`.

    Args:
        name: the implementation's name; `NAME`, ``"attention_derive"``, by default.

    Returns:
        The name, to pass as ``attn_implementation=``.

    Raises:
        ImportError: when `transformers` is not installed.
    """
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
    one after the other (c_h rows each); they are split into `W_query`, `W_key`, `W_value`.

    Args:
        layer: BLOOM's attention layer, `model.transformer.h[i].self_attention`.
        context_length: the most tokens the module takes (the size of its causal mask).

    Returns:
        A `MultiHeadAttention` with the layer's weights, dtype and device.

    Raises:
        TypeError: when layer lacks what `BloomAttention` has (`num_heads`, `head_dim`,
            `query_key_value`, `dense`, `attention_dropout`).
        ValueError: when context_length is not a positive int.
    """
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


# ---------------------------------------------------------------------------------------------
# A Hugging Face attention layer as this package's module


@dataclasses.dataclass(frozen=True)
class Family:
    """How one family's attention layer is read (one row of `FAMILIES`).

    norm_offset: the QK-norm's gains are 1 + its weight (Gemma 3's, Qwen 3.5's) or the weight
    itself (0). interleaved: its RoPE rotates the pairs (2i, 2i + 1) (Llama 4's complex tables),
    read as the book's halves by reordering each head's rows of q_proj and k_proj alike (the
    scores are the same sums). gate: q_proj holds each head's queries then its gate's logits
    (Qwen 3.5)."""

    norm_offset: float = 0.0
    interleaved: bool = False
    gate: bool = False


#: The families `from_hf` reads, by their attention layer's class; what differs between their
#: layers (a window, chunks, RoPE or none, the temperature) is read from the layer and its config.
FAMILIES = {
    "LlamaAttention": Family(),
    "Qwen3Attention": Family(),
    "Gemma2Attention": Family(),
    "Gemma3Attention": Family(norm_offset=1.0),
    "Llama4TextAttention": Family(interleaved=True),
    "Qwen3_5Attention": Family(norm_offset=1.0, gate=True),
}


class FromHF(torch.nn.Module):
    """A Hugging Face attention layer as this package's `GroupedQueryAttention` (`attention`),
    called as ``module(x)`` on the layer's input x `(*batch, n, d)`, its positions 0 … n − 1,
    causal, with the model's rotary embedding: the layer's output (before the residual).
    `from_hf` builds it.

    Args:
        attention: the `GroupedQueryAttention` holding the layer's weights.
        rotary: the model's rotary embedding (``model.model.rotary_emb``), called on (x,
            positions) and giving cos and sin, each `(1, n, c_h)` (or the rotated width), or
            Llama 4's complex e^{iθ}; None for a layer without RoPE.
        layer_type: passed to the rotary embedding as its third argument, where it keeps one
            per kind of layer (Gemma 3's ``"sliding_attention"`` and ``"full_attention"``);
            None: not passed.
        interleaved: the rotary embedding gives complex angles of the pairs (2i, 2i + 1)
            (Llama 4's), read as the book's cos and sin halves (W_query's and W_key's rows
            reordered to match, as `from_hf` does).
        width: c_r, the rotated features of a head (partial RoPE): the first c_r columns of cos
            and sin; None: all.
    """

    def __init__(self, attention, rotary, *, layer_type=None, interleaved=False, width=None):
        super().__init__()
        self.attention = attention
        self.rotary = rotary
        self.layer_type = layer_type
        self.interleaved = interleaved
        self.width = width  # the rotated features of a head (partial RoPE), None: all

    def forward(self, x: Tensor) -> Tensor:
        """The layer's output on its input x, causal, at positions 0 … n − 1.

        Args:
            x: the layer's input, `(*batch, n, d)`, d the model's hidden size.

        Returns:
            The layer's output before the residual, `(*batch, n, d)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with the layer's d.
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
        n = x.shape[-2]
        blocked = ~_core_causal(n, x.device)
        if self.rotary is None:
            return self.attention(x, blocked)
        positions = torch.arange(n, device=x.device)[None]
        given = (x, positions) if self.layer_type is None else (x, positions, self.layer_type)
        found = self.rotary(*given)
        if self.interleaved:  # e^{iθ}: the pairs' angles, as the book's halves
            angles = found[0] if found.dim() == 3 else found
            cos = torch.cat([angles.real, angles.real], dim=-1)
            sin = torch.cat([angles.imag, angles.imag], dim=-1)
        else:
            cos, sin = found[0][0], found[1][0]  # (batch 1, n, c_r) -> (n, c_r)
        if self.width is not None:
            cos, sin = cos[..., : self.width], sin[..., : self.width]
        return self.attention(x, blocked, cos.to(x.dtype), sin.to(x.dtype))


def _core_causal(n: int, device) -> Tensor:
    return _modify.allowed((M.Causal(),), M.Block(0, n, 0, n), device)  # pyright: ignore[reportReturnType]


@torch.no_grad()
def from_hf(layer: torch.nn.Module, rotary: torch.nn.Module | None = None) -> torch.nn.Module:
    """A Hugging Face attention layer as this package's module, with its weights: `from_bloom`'s
    for BLOOM's, else a `FromHF` holding a `GroupedQueryAttention` built from what the layer and
    its config say about this layer — its heads and groups, its scale (`scaling`: Gemma's
    1/√query_pre_attn_scalar), its QK-norm (with gains, 1 + gains, or none: Llama 4's L2 norm),
    its window (`sliding_window`), Gemma 2's softcap, Llama 4's chunks (`attention_chunk_size`
    on a `chunked_attention` layer) and temperature (`attn_temperature_tuning` on a layer
    without RoPE), Qwen 3.5's gate. A layer of a family not read is refused by name.

    The recurrent layers are read too: a Gated DeltaNet (`LINEAR_FAMILIES`) or Kimi Delta
    Attention layer (`KDA_FAMILIES`) into a `FromHFLinear`, a Mamba-2 or Mamba mixer
    (`SSM_FAMILIES`, `MAMBA_FAMILIES`) into a `FromHFSSM`.

    Args:
        layer: the model's layer (``model.model.layers[i].self_attn``, or BLOOM's
            `BloomAttention`, or a recurrent layer).
        rotary: the model's rotary embedding (``model.model.rotary_emb``), needed for a layer
            with RoPE; None otherwise (not read for a layer without RoPE).

    Returns:
        The module, with the layer's weights, dtype and device: a `FromHF`, `from_bloom`'s
            `MultiHeadAttention` for BLOOM (context_length 2048), or a `FromHFLinear` or
            `FromHFSSM` for a recurrent layer.

    Raises:
        TypeError: when the layer's class is not read.
        ValueError: when the layer has RoPE and rotary is None, has a bias on a projection it
            does not read, or (a recurrent layer) another activation than SiLU or tensors the
            module does not hold.
    """
    from .grouped import GroupedQueryAttention

    source: typing.Any = layer  # a Hugging Face layer: its attributes as it has them
    kind = type(source).__name__
    if kind == "BloomAttention":
        return from_bloom(source)
    if kind in LINEAR_FAMILIES:
        return from_linear(source)
    if kind in SSM_FAMILIES:
        return from_ssm(source)
    if kind in KDA_FAMILIES:
        return from_kda(source)
    if kind in MAMBA_FAMILIES:
        return from_mamba(source)
    if kind not in FAMILIES:
        raise TypeError(
            f"from_hf: {kind} is not read (the families read: BloomAttention, "
            f"{', '.join(FAMILIES)}); `register()` runs any layer that calls transformers' "
            f"attention interface"
        )
    family = FAMILIES[kind]
    config = source.config
    index = getattr(source, "layer_idx", 0)
    layer_types = getattr(config, "layer_types", None)
    layer_type = layer_types[index] if layer_types else None
    heads = config.num_attention_heads
    groups = config.num_key_value_heads
    width = source.head_dim
    uses_rope = bool(getattr(source, "use_rope", True))
    if uses_rope and rotary is None:
        raise ValueError(f"from_hf: {kind} {index} rotates its queries and keys; give rotary=")
    mods = []
    chunk = getattr(config, "attention_chunk_size", None)
    if chunk is not None and layer_type == "chunked_attention":
        mods.append(M.Chunked(int(chunk)))
    if getattr(source, "attn_temperature_tuning", False) and not uses_rope:
        mods.append(M.Temperature(float(source.floor_scale), float(source.attn_scale)))
    q_norm, k_norm = getattr(source, "q_norm", None), getattr(source, "k_norm", None)
    l2 = getattr(source, "qk_norm", None)
    qk_norm = "l2" if l2 is not None else (q_norm is not None)
    window = getattr(source, "sliding_window", None)
    softcap = getattr(source, "attn_logit_softcapping", None)
    ours = GroupedQueryAttention(
        config.hidden_size,
        num_heads=heads,
        num_kv_groups=groups,
        head_dim=width,
        qk_norm=qk_norm,
        sliding_window=None if window is None else int(window),
        softcap=None if softcap is None else float(softcap),
        query_pre_attn_scalar=float(source.scaling) ** -2,
        gate=family.gate,
        mods=tuple(mods),
    )
    weight = source.q_proj.weight
    ours = ours.to(dtype=weight.dtype, device=weight.device)
    q, k = source.q_proj.weight, source.k_proj.weight
    if family.interleaved and uses_rope:  # each head's pairs (2i, 2i + 1) -> (i, i + c_h/2)
        order = torch.cat([torch.arange(0, width, 2), torch.arange(1, width, 2)])
        q = q.unflatten(0, (-1, width))[:, order].flatten(0, 1)
        k = k.unflatten(0, (-1, width))[:, order].flatten(0, 1)
    for mine, theirs in ((ours.W_query, q), (ours.W_key, k), (ours.W_value, source.v_proj.weight)):
        mine.weight.copy_(theirs)
    ours.out_proj.weight.copy_(source.o_proj.weight)
    for linear in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if getattr(source, linear).bias is not None:
            raise ValueError(f"from_hf: {kind} has a bias on {linear}: not read")
    for mine, theirs in ((ours.q_norm, q_norm), (ours.k_norm, k_norm), (ours.q_norm, l2)):
        if theirs is None or mine is None:
            continue
        mine.eps = float(getattr(theirs, "variance_epsilon", getattr(theirs, "eps", 1e-6)))
        if mine.scale is not None and getattr(theirs, "weight", None) is not None:
            mine.scale.copy_(family.norm_offset + theirs.weight)
    if l2 is not None:
        ours.k_norm.eps = ours.q_norm.eps  # pyright: ignore[reportOptionalMemberAccess]
    partial = getattr(config, "partial_rotary_factor", None)
    rope_parameters = getattr(config, "rope_parameters", None) or {}
    partial = rope_parameters.get("partial_rotary_factor", partial)
    rotated = None if partial in (None, 1.0) else int(width * partial)
    wants_type = rotary is not None and "layer_type" in inspect.signature(rotary.forward).parameters
    return FromHF(
        ours,
        rotary if uses_rope else None,
        layer_type=layer_type if wants_type else None,
        interleaved=family.interleaved,
        width=rotated,
    )


# ---------------------------------------------------------------------------------------------
# A Hugging Face linear-attention layer (Gated DeltaNet) as this package's module


def _packed_qkv(layer, rows: dict) -> dict:
    """Qwen 3.5's projections: `in_proj_qkv` holds Q's rows, then K's, then V's; the gate, β
    and the decay each their own (`in_proj_z`, `in_proj_b`, `in_proj_a`)."""
    q, k, v = layer.in_proj_qkv.weight.split([rows["e"], rows["e"], rows["c"]])
    return dict(
        W_query=q,
        W_key=k,
        W_value=v,
        W_gate=layer.in_proj_z.weight,
        W_beta=layer.in_proj_b.weight,
        W_alpha=layer.in_proj_a.weight,
    )


def _grouped_qkvz(layer, rows: dict) -> dict:
    """Qwen3-Next's projections: `in_proj_qkvz` holds, for each key head in turn, its query, its
    key, the values of the heads it serves and their gates; `in_proj_ba`, for each key head, the
    β then the decay of the heads it serves."""
    groups, width, per = rows["h_k"], rows["c_k"], rows["c"] // rows["h_k"]
    parts = layer.in_proj_qkvz.weight.unflatten(0, (groups, -1))
    q, k, v, z = parts.split([width, width, per, per], dim=1)
    b, a = layer.in_proj_ba.weight.unflatten(0, (groups, -1)).chunk(2, dim=1)
    flat = lambda t: t.flatten(0, 1)  # noqa: E731
    return dict(
        W_query=flat(q),
        W_key=flat(k),
        W_value=flat(v),
        W_gate=flat(z),
        W_beta=flat(b),
        W_alpha=flat(a),
    )


#: The linear-attention layers `from_hf` reads, by class: where each of our weights lies in the
#: layer's projections. The rest is common to the families: `conv1d`, `dt_bias`, `A_log`, the
#: gated RMSNorm's `norm.weight` and `out_proj`, and the config's `linear_*` sizes.
LINEAR_FAMILIES = {
    "Qwen3_5GatedDeltaNet": _packed_qkv,
    "Qwen3NextGatedDeltaNet": _grouped_qkvz,
}


class FromHFLinear(torch.nn.Module):
    """A Hugging Face Gated DeltaNet layer as this package's `GatedDeltaNet` (`linear`), called
    as the layer is: ``module(hidden_states, cache=None, attention_mask=None)``. Without a cache,
    the layer's output on its input; with one (transformers' `Cache` of a hybrid model), the
    convolution's inputs and the state are read from it and written back as the layer does, so
    the module replaces the layer in its model, generation included
    (`replace_linear_attention`)."""

    def __init__(self, linear, layer_idx: int) -> None:
        super().__init__()
        self.linear = linear
        self.layer_idx = layer_idx

    def forward(self, hidden_states: Tensor, cache=None, attention_mask=None, **kwargs) -> Tensor:
        x = hidden_states
        if attention_mask is not None and attention_mask.dim() == 2:  # padding: tokens zeroed
            x = (x * attention_mask[:, :, None]).to(x.dtype)
        if cache is None:
            return self.linear(x)
        index, width = self.layer_idx, self.linear.conv1d.kernel_size[0]
        state = cache.get_recurrent_state(index)
        kept = cache.get_conv_state(index)  # the last inputs (b, channels, ≥ width), or None
        past = None if kept is None else kept[..., kept.shape[-1] - (width - 1) :].mT.clone()
        mixed = self.linear.mixed(x)
        out, state, _ = self.linear.continued(x, state, past, mixed)
        cache.update_conv_state(mixed.mT, index, conv_kernel_size=width)
        cache.update_recurrent_state(state, index)
        return out


@torch.no_grad()
def from_linear(layer: torch.nn.Module) -> FromHFLinear:
    """A Hugging Face Gated DeltaNet layer (`LINEAR_FAMILIES`: Qwen 3.5's, Qwen3-Next's) as
    this package's `attention.deltanet.GatedDeltaNet` with its weights, in a `FromHFLinear`."""
    from .deltanet import GatedDeltaNet

    source: typing.Any = layer
    kind = type(source).__name__
    if kind not in LINEAR_FAMILIES:
        raise TypeError(
            f"from_hf: {kind} is not a linear-attention layer read (those read: "
            f"{', '.join(LINEAR_FAMILIES)})"
        )
    heads, key_heads = source.num_v_heads, source.num_k_heads
    key_dim, value_dim = source.head_k_dim, source.head_v_dim
    activation = getattr(source, "activation", "silu")
    if activation not in ("silu", "swish"):
        raise ValueError(f"from_hf: {kind} convolves with {activation!r}; read: silu")
    ours = GatedDeltaNet(
        source.hidden_size,
        heads * value_dim,
        0.0,
        heads,
        key_heads=key_heads,
        key_dim=key_dim,
        beta="head",
        conv_size=source.conv_kernel_size,
        out_features=source.out_proj.weight.shape[0],
        out_bias=source.out_proj.bias is not None,
        norm_eps=float(source.norm.variance_epsilon),
    )
    weight = source.out_proj.weight
    ours = ours.to(dtype=weight.dtype, device=weight.device)
    rows = dict(e=key_heads * key_dim, c=heads * value_dim, h_k=key_heads, c_k=key_dim)
    for name, tensor in LINEAR_FAMILIES[kind](source, rows).items():
        getattr(ours, name).weight.copy_(tensor)
    if source.conv1d.bias is not None:
        raise ValueError(f"from_hf: {kind} has a bias on conv1d: not read")
    ours.conv1d.weight.copy_(source.conv1d.weight)  # pyright: ignore[reportOptionalMemberAccess]
    ours.dt_bias.copy_(source.dt_bias)
    ours.A_log.copy_(source.A_log)
    ours.norm.weight.copy_(source.norm.weight)  # pyright: ignore[reportOptionalMemberAccess]
    ours.out_proj.weight.copy_(source.out_proj.weight)
    if source.out_proj.bias is not None:
        ours.out_proj.bias.copy_(source.out_proj.bias)
    for name, linear in source.named_children():
        if name.startswith("in_proj") and getattr(linear, "bias", None) is not None:
            raise ValueError(f"from_hf: {kind} has a bias on {name}: not read")
    return FromHFLinear(ours, int(getattr(source, "layer_idx", 0)))


#: The state-space layers `from_hf` reads (`from_ssm`): Mamba-2's mixer as the models that use it
#: name it, each with transformers' parameter names and Mamba2Mixer's computation.
SSM_FAMILIES = (
    "Mamba2Mixer",
    "BambaMixer",
    "GraniteMoeHybridMambaLayer",
    "NemotronHMamba2Mixer",
    "Zamba2MambaMixer",
)


class FromHFSSM(torch.nn.Module):
    """A Hugging Face Mamba-2 or Mamba mixer as this package's `attention.ssm.Mamba2` or
    `attention.ssm.Mamba` (`ssm`), called as the layer is:
    ``module(hidden_states, cache=None, attention_mask=None)``. With a cache (transformers'
    `Cache` of the model), the convolution's inputs and the state are read from it and written
    back as the layer does, so the module replaces the layer in its model,
    generation included (`replace_linear_attention`)."""

    def __init__(self, ssm, layer_idx: int) -> None:
        super().__init__()
        self.ssm = ssm
        self.layer_idx = layer_idx

    def forward(self, hidden_states: Tensor, cache=None, attention_mask=None, **kwargs) -> Tensor:
        keep = attention_mask if attention_mask is not None and attention_mask.dim() == 2 else None
        if keep is not None and keep.shape[-1] != hidden_states.shape[-2]:
            keep = None  # a decoding step: the mask covers the whole sequence, the token is kept
        if cache is None:
            return self.ssm.continued(hidden_states, None, None, keep)[0]
        index, width = self.layer_idx, self.ssm.conv1d.kernel_size[0]
        state = cache.get_recurrent_state(index)
        kept = cache.get_conv_state(index)  # the last inputs (b, channels, ≥ width), or None
        past = None if kept is None else kept[..., kept.shape[-1] - (width - 1) :].mT.clone()
        out, state, past = self.ssm.continued(hidden_states, state, past, keep)
        # the convolution's last inputs: what the cache keeps (its last conv_kernel_size columns
        # end with them, whatever it held)
        cache.update_conv_state(past.mT, index, conv_kernel_size=width)
        cache.update_recurrent_state(state, index)  # in its computing dtype: float32 at least
        return out


@torch.no_grad()
def from_ssm(layer: torch.nn.Module) -> FromHFSSM:
    """A Hugging Face Mamba-2 mixer (`SSM_FAMILIES`) as this package's `attention.ssm.Mamba2`
    with its weights (loaded by name: the two share them), in a `FromHFSSM`. A layer with a
    tensor Mamba2 does not hold (Falcon H1's µP multipliers) or another activation is refused by
    name."""
    from .ssm import Mamba2

    source: typing.Any = layer
    kind = type(source).__name__
    if kind not in SSM_FAMILIES:
        raise TypeError(
            f"from_hf: {kind} is not a state-space layer read (those read: "
            f"{', '.join(SSM_FAMILIES)})"
        )
    activation = getattr(source, "activation", "silu")
    if activation not in ("silu", "swish"):
        raise ValueError(f"from_hf: {kind} convolves with {activation!r}; read: silu")
    inner = int(getattr(source, "intermediate_size", source.num_heads * source.head_dim))
    if inner != source.num_heads * source.head_dim:
        raise ValueError(
            f"from_hf: {kind} has num_heads={source.num_heads} of head_dim={source.head_dim} "
            f"but an inner width of {inner}: its heads do not tile its channels (the layer "
            "itself cannot run on them)"
        )
    groups = inner // int(getattr(source.norm, "group_size", inner // source.n_groups))
    if groups != source.n_groups:
        raise ValueError(
            f"from_hf: {kind} normalises {groups} groups of channels but has "
            f"n_groups={source.n_groups} groups of B and C; Mamba2 reads the two as one"
        )
    low, high = (float(limit) for limit in source.time_step_limit)
    ours = Mamba2(
        source.in_proj.in_features,
        num_heads=source.num_heads,
        head_dim=source.head_dim,
        state_size=source.ssm_state_size,
        n_groups=source.n_groups,
        conv_kernel=source.conv1d.kernel_size[0],
        use_bias=source.in_proj.bias is not None,
        use_conv_bias=source.conv1d.bias is not None,
        norm_eps=float(source.norm.variance_epsilon),
        chunk_size=int(source.chunk_size),
        time_step_limit=(low, high),
    )
    weight = source.in_proj.weight
    ours = ours.to(dtype=weight.dtype, device=weight.device)
    theirs = source.state_dict()
    unread = sorted(set(theirs) - set(ours.state_dict()))
    if unread:
        raise ValueError(f"from_hf: {kind} holds {', '.join(unread)}, which Mamba2 does not read")
    ours.load_state_dict(theirs)
    return FromHFSSM(ours, int(getattr(source, "layer_idx", 0)))


#: Mamba's (Mamba-1's) mixers `from_hf` reads (`from_mamba`): the norms each puts on Δ's input,
#: B and C before the scan (`attention.ssm.NORMS`).
MAMBA_FAMILIES = {
    "MambaMixer": None,
    "FalconMambaMixer": "weightless",
    "JambaMambaMixer": "weighted",
}


@torch.no_grad()
def from_mamba(layer: torch.nn.Module) -> FromHFSSM:
    """A Hugging Face Mamba mixer (`MAMBA_FAMILIES`: Mamba's, Falcon Mamba's, Jamba's) as this
    package's `attention.ssm.Mamba` with its weights (loaded by name), in a `FromHFSSM` (the
    same cache as Mamba-2's: the state, the convolution's inputs)."""
    from .ssm import Mamba

    source: typing.Any = layer
    kind = type(source).__name__
    if kind not in MAMBA_FAMILIES:
        raise TypeError(f"from_hf: {kind} is not read as Mamba (read: {', '.join(MAMBA_FAMILIES)})")
    activation = getattr(source, "activation", "silu")
    if activation not in ("silu", "swish"):
        raise ValueError(f"from_hf: {kind} convolves with {activation!r}; read: silu")
    norms = MAMBA_FAMILIES[kind]
    eps = 1e-6
    if norms is not None:
        eps = float(source.b_layernorm.variance_epsilon)
    ours = Mamba(
        source.in_proj.in_features,
        inner=source.intermediate_size,
        state_size=source.ssm_state_size,
        time_step_rank=source.time_step_rank,
        conv_kernel=source.conv1d.kernel_size[0],
        use_bias=source.in_proj.bias is not None,
        use_conv_bias=source.conv1d.bias is not None,
        norms=norms,
        norm_eps=eps,
    )
    weight = source.in_proj.weight
    ours = ours.to(dtype=weight.dtype, device=weight.device)
    theirs = source.state_dict()
    unread = sorted(set(theirs) - set(ours.state_dict()))
    if unread:
        raise ValueError(f"from_hf: {kind} holds {', '.join(unread)}, which Mamba does not read")
    ours.load_state_dict(theirs)
    return FromHFSSM(ours, int(getattr(source, "layer_idx", 0)))


#: Kimi Delta Attention's layers `from_hf` reads (`from_kda`), with transformers' names.
KDA_FAMILIES = ("KimiLinearDeltaAttention", "BailingHybridDeltaAttention")


@torch.no_grad()
def from_kda(layer: torch.nn.Module) -> FromHFLinear:
    """A Hugging Face Kimi Delta Attention layer (`KDA_FAMILIES`: Kimi Linear's, Bailing's
    hybrid delta layers, whole gate projections and a bounded forget gate) as this
    package's `attention.kimi.KimiDeltaAttention` with its weights (loaded by name: the two share
    them), in a `FromHFLinear` (the same cache as Gated DeltaNet's)."""
    from .kimi import KimiDeltaAttention

    source: typing.Any = layer
    kind = type(source).__name__
    if kind not in KDA_FAMILIES:
        raise TypeError(f"from_hf: {kind} is not read as KDA (read: {', '.join(KDA_FAMILIES)})")
    activation = getattr(source, "activation", "silu")
    if activation not in ("silu", "swish"):
        raise ValueError(f"from_hf: {kind} convolves with {activation!r}; read: silu")
    gate = source.forget_gate
    ours = KimiDeltaAttention(
        source.hidden_size,
        num_heads=source.num_heads,
        head_dim=source.head_dim,
        conv_size=source.conv_kernel_size,
        norm_eps=float(source.o_norm.variance_epsilon),
        low_rank=hasattr(source, "g_a_proj"),
        decay_bound=float(gate.lower_bound) if getattr(gate, "safe_gate", False) else None,
    )
    weight = source.q_proj.weight
    ours = ours.to(dtype=weight.dtype, device=weight.device)
    theirs = source.state_dict()
    # Kimi keeps A_log as (1, 1, h, 1), Bailing as (h,): the same numbers
    theirs["forget_gate.A_log"] = theirs["forget_gate.A_log"].reshape(1, 1, source.num_heads, 1)
    unread = sorted(set(theirs) - set(ours.state_dict()))
    if unread:
        raise ValueError(f"from_hf: {kind} holds {', '.join(unread)}, which KDA does not read")
    ours.load_state_dict(theirs)
    return FromHFLinear(ours, int(getattr(source, "layer_idx", 0)))


def replace_linear_attention(model: torch.nn.Module) -> int:
    """Replace every linear-attention and state-space layer of `model` (`READERS`: Gated
    DeltaNet's, KDA's, Mamba-2's and Mamba's families) by this package's, in place; returns how
    many were replaced. With `register()` for its softmax layers, a hybrid
    model (Qwen 3.5, Qwen3-Next, Bamba, Granite 4, Kimi Linear's KDA layers) then runs on this
    package in both kinds of layer."""
    found = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child).__name__ in READERS
    ]
    for parent, name, child in found:
        setattr(parent, name, READERS[type(child).__name__](child))
    return len(found)


#: Every recurrent layer `from_hf` reads, by class: the function that reads it.
READERS: dict[str, typing.Callable[[typing.Any], torch.nn.Module]] = {
    **dict.fromkeys(LINEAR_FAMILIES, from_linear),
    **dict.fromkeys(KDA_FAMILIES, from_kda),
    **dict.fromkeys(SSM_FAMILIES, from_ssm),
    **dict.fromkeys(MAMBA_FAMILIES, from_mamba),
}
