"""Hugging Face drop-in parity: models of `transformers` built from small configurations with
random weights (nothing is downloaded), run with this package's attention implementation
(`attention.huggingface.register`) and with `transformers`' own eager one; Qwen 3.5's attention
layer against `GroupedQueryAttention(gate=True)`, BLOOM's against `from_bloom`'s module.

Tolerances: the eager implementations of Gemma 2, Gemma 3 and Qwen 3.5 take their softmax in
float32 even in a float64 model, so their weights carry float32's rounding, a relative 2⁻²⁴ each;
an output is a weighted mean of values, off by at most that times the largest |v| and a few
more roundings: the bound `F32` (2⁻¹⁸ of the largest output) leaves a factor 64 for them (BLOOM's softmax and
Qwen 3.5's QK-norm are float32 too). GPT-OSS's eager softmax stays in float64 (`F64`). Each test also checks that the comparison can fail: the
same model with its modification taken out (the cap, the sinks, the window, the gate) is further
than 100 bounds away.
"""

import copy
import re
from pathlib import Path

import pytest
import torch
from transformers import (
    AttentionInterface,
    AutoModelForCausalLM,
    BloomConfig,
    BloomModel,
    Gemma2Config,
    Gemma3TextConfig,
    GptOssConfig,
    Llama4TextConfig,
    LlamaConfig,
    Qwen3_5TextConfig,
    Qwen3Config,
)

import attention.huggingface as hf
from attention import GroupedQueryAttention
from attention import functional as F

F32, F64 = 2.0**-18, 2.0**-40
SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    initializer_range=0.3,
)
LOCAL_GLOBAL = ["sliding_attention", "full_attention"]

CONFIGS = {
    "gemma2": (
        Gemma2Config(
            **SIZES,
            sliding_window=4,
            attn_logit_softcapping=5.0,
            query_pre_attn_scalar=12,
            layer_types=LOCAL_GLOBAL,
        ),
        F32,
    ),
    "gemma3": (
        Gemma3TextConfig(
            **SIZES, sliding_window=4, query_pre_attn_scalar=12, layer_types=LOCAL_GLOBAL
        ),
        F32,
    ),
    "gpt_oss": (
        GptOssConfig(
            **SIZES,
            sliding_window=4,
            num_local_experts=2,
            num_experts_per_tok=1,
            layer_types=LOCAL_GLOBAL,
        ),
        F64,
    ),
    "llama": (LlamaConfig(**SIZES), F32),
    "qwen3": (Qwen3Config(**SIZES), F32),  # QK-norm with gains
    # Llama 4: chunked layers with RoPE and the L2 norm, a global layer without RoPE whose
    # queries are tempered (`floor_scale` small, so that 12 tokens cross its steps)
    "llama4": (
        Llama4TextConfig(
            **{**SIZES, "num_hidden_layers": 4},
            intermediate_size_mlp=48,
            attention_chunk_size=4,
            no_rope_layers=[1, 1, 1, 0],
            use_qk_norm=True,
            attn_temperature_tuning=True,
            floor_scale=3,
            attn_scale=0.5,
            num_local_experts=2,
            interleave_moe_layer_step=2,
        ),
        F32,
    ),
    "qwen3_5": (
        Qwen3_5TextConfig(
            **SIZES,
            layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
        ),
        F32,
    ),
}


def models(name, implementation=hf.NAME):
    """(eager, ours): the same weights, float64, eval mode."""
    hf.register()
    config, _ = CONFIGS[name]
    torch.manual_seed(0)
    built = []
    for attn in ("eager", implementation):
        model = AutoModelForCausalLM.from_config(
            copy.deepcopy(config), attn_implementation=attn, experts_implementation="eager"
        )
        built.append(model.double().eval())
    built[1].load_state_dict(built[0].state_dict())
    return built


