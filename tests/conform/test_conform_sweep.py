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
    "afmoe",
    "apertus",
    "bamba",
    "bart",
    "bert",
    "bloom",
    "cohere2",
    "cwm",
    "electra",
    "exaone4",
    "falcon_mamba",
    "gemma2",
    "gemma3_text",
    "glm4",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "gpt_oss",
    "granitemoehybrid",
    "helium",
    "internlm3",
    "jamba",
    "llama",
    "llama4_text",
    "mamba",
    "mamba2",
    "mistral",
    "mixtral",
    "nemotron_h",
    "olmo2",
    "olmo3",
    "phi",
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
    for row in rows:  # the verdict first, the time (which varies) before the class and layer
        start, end = (
            f"| {row.family} | conforms | {row.variant} | ",
            f" | {row.layer} | `{row.path}` |",
        )
        lines = [line for line in table.splitlines() if line.startswith(start) and end in line]
        assert lines, (start, end)


def _heads_mixed(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Hugging Face's attention with the heads merged by a reshape without the transpose."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = query @ key.transpose(-1, -2) * scaling + attention_mask[..., : key.shape[-2]]
    out = scores.softmax(-1) @ value  # (batch, h, n, c_h)
    return out.reshape(out.shape[0], out.shape[2], out.shape[1], -1), None


def test_the_sweep_tells_a_broken_layer_a_refused_one_and_an_unread_family_apart(monkeypatch):
    """Llama's layers with the heads mixed (its attention function replaced) do not conform,
    named; BitNet's, which normalise the merged heads before o_proj, are refused with that
    reason; GPT-J's layout is in no table: not read."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", _heads_mixed)
    found = {row.family: row for row in sweep_transformers.sweep(["llama", "bitnet", "gptj"])}
    assert found["llama"].verdict == "does not conform"
    assert "diagnosis: heads-mixed" in found["llama"].why
    assert found["bitnet"].verdict == "not read"
    assert "attn_sub_norm" in found["bitnet"].why
    assert found["gptj"].verdict == "not read"
    assert "no adapter finds the weights of GPTJAttention" in found["gptj"].why


def test_a_scale_of_the_config_is_read_and_what_else_a_layer_does_still_refused():
    """Granite scales by its attention_multiplier and HyperCLOVA X by another number: read as
    query-scale, they conform. Inkling scales by 1/c_h too (its queries and keys RMS-normalised),
    but it also convolves its keys and values and adds relative logits: reading its scale must
    not read it as conforming or not, it is refused with what it does that no variant declares."""
    rows = sweep_transformers.sweep(["granite", "hyperclovax", "inkling_text"])
    for row in rows:
        if row.family == "inkling_text":
            assert row.verdict == "not read" and "k_sconv" in row.why, row
        else:
            assert row.verdict == "conforms" and "query-scale" in row.variant, row
