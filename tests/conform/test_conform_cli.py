"""`derive conform TARGET`: the table, --json, --markdown, colour only on a terminal, and the exit
statuses 0 (conforms), 1 (does not), 2 (bad input, one line on stderr, no traceback)."""

import io
import json
import re
from pathlib import Path

import pytest

from derive.cli import main

CORPUS = Path(__file__).parent / "corpus"


def run(capsys, *argv):
    status = main(["conform", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_correct_function_conforms(capsys):
    status, out, err = run(capsys, f"{CORPUS / 'correct.py'}:sdpa_written")
    assert (status, err) == (0, "")
    assert re.search(r"^  PASS\s+forward values\s", out, re.M)
    assert "formula: C = softmax(Q Kᵀ/√c) V" in out
    assert out.rstrip().endswith("conforms (9 PASS)")
    assert "\033[" not in out  # not a terminal: no colour


def test_a_broken_module_is_named_with_both_formulas(capsys):
    status, out, _ = run(capsys, f"{CORPUS / 'broken.py'}:no_scale")
    assert status == 1
    assert re.search(r"^  FAIL\s+forward values\s", out, re.M)
    assert "diagnosis: no-scale (no scaling: softmax(Ω), not softmax(Ω/√c))" in out
    assert "the implementation computes  ω̃⁽ˡ⁾[m,p] = ω⁽ˡ⁾[m,p]" in out
    assert "the derivation declares      ω̃⁽ˡ⁾[m,p] = ω⁽ˡ⁾[m,p]/√c_h" in out
    assert "does not conform" in out.splitlines()[-1]


def test_json_for_tools(capsys):
    status, out, _ = run(capsys, f"{CORPUS / 'broken.py'}:mask_inverted", "--json")
    report = json.loads(out)
    assert status == 1
    assert {"conforms", "kind", "checks", "diagnosis"} <= set(report)
    assert (report["conforms"], report["kind"], report["diagnosis"]) == (
        False,
        "sdpa",
        "mask-inverted",
    )
    names = [check["name"] for check in report["checks"]]
    assert names[0] == "forward values" and "mask convention" in names
    failing = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert [c["name"] for c in failing] == ["mask convention", "query with no key"]
    assert failing[0]["error"] > failing[0]["tolerance"] > 0
    assert report["mistake"]["wrong"] != report["mistake"]["right"]


def test_json_survives_a_size_given_by_value(capsys):
    """--value w=3 makes a SymPy Integer among the sizes: --json writes it as a number (it
    crashed with "Integer is not JSON serializable")."""
    target = f"{CORPUS / 'correct.py'}:sdpa_written"
    status, out, err = run(
        capsys, target, "--variant", "sliding-window", "--value", "w=3", "--json"
    )
    assert status in (0, 1) and err == ""
    report = json.loads(out)
    assert report["sizes"]["w"] == 3 and isinstance(report["sizes"]["w"], int)
    assert report["variant"] == "sliding-window"


def test_json_carries_every_note_the_table_shows(capsys):
    """The stated conventions (a query with no key's weights) are in --json as in the table."""
    target = f"{CORPUS / 'correct.py'}:sdpa_lowest"
    status, table, _ = run(capsys, target)
    status, out, _ = run(capsys, target, "--json")
    notes = json.loads(out)["notes"]
    assert notes and notes[0].startswith("convention: a query with no key gets")
    assert all(note in table for note in notes)
    assert json.loads(out)["causal_how"]


def test_markdown_for_a_bug_report(capsys):
    status, out, _ = run(capsys, f"{CORPUS / 'broken.py'}:heads_mixed", "--markdown")
    assert status == 1
    assert "| result | check | worst error | tolerance | property | formula |" in out
    assert "**Diagnosis: `heads-mixed`**" in out
    assert out.count("$$") == 4  # the wrong and the right formula, displayed


def test_colour_only_on_a_terminal(capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    from derive.cli import _parser
    from derive.cli.conform import run_conform

    args = _parser().parse_args(["conform", f"{CORPUS / 'broken.py'}:scale_by_c"])
    out = Terminal()
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert run_conform(args, out) == 1
    assert "\033[31mFAIL" in out.getvalue() and "\033[32mPASS" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    run_conform(args, out)
    assert "\033[" not in out.getvalue()


def test_options_reach_the_check(capsys):
    status, out, _ = run(
        capsys,
        "torch.nn.functional:scaled_dot_product_attention",
        "--n",
        "7",
        "--width",
        "6",
        "--heads",
        "2",
        "--dtype",
        "float64",
        "--json",
    )
    report = json.loads(out)
    assert status == 0
    assert report["sizes"] == {"batch": 3, "heads": 2, "n": 7, "c": 6}  # batch: no size has 3
    assert report["dtype"] == "float64"
    forward = report["checks"][0]
    assert forward["tolerance"] < 1e-13  # float64 rounding


@pytest.mark.parametrize(
    "target, message",
    [
        ("no_such_module_here:f", r"cannot import module 'no_such_module_here'"),
        ("missing/file.py:f", r"no file 'missing/file.py'"),
        ("torch.nn.functional:no_such_thing", r"has no attribute 'no_such_thing'"),
        ("torch.nn:Linear", r"torch.nn:Linear is a class; conform needs an instance"),
        ("plain", r"target must be 'module:attribute' or 'path/to/file.py:attribute', got 'plain'"),
        ("math:pi", r"math:pi is of type float: expected a function or an nn.Module"),
        ("{corpus}/conventions.py:split_heads", r"requires 2 positional arguments|neither"),
        ("{corpus}/correct.py:D", r"correct.py:D is of type int"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, target, message):
    status, out, err = run(capsys, target.format(corpus=CORPUS))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("derive conform: ")
    assert re.search(message, err)


def test_a_module_whose_weights_no_adapter_finds(capsys, tmp_path):
    target = tmp_path / "odd.py"
    target.write_text(
        "import torch.nn as nn\n\n"
        "class Odd(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.mix = nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n"
        "        return self.mix(x)\n\n"
        "odd = Odd()\n"
    )
    status, _, err = run(capsys, f"{target}:odd")
    assert status == 2
    assert (
        "no adapter finds the weights of Odd: looked for nn.MultiheadAttention (torch-mha)" in err
    )
    assert "W_query, W_key, W_value" in err and "register_adapter" in err


def test_the_kind_can_be_said(capsys):
    status, _, err = run(capsys, f"{CORPUS / 'correct.py'}:nanogpt", "--kind", "self")
    assert status == 2 and "--kind self is for this package's own attention modules" in err


def test_a_target_that_exits_while_imported_exits_2_with_one_line(capsys, tmp_path):
    target = tmp_path / "exits.py"
    target.write_text("import sys\n\nsys.exit(3)\n")
    status, out, err = run(capsys, f"{target}:f")
    assert (status, out) == (2, "")
    assert (
        err == f"derive conform: cannot load {str(target)!r}: it called sys.exit(3) while "
        "being imported\n"
    )


def test_a_target_file_with_postponed_annotations_and_a_dataclass_loads(capsys, tmp_path):
    """The file is a module in sys.modules while it runs, as dataclasses need."""
    target = tmp_path / "annotated.py"
    target.write_text(
        "from __future__ import annotations\n\n"
        "from dataclasses import dataclass\n\n"
        "import torch.nn.functional as F\n\n\n"
        "@dataclass\nclass Options:\n    causal: bool = False\n\n\n"
        "sdpa = F.scaled_dot_product_attention\n"
    )
    status, out, _ = run(capsys, f"{target}:sdpa")
    assert status == 0 and out.rstrip().endswith("PASS)")


def test_a_failure_of_derive_s_own_exits_3_not_the_verdict_s_1(capsys, monkeypatch):
    """A script tells a broken tool from a broken port: conform's own failure exits 3 (one
    line saying what derive could not do), never 1, the code of "does not conform"."""
    import derive.conformance

    def broken(*args, **kwargs):
        raise RuntimeError("a bug of the tool")

    monkeypatch.setattr(derive.conformance, "conform", broken)
    status, out, err = run(capsys, f"{CORPUS / 'correct.py'}:sdpa_written")
    assert status == 3 and out == "" and err.count("\n") == 1, err
    assert "derive could not run conform" in err and "RuntimeError: a bug of the tool" in err
