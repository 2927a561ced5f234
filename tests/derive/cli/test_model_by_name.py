"""`--model TYPE` and `--config FILE`: a model's attention derived by its name, as the combination
the Hugging Face adapter of derive conform reads from a layer built from its config, with the
config's values; and each way it is refused, named."""

import json

import pytest

pytest.importorskip("transformers", reason="--model reads a transformers config")

import derive  # noqa: E402
from derive.cli import main  # noqa: E402
from derive.conformance.read.models import (  # noqa: E402
    ModelError,
    model_layers,
    model_reading,
)


def _config_file(tmp_path, **changes):
    import transformers

    given = transformers.AutoConfig.for_model("gemma2").to_dict() | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(given), encoding="utf-8")
    return path


def test_a_model_type_is_its_kinds_of_layer_with_the_config_s_values():
    local, overall = model_layers(model="gemma2")  # Gemma 2: local layers, then global ones
    assert derive.variant(local.variant).name == "gqa+sliding-window+softcap+rope"
    assert derive.variant(overall.variant).name == "gqa+softcap+rope"
    assert (local.heads, local.width) == (8, 256)
    assert dict(local.values) == {"g": 4, "beta": 10000.0, "w": 4096, "kappa": 50.0}
    assert "w" not in dict(overall.values)


def test_a_config_file_gives_its_own_values(tmp_path):
    path = _config_file(
        tmp_path,
        sliding_window=512,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        query_pre_attn_scalar=64,  # the scale 1/√c_h (another: the variant query-scale)
    )
    local = model_layers(config=path)[0]
    assert (local.heads, local.width) == (4, 64)
    assert dict(local.values)["w"] == 512 and dict(local.values)["g"] == 1
    assert local.model == "gemma2 (its config config.json)"


def test_the_command_derives_the_model_s_attention_and_states_its_values(tmp_path, capsys):
    by_type, by_file = tmp_path / "type.tex", tmp_path / "file.tex"
    assert main(["latex", "--model", "gemma2", "-o", str(by_type)]) == 0
    assert main(["latex", "--config", str(_config_file(tmp_path)), "-o", str(by_file), "-q"]) == 0
    tex, same = by_type.read_text(encoding="utf-8"), by_file.read_text(encoding="utf-8")
    assert "Grouped-query attention with a sliding window, softcapping and RoPE" in tex
    assert r"$w = 4096$" in tex and r"$\kappa = 50$" in tex and r"$g = 4$" in tex
    assert "c_h = 256" in tex and "model.layers.0.self_attn" in tex
    # the same derivation from the model's own config file, its source named so
    assert tex.replace("transformers' default config", "its config config.json") == same
    assert "2 kinds of attention layer" in capsys.readouterr().err


def test_gpt_oss_is_derived_with_yarn_by_its_name_and_by_its_config_file(tmp_path):
    """GPT-OSS's sliding layers (GQA, a window, sinks, RoPE scaled by YaRN), by its model type
    and from a saved config: the same derivation, with the config's values."""
    import transformers

    config = transformers.AutoConfig.for_model("gpt_oss").to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    by_type, by_file = tmp_path / "type.tex", tmp_path / "file.tex"
    assert main(["latex", "--model", "gpt_oss", "-o", str(by_type), "-q"]) == 0
    assert main(["latex", "--config", str(path), "-o", str(by_file), "-q"]) == 0
    tex, same = by_type.read_text(encoding="utf-8"), by_file.read_text(encoding="utf-8")
    assert "the attention of GPT-OSS (its sliding layers)" in tex
    for value in (r"$\eta = 32$", r"$\tau = 0$", r"$\rho_{a} = 1.34657$", r"$w = 128$"):
        assert value in tex
    assert tex.replace("transformers' default config", "its config config.json") == same


def test_a_model_with_recurrent_layers_derives_its_softmax_layers_and_names_the_others(tmp_path):
    """Qwen 3.5: its full-attention layers derive; its Gated DeltaNet layers are listed as
    checked by conform against their recurrence (they made --model fail before)."""
    kinds, others = model_reading(model="qwen3_5_text")
    assert [derive.variant(kind.variant).name for kind in kinds] == [
        "gqa+qk-norm+partial-rope+gate"
    ]
    ((path, reason),) = others.items()
    assert path.endswith("linear_attn") and "a recurrent layer" in reason
    assert main(["markdown", "--model", "qwen3_5_text", "-q", "-o", str(tmp_path / "q.md")]) == 0


def test_the_check_gives_the_model_s_parameters_and_draws_small_sizes(capsys):
    assert main(["check", "--model", "qwen3", "--seed", "0", "--forward-only", "-q"]) == 0
    out = capsys.readouterr().out
    assert "qwen3" in out and "its parameters given, its sizes drawn small" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["latex", "--model", "gema2"], "unknown model type 'gema2'; did you mean 'gemma2'?"),
        (["latex", "--model", "ministral3"], "llama_4_scaling_beta"),
        (["latex", "--model", "gemma2", "--layer", "2"], "--layer 2, but gemma2"),
        (["latex", "--model", "gemma2", "--variant", "rope"], "drop --variant"),
        (["latex", "--model", "gemma2", "--config", "c.json"], "not both"),
        (["latex", "--config", "missing.json"], "config 'missing.json' cannot be read"),
    ],
)
def test_a_model_that_cannot_be_read_is_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "-o", "out.tex"]) == 2
    err = capsys.readouterr().err
    assert message in err and not (tmp_path / "out.tex").exists()


def test_the_reading_refuses_neither_or_both():
    with pytest.raises(ModelError, match="one of them"):
        model_layers()


def test_conform_checks_each_kind_of_layer_of_a_model(capsys):
    """derive conform --model: the model built from its config, each kind of layer conformed;
    0 where all conform, 1 where a layer is not read (its reason said), the JSON by layer."""
    assert main(["conform", "--model", "gemma2", "-q"]) == 0
    out = capsys.readouterr().out
    assert "gemma2 (transformers' default config): 2 kinds of attention layer" in out
    assert out.count("conforms (") == 2 and "model.layers.1.self_attn (Gemma2Attention)" in out
    assert main(["conform", "--model", "gemma2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown["layers"]) == {"model.layers.0.self_attn", "model.layers.1.self_attn"}
    assert all(layer["conforms"] for layer in shown["layers"].values())
    assert main(["conform", "--model", "ministral3", "-q"]) == 1
    assert "model.layers.0.self_attn: not read: Ministral3Attention:" in capsys.readouterr().out
    assert main(["conform", "--model", "gpt_oss", "-q"]) == 0  # YaRN: both kinds conform
    assert capsys.readouterr().out.count("conforms (") == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["conform"], "give a TARGET, or --model TYPE or --config FILE"),
        (["conform", "x.py:f", "--model", "gemma2"], "give a TARGET, or --model TYPE"),
        (["conform", "--model", "gemma2", "--variant", "rope"], "--variant is for one module"),
        (["conform", "--model", "gema2"], "did you mean 'gemma2'?"),
    ],
)
def test_conform_of_a_model_refuses_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
