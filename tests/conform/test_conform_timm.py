"""`derive conform` of timm's own `Attention` (timm.layers.attention, the vision transformers'
layer), no adapter written: the built-in timm adapter reads its packed ``qkv``, its QK-norm (an
RMS norm: the qk-norm variant) and its output gate (the gate variant). Non-fused, a query with
no key gets NaN (timm fills with −∞): a convention, stated, not a failure; fused, torch's sdpa.
What no registered variant declares (a LayerNorm as QK-norm, ``scale_norm``, a gate with a bias)
is refused in one line, and a wrong scale is named."""

import functools

import pytest
import torch

from derive import ConformError, conform

from .timm_layers import timm_attention


@pytest.fixture(scope="module")
def timm():
    return timm_attention()


def _layer(timm, *, fused: bool, **options):
    torch.manual_seed(0)
    layer = timm.Attention(16, num_heads=2, **options)
    layer.fused_attn = fused  # timm's global switch sets it at construction; the tests choose
    with torch.no_grad():  # gains away from 1, so that a gain read wrongly is seen
        for norm in (layer.q_norm, layer.k_norm):
            if getattr(norm, "weight", None) is not None:
                norm.weight.uniform_(0.5, 1.5)
    return layer


def _row(report, name):
    return next(check for check in report.checks if check.name == name)


@pytest.mark.parametrize("fused", [False, True])
def test_timm_attention_conforms_with_its_convention_stated(timm, fused):
    report = conform(_layer(timm, fused=fused, qkv_bias=True))
    assert report.conforms, report.table()
    assert report.convention == "timm" and report.variant == ""
    assert "b_q" in _row(report, "gradients").note
    empty = _row(report, "query with no key").note
    if fused:  # torch's sdpa gives a query with no key zeros
        assert empty.startswith("its row: zero weights")
    else:
        assert empty.startswith("its row: NaN")
        assert "convention: a query with no key gets NaN (IEEE 0/0, torch's convention)" in (
            report.notes
        )


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("norm", ["timm RmsNorm", "torch RMSNorm", "torch RMSNorm, no gains"])
def test_timm_qk_norm_is_the_qk_norm_variant(timm, fused, norm):
    from timm.layers.norm import RmsNorm

    layers = {
        "timm RmsNorm": RmsNorm,
        "torch RMSNorm": torch.nn.RMSNorm,
        "torch RMSNorm, no gains": functools.partial(torch.nn.RMSNorm, elementwise_affine=False),
    }
    report = conform(_layer(timm, fused=fused, qk_norm=True, norm_layer=layers[norm]))
    assert report.conforms, report.table()
    assert report.variant == "qk-norm"


def test_a_layer_norm_as_qk_norm_is_refused_not_read_as_an_rms_norm(timm):
    from timm.layers.norm import LayerNorm

    with pytest.raises(ConformError, match="LayerNorm: its output is neither"):
        conform(_layer(timm, fused=False, qk_norm=True, norm_layer=LayerNorm))


@pytest.mark.parametrize("fused", [False, True])
def test_timm_gate_is_the_gate_variant(timm, fused):
    report = conform(_layer(timm, fused=fused, gated=True))
    assert report.conforms, report.table()
    assert report.variant == "gate"
    assert "W_g" in _row(report, "gradients").note


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scale_norm": True}, "with scale_norm"),
        ({"gated": True, "qkv_bias": True}, "a gate with a bias"),
    ],
)
def test_what_no_variant_declares_is_refused(timm, options, message):
    from timm.layers.norm import RmsNorm

    with pytest.raises(ConformError, match=message):
        conform(_layer(timm, fused=False, norm_layer=RmsNorm, **options))


def test_a_wrong_scale_is_named(timm):
    layer = _layer(timm, fused=False)
    layer.scale = layer.head_dim**-1.0
    report = conform(layer)
    assert not report.conforms
    assert report.diagnosis is not None and report.diagnosis.id == "scale-by-head-width"
