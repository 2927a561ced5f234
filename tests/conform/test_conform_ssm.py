"""`derive conform` on state-space layers: Mamba's and Mamba-2's mixers (the corpus's ports written with the
mixer's names, this package's `Mamba2`, the mixers of transformers' Mamba 2, Bamba and Granite 4)
checked against SSD's recurrence on their own weights, in one call and token by token with
their state; each broken port named by its mistake's id; a hybrid model's every kind of layer
checked by `derive.testing.assert_model_conforms`."""

import copy

import mamba_ports
import pytest
import ssm_ports
import torch
import transformers as T

from attention.ssm import Mamba, Mamba2
from derive import conform, testing
from derive.conformance.ssm import MAMBA_MISTAKES, MISTAKES

_SMALL = dict(
    hidden_size=16,
    vocab_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=24,
)
_MAMBA = dict(
    mamba_n_heads=4,
    mamba_d_head=8,
    mamba_d_state=6,
    mamba_n_groups=2,
    mamba_d_conv=3,
    mamba_chunk_size=4,
    mamba_expand=2,
)


def _mamba2_mixer(seed=0):
    """The mixer of a small Mamba 2 built from its config, its weights drawn so that every part
    counts (initialisation leaves D and the norm's gains at 1), eval mode."""
    config = T.Mamba2Config(
        hidden_size=16,
        vocab_size=32,
        num_hidden_layers=1,
        num_heads=4,
        head_dim=8,
        expand=2,
        state_size=6,
        n_groups=2,
        conv_kernel=3,
        chunk_size=4,
    )
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    layer = model.backbone.layers[0].mixer
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.3)
    return layer


@pytest.mark.parametrize("name", sorted(ssm_ports.CORRECT))
def test_a_correct_port_conforms(name):
    report = conform(ssm_ports.CORRECT[name]())
    assert report.conforms, report.table()
    assert report.kind == "state-space (named)" and report.variant == "ssd"


def test_a_correct_port_in_float64_conforms_at_float64_s_precision():
    """Our reference computes in float64 when given it: a float64 port is held to float64."""
    report = conform(ssm_ports.correct().double())
    assert report.conforms and report.precision is None, report.table()
    assert report.checks[0].tolerance < 1e-12


@pytest.mark.parametrize("mistake", sorted(ssm_ports.BROKEN))
def test_a_broken_port_is_named_by_its_mistake(mistake):
    report = conform(ssm_ports.BROKEN[mistake]())
    assert not report.conforms
    assert report.diagnosis is not None and report.diagnosis.id == mistake, report.table()


def test_the_corpus_has_a_port_for_every_mistake():
    assert set(ssm_ports.BROKEN) == {m.id for m in MISTAKES}


def test_our_module_conforms_one_call_and_token_by_token():
    torch.manual_seed(1)
    report = conform(Mamba2(12, num_heads=4, head_dim=3, state_size=5, n_groups=2))
    assert report.conforms, report.table()
    assert [check.status for check in report.checks] == ["PASS", "PASS"]


def test_a_mamba2_mixer_conforms_token_by_token_with_its_cache():
    layer = _mamba2_mixer()
    report = conform(layer)
    assert report.conforms, report.table()
    assert report.kind == "state-space (huggingface)"
    assert [check.status for check in report.checks] == ["PASS", "PASS"]
    broken = copy.deepcopy(layer)  # its state forgotten between calls: token by token fails
    broken.forward = lambda hidden_states, cache=None, **_: layer(hidden_states)
    report = conform(broken)
    assert [check.status for check in report.checks] == ["PASS", "FAIL"], report.table()


def test_a_float64_mixer_computes_at_float32_s_precision_and_says_so():
    """transformers' scan casts to float32 whatever the model's dtype: given float64, its
    outputs are within float32's rounding of the rule's, not within float64's."""
    report = conform(_mamba2_mixer().double())
    assert report.conforms and report.precision == "float32", report.table()
    assert any("float32's precision" in note for note in report.notes)
    assert report.checks[0].error > 64 * 2**-53 * 7  # not within float64's own bound


@pytest.mark.parametrize(
    "config",
    [
        lambda: T.BambaConfig(**_SMALL, **_MAMBA, attn_layer_indices=[1]),
        lambda: T.GraniteMoeHybridConfig(
            **_SMALL,
            **_MAMBA,
            layer_types=["mamba", "attention"],
            num_local_experts=2,
            num_experts_per_tok=1,
        ),
    ],
    ids=["bamba", "granite-4"],
)
def test_a_hybrid_model_conforms_in_every_kind_of_layer(config):
    torch.manual_seed(2)
    model = T.AutoModelForCausalLM.from_config(config()).eval()
    reports = testing.assert_model_conforms(model)
    kinds = {report.variant for report in reports.values()}
    assert "ssd" in kinds and len(kinds) == 2, reports  # the mixer and the softmax layer
    mixer = next(m for m in model.modules() if type(m).__name__.endswith(("Mixer", "MambaLayer")))
    mixer.forward = _skip_doubled(mixer)  # a slip in the mixer: the model fails, it is named
    with pytest.raises(AssertionError, match=type(mixer).__name__):
        testing.assert_model_conforms(model)


def _skip_doubled(mixer):
    """The mixer's forward with half its input added again (a skip added twice: a port's slip)."""
    forward = mixer.forward

    def doubled(hidden_states, *args, **kwargs):
        out = forward(hidden_states, *args, **kwargs)
        return out + 0.5 * hidden_states

    return doubled


# ---------------------------------------------------------------------------------------------
# Mamba's (Mamba-1's) mixers, against the selective scan's recurrence


@pytest.mark.parametrize("mistake", sorted(mamba_ports.BROKEN))
def test_a_broken_mamba_port_is_named_by_its_mistake(mistake):
    report = conform(mamba_ports.BROKEN[mistake]())
    assert not report.conforms and report.variant == "selective-scan"
    assert report.diagnosis is not None and report.diagnosis.id == mistake, report.table()


def test_a_correct_mamba_port_conforms_and_the_corpus_has_every_mistake():
    report = conform(mamba_ports.correct())
    assert report.conforms and report.kind == "state-space (named)", report.table()
    assert set(mamba_ports.BROKEN) == {m.id for m in MAMBA_MISTAKES}


def test_our_mamba_conforms_one_call_and_token_by_token_at_float64():
    torch.manual_seed(4)
    report = conform(Mamba(12, inner=10, state_size=4).double())
    assert report.conforms and report.precision is None, report.table()
    assert [check.status for check in report.checks] == ["PASS", "PASS"]


@pytest.mark.parametrize(
    "config",
    [
        lambda: T.MambaConfig(hidden_size=16, vocab_size=32, num_hidden_layers=1, state_size=4),
        lambda: T.FalconMambaConfig(
            hidden_size=16, vocab_size=32, num_hidden_layers=1, state_size=4
        ),
    ],
    ids=["mamba", "falcon-mamba"],
)
def test_a_mamba_mixer_conforms_token_by_token_with_its_cache(config):
    torch.manual_seed(5)
    model = T.AutoModelForCausalLM.from_config(config()).eval()
    layer = model.backbone.layers[0].mixer
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.3)
    report = conform(layer)
    assert report.conforms and report.kind == "state-space (huggingface)", report.table()
    assert [check.status for check in report.checks] == ["PASS", "PASS"]
    broken = copy.deepcopy(layer)  # its state forgotten between calls: token by token fails
    broken.forward = lambda hidden_states, cache=None, **_: layer(hidden_states)
    assert [check.status for check in conform(broken).checks] == ["PASS", "FAIL"]
