"""What a Hugging Face attention layer is, as tables: where each family keeps its projections
(`LAYOUTS`), what each config key or attribute says about one layer (`READINGS`), and what the
adapter does not read, with its reason (`REFUSED`). The adapter (`huggingface`) reads these
tables and nothing else about a family: a family that keeps its weights another way is one
more row of `LAYOUTS`, a key of a config one more row of `READINGS`.

Where the config says something for every layer and the layer decides (does this layer rotate?
does it have a window?), the reading asks the layer: `huggingface_reading.ROTATES` holds each
family's rule where its layers decide from their window whether they rotate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import huggingface_reading as H
from .adapters import linear_weights, norm_gains, per_head_parts
from .target import ConformError

__all__ = ["Layout", "LAYOUTS", "layout_of", "Projections", "Said", "READINGS", "REFUSED"]


@dataclass(frozen=True)
class Projections:
    """W_q, W_k, W_v (d × ·) and their biases as a layout cuts them, and the output gate's W_g
    where the queries' projection holds it too (Qwen 3.5)."""

    weights: list
    biases: list
    w_g: Any = None


#: (layer, h, c_h) -> its projections, cut as its family packs them.
Cut = Callable[[Any, int, int], "Projections"]


@dataclass(frozen=True)
class Layout:
    """Where one family's layer keeps W_q, W_k, W_v and W_o.

    Attributes:
        family: who keeps them so (for the reader and the refusals).
        holds: the attributes a layer of this layout has, all of them.
        output: the output projection's attribute; None where the layer has none (W_o = I).
        cut: (layer, h, c_h) -> Projections.
        classes: the layer classes this row is for, where the attributes alone are shared with
            a family that packs them otherwise (tried before the rows without classes).
        heads: the layer's h (default: its config's ``num_attention_heads``, else
            ``num_heads``).
        needs_config: whether a layer of this layout keeps its config (a module of one's own
            with the same names does not); BART's kin keep theirs only in some families.
    """

    family: str
    holds: tuple[str, ...]
    output: str | None
    cut: Cut
    classes: tuple[str, ...] = ()
    heads: Callable[[Any], int] = H.heads
    needs_config: bool = True


def _projection(module: Any, name: str) -> tuple[Any, Any]:
    """The layer's projection `name` as (W, b); one that is not an nn.Linear is refused by name
    (Moshi's MoshiLinear, Zaya's ZayaCCAProjection: weights another layout keeps)."""
    layer = getattr(module, name)
    if not isinstance(getattr(layer, "weight", None), torch.Tensor):
        raise ConformError(
            f"{type(module).__name__}.{name} is a {type(layer).__name__} without an "
            "nn.Linear's weight: its projections are not read"
        )
    return linear_weights(layer)


def _separate(*names: str) -> Cut:
    """One nn.Linear each for q, k, v; a query projection twice as wide holds each head's
    queries, then its gate's logits (Qwen 3.5)."""

    def cut(module: Any, heads: int, width: int) -> Projections:
        found = (_projection(module, name) for name in names)
        ws, bs = map(list, zip(*found, strict=True))
        if ws[0].shape[1] != 2 * heads * width:
            return Projections(ws, bs)
        if bs[0] is not None:
            raise ConformError(
                f"{type(module).__name__}: a gated q_proj with a bias: the gate "
                "variant declares no bias of its logits"
            )
        ws[0], w_g = per_head_parts(ws[0], heads, 2)
        return Projections(ws, bs, w_g)

    return cut


def _q_then_k_then_v(name: str) -> Cut:
    """One projection: all queries, then the keys, then the values (Phi-3's qkv_proj)."""

    def cut(module: Any, heads: int, width: int) -> Projections:
        w, b = _projection(module, name)
        c = heads * width
        kv = (w.shape[1] - c) // 2
        cuts = (slice(0, c), slice(c, c + kv), slice(c + kv, None))
        return Projections([w[:, s] for s in cuts], [None if b is None else b[s] for s in cuts])

    return cut


def _packed(name: str, layout: Callable, groups: Callable) -> Cut:
    """One projection cut by `layout(layer)` (a function (tensor, h, g, c_h) -> [q, k, v]),
    with `groups(layer)` groups of keys (None: h)."""

    def cut(module: Any, heads: int, width: int) -> Projections:
        w, b = _projection(module, name)
        parts, kv = layout(module), groups(module) or heads
        bs = [None] * 3 if b is None else parts(b, heads, kv, width)
        return Projections(parts(w, heads, kv, width), bs)

    return cut


