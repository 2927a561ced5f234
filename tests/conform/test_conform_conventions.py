"""Conventions the derivation leaves open are stated, not failed, unless asked: NaN for a query
with no key (IEEE 0/0; derive's own convention is zero weights), and a float64 layer whose
softmax runs in float32 (Hugging Face's eager layers). `strict=True` (``--strict``) fails on
them; `conventions=` tells one instead of letting it be found."""

from pathlib import Path

import broken
import pytest
import torch

from derive import conform
from derive.cli import main

transformers = pytest.importorskip("transformers")


def _row(report, name):
    return next(check for check in report.checks if check.name == name)


def test_nan_for_a_query_with_no_key_is_a_convention_stated():
    report = conform(broken.nan_on_empty_rows)
    assert report.conforms
    assert "torch's convention" in _row(report, "query with no key").note
    assert "convention: a query with no key gets NaN, not zero weights" in report.notes


def test_strict_or_zero_rows_told_fail_on_nan_and_name_it():
    strict = conform(broken.nan_on_empty_rows, strict=True)
    told = conform(broken.nan_on_empty_rows, conventions={"empty rows": "zero"})
    for report in (strict, told):
        assert not report.conforms and report.diagnosis.id == "nan-on-empty-rows"


def _llama(implementation="eager"):
    config = transformers.LlamaConfig(vocab_size=64, num_hidden_layers=1, hidden_size=32,
                                      intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=2)  # fmt: skip
    config._attn_implementation = implementation
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).model.layers[0].self_attn


def test_a_float64_layer_whose_softmax_runs_in_float32_conforms_with_that_stated():
    """Its error (about 1e-9) is far above float64's tolerance (about 1e-15) and far below
    float32's (about 1e-8): the tolerance says which precision it follows."""
    report = conform(_llama(), dtype=torch.float64)
    assert report.conforms, report.table()
    assert (
        "convention: its softmax in float32 (it does not conform with float64 throughout); "
        "the tolerances follow from that precision" in report.notes
    )
    row = _row(report, "forward values")
    assert "softmax in float32" in row.why and row.error > 1e-12


def test_strict_holds_a_float64_layer_to_float64_and_says_why_it_fails():
    report = conform(_llama(), dtype=torch.float64, strict=True)
    assert not report.conforms
    assert any("with its softmax in float32 it would conform" in n for n in report.notes)


def test_the_sdpa_layer_keeps_a_float64_softmax_and_only_its_tables_are_float32():
    """torch's kernel takes the softmax in float64; Hugging Face's rotary embedding computes
    its tables in float32 in every model: that, and only that, is stated, with a tolerance far
    below the eager layer's."""
    sdpa, eager = (conform(_llama(kind), dtype=torch.float64) for kind in ("sdpa", "eager"))
    assert sdpa.conforms
    assert [n for n in sdpa.notes if "convention" in n] == [
        "convention: its RoPE tables in float32 (it does not conform with float64 "
        "throughout); the tolerances follow from that precision"
    ]
    ratio = _row(sdpa, "forward values").tolerance / _row(eager, "forward values").tolerance
    assert ratio < 0.1


def test_the_softmax_precision_can_be_told_and_strict_is_a_flag(capsys, monkeypatch):
    report = conform(_llama(), dtype=torch.float64, conventions={"softmax": "float32"})
    assert report.conforms and not report.notes
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["conform", "tests/conform/corpus/broken.py:nan_on_empty_rows"]) == 0
    assert main(["conform", "tests/conform/corpus/broken.py:nan_on_empty_rows", "--strict"]) == 1
    assert "diagnosis: nan-on-empty-rows" in capsys.readouterr().out
