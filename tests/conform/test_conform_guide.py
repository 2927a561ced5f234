"""The guide to `derive conform` (docs/guides/check-your-port.md) says what is true: its four-line test runs as pasted (and fails
on a broken attention), and its example output is what the command prints now (numbers aside)."""

import re
from pathlib import Path

import broken
import pytest

from derive.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "guides" / "check-your-port.md").read_text(encoding="utf-8")


def _three_lines():
    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", SECTION, re.S) if "assert_conforms" in b
    ]
    return block


def test_the_four_line_test_runs_as_pasted_and_passes():
    block = _three_lines()
    assert len([line for line in block.splitlines() if line.strip()]) == 4
    namespace: dict = {}
    exec(compile(block, "check-your-port.md", "exec"), namespace)  # noqa: S102 - our own guide
    namespace["test_my_attention"]()


def test_the_four_line_test_fails_on_a_broken_attention_with_the_report():
    block = _three_lines().replace("MultiHeadAttention(64", "Broken(64")
    namespace = {"Broken": lambda *args, **kwargs: broken.heads_mixed()}
    exec(compile(block, "check-your-port.md", "exec"), namespace)  # noqa: S102
    with pytest.raises(AssertionError, match=r"diagnosis: heads-mixed"):
        namespace["test_my_attention"]()


def _numbers_masked(text):
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", text).rstrip()


def test_the_example_output_is_what_the_command_prints(capsys, monkeypatch):
    (example,) = re.findall(r"```text\n\$ derive conform (\S+)\n(.*?)```", SECTION, re.S)
    target, printed = example
    monkeypatch.chdir(ROOT)
    assert main(["conform", target]) == 1
    out = capsys.readouterr().out
    assert _numbers_masked(printed) == _numbers_masked(out)


def test_the_hugging_face_example_runs_and_reads_the_variant(capsys):
    pytest.importorskip("transformers")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", SECTION, re.S) if "Qwen3" in b]
    assert len([line for line in block.splitlines() if line.strip()]) == 3
    exec(compile(block, "check-your-port.md", "exec"), {})  # noqa: S102 - our own guide
    out = capsys.readouterr().out
    assert "variant gqa+rope+qk-norm" in out.splitlines()[0]
    assert out.rstrip().splitlines()[-1].startswith("conforms")