def _heads_then_two(w: Any, heads: int, groups: int, width: int) -> list:
    """[Q | K | V]: the queries of every head, then the groups' keys, then their values
    (GPT-BigCode's and Falcon's multi-query layers, one group)."""
    c, kv = heads * width, groups * width
    return [w[..., :c], w[..., c : c + kv], w[..., c + kv : c + 2 * kv]]


def _each_head_three(w: Any, heads: int, groups: int, width: int) -> list:
    """Each head's q, k, v in turn (GPT-NeoX, BLOOM, GPT-BigCode and Falcon without groups)."""
    return per_head_parts(w, heads, 3)


def _each_group(w: Any, heads: int, groups: int, width: int) -> list:
    """Each group's queries, then its key, then its value (Falcon's new decoder layers)."""
    per = heads // groups
    parts = w.unflatten(-1, (groups, per + 2, width))
    queries, keys, values = parts[..., :per, :], parts[..., per, :], parts[..., -1, :]
    return [queries.flatten(-3), keys.flatten(-2), values.flatten(-2)]


def _falcon(module: Any) -> Callable:
    if module.new_decoder_architecture:
        return _each_group
    return _heads_then_two if module.multi_query else _each_head_three


def _falcon_groups(module: Any) -> int | None:
    if module.new_decoder_architecture:
        return module.num_kv_heads
    return 1 if module.multi_query else None


#: Where each family keeps its projections; the first row that fits a layer reads it.
LAYOUTS = (
    Layout(
        "GPT-BigCode: c_attn packs each head's q, k, v, or multi-query's [Q | K | V]",
        ("c_attn", "c_proj"),
        "c_proj",
        _packed(
            "c_attn",
            lambda m: _heads_then_two if m.multi_query else _each_head_three,
            lambda m: m.kv_heads,
        ),
        classes=("GPTBigCodeAttention",),
    ),
    Layout(
        "Falcon: query_key_value by groups (new decoder), [Q | K | V] (multi-query) or by head",
        ("query_key_value", "dense"),
        "dense",
        _packed("query_key_value", _falcon, _falcon_groups),
        classes=("FalconAttention",),
    ),
    Layout(
        "Llama and its kin: q_proj, k_proj, v_proj, o_proj",
        ("q_proj", "k_proj", "v_proj", "o_proj"),
        "o_proj",
        _separate("q_proj", "k_proj", "v_proj"),
    ),
    Layout(
        "BART and its kin (mBART, Marian, Pegasus, Blenderbot, OPT, XGLM, BioGPT, TrOCR, MVP): "
        "q_proj, k_proj, v_proj, out_proj, the heads the layer's num_heads",
        ("q_proj", "k_proj", "v_proj", "out_proj", "num_heads"),
        "out_proj",
        _separate("q_proj", "k_proj", "v_proj"),
        heads=lambda m: m.num_heads,
        needs_config=False,  # MVP's, TrOCR's and XGLM's layers keep none
    ),
    Layout(
        "Phi: q_proj, k_proj, v_proj, dense",
        ("q_proj", "k_proj", "v_proj", "dense"),
        "dense",
        _separate("q_proj", "k_proj", "v_proj"),
    ),
    Layout(
        "Phi-3: qkv_proj holds Q, then K, then V",
        ("qkv_proj", "o_proj"),
        "o_proj",
        _q_then_k_then_v("qkv_proj"),
    ),
    Layout(
        "GPT-NeoX, BLOOM: query_key_value packs each head's q, k, v in turn",
        ("query_key_value", "dense"),
        "dense",
        _packed("query_key_value", lambda m: _each_head_three, lambda m: None),
    ),
    Layout(
        "BERT's self-attention: query, key, value, the output projection in the next module",
        ("query", "key", "value"),
        None,
        _separate("query", "key", "value"),
    ),
)


def layout_of(module: Any) -> Layout | None:
    """The row of `LAYOUTS` that reads this layer: one for its class first, else the first
    whose attributes it holds (a user's subclass: its base's row, `library_class`)."""
    name = H.library_class(module).__name__
    for row in LAYOUTS:
        if name in row.classes:
            return row
    fits = (row for row in LAYOUTS if not row.classes)
    return next((row for row in fits if all(hasattr(module, a) for a in row.holds)), None)


@dataclass
class Said:
    """What one key of a config or attribute of a layer says about the layer: a registered
    variant, the numbers it reads (by symbol) and the matrices (by letter)."""

    variant: str
    values: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)


