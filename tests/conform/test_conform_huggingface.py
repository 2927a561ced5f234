"""`derive conform` of Hugging Face's attention layers as they come, no adapter written: the
built-in one reads the variant from the layer and its config (grouped keys, RoPE's base, QK-norm,
the window, the softcap, the sinks), and calls the layer as its model does. Each is built from a
config with random weights (nothing is downloaded) and must conform, eager and sdpa alike; told
a β, a cap or a variant it does not compute, it must not. transformers is a test dependency,
never imported by derive."""

import math

import pytest
import torch

from derive import ConformError, conform

transformers = pytest.importorskip("transformers")

SIZES = {
    "vocab_size": 64,
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
}
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10_000.0}
#: GPT-OSS's YaRN (its config's own numbers but the original context, cut so that a head of 8
#: features has pairs on both sides of the ramp and in it).
GPT_OSS_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10_000.0,
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 512,
}

#: two layers, the first sliding, the second global
TWO_KINDS = {
    "num_hidden_layers": 2,
    "sliding_window": 3,
    "layer_types": ["sliding_attention", "full_attention"],
}
LLAMA4 = {
    "intermediate_size_mlp": 64,
    "attention_chunk_size": 4,
    "use_qk_norm": True,
    "attn_temperature_tuning": True,
    "floor_scale": 3,
    "attn_scale": 0.5,
    "num_local_experts": 2,
}