def attention_outputs(model, ids):
    """The output of every attention layer (before its output projection's residual)."""
    found = []
    hooks = [
        layer.self_attn.register_forward_hook(lambda m, i, out: found.append(out[0]))
        for layer in model.model.layers
        if hasattr(layer, "self_attn")
    ]
    with torch.no_grad():
        logits = model(ids).logits
    for hook in hooks:
        hook.remove()
    return logits, found


def assert_close_within(got, expected, bound):
    got, expected = got.detach(), expected.detach()
    scale = max(float(expected.abs().max()), 1.0)
    error = float((got - expected).abs().max())
    assert error <= bound * scale, (error, bound * scale)
    return bound * scale


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_model_on_our_attention_computes_what_its_eager_attention_computes(name):
    eager, ours = models(name)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    logits, expected = attention_outputs(eager, ids)
    got_logits, got = attention_outputs(ours, ids)
    assert len(got) == len(expected) >= 1
    bound = CONFIGS[name][1]
    for layer_got, layer_expected in zip(got, expected, strict=True):
        assert_close_within(layer_got, layer_expected, bound)
    assert_close_within(got_logits, logits, bound)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_gradients_are_those_of_the_eager_attention(name):
    eager, ours = models(name)
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(2))
    for model in (eager, ours):
        model.train()
        torch.manual_seed(3)  # the same dropout, if any
        model(ids).logits.square().mean().backward()
    expected = dict(eager.named_parameters())
    checked = 0
    for key, parameter in ours.named_parameters():
        if "self_attn" in key and parameter.grad is not None:
            assert_close_within(parameter.grad, expected[key].grad, CONFIGS[name][1])
            checked += 1
    assert checked >= 4  # q, k, v, o of at least one layer


@pytest.mark.parametrize(
    ("name", "taken_out"),
    [
        ("gemma2", "softcap"),
        ("gpt_oss", "s_aux"),
        ("gemma3", "sliding_window"),
        ("llama4", "the chunks' mask"),  # its chunks come in the mask, dropped below
    ],
)
def test_without_its_modification_a_model_is_caught(name, taken_out):
    """The comparison above can fail: our implementation with the model's modification
    dropped (and no mask given, so that the window is ours to apply) is far off."""

    def without(module, query, key, value, attention_mask, **options):
        options.pop(taken_out, None)
        return hf.attention_forward(module, query, key, value, None, **options)

    AttentionInterface.register("attention_derive_without", without)
    eager, ours = models(name, "attention_derive_without")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    _, expected = attention_outputs(eager, ids)
    _, got = attention_outputs(ours, ids)
    bound = CONFIGS[name][1] * float(expected[0].abs().max())
    assert float((got[0] - expected[0]).abs().max()) > 100 * bound


@pytest.mark.parametrize("name", ["gpt_oss", "llama4"])
def test_greedy_generation_with_the_cache_picks_the_same_tokens(name):
    eager, ours = models(name)
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(4))
    options = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    expected = eager.generate(ids, **options)
    torch.testing.assert_close(ours.generate(ids, **options), expected, rtol=0, atol=0)
    assert expected.shape[-1] == 13


