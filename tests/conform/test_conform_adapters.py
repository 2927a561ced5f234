"""What an adapter says and what a report says of it: every argument of `register_adapter`
documented; an adapter with call= but no mask= leaves the mask checks unrun, and the verdict line
says so; a row never reads "named None"; a module that fails on a batch and on one sequence is
one message naming the shape each attempt passed."""

import inspect
import json
import re

import correct
import pytest
import torch
import torch.nn as nn

from derive import ConformError, conform
from derive.conformance.read import adapters
from derive.testing import Weights, register_adapter


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(adapters, "_REGISTERED", [])


class Biased(nn.Module):
    """One head; its mask is an additive bias (n, n), keyword attn_bias, called as module(x, x)."""

    def __init__(self, d=6, c=4):
        super().__init__()
        torch.manual_seed(3)
        self.wq, self.wk, self.wv = (nn.Parameter(torch.randn(d, c) / d**0.5) for _ in range(3))

    def forward(self, x, context, attn_bias=None):
        q, k, v = x @ self.wq, context @ self.wk, context @ self.wv
        scores = q @ k.mT / q.shape[-1] ** 0.5  # (batch, n, n)
        scores = scores if attn_bias is None else scores + attn_bias
        return scores.softmax(dim=-1) @ v


def _attend(module, x, allowed):
    bias = None if allowed is None else torch.where(allowed, 0.0, -1e4)  # finite: no NaN
    return module(x, x, attn_bias=bias)


def _register(**options):
    @register_adapter("biased", recognises=lambda module: hasattr(module, "wq"), **options)
    def biased(module):
        return Weights(module.wq, module.wk, module.wv)

    return biased


def _row(report, name):
    (row,) = [r for r in report.checks if r.name == name]
    return row


def test_call_without_mask_says_in_the_verdict_that_the_mask_checks_did_not_run(registry):
    _register(call=_attend)
    report = conform(Biased())
    reason = "adapter biased gives call= but no mask=, so its call gets no mask"
    assert report.conforms
    assert _row(report, "mask convention").why == reason
    verdict = report.table().splitlines()[-1]
    assert verdict == f"conforms (5 PASS, 6 n/a), but the mask checks did not run: {reason}"
    assert report.markdown().rstrip().endswith(verdict)
    assert json.loads(json.dumps(report.as_json()))["unchecked"] == [
        f"the mask checks did not run: {reason}"
    ]


def test_call_with_mask_runs_the_mask_checks_and_the_verdict_is_plain(registry):
    _register(call=_attend, mask="attn_bias")
    report = conform(Biased())
    assert _row(report, "mask convention").status == "PASS"
    assert report.table().splitlines()[-1] == "conforms (7 PASS, 4 n/a)"
    assert report.unchecked == ()


def test_a_convention_that_takes_no_mask_is_no_caveat():
    report = conform(correct.book_mha())
    assert report.unchecked == () and _row(report, "mask convention").status == "n/a"


def test_a_missing_dropout_says_what_was_looked_for(registry):
    row = _row(conform(correct.torch_mha()), "dropout")
    assert (
        row.why == "adapter torch-mha names no dropout module (dropout=, the nn.Dropout on "
        "the weights)"
    )
    _register(call=_attend, dropout="attn_drop")
    row = _row(conform(Biased()), "dropout")
    assert row.why == "no submodule named 'attn_drop' is an nn.Dropout (adapter biased's dropout=)"
    assert "None" not in row.why


class Refuses(Biased):
    def forward(self, x, context=None, attn_bias=None):
        raise RuntimeError(f"not for {tuple(x.shape)}")


class Widens(Biased):
    def forward(self, x, context=None, attn_bias=None):
        return torch.cat([super().forward(x, x), x], dim=-1)  # (…, n, c) -> (…, n, c + d)


@pytest.mark.parametrize(
    "module, batch, one",
    [
        (Refuses(), "(RuntimeError: not for (2, 5, 6))", "(RuntimeError: not for (5, 6))"),
        (Widens(), "(it returned shape (2, 5, 10))", "(it returned shape (5, 10))"),
    ],
)
def test_a_module_that_fails_on_a_batch_and_on_one_sequence(registry, module, batch, one):
    _register()
    message = (
        f"calling {type(module).__qualname__} failed on a batch, x of shape (2, 5, 6) {batch}, "
        f"and on one sequence, x of shape (5, 6) {one}"
    )
    with pytest.raises(ConformError) as raised:
        conform(module, batch=2)
    assert str(raised.value) == message


def test_every_argument_of_register_adapter_is_documented():
    doc = inspect.getdoc(register_adapter) or ""
    for name in inspect.signature(register_adapter).parameters:
        assert re.search(rf"^    {name}: \S", doc, re.M), name
    assert "allowed[m, p]" in doc and "True when" in doc  # what `allowed` is
    assert "register_adapter" in (adapters.__doc__ or "")


def test_a_buffer_is_read_by_what_it_holds_not_by_its_shape():
    """ALiBi's slopes as a buffer (h, 1, 1) in a submodule are square in their last two axes,
    and no causal mask: the module's longest sequence is its causal mask's (6), not 1."""
    import attention
    from derive import conform

    torch.manual_seed(0)
    layer = attention.MultiHeadAttention(8, 8, 6, 0.0, 2)
    holder = torch.nn.Module()
    holder.register_buffer("slopes", torch.rand(2, 1, 1))
    layer.alibi_holder = holder
    report = conform(layer)
    assert report.conforms, report.table()
    assert report.sizes["n"] >= 2