#: (config class, model class, config options, the variant the report must name)
LAYERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, "gqa+rope"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}, "gqa+rope"),  # with q, k, v biases
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}, "gqa+rope+qk-norm"),
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        {"sliding_window": 3},
        "gqa+rope+sliding-window",
    ),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"query_pre_attn_scalar": 8, "sliding_window": 4, "attn_logit_softcapping": 20.0},
        "gqa+rope+sliding-window+softcap",
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"query_pre_attn_scalar": 8, "sliding_window": 4},
        "gqa+rope+qk-norm+sliding-window",
    ),  # gains 1 + weight
    "gpt-oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        {"rope_parameters": DEFAULT_ROPE, "sliding_window": 3},
        "gqa+rope+sliding-window+sinks",
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}, "gqa+rope"),  # qkv_proj
    "bert": ("BertConfig", "BertModel", {}, ""),  # query, key, value; not causal
    "vit": ("ViTConfig", "ViTModel", {"image_size": 8, "patch_size": 4}, ""),
    "qwen3.5": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",  # a full-attention layer, gated
        {
            "layer_types": ["full_attention"],
            "rope_parameters": DEFAULT_ROPE | {"partial_rotary_factor": 1.0},
        },
        "gqa+rope+qk-norm+gate",
    ),
    "qwen3.5-partial": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",  # its own partial rotation
        {
            "layer_types": ["full_attention"],
            "rope_parameters": DEFAULT_ROPE | {"partial_rotary_factor": 0.5},
        },
        "gqa+rope+partial-rope+qk-norm+gate",
    ),
    "gpt-neox": ("GPTNeoXConfig", "GPTNeoXModel", {"rotary_pct": 1.0}, "rope"),  # per head
    "gpt-neox-partial": ("GPTNeoXConfig", "GPTNeoXModel", {}, "rope+partial-rope"),  # 0.25
    "bloom": ("BloomConfig", "BloomModel", {}, "alibi"),  # per head; adds the residual itself
    "llama3.1": (
        "LlamaConfig",
        "LlamaForCausalLM",  # L_0 = 64: at head_dim 8, the pairs'
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 10_000.0,  # fast,
                "factor": 8.0,
                "low_freq_factor": 1.0,  # blended and
                "high_freq_factor": 4.0,  # slow frequencies all occur
                "original_max_position_embeddings": 64,
            }
        },
        "gqa+rope+llama3-rope",
    ),
    "gpt-oss-yarn": (
        "GptOssConfig",
        "GptOssForCausalLM",  # L_0 = 512 at head_dim 8: pairs kept, blended and interpolated
        {
            "rope_parameters": dict(GPT_OSS_YARN),
            "sliding_window": 3,
            "layer_types": ["sliding_attention"],
            "num_local_experts": 2,
            "num_experts_per_tok": 1,
        },
        "gqa+rope+yarn-rope+sliding-window+sinks",
    ),
    "llama-yarn": (
        "LlamaConfig",
        "LlamaForCausalLM",  # L_0 = 64: the range rounded outwards, its low end held at 0
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10_000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 64,
            }
        },
        "gqa+rope+yarn-rope",
    ),
    "llama-linear": (
        "LlamaConfig",
        "LlamaForCausalLM",  # position interpolation: every frequency divided by 4
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 10_000.0, "factor": 4.0}},
        "gqa+rope+linear-rope",
    ),
    "cohere": ("CohereConfig", "CohereForCausalLM", {}, "gqa+rope+interleaved-rope"),
    "glm4": (
        "Glm4Config",
        "Glm4ForCausalLM",
        {"pad_token_id": 0},  # half of each head, paired
        "gqa+rope+partial-rope+interleaved-rope",
    ),  # by neighbours
    "olmo2": (
        "Olmo2Config",
        "Olmo2ForCausalLM",
        {"pad_token_id": 0},  # QK-norm before the
        "gqa+rope+whole-qk-norm",
    ),  # heads are split
    "olmo3": (
        "Olmo3Config",
        "Olmo3ForCausalLM",  # a sliding layer
        {"pad_token_id": 0, "sliding_window": 3, "layer_types": ["sliding_attention"]},
        "gqa+rope+whole-qk-norm+sliding-window",
    ),
    # Cohere 2 and EXAONE 4: a layer rotates only where it slides; EXAONE 4's global layer keeps
    # the config's window unused (issue 34: both were checked as RoPE layers, EXAONE 4's with
    # the window)
    "cohere2-global": (
        "Cohere2Config",
        "Cohere2ForCausalLM",
        {**TWO_KINDS, "pad_token_id": 0},
        "gqa",
    ),
    "exaone4-global": (
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {**TWO_KINDS, "pad_token_id": 0},
        "gqa+qk-norm",
    ),
    "exaone4-local": (
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {**TWO_KINDS, "pad_token_id": 0},
        "gqa+rope+qk-norm+sliding-window",
    ),
    # Llama 4: a layer with RoPE (e^{iθ} on neighbouring pairs, the L2 norm, chunks of 4) and
    # one without (its queries tempered from position 2 on: floor_scale 3)
    "llama4-chunked": (
        "Llama4TextConfig",
        "Llama4ForCausalLM",
        {**LLAMA4, "no_rope_layers": [1]},
        "gqa+rope+interleaved-rope+l2-qk-norm+chunked",
    ),
    "llama4-nope": (
        "Llama4TextConfig",
        "Llama4ForCausalLM",
        {**LLAMA4, "no_rope_layers": [0]},
        "gqa+temperature-tuning",
    ),
    # MiniMax's softmax layers are typed full_attention and slide by the config's window (read
    # as none when the layer types were made the rule)
    "minimax-window": (
        "MiniMaxConfig",
        "MiniMaxForCausalLM",
        {"sliding_window": 3, "layer_types": ["full_attention"], "num_local_experts": 2},
        "gqa+rope+sliding-window",
    ),
    # BART and its kin: out_proj, the heads in the layer (a row of LAYOUTS)
    "bart": ("BartConfig", "BartForCausalLM", {"decoder_attention_heads": 4}, ""),
}
ENCODERS = {"bert": "encoder.layer.0.attention.self", "vit": "layers.0.attention"}
PATHS = ENCODERS | {
    "bart": "model.decoder.layers.0.self_attn",
    "gpt-neox": "layers.0.attention",
    "gpt-neox-partial": "layers.0.attention",
    "bloom": "h.0.self_attention",
    "cohere2-global": "model.layers.1.self_attn",
    "exaone4-global": "model.layers.1.self_attn",
}


def _layer(name, implementation="eager"):
    config_class, model_class, options, _ = LAYERS[name]
    sizes = (
        SIZES
        if name not in ENCODERS
        else {k: v for k, v in SIZES.items() if k not in ("num_key_value_heads", "head_dim")}
    )
    config = getattr(transformers, config_class)(**(sizes | options))
    config._attn_implementation = implementation
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config)
    layer = model.get_submodule(PATHS.get(name, "model.layers.0.self_attn"))
    with torch.no_grad():  # gains and sinks away from their initial values
        for parameter_name, parameter in layer.named_parameters():
            if "norm" in parameter_name or "sinks" in parameter_name:
                parameter.normal_()
    return layer