def test_a_qwen_3_5_attention_layer_is_our_gated_module():
    """Qwen 3.5's full-attention layer (gate in `q_proj`, QK-norm with gains 1 + w) and
    `GroupedQueryAttention(gate=True, qk_norm=True)` given its weights: the same output."""
    config = copy.deepcopy(CONFIGS["qwen3_5"][0])
    config.rope_parameters["partial_rotary_factor"] = 1.0  # the book's RoPE: every feature
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").double().eval()
    layer = model.model.layers[1].self_attn
    with torch.no_grad():
        layer.q_norm.weight.normal_()
        layer.k_norm.weight.normal_()
    ours = GroupedQueryAttention(
        32, num_heads=4, num_kv_groups=2, head_dim=8, qk_norm=True, gate=True
    ).double()
    ours.q_norm.eps = ours.k_norm.eps = config.rms_norm_eps
    with torch.no_grad():
        for mine, theirs in (
            ("W_query", "q_proj"),
            ("W_key", "k_proj"),
            ("W_value", "v_proj"),
            ("out_proj", "o_proj"),
        ):
            getattr(ours, mine).weight.copy_(getattr(layer, theirs).weight)
        ours.q_norm.scale.copy_(1 + layer.q_norm.weight)
        ours.k_norm.scale.copy_(1 + layer.k_norm.weight)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    positions = torch.arange(7)[None]
    cos, sin = model.model.rotary_emb(x, positions)
    additive = torch.zeros(7, 7, dtype=x.dtype).masked_fill(~F.causal_mask(7), -torch.inf)
    expected, _ = layer(x, (cos, sin), additive[None, None])  # eager: no mask, no causality
    got = ours(x, ~F.causal_mask(7), cos[0], sin[0])
    assert_close_within(got, expected, F32)  # Qwen 3.5's norms and softmax: float32
    ours.gate = False  # the gate read as queries' columns: another output (or none at all)
    with pytest.raises(Exception):  # noqa: B017 - W_query is twice as wide as the queries
        ours(x, ~F.causal_mask(7), cos[0], sin[0])


def test_bloom_s_attention_is_our_alibi_module():
    config = BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=4, initializer_range=0.3)
    torch.manual_seed(6)
    model = BloomModel(config).double().eval()
    layer = model.h[0].self_attention
    seen = {}

    def keep(module, args, kwargs, out):
        seen.update(
            hidden=args[0] if args else kwargs["hidden_states"],
            residual=args[1] if len(args) > 1 else kwargs["residual"],
            out=out[0],
        )

    layer.register_forward_hook(keep, with_kwargs=True)
    with torch.no_grad():
        model(torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(7)))
    ours = hf.from_hf(layer).eval().requires_grad_(False)  # BLOOM's case: `from_bloom`
    got = ours(seen["hidden"]) + seen["residual"]
    assert_close_within(got, seen["out"], F32)  # BLOOM's softmax: float32
    plain = hf.from_bloom(layer).eval().requires_grad_(False)
    plain.score_mods = ()  # no ALiBi: another output
    error = float((plain(seen["hidden"]) + seen["residual"] - seen["out"]).abs().max())
    assert error > 100 * F32 * float(seen["out"].abs().max())


def test_the_guide_s_example_builds_a_model_on_our_attention():
    guide = Path(__file__).parents[2] / "docs" / "guides" / "huggingface.md"
    (example,) = re.findall(r"```py\n(.*?)```", guide.read_text(encoding="utf-8"), re.S)
    namespace: dict = {}
    exec(compile(example, "huggingface.md", "exec"), namespace)  # noqa: S102 - our own guide
    model = namespace["model"]
    assert model.config._attn_implementation == hf.NAME
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return hf.attention_forward(*args, **kwargs)

    AttentionInterface.register(hf.NAME, counted)
    try:
        model(torch.randint(0, 256, (1, 5)))
    finally:
        hf.register()
    assert len(calls) == model.config.num_hidden_layers


def _padded_masks(dtype):
    """A batch of 2 whose first sequence's first two keys are padding, as transformers gives it:
    boolean (True: may attend), additive with finfo.min, additive with −∞."""
    n = 5
    allowed = torch.ones(2, 1, n, n, dtype=torch.bool).tril()
    allowed[0, :, :, :2] = False
    allowed[0, :, :2, :2] = torch.eye(2, dtype=torch.bool)  # a padding query sees itself
    least = torch.finfo(dtype).min
    additive = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, least)
    infinite = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, -torch.inf)
    return allowed, {"boolean": allowed, "finfo.min": additive, "-inf": infinite}