def _rope(module: Any, found: Projections, width: int) -> list[Said]:
    beta = H.beta(module)
    if beta is None:
        return []
    said = [Said("rope", {"beta": beta})]
    if H.rotated_width(module) is not None:  # GPT-NeoX's rotary_pct, Qwen 3.5's factor
        said.append(Said("partial-rope", {"c_r": H.rotated_width(module)}))
    if H.interleaved(module):  # Cohere, GLM, Llama 4: neighbouring features paired
        said.append(Said("interleaved-rope"))
    smoothing = H.llama3(module)
    if smoothing is not None:  # Llama 3.1's frequencies
        said.append(Said("llama3-rope", smoothing))
    scaled = H.yarn(module)
    if scaled is not None:  # YaRN's frequencies and attention factor (GPT-OSS, DeepSeek V3)
        said.append(Said("yarn-rope", scaled))
    interpolated = H.linear(module)
    if interpolated is not None:  # position interpolation: every frequency divided by η
        said.append(Said("linear-rope", interpolated))
    return said


def _qk_norm(module: Any, found: Projections, width: int) -> list[Said]:
    """qk-norm where ``q_norm`` normalises one head's c_h features (Qwen 3, Gemma 3),
    whole-qk-norm where it normalises the h·c_h of all heads (OLMo 2 and 3) and ``k_norm`` the
    g·c_h of all keys."""
    if getattr(module, "q_norm", None) is None:
        return []
    name, gains = type(module).__name__, getattr(module.q_norm, "weight", None)
    if gains is None:  # Dory's L2 norm onto the unit sphere
        raise ConformError(
            f"{name}: q_norm ({type(module.q_norm).__name__}) has no gains: not the RMS norm "
            "with gains of the qk-norm variant"
        )
    c, c_kv = found.weights[0].shape[1], found.weights[1].shape[1]
    features = gains.shape[-1]
    if features not in (width, c):
        raise ConformError(
            f"{name}: q_norm normalises {features} features, neither one head's {width} "
            f"(qk-norm) nor all heads' {c} (whole-qk-norm)"
        )
    whole = features != width
    k_width = c_kv if whole else width
    if module.k_norm.weight.shape[-1] != k_width:
        raise ConformError(
            f"{name}: k_norm normalises {module.k_norm.weight.shape[-1]} features, q_norm "
            f"{features}: expected {k_width}, the keys normalised as the queries"
        )
    g_q, epsilon = norm_gains(module.q_norm, features)
    g_k, _ = norm_gains(module.k_norm, k_width)
    variant = "whole-qk-norm" if whole else "qk-norm"
    return [Said(variant, {"epsilon": epsilon}, {"G_q": g_q, "G_k": g_k})]


def _l2_norm(module: Any, found: Projections, width: int) -> list[Said]:
    if getattr(module, "qk_norm", None) is None:  # Llama 4's L2Norm: no gains
        return []
    norm = module.qk_norm  # transformers 5.24's L2Norm keeps eps, 5.25's variance_epsilon
    epsilon = getattr(norm, "eps", None)
    epsilon = norm.variance_epsilon if epsilon is None else epsilon
    return [Said("l2-qk-norm", {"epsilon": float(epsilon)})]


def _chunks(module: Any, found: Projections, width: int) -> list[Said]:
    size = H.chunk(module)
    return [] if size is None else [Said("chunked", {"chi": size})]


def _temperature(module: Any, found: Projections, width: int) -> list[Said]:
    tempered = H.temperature(module)
    return [] if tempered is None else [Said("temperature-tuning", tempered)]


def _window(module: Any, found: Projections, width: int) -> list[Said]:
    window = H.window(module)
    return [] if window is None else [Said("sliding-window", {"w": window})]


def _scale(module: Any, found: Projections, width: int) -> list[Said]:
    """The scores times `scaling`: the book's 1/√c_h, or 1/√c_q with c_q = 1/scaling² (Gemma's
    query_pre_attn_scalar, Granite's attention_multiplier)."""
    scaling = H.scaling(module)
    if math.isclose(scaling, width**-0.5, rel_tol=1e-9):
        return []
    return [Said("query-scale", {"c_q": 1.0 / scaling**2})]


def _softcap(module: Any, found: Projections, width: int) -> list[Said]:
    kappa = getattr(module, "attn_logit_softcapping", None)
    return [] if kappa is None else [Said("softcap", {"kappa": kappa})]


def _alibi(module: Any, found: Projections, width: int) -> list[Said]:
    if not H.takes_alibi(module):  # BLOOM: its model's slopes, read off its bias at position 1
        return []
    return [Said("alibi", inputs={"Mu": H.alibi(module, 2, torch.float64)[:, 0, 1][None]})]


def _sinks(module: Any, found: Projections, width: int) -> list[Said]:
    sinks = getattr(module, "sinks", None)
    return [] if sinks is None else [Said("sinks", inputs={"Zeta": sinks[None]})]