@pytest.mark.parametrize("name", LAYERS)
def test_a_layer_conforms_with_the_variant_its_config_gives(name):
    report = conform(_layer(name))
    assert report.conforms, report.table()
    assert report.convention == "huggingface" and report.variant == LAYERS[name][3]
    assert report.causal == (name not in ENCODERS)
    rows = {check.name: check.status for check in report.checks}
    assert rows["gradients"] == rows["mask convention"] == "PASS"
    # a decoder layer generates with a cache (BLOOM's adds its own ALiBi and residual)
    cached = name not in ENCODERS and name != "bloom"
    assert rows["after a cache"] == ("PASS" if cached else "n/a")


@pytest.mark.parametrize("name", ["llama", "qwen3", "mistral", "bert", "vit"])
def test_the_sdpa_implementation_conforms_too(name):
    assert conform(_layer(name, "sdpa")).conforms


def test_a_window_is_shown_enough_tokens_to_reach_past_it():
    report = conform(_layer("mistral"))
    assert report.sizes["n"] == report.sizes["w"] + 2 == 5 and report.sizes["w"] == 3
    wide = conform(_layer("gemma3"), values={"w": 100})
    assert any("not exercised" in note for note in wide.notes)


def test_told_another_base_a_cap_or_a_sink_a_layer_does_not_conform():
    assert not conform(_layer("llama"), values={"beta": 500.0}).conforms
    assert not conform(_layer("llama3.1"), values={"eta": 4.0}).conforms  # another factor
    assert not conform(_layer("gemma2"), values={"kappa": 50.0}).conforms
    assert not conform(_layer("llama"), variant="softcap").conforms


@pytest.mark.parametrize(
    ("family", "build", "c_q"),
    [
        # Gemma 2 27B's kind: query_pre_attn_scalar (here 12) other than the head's width (8)
        (
            "gemma2",
            lambda: transformers.Gemma2Config(**(SIZES | {"query_pre_attn_scalar": 12})),
            12,
        ),
        # Granite: the scores times attention_multiplier μ, c_q = 1/μ²
        (
            "granite",
            lambda: transformers.GraniteConfig(**(SIZES | {"attention_multiplier": 0.25})),
            16,
        ),
    ],
)
def test_a_scale_of_the_config_is_read_as_query_scale(family, build, c_q):
    """The layer scales by its config's number, not 1/√c_h: read as the variant that declares
    it (query-scale) with that number, it conforms; told the book's scale, it does not."""
    model = transformers.AutoModelForCausalLM.from_config(build())
    layer = model.model.layers[0].self_attn
    report = conform(layer)
    assert report.conforms, report.table()
    assert "query-scale" in report.variant.split("+")
    assert report.sizes["c_q"] == pytest.approx(c_q)
    assert not conform(layer, values={"c_q": 8}).conforms  # 1/√c_h: the wrong scale


@pytest.mark.parametrize(
    ("name", "told"),
    [
        ("gpt-oss-yarn", {"rho_a": 1.0}),  # the attention factor missing
        ("gpt-oss-yarn", {"tau": 1.0}),  # the range rounded outwards: another ramp
        ("gpt-oss-yarn", {"eta": 8.0}),  # another factor
        ("llama-yarn", {"tau": 0.0}),
        ("llama-yarn", {"beta_s": 2.0}),
    ],
)
def test_yarn_told_another_number_does_not_conform(name, told):
    """Each number of YaRN changes what the layer computes at these sizes."""
    assert not conform(_layer(name), values=told).conforms


def test_yarn_values_are_read_as_transformers_reads_them():
    report = conform(_layer("gpt-oss-yarn"))
    expected = {"eta": 32, "beta_f": 32, "beta_s": 1, "L_0": 512, "tau": 0}
    assert {k: report.sizes[k] for k in expected} == expected
    assert report.sizes["rho_a"] == pytest.approx(0.1 * math.log(32) + 1)


def test_a_port_that_drops_yarn_s_attention_factor_does_not_conform(monkeypatch):
    """A GPT-OSS whose rotary embedding leaves cos and sin unscaled (the attention factor
    missing, issue 49's broken YaRN port) is found out."""
    from transformers.models.gpt_oss import modeling_gpt_oss

    layer = _layer("gpt-oss-yarn")
    assert conform(layer).conforms
    built = modeling_gpt_oss.GptOssRotaryEmbedding.__init__

    def unscaled(self, *args, **kwargs):
        built(self, *args, **kwargs)
        self.attention_scaling = 1.0

    monkeypatch.setattr(modeling_gpt_oss.GptOssRotaryEmbedding, "__init__", unscaled)
    assert not conform(layer).conforms