@pytest.mark.parametrize("form", ["boolean", "finfo.min", "-inf"])
def test_a_padding_mask_in_each_of_transformers_forms_is_read_one_way(form):
    """0 (or True) may attend, a large negative number (or False) may not: the output equals a
    float64 reference that masks exactly the padding, and reading the mask the other way round
    (the additive mask's finfo.min taken as "may attend") would differ from it."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64) for _ in "qkv")
    allowed, masks = _padded_masks(torch.float64)
    module = torch.nn.Module()
    out, _ = hf.attention_forward(module, q, k, v, masks[form], is_causal=True)
    scores = (q @ k.mT / 2).masked_fill(~allowed, -torch.inf)
    expected = (scores.softmax(-1) @ v).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    reversed_reading = (q @ k.mT / 2).masked_fill(allowed, -torch.inf).softmax(-1).nan_to_num()
    assert (out - (reversed_reading @ v).transpose(1, 2)).abs().max() > 1e-3


def test_a_left_padded_batch_gives_eager_s_outputs_at_its_tokens():
    """A model on our attention, given a batch whose first sequence is left-padded, computes at
    every real token what eager attention computes. GPT-OSS: its sinks keep a padding query's
    row finite in eager attention too (Gemma 2's eager rows of padding are NaN, and the next
    layer spreads them to every token of the sequence)."""
    eager, ours = models("gpt_oss")
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.ones(2, 6, dtype=torch.long)
    attention_mask[0, :2] = 0
    with torch.no_grad():
        expected = eager(ids, attention_mask=attention_mask).logits
        got = ours(ids, attention_mask=attention_mask).logits
        unpadded = ours(ids, attention_mask=torch.ones_like(attention_mask)).logits
    real = attention_mask.bool()
    assert_close_within(got[real], expected[real], F64)
    assert (unpadded[0, 2:] - expected[0, 2:]).abs().max() > 1e-3  # the padding matters


# -- from_hf: a layer as our module, table-driven ----------------------------------------------

#: The families of `CONFIGS` with no row in `from_hf`'s table (refused by name): GPT-OSS's
#: projections have biases, which `GroupedQueryAttention` has not.
NOT_READ = {"gpt_oss"}


def _layers_inputs_and_outputs(model, ids):
    """Each attention layer with its input and output in one forward pass of the model."""
    found = []

    def before(module, args, kwargs):
        found.append([module, kwargs.get("hidden_states", args[0] if args else None)])

    def after(module, args, kwargs, out):
        found[-1].append(out[0])

    layers = [layer.self_attn for layer in model.model.layers if hasattr(layer, "self_attn")]
    hooks = [h for a in layers for h in (a.register_forward_pre_hook(before, with_kwargs=True),)]
    hooks += [a.register_forward_hook(after, with_kwargs=True) for a in layers]
    with torch.no_grad():
        model(ids)
    for hook in hooks:
        hook.remove()
    return found


@pytest.mark.parametrize("name", sorted(set(CONFIGS) - set(NOT_READ)))
def test_from_hf_gives_each_layer_s_own_output_on_its_own_input(name):
    eager, _ = models(name)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():  # QK-norm's gains away from their start, so that reading them matters
        for layer in eager.model.layers:
            attention = getattr(layer, "self_attn", None)
            for which in ("q_norm", "k_norm"):
                norm = getattr(attention, which, None)
                if getattr(norm, "weight", None) is not None:
                    norm.weight.normal_(generator=torch.Generator().manual_seed(7))
    found = _layers_inputs_and_outputs(eager, ids)
    assert len(found) >= 1
    for layer, x, expected in found:
        ours = hf.from_hf(layer, eager.model.rotary_emb)
        with torch.no_grad():
            got = ours(x)
        assert_close_within(got, expected, CONFIGS[name][1])
        assert (got - expected).abs().max() < 1e-3 * expected.abs().max()


def test_from_hf_refuses_what_it_does_not_read_by_name():
    eager, _ = models("gpt_oss")
    with pytest.raises(TypeError, match=r"from_hf: GptOssAttention is not read \(the families"):
        hf.from_hf(eager.model.layers[0].self_attn, eager.model.rotary_emb)
    with pytest.raises(TypeError, match=r"from_hf: Linear is not read \(the families read"):
        hf.from_hf(torch.nn.Linear(2, 2))
