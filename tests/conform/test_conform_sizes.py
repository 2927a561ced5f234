"""Any size or dtype the target accepts is checked (a check with nothing to compare is n/a, with
its reason); a size or dtype the target refuses is exit 2 with one line naming what was passed."""

import re

import correct
import pytest
import torch

from derive import conform
from derive.cli import main


def _row(report, name):
    (row,) = [r for r in report.checks if r.name == name]
    return row


@pytest.mark.parametrize(
    "options, alone, reason",
    [
        ({"heads": 1}, "heads kept separate", "one head (heads = 1): no other to change"),
        ({"batch": 1}, "batch independence", "one sequence (batch = 1): no other to change"),
        ({"batch": 1, "heads": 1, "n": 2, "width": 1}, "heads kept separate", "one head"),
    ],
)
def test_a_function_with_one_head_or_one_sequence_conforms(options, alone, reason):
    report = conform(correct.sdpa_torch, **options)
    assert report.conforms
    row = _row(report, alone)
    assert (row.status, row.error) == ("n/a", None) and row.why.startswith(reason)


def test_a_module_with_one_sequence_checks_no_batch_independence():
    """Before: the check compared the output with itself, and passed."""
    report = conform(correct.book_mha(), batch=1)
    assert report.conforms and report.sizes["batch"] == 1
    row = _row(report, "batch independence")
    assert (row.status, row.why) == ("n/a", "one sequence (batch = 1): no other to change")


@pytest.mark.parametrize("option", [("--heads", "1"), ("--batch", "1")])
def test_the_command_takes_one_head_or_one_sequence(capsys, option):
    status = main(["conform", "torch.nn.functional:scaled_dot_product_attention", *option])
    out = capsys.readouterr().out
    assert status == 0 and re.search(r"^conforms \(\d+ PASS, 1 n/a\)$", out, re.M)


_PICKY = (
    "import torch.nn.functional as F\n\n\n"
    "def even_heads(q, k, v):\n"
    "    if q.shape[1] % 2 or q.dtype == torch.float16:\n"
    "        raise ValueError(f'heads must be even, got {q.shape[1]}; no float16')\n"
    "    return F.scaled_dot_product_attention(q, k, v)\n"
)


@pytest.mark.parametrize(
    "argv, passed",
    [
        (["--heads", "3"], r"q of shape \(2, 3, 5, 8\)"),  # the default: 3 heads, batch 2
        (["--heads", "2", "--dtype", "float16"], r"q of shape \(3, 2, 5, 8\)"),
    ],
)
def test_a_size_or_dtype_the_target_refuses_exits_2_with_one_line(capsys, tmp_path, argv, passed):
    target = tmp_path / "picky.py"
    target.write_text("import torch\n" + _PICKY)
    status = main(["conform", f"{target}:even_heads", *argv])
    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    assert captured.err.count("\n") == 1 and re.search(passed, captured.err)
    assert "ValueError: heads must be even" in captured.err
    assert main(["conform", f"{target}:even_heads", "--heads", "2"]) == 0


def test_sizes_the_target_accepts_in_every_dtype():
    for dtype in (torch.float64, torch.bfloat16):
        report = conform(correct.sdpa_written, heads=1, batch=1, dtype=dtype)
        assert report.conforms, report.table()