def test_linear_scaling_is_read_with_its_factor_and_told_another_does_not_conform():
    report = conform(_layer("llama-linear"))
    assert report.conforms and report.sizes["eta"] == 4
    assert not conform(_layer("llama-linear"), values={"eta": 2.0}).conforms


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
def test_a_rope_scaling_that_reads_the_sequence_s_length_is_refused(kind):
    """Dynamic NTK and LongRoPE change the angles with the sequence's length (at the sizes a
    check runs, dynamic's are the default ones): read as plain RoPE, a layer would "conform"
    while the model computes otherwise past its original context. Refused by name instead."""
    config = transformers.LlamaConfig(**SIZES)
    config.rope_parameters = {"rope_type": kind, "rope_theta": 10_000.0, "factor": 2.0}
    if kind == "longrope":
        half = SIZES["hidden_size"] // SIZES["num_attention_heads"] // 2
        config.rope_parameters |= {"short_factor": [1.0] * half, "long_factor": [2.0] * half}
        config.rope_parameters["original_max_position_embeddings"] = 64
    layer = transformers.LlamaForCausalLM(config).model.layers[0].self_attn
    with pytest.raises(ConformError, match=rf"rope_type '{kind}' scales the angles"):
        conform(layer)


@pytest.mark.parametrize("name", ["gpt-neox-partial", "qwen3.5-partial"])
def test_a_partial_rotation_is_read_with_its_width(name):
    """GPT-NeoX's default rotary_pct (0.25 of 8: c_r = 2) and Qwen 3.5's factor (0.5: c_r = 4);
    told another width, the layer does not conform."""
    layer = _layer(name)
    assert conform(layer).sizes["c_r"] == (2 if name == "gpt-neox-partial" else 4)
    assert not conform(layer, values={"c_r": 8 if name == "gpt-neox-partial" else 2}).conforms


class _PerHeadNorm(torch.nn.Module):
    """An RMS norm of each head's c_h features on their own, with OLMo's gains of the whole row:
    a port of OLMo that normalises per head, as Qwen 3 does."""

    def __init__(self, norm, width):
        super().__init__()
        self.weight, self.eps, self.width = norm.weight, norm.variance_epsilon, width

    def forward(self, x):
        heads = x.unflatten(-1, (-1, self.width))
        normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.flatten(-2) * self.weight


@pytest.mark.parametrize("which", [("q_norm",), ("k_norm",), ("q_norm", "k_norm")])
def test_olmo_normalised_per_head_does_not_conform(which):
    """OLMo's QK-norm reads as whole-qk-norm by the length of its gains; a layer that normalises
    each head instead (its norm of a row of ones still gives the gains) computes other scores,
    and where both norms are per head the catalogue names it."""
    layer = _layer("olmo2")
    assert conform(layer).variant == "gqa+rope+whole-qk-norm"
    for name in which:
        setattr(layer, name, _PerHeadNorm(getattr(layer, name), SIZES["head_dim"]))
    report = conform(layer)
    assert report.variant == "gqa+rope+whole-qk-norm" and not report.conforms
    assert report.diagnosis.id == ("qk-norm-per-head" if len(which) == 2 else None)


def test_a_layer_that_drops_its_cache_fails_after_a_cache(monkeypatch):
    """A Llama layer that never hands its cache on: the tokens after the first call attend to
    themselves only."""
    layer = _layer("llama")
    forward = type(layer).forward

    def forgetting(
        self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs
    ):
        mask = None if attention_mask is None else attention_mask[..., -hidden_states.shape[1] :]
        return forward(self, hidden_states, position_embeddings, mask, None, **kwargs)

    monkeypatch.setattr(type(layer), "forward", forgetting)
    report = conform(layer)
    rows = {check.name: check.status for check in report.checks}
    assert rows["forward values"] == "PASS" and rows["after a cache"] == "FAIL"


