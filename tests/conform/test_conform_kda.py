"""`derive conform` on Kimi Delta Attention: KDA layers (the corpus's ports written with the
layer's names, this package's `KimiDeltaAttention`, transformers' Kimi Linear layer) checked
against the rule's recurrence on their own weights, in one call and token by token with their
state; each broken port named by its mistake's id."""

import copy

import kda_ports
import pytest
import torch
import transformers as T

from attention import KimiDeltaAttention
from derive import conform
from derive.conformance.kda import MISTAKES


def _kimi_linear_layer(seed=0):
    """The KDA layer of a small Kimi Linear built from its config, its weights drawn so that
    every part counts, eval mode."""
    config = T.KimiLinearConfig(
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        hidden_size=32,
        vocab_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=48,
        linear_attn_config={
            "kda_layers": [1],
            "full_attn_layers": [2],
            "num_heads": 4,
            "head_dim": 8,
            "short_conv_kernel_size": 3,
        },
    )
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    layer = next(m for m in model.modules() if type(m).__name__ == "KimiLinearDeltaAttention")
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.3)
    return layer


@pytest.mark.parametrize("name", sorted(kda_ports.CORRECT))
def test_a_correct_port_conforms(name):
    report = conform(kda_ports.CORRECT[name]())
    assert report.conforms, report.table()
    assert report.kind == "Kimi Delta Attention (named)" and report.variant == "kda"


def test_a_correct_port_in_float64_conforms_at_float64_s_precision():
    """Our reference computes in float64 when given it: a float64 port is held to float64."""
    report = conform(kda_ports.correct().double())
    assert report.conforms and report.precision is None, report.table()
    assert report.checks[0].tolerance < 1e-12


@pytest.mark.parametrize("mistake", sorted(kda_ports.BROKEN))
def test_a_broken_port_is_named_by_its_mistake(mistake):
    report = conform(kda_ports.BROKEN[mistake]())
    assert not report.conforms
    assert report.diagnosis is not None and report.diagnosis.id == mistake, report.table()


def test_the_corpus_has_a_port_for_every_mistake():
    assert set(kda_ports.BROKEN) == {m.id for m in MISTAKES}


def test_our_module_conforms_one_call_and_token_by_token():
    torch.manual_seed(1)
    report = conform(KimiDeltaAttention(12, num_heads=3, head_dim=4, conv_size=3))
    assert report.conforms, report.table()
    assert [check.status for check in report.checks] == ["PASS", "PASS"]


def test_kimi_linear_s_layer_conforms_token_by_token_with_its_cache():
    layer = _kimi_linear_layer()
    report = conform(layer)
    assert report.conforms, report.table()
    assert report.kind == "Kimi Delta Attention (huggingface)"
    assert [check.status for check in report.checks] == ["PASS", "PASS"]
    broken = copy.deepcopy(layer)  # its state forgotten between calls: token by token fails
    broken.forward = lambda hidden_states, cache=None, **_: layer(hidden_states)
    report = conform(broken)
    assert [check.status for check in report.checks] == ["PASS", "FAIL"], report.table()


def test_a_float64_layer_computes_at_float32_s_precision_and_says_so():
    report = conform(_kimi_linear_layer().double())
    assert report.conforms and report.precision == "float32", report.table()
    assert report.checks[0].error > 64 * 2**-53 * 7


def test_bailing_s_hybrid_delta_layer_conforms_as_kda():
    """Bailing's delta layers: KDA with whole gate projections and a bounded forget gate."""
    config = T.BailingHybridConfig(
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        hidden_size=32,
        vocab_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=48,
        linear_num_heads=4,
        linear_head_dim=8,
        linear_conv_kernel_dim=3,
        layer_types=["linear_attention", "full_attention"],
    )
    torch.manual_seed(3)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    layer = next(m for m in model.modules() if type(m).__name__ == "BailingHybridDeltaAttention")
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.3)
    report = conform(layer)
    assert report.conforms and report.variant == "kda", report.table()
    assert [check.status for check in report.checks] == ["PASS", "PASS"]
    broken = copy.deepcopy(layer)  # its outputs off by 1%: it fails
    original = broken.forward
    broken.forward = lambda hidden_states, cache=None, **_: original(hidden_states) * 1.01
    assert not conform(broken).conforms
