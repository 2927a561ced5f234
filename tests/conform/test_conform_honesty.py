"""What `derive conform` promises besides its verdict: it leaves the target's weights, mode and the
random state as they were, imports nothing but the target, and `derive.testing` brings it to a
user's own tests, with adapters for conventions of their own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import correct
import pytest
import torch
import torch.nn as nn

from derive import ConformError, conform
from derive.conformance.read import adapters
from derive.testing import Weights, assert_conforms, register_adapter

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"


def test_the_weights_the_mode_and_the_random_state_are_left_alone():
    module = correct.ours_mha()
    module.train()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    torch.manual_seed(11)
    state = torch.get_rng_state()
    threads = torch.get_num_threads()
    report = conform(module)
    assert report.conforms
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    assert module.training
    after = module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


PROBE = """
import json, sys
import derive, sympy, torch  # derive loads SymPy when first used: its own dependencies are not the target
before = set(sys.modules)
report = derive.conform(sys.argv[1])
new = sorted(set(sys.modules) - before)
print(json.dumps({"conforms": report.conforms, "new": new}))
"""


def test_nothing_but_the_target_is_imported(tmp_path):
    target = tmp_path / "mine.py"
    target.write_text(
        "import torch\n\n"
        "def attend(q, k, v, attn_mask=None):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", PROBE, f"{target}:attend"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(result.stdout)
    assert found["conforms"]
    foreign = [
        m
        for m in found["new"]
        if m.split(".")[0] not in ("derive", "sympy", "torch")
        and not m.startswith("_conform_target_")
    ]
    assert "attention" not in found["new"]
    assert foreign == [], foreign


def test_assert_conforms_passes_a_correct_module_and_returns_its_report():
    assert assert_conforms(correct.nanogpt()).convention == "nanogpt"


def test_assert_conforms_fails_with_the_report_as_its_message():
    import broken

    with pytest.raises(AssertionError, match=r"(?s)diagnosis: values-are-keys.*does not conform"):
        assert_conforms(broken.values_are_keys)


def test_assert_conforms_refuses_what_it_cannot_check():
    with pytest.raises(ConformError, match=r"no adapter finds the weights of Linear"):
        assert_conforms(nn.Linear(4, 4))


class FusedQKV(nn.Module):
    """A convention of one's own: q, k, v packed in `wqkv` (d, 3c), stored as x @ wqkv."""

    def __init__(self, d=12, heads=2):
        super().__init__()
        torch.manual_seed(2)
        self.wqkv = nn.Parameter(torch.randn(d, 3 * d) / d**0.5)
        self.wo = nn.Parameter(torch.randn(d, d) / d**0.5)
        self.n_heads = heads

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (x @ self.wqkv).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return y.transpose(1, 2).reshape(b, n, d) @ self.wo


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(adapters, "_REGISTERED", [])


def test_a_registered_adapter_reads_a_convention_of_ones_own(registry):
    with pytest.raises(ConformError, match="no adapter finds the weights of FusedQKV"):
        conform(FusedQKV())

    @register_adapter("fused-qkv", recognises=lambda module: hasattr(module, "wqkv"))
    def fused_qkv(module):
        w_q, w_k, w_v = module.wqkv.chunk(3, dim=1)  # (d, 3c) -> three (d, c)
        return Weights(w_q, w_k, w_v, W_o=module.wo, heads=module.n_heads)

    report = conform(FusedQKV())
    assert report.conforms and report.convention == "fused-qkv"
    assert [r.status for r in report.checks if r.name == "heads kept separate"] == ["PASS"]


def test_an_adapter_with_shapes_that_do_not_fit_is_refused(registry):
    @register_adapter("wrong", recognises=lambda module: hasattr(module, "wqkv"))
    def wrong(module):
        return Weights(module.wqkv, module.wqkv, module.wqkv, heads=5)

    with pytest.raises(
        ConformError, match=r"adapter wrong: heads=5 must be a positive int dividing c=36"
    ):
        conform(FusedQKV())


def test_a_mistake_outside_the_catalogue_is_said_so_with_where_values_first_differ():
    import book

    class ValuesDoubled(book.BookMultiHeadAttention):
        def forward(self, x):
            b, n, _ = x.shape
            split = (b, n, self.num_heads, self.head_dim)
            keys, queries = (
                self.W_key(x).view(split).transpose(1, 2),
                self.W_query(x).view(split).transpose(1, 2),
            )
            values = 2 * self.W_value(x).view(split).transpose(1, 2)  # not in the catalogue
            scores = (queries @ keys.transpose(2, 3)).masked_fill(
                self.mask.bool()[:n, :n], -torch.inf
            )
            weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
            context = (weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)
            return self.out_proj(context)

    torch.manual_seed(3)
    report = conform(ValuesDoubled(24, 24, 16, 0.0, 3))
    assert not report.conforms and report.diagnosis.id is None
    first = report.diagnosis.first_difference
    assert first.startswith("the values first differ in scenario 'forward' at C_concat")
    assert "Q, K, V agree" in first
    assert "diagnosis: no mistake in the catalogue matches" in report.table()
    assert report.as_json()["diagnosis"] is None and report.as_json()["first_difference"] == first


def test_a_function_outside_the_catalogue_differs_first_at_its_output():
    def doubled(q, k, v):
        return 2 * torch.nn.functional.scaled_dot_product_attention(q, k, v)

    first = conform(doubled).diagnosis.first_difference
    assert first.startswith(
        "the values first differ in scenario 'forward' at C (the output), entry"
    )