@pytest.mark.parametrize(
    ("name", "told"), [("llama4-chunked", {"chi": 8}), ("llama4-nope", {"F": 100})]
)
def test_llama_4_s_layers_told_another_chunk_or_floor_do_not_conform(name, told):
    """The control of Llama 4's rows above: the chunk and the temperature read from the config
    are what the layer computes (issue 34: its RoPE layers crashed on their complex tables, its
    layers without RoPE were checked as RoPE layers)."""
    assert not conform(_layer(name), values=told).conforms


@pytest.mark.parametrize("name", ["cohere2-global", "exaone4-global"])
def test_a_global_layer_that_does_not_rotate_told_rope_does_not_conform(name):
    """The control of the rows above: the layer, asked, does not rotate."""
    assert not conform(_layer(name), variant="rope").conforms


#: The packed layouts (rows of `LAYOUTS`): GPT-BigCode's (each head's q, k, v; or multi-query's
#: [Q | K | V]) and Falcon's (each head's; multi-query's; the new decoder's groups), each with
#: the variant its layer computes.
PACKED_LAYERS = {
    "bigcode": ("GPTBigCodeConfig", "GPTBigCodeModel", {"multi_query": False}, ""),
    "bigcode-multi-query": ("GPTBigCodeConfig", "GPTBigCodeModel", {"multi_query": True}, "gqa"),
    "falcon": ("FalconConfig", "FalconModel", {"multi_query": False}, "rope"),
    "falcon-multi-query": ("FalconConfig", "FalconModel", {"multi_query": True}, "gqa+rope"),
    "falcon-new-decoder": (
        "FalconConfig",
        "FalconModel",
        {"new_decoder_architecture": True, "num_kv_heads": 2},
        "gqa+rope",
    ),
}


def _packed_layer(name):
    config_class, model_class, options, _ = PACKED_LAYERS[name]
    sizes = {"vocab_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}
    width = {"n_embd": 32} if "bigcode" in name else {"hidden_size": 32}
    config = getattr(transformers, config_class)(**sizes, **width, **options)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    block = getattr(transformers, model_class)(config).eval().h[0]
    return getattr(block, "attn", None) or block.self_attention


@pytest.mark.parametrize("name", sorted(PACKED_LAYERS))
def test_a_packed_layout_is_read_as_its_family_packs_it(name, monkeypatch):
    """Each layout conforms with its variant; read with another family's layout (each head's
    q, k, v taken as [Q | K | V], or the reverse) it does not."""
    from derive.conformance.read import huggingface_tables as tables

    layer = _packed_layer(name)
    report = conform(layer)
    assert report.conforms, report.table()
    assert report.variant == PACKED_LAYERS[name][3] and report.convention == "huggingface"
    # each layout read as another: a group's as each head's, each head's as [Q | K | V], and
    # [Q | K | V] as each head's
    each_head, heads_then_two = tables._each_head_three, tables._heads_then_two
    monkeypatch.setattr(tables, "_each_group", each_head)
    monkeypatch.setattr(tables, "_each_head_three", heads_then_two)
    monkeypatch.setattr(tables, "_heads_then_two", each_head)
    misread = None
    try:
        misread = conform(layer)
    except ConformError:  # a layout whose widths do not fit: refused, which fails as well
        pass
    assert misread is None or not misread.conforms


def test_falcon_s_alibi_layers_are_refused_by_name():
    config = transformers.FalconConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, alibi=True
    )
    layer = transformers.FalconModel(config).h[0].self_attention
    with pytest.raises(ConformError, match="Falcon's ALiBi layers are not read"):
        conform(layer)


