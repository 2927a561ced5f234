"""Conventions the derivation leaves open are stated, not failed, unless asked: what a query with
no key gets (derive's convention is zero weights; torch's NaN; a finite fill's uniform weights),
and a float64 layer whose softmax or RoPE tables run in float32 (Hugging Face's models, as their
adapter knows). `strict=True` (``--strict``) fails on them; `conventions=` (``--convention``)
tells one; found alone, a float32 softmax is only a hint in a failing report."""

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
    assert _row(report, "query with no key").note.startswith("its row: NaN")
    assert "convention: a query with no key gets NaN (IEEE 0/0, torch's convention)" in report.notes


def test_strict_or_zero_rows_told_fail_on_nan_and_name_it():
    strict = conform(broken.nan_on_empty_rows, strict=True)
    told = conform(broken.nan_on_empty_rows, conventions={"empty rows": "zero"})
    for report in (strict, told):
        assert not report.conforms and report.diagnosis.id == "nan-on-empty-rows"


def test_the_other_rows_of_the_empty_row_scenario_are_compared():
    """Only the row with no key is a convention: a mistake elsewhere in that call fails."""
    report = conform(broken.mask_after_softmax)
    row = _row(report, "query with no key")
    assert row.status == "FAIL" and row.error > row.tolerance


def _llama(implementation="eager"):
    config = transformers.LlamaConfig(
        vocab_size=64,
        num_hidden_layers=1,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    config._attn_implementation = implementation
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).model.layers[0].self_attn


def test_a_float64_eager_layer_follows_its_adapter_s_known_float32_softmax():
    """Hugging Face's eager softmax and rotary tables run in float32 whatever the dtype: the
    adapter says so, the tolerance follows (its error, about 1e-9, is far above float64's
    tolerance and far below float32's), and the report states it."""
    report = conform(_llama(), dtype=torch.float64)
    assert report.conforms, report.table()
    assert "convention (huggingface modules): the softmax in float32" in report.notes
    assert "convention (huggingface modules): RoPE's tables in float32" in report.notes
    row = _row(report, "forward values")
    assert "softmax in float32" in row.why and row.error > 1e-12


def test_the_sdpa_layer_keeps_a_float64_softmax_and_only_its_tables_are_float32():
    sdpa, eager = (conform(_llama(kind), dtype=torch.float64) for kind in ("sdpa", "eager"))
    assert sdpa.conforms
    assert [n for n in sdpa.notes if "huggingface modules" in n] == [
        "convention (huggingface modules): RoPE's tables in float32"
    ]
    ratio = _row(sdpa, "forward values").tolerance / _row(eager, "forward values").tolerance
    assert ratio < 0.1


def test_strict_ignores_the_adapter_s_conventions():
    report = conform(_llama(), dtype=torch.float64, strict=True)
    assert not report.conforms
    assert _row(report, "forward values").status == "FAIL"
    assert _row(report, "query with no key").status == "FAIL"  # uniform, not derive's zeros


class _Float32Inside(torch.nn.Module):
    """One head whose whole computation runs in float32, whatever its weights' dtype."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.W_query, self.W_key, self.W_value = (
            torch.nn.Linear(8, 8, bias=False) for _ in range(3)
        )

    def forward(self, x):
        q, k, v = (
            torch.nn.functional.linear(x.float(), layer.weight.float())
            for layer in (self.W_query, self.W_key, self.W_value)
        )
        return (torch.softmax(q @ k.mT / 8**0.5, dim=-1) @ v).to(x.dtype)


def test_a_layer_computed_in_float32_throughout_conforms_at_float32_s_precision_only():
    """Given float64 and computing in float32 throughout: not excused as a convention, but
    named. It conforms at float32's precision, which the verdict, `precision` and a finding
    say (never "no mistake matches"); --strict holds it to float64, and it fails."""
    report = conform(_Float32Inside(), dtype=torch.float64)
    assert report.conforms and report.precision == "float32", report.table()
    assert report.table().splitlines()[-1].startswith("conforms at float32's precision, not")
    assert not any(note.startswith("convention") for note in report.notes)
    assert "float32 (its inputs float64) rounding" in _row(report, "forward values").why
    strict = conform(_Float32Inside(), dtype=torch.float64, strict=True)
    assert not strict.conforms and strict.precision is None


def test_a_convention_can_be_told_and_strict_is_a_flag(monkeypatch, capsys):
    told = conform(_Float32Inside(), dtype=torch.float64, conventions={"softmax": "float32"})
    assert "softmax in float32" in _row(told, "forward values").why
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["conform", "tests/conform/corpus/broken.py:nan_on_empty_rows"]) == 0
    assert main(["conform", "tests/conform/corpus/broken.py:nan_on_empty_rows", "--strict"]) == 1
    assert "diagnosis: nan-on-empty-rows" in capsys.readouterr().out
    assert (
        main(
            [
                "conform",
                "tests/conform/corpus/broken.py:nan_on_empty_rows",
                "--convention",
                "empty rows=zero",
            ]
        )
        == 1
    )
