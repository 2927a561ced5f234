"""The sweep of transformers' attention layers (tests/benchmarks/sweep_transformers.py) on a
fixed list of families, in one process: every kind of attention layer of each conforms (local
and global layers, layers with and without RoPE, encoders and decoders), the sweep tells a layer
that does not conform and a family it cannot read apart from those, and docs/conformance.md, the
table of the whole sweep, says the same of every family of the list."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # the test extra installs it; CI has it

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "sweep_transformers.py"
_SPEC = importlib.util.spec_from_file_location("sweep_transformers", _PATH)
sweep_transformers = importlib.util.module_from_spec(_SPEC)
sys.modules["sweep_transformers"] = sweep_transformers  # its dataclass looks itself up there
_SPEC.loader.exec_module(sweep_transformers)

#: Families whose every kind of attention layer conforms today (from the whole sweep's table).
FAMILIES = [
    "apertus",
    "bert",
    "bloom",
    "cohere2",
    "cwm",
    "electra",
    "exaone4",
    "gemma2",
    "gemma3_text",
    "glm4",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "helium",
    "internlm3",
    "llama",
    "llama4_text",
    "mistral",
    "mixtral",
    "olmo2",
    "olmo3",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen3_5_text",
    "qwen3_moe",
    "qwen3_next",
    "roberta",
    "seed_oss",
    "smollm3",
    "stablelm",
    "starcoder2",
]


@pytest.fixture(scope="module")
def rows():
    return sweep_transformers.sweep(FAMILIES)


def test_every_family_of_the_list_conforms(rows):
    assert len(FAMILIES) >= 25
    assert {row.family for row in rows} == set(FAMILIES)
    assert [row for row in rows if row.verdict != "conforms"] == []
    assert len(rows) > len(FAMILIES)  # some families have two kinds of layer


def test_the_table_of_the_whole_sweep_says_the_same(rows):
    table = sweep_transformers.DOC.read_text(encoding="utf-8")
    for row in rows:
        line = f"| {row.family} | `{row.path}` | {row.layer} | {row.variant} | conforms |"
        assert line in table, line


def test_the_sweep_tells_a_layer_that_differs_and_a_family_it_cannot_read():
    found = {row.family: row for row in sweep_transformers.sweep(["bitnet", "bart"])}
    # BitNet normalises the merged heads before o_proj (attn_sub_norm): not the formula
    assert found["bitnet"].verdict == "does not conform"
    assert "forward values" in found["bitnet"].why
    assert found["bart"].verdict == "not read" and found["bart"].why