def _broken_attention(mistake):
    """Hugging Face's eager attention function (the layer's query, key and value states, its
    additive mask, its scale) with one classic mistake, for `AttentionInterface.register`."""

    def attend(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
        scores = query @ key.transpose(-1, -2) * scaling
        if mistake == "mask-after-softmax":
            kept = attention_mask[..., : key.shape[-2]] == 0
            weights = scores.float().softmax(-1).to(query.dtype) * kept
        else:
            axis = -2 if mistake == "softmax-over-queries" else -1
            scores = scores + attention_mask[..., : key.shape[-2]]
            weights = scores.float().softmax(axis).to(query.dtype)
        out = weights @ value  # (batch, h, n, c_h)
        if mistake == "heads-mixed":  # the heads merged without the transpose
            return out.reshape(out.shape[0], out.shape[2], out.shape[1], -1), weights
        return out.transpose(1, 2).contiguous(), weights

    return attend


@pytest.mark.parametrize("mistake", ["softmax-over-queries", "heads-mixed", "mask-after-softmax"])
def test_a_decoder_layer_s_mistake_is_named_through_its_cached_calls(mistake):
    """A Hugging Face decoder layer is also checked with its cache, where it makes its mistake
    within each call: the diagnosis models the mistake per call (or, for one that mixes a
    call's rows, asks nothing of the cached calls) and names it (issue 34: no name was found,
    the mistake modelled over the whole sequence)."""
    name = f"broken-{mistake}"
    transformers.AttentionInterface.register(name, _broken_attention(mistake))
    report = conform(_layer("llama", implementation=name))
    assert not report.conforms
    rows = {check.name: check.status for check in report.checks}
    assert rows["after a cache"] == "FAIL", report.table()
    assert report.diagnosis.id == mistake, report.table()


#: The families the tables refuse (`REFUSED`), each by the words of its reason: one per row.
REFUSED_FAMILIES = {
    "gpt_neo": "no scale of its scores",
    "bitnet": "attn_sub_norm",
    "diffllama": "differential attention",
    "hunyuan_v1_dense": "normalised after RoPE",
    "persimmon": "LayerNorms of the queries and keys",
    "lfm3": "an output gate of another kind",
    "beam": "gate_bias",
    "inkling_text": "short convolutions of its keys and values",
    "ministral3": "llama_4_scaling_beta",
}
#: where a family's first attention layer is, and what building it takes (LFM3's first layers
#: are convolutions; GPT-Neo's layers are typed)
FIRST_ATTENTION = {
    "lfm3": ("model.layers.2.self_attn", {"num_hidden_layers": 3}),
    "gpt_neo": (
        "transformer.h.0.attn.attention",
        {"num_layers": 1, "attention_types": [[["global"], 1]]},
    ),
}


def _family_layer(family):
    path, options = FIRST_ATTENTION.get(family, ("model.layers.0.self_attn", {}))
    config = transformers.AutoConfig.for_model(family, **SIZES | {"pad_token_id": 0} | options)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.get_submodule(path)


def test_every_refusal_of_the_tables_is_tested():
    from derive.conformance.read.huggingface_tables import REFUSED

    # and Falcon's ALiBi layers, which a default config does not build:
    # test_falcon_s_alibi_layers_are_refused_by_name
    assert len(REFUSED_FAMILIES) + 1 == len(REFUSED)


@pytest.mark.parametrize("family", sorted(REFUSED_FAMILIES))
def test_a_layer_that_computes_what_no_variant_declares_is_refused_by_name(family):
    """Not checked against a formula it does not compute ("does not conform" of an unmodified
    layer): refused, naming what it computes."""
    layer = _family_layer(family)
    with pytest.raises(ConformError, match=REFUSED_FAMILIES[family]) as refused:
        conform(layer)
    assert type(layer).__name__ in str(refused.value) and "not read" in str(refused.value)


def test_stablelm_s_layernorms_per_head_are_refused_too():
    config = transformers.StableLmConfig(**SIZES, qk_layernorm=True)
    layer = transformers.StableLmForCausalLM(config).model.layers[0].self_attn
    with pytest.raises(ConformError, match="LayerNorms of the queries and keys"):
        conform(layer)


def test_gpt2_s_layer_alone_conforms_with_the_mask_its_model_gives():
    """transformers 5's GPT2Attention applies no causal mask of its own: its model gives one
    as attention_mask, as to every decoder layer. Conformed alone, it is called that way, so it
    is causal (never causal-mask-missing) and its mask checks run."""
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = transformers.GPT2Config(n_embd=32, n_head=4, n_layer=1, vocab_size=64)
    torch.manual_seed(0)
    report = conform(GPT2Attention(config, layer_idx=0))
    assert report.conforms, report
    checks = {check.name: check.status for check in report.checks}
    assert checks["causality"] == "PASS" and checks["mask convention"] == "PASS"


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_a_users_subclass_of_a_layer_is_read_as_its_base(name):
    """A layer patched by subclassing, in the user's own module, its forward unchanged: read
    as its base (its family's row, the rotary embedding beside the base), and it conforms."""
    layer = _layer(name)
    patched = type("Patched" + type(layer).__name__, (type(layer),), {"__module__": __name__})
    layer.__class__ = patched
    report = conform(layer)
    assert report.conforms, report.table()
    assert report.variant == LAYERS[name][3]
