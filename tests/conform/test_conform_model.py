"""`assert_model_conforms`: every kind of attention layer of a model, each checked once with its
own index — Gemma 3's local and global layers, SmolLM3's layers with and without RoPE (its
`no_rope_layers`), Qwen 3.5's Gated DeltaNet and full-attention layers — built from small configs with random weights; a model with one broken layer
is named by that layer's path."""

import pytest
import torch

from derive import ConformError
from derive.testing import assert_model_conforms, attention_layers

transformers = pytest.importorskip("transformers")

SIZES = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "num_hidden_layers": 4,
}

#: (config class, model class, options, {the first layer of each kind: the variant read})
MODELS = {
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "sliding_window": 3,
            "query_pre_attn_scalar": 8,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
        },
        {
            "model.layers.0.self_attn": "gqa+rope+qk-norm+sliding-window",
            "model.layers.1.self_attn": "gqa+rope+qk-norm",
        },
    ),
    "smollm3": (
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        {"no_rope_layers": [1, 1, 1, 0], "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0},
        {"model.layers.0.self_attn": "gqa+rope", "model.layers.3.self_attn": "gqa"},
    ),
    # a hybrid model: Gated DeltaNet layers beside full-attention ones
    "qwen3_5": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        {
            "layer_types": ["linear_attention", "full_attention"] * 2,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 6,
            "linear_conv_kernel_dim": 3,
        },
        {
            "model.layers.0.linear_attn": "gated-deltanet",
            "model.layers.1.self_attn": "gqa+rope+partial-rope+qk-norm+gate",
        },
    ),
}


def _model(name):
    config_class, model_class, options, _ = MODELS[name]
    config = getattr(transformers, config_class)(**(SIZES | options))
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config)


@pytest.mark.parametrize("name", MODELS)
def test_each_kind_of_layer_is_checked_once_and_conforms(name):
    model = _model(name)
    assert list(attention_layers(model)) == list(MODELS[name][3])
    reports = assert_model_conforms(model)
    assert {path: report.variant for path, report in reports.items()} == MODELS[name][3]


def test_a_broken_layer_is_named_by_its_path():
    """Layer 1 of Gemma 3 (its first global one) given its input scaled by 1.5: only that kind
    fails, and the message says which layer."""
    model = _model("gemma3")
    model.model.layers[1].self_attn.register_forward_pre_hook(
        lambda module, args, kwargs: (
            ((args[0] * 1.5, *args[1:]), kwargs)
            if args
            else (args, {**kwargs, "hidden_states": kwargs["hidden_states"] * 1.5})
        ),
        with_kwargs=True,
    )
    with pytest.raises(AssertionError, match=r"1 of 2 kinds .*\n\nmodel\.layers\.1\.self_attn:"):
        assert_model_conforms(model)


def test_a_model_without_an_attention_layer_is_refused():
    with pytest.raises(ConformError, match=r"no attention layer of Sequential is read"):
        assert_model_conforms(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_a_layer_an_adapter_refuses_fails_the_model_by_its_path(monkeypatch):
    """Gemma 3's global layers refused (a row added to the tables' refusals for the test): the
    model does not pass with its local layers alone; the refused layer is named with why (it
    was skipped as if it were no attention layer)."""
    from derive.conformance.read import huggingface_tables as tables
    from derive.testing import refused_layers

    refuse = (lambda layer: layer.sliding_window is None, "told to refuse the global layers")
    monkeypatch.setattr(tables, "REFUSED", (*tables.REFUSED, refuse))
    model = _model("gemma3")
    assert list(attention_layers(model)) == ["model.layers.0.self_attn"]
    assert list(refused_layers(model)) == ["model.layers.1.self_attn"]
    with pytest.raises(AssertionError) as failed:
        assert_model_conforms(model)
    said = str(failed.value)
    assert "model.layers.1.self_attn:\nnot read:" in said and "told to refuse" in said
    assert "model.layers.0.self_attn" not in said


def test_a_layer_named_like_attention_that_no_adapter_reads_fails_the_model():
    """MiniMax alternates lightning (linear) layers with softmax ones. No adapter reads the
    lightning layers; they were silently left out, and the model passed with half its attention
    unchecked. Now they are named, with what was looked for, and the model does not pass."""
    from derive.testing import refused_layers

    config = transformers.MiniMaxConfig(
        **(SIZES | {"num_hidden_layers": 2}),
        num_local_experts=2,
        layer_types=["linear_attention", "full_attention"],
    )
    torch.manual_seed(0)
    model = transformers.MiniMaxForCausalLM(config)
    refused = refused_layers(model)
    assert list(refused) == ["model.layers.0.self_attn"]
    assert refused["model.layers.0.self_attn"].startswith(
        "MiniMaxLightningAttention is named like an attention layer: no adapter finds"
    )
    assert list(attention_layers(model)) == ["model.layers.1.self_attn"]
    with pytest.raises(AssertionError, match=r"model.layers.0.self_attn:\nnot read: MiniMax"):
        assert_model_conforms(model)
