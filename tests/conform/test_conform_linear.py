"""`derive conform` on attention without the softmax: Gated DeltaNet layers (the corpus's ports of
the book's class, this package's `GatedDeltaNet`, Qwen 3.5's and Qwen3-Next's layers of
`transformers`) checked against the gated delta rule's recurrence on their own weights, in one
call and token by token with their state; each broken port named by its mistake's id."""

import copy

import linear_ports
import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

from attention import GatedDeltaNet
from derive import conform
from derive.conformance.linear import MISTAKES


@pytest.mark.parametrize("name", sorted(linear_ports.CORRECT))
def test_a_correct_port_conforms(name):
    report = conform(linear_ports.CORRECT[name]())
    assert report.conforms, report.table()
    assert report.kind == "linear attention (book)" and report.diagnosis is None


@pytest.mark.parametrize("mistake", sorted(linear_ports.BROKEN))
def test_a_broken_port_is_named_by_its_mistake(mistake):
    report = conform(linear_ports.BROKEN[mistake]())
    assert not report.conforms
    assert report.diagnosis is not None and report.diagnosis.id == mistake, report.table()


def test_the_corpus_has_a_port_for_every_mistake():
    assert set(linear_ports.BROKEN) == {m.id for m in MISTAKES}


def test_our_module_conforms_one_call_and_token_by_token():
    torch.manual_seed(1)
    ours = GatedDeltaNet(12, 18, 0.0, 3, beta="head", conv_size=3, key_heads=1, key_dim=4)
    report = conform(ours)
    assert report.conforms, report.table()
    assert [check.status for check in report.checks] == ["PASS", "PASS"]


def _qwen_3_5_linear_layer():
    """The linear (Gated DeltaNet) layer of a small Qwen 3.5 built from its config, random
    weights, eval mode."""
    config = Qwen3_5TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        layer_types=["linear_attention", "full_attention"],
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=3,
    )
    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config)).eval()
    return model.model.layers[0].linear_attn


def test_a_qwen_3_5_linear_layer_conforms_token_by_token_with_its_cache():
    layer = _qwen_3_5_linear_layer()
    report = conform(layer)
    assert report.conforms, report.table()
    assert report.kind == "linear attention (huggingface)"
    assert [check.status for check in report.checks] == ["PASS", "PASS"]
    broken = copy.deepcopy(layer)  # its state forgotten between calls: token by token fails
    broken.forward = lambda hidden_states, cache=None, **_: layer(hidden_states)
    report = conform(broken)
    assert [check.status for check in report.checks] == ["PASS", "FAIL"], report.table()


def test_a_float64_layer_that_computes_in_float32_conforms_at_that_precision():
    """Qwen 3.5's linear layer in float64 casts to float32 inside: its outputs are within
    float32's rounding of the rule's, not float64's. The verdict names the precision it
    computes at, in the table, the finding and the JSON (it said "no mistake matches"); our
    own module in float64 computes in float64, and conforms at float64's precision."""
    report = conform(_qwen_3_5_linear_layer().double())
    assert report.conforms and report.precision == "float32", report.table()
    assert "conforms at float32's precision, not float64's" in report.table()
    assert report.as_json()["precision"] == "float32" and report.diagnosis is None
    assert any(note.startswith("finding: it computes at float32's") for note in report.notes)
    torch.manual_seed(1)
    ours = GatedDeltaNet(12, 18, 0.0, 3, beta="head", conv_size=3, key_heads=1, key_dim=4)
    exact = conform(ours.double())
    assert exact.conforms and exact.precision is None, exact.table()
