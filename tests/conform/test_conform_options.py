"""What `derive.conform`'s options change: causality told rather than probed, the sizes, the
dtype and its tolerance, an adapter named, and options it does not know."""

import correct
import pytest
import torch

from derive import ConformError, conform


def _row(report, name):
    (row,) = [r for r in report.checks if r.name == name]
    return row


def test_telling_a_non_causal_module_it_is_causal_fails_it():
    report = conform(correct.ours_v2(), causal=True)
    assert (report.causal, report.causal_how) == (True, "as told")
    assert _row(report, "causality").status == "FAIL"
    assert _row(report, "forward values").status == "FAIL"


def test_telling_a_causal_module_it_is_not_fails_its_values_and_checks_no_causality():
    report = conform(correct.nanogpt(), causal=False)
    assert _row(report, "forward values").status == "FAIL"
    assert _row(report, "causality").status == "n/a"
    assert _row(report, "causality").why == "not causal: as told"


def test_sizes_are_chosen_distinct_and_can_be_given():
    report = conform(correct.book_mha(), n=7)
    assert report.sizes == {"batch": 2, "n": 7, "d": 24, "c": 24, "heads": 3, "c_h": 8}
    report = conform(correct.sdpa_written, n=3, width=2, heads=4)
    assert report.sizes == {"batch": 5, "heads": 4, "n": 3, "c": 2}  # 2, 3, 4 taken


def test_a_module_longer_than_its_context_is_refused():
    with pytest.raises(ConformError, match=r"n=17: expected 2 ≤ n ≤ 16 \(the module's longest\)"):
        conform(correct.book_causal(), n=17)


@pytest.mark.parametrize("dtype, larger", [(torch.float64, False), (torch.bfloat16, True)])
def test_the_tolerance_follows_the_dtype(dtype, larger):
    base = _row(conform(correct.gpt2()), "forward values").tolerance  # float32
    report = conform(correct.gpt2(), dtype=dtype)
    assert report.conforms and report.dtype == str(dtype).removeprefix("torch.")
    forward = _row(report, "forward values")
    assert (forward.tolerance > 100 * base) if larger else (forward.tolerance < base / 1e6)
    assert forward.why.startswith(str(dtype).removeprefix("torch.") + " rounding")


def test_an_adapter_can_be_named_and_an_unknown_one_is_refused():
    assert conform(correct.book_mha(), adapter="book").convention == "book"
    with pytest.raises(
        ConformError, match=r"no adapter 'mine'; known: torch-mha, gpt2, gpt2-own-mask, nanogpt"
    ):
        conform(correct.book_mha(), adapter="mine")
    # a misspelled name gets the closest known one ('mine' is close to none)
    with pytest.raises(ConformError, match=r"no adapter 'gtp2' \(did you mean 'gpt2'\?\); known"):
        conform(correct.book_mha(), adapter="gtp2")


def test_an_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match=r"unknown options \['heads_count'\]"):
        conform(correct.sdpa_torch, heads_count=2)