def _gate(module: Any, found: Projections, width: int) -> list[Said]:
    """The output gate σ(X W_g): in a query projection twice as wide (Qwen 3.5), or its own
    ``gate_proj`` as wide as the heads (AFMoE, HRM)."""
    w_g = found.w_g
    gate = getattr(module, "gate_proj", None)
    if w_g is None and isinstance(gate, torch.nn.Linear):
        if gate.bias is not None:
            raise ConformError(
                f"{type(module).__name__}: gate_proj with a bias: the gate variant declares "
                "no bias of its logits"
            )
        w_g = gate.weight.mT
    return [] if w_g is None else [Said("gate", inputs={"W_g": w_g})]


#: What each key of a config, or attribute of a layer, says about that layer: (the key, its
#: reading (layer, projections, c_h) -> what it says), in the order the variant is written.
READINGS: tuple[tuple[str, Callable[[Any, Projections, int], list[Said]]], ...] = (
    ("rope_parameters, rope_theta, partial_rotary_factor, rotate_half, rope_type", _rope),
    ("q_norm, k_norm", _qk_norm),
    ("qk_norm (Llama 4's L2 norm)", _l2_norm),
    ("attention_chunk_size on a chunked_attention layer", _chunks),
    ("attn_temperature_tuning, floor_scale, attn_scale", _temperature),
    ("sliding_window, is_sliding", _window),
    ("scaling (query_pre_attn_scalar, attention_multiplier)", _scale),
    ("attn_logit_softcapping", _softcap),
    ("alibi (a forward that takes it), build_alibi_tensor", _alibi),
    ("sinks", _sinks),
    ("a q_proj twice as wide, gate_proj", _gate),
)


def _holds(name: str, kind: type | None = None) -> Callable[[Any], bool]:
    def test(module: Any) -> bool:
        found = getattr(module, name, None)
        return found is not None and (kind is None or isinstance(found, kind))

    return test


#: What the adapter does not read, with why: (the test of the layer, the reason). A layer
#: that passes a test is refused by name before anything is read.
REFUSED: tuple[tuple[Callable[[Any], bool], str], ...] = (
    (
        lambda layer: not any(hasattr(layer, name) for name in ("scaling", "inv_norm_factor")),
        "no scale of its scores to read (scaling, or BLOOM's inv_norm_factor): a layer that "
        "does not scale them (GPT-Neo's), keeps its scale elsewhere, or has no softmax (linear "
        "attention other than Gated DeltaNet's, which has its own adapter)",
    ),
    (
        lambda layer: (
            H.library_class(layer).__name__ == "FalconAttention" and layer.config.alibi is True
        ),
        "Falcon's ALiBi layers are not read: its bias and its call differ from BLOOM's in "
        "transformers 5.24, and from 5.25 its model adds the bias to the mask, which the "
        "adapter does not build (its RoPE layers are read)",
    ),
    (
        _holds("k_sconv"),
        "short convolutions of its keys and values (k_sconv, v_sconv) and logits of the "
        "relative positions added to the scores (r_proj, as Inkling's): steps no registered "
        "variant declares",
    ),
    (
        _holds("attn_sub_norm"),
        "its merged heads are RMS-normalised before o_proj (attn_sub_norm, as BitNet's): a step "
        "no registered variant declares",
    ),
    (
        _holds("lambda_q1"),
        "differential attention (two softmaxes weighed by λ, as DiffLlama's): no registered "
        "variant declares it (docs/examples/differential_attention.py declares it as a user's)",
    ),
    (
        _holds("query_layernorm"),
        "its queries and keys are normalised after RoPE (query_layernorm, key_layernorm, "
        "as HunYuan's): the qk-norm variant normalises them before",
    ),
    (
        _holds("q_layernorm"),
        "LayerNorms of the queries and keys (q_layernorm, k_layernorm, as Persimmon's and "
        "StableLM's per head): each centres its row and adds a bias, the qk-norm variant is "
        "an RMS norm",
    ),
    (
        _holds("g_proj", torch.nn.Linear),
        "an output gate of another kind (g_proj: LFM3's one logit per head, Laguna's softplus): "
        "the gate variant declares σ of one logit per feature",
    ),
    (
        _holds("gate_bias"),
        "a bias of the gate's logits per head (gate_bias): the gate variant declares none",
    ),
    (
        lambda layer: (H.rope(layer) or {}).get("llama_4_scaling_beta") is not None,
        "its queries are multiplied by 1 + β log(1 + ⌊position / L_0⌋) with the position "
        "counted from 0 (llama_4_scaling_beta, as Ministral 3's and Mistral 4's): Llama 4's "
        "temperature tuning (the temperature-tuning variant) counts it from 1, so the two differ "
        "at every L_0-th position, past what a check at small sizes sees",
    ),
)
