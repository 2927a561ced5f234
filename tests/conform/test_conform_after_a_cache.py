"""`derive conform` after a cache: a causal module run on its first s tokens, then on the rest
with what it cached, gives the derivation's rows s + 1 … n; RoPE's positions restarted at 0 after
the cache (`rope-offset`) are named. On the book's own KV-cache layer (llms_from_scratch, Qwen
3), this package's modules with `use_cache`, and an adapter of the user's."""

import os

import pytest
import torch

import attention
from derive import conform
from derive.conformance.read import adapters
from derive.testing import Weights, register_adapter

try:
    from llms_from_scratch.kv_cache import qwen3 as book_kv
except ImportError:  # the README's test command installs it; CI must have it
    if os.environ.get("CI"):
        raise
    book_kv = None


def _row(report):
    return next(check for check in report.checks if check.name == "after a cache")


@pytest.mark.skipif(book_kv is None, reason="llms-from-scratch is not installed")
def test_the_book_s_kv_cache_layer_conforms_after_its_cache():
    torch.manual_seed(0)
    layer = book_kv.GroupedQueryAttention(16, num_heads=4, num_kv_groups=2, qk_norm=True)
    report = conform(layer, variant="rope")
    assert report.conforms, report.table()
    assert _row(report).status == "PASS"


@pytest.mark.skipif(book_kv is None, reason="llms-from-scratch is not installed")
def test_the_book_s_layer_with_positions_restarted_after_the_cache_is_named(monkeypatch):
    """The book's apply_rope given offset 0 whatever start_pos is: every check of one call
    passes, the tokens after the cache do not, and the catalogue names it."""
    rotate = book_kv.apply_rope
    monkeypatch.setattr(book_kv, "apply_rope", lambda x, cos, sin, offset=0: rotate(x, cos, sin))
    torch.manual_seed(0)
    layer = book_kv.GroupedQueryAttention(16, num_heads=4, num_kv_groups=2)
    report = conform(layer, variant="rope")
    assert not report.conforms and _row(report).status == "FAIL"
    assert [c.name for c in report.checks if c.status == "FAIL"] == ["after a cache"]
    assert report.diagnosis.id == "rope-offset"
    assert "m − 4 if 4 < m, m − 2 if 2 < m" in report.diagnosis.wrong  # tokens 1–2, 3–4, 5


@pytest.mark.parametrize(
    "module",
    [
        attention.MultiHeadAttention(16, 16, context_length=8, dropout=0.0, num_heads=4),
        attention.MultiHeadLatentAttention(16, 16, num_heads=4, dropout=0.0, latent_dim=8),
    ],
    ids=["multi-head", "latent"],
)
def test_this_package_s_modules_conform_after_their_cache(module):
    report = conform(module)
    assert report.conforms and _row(report).status == "PASS", report.table()


def test_a_cache_that_forgets_the_tokens_before_fails_after_a_cache():
    """A module whose second call attends only to its own tokens (the cache dropped)."""

    class Forgetful(attention.MultiHeadAttention):
        def forward(self, x, use_cache=False, **options):
            if use_cache:
                self.reset_cache()
            return super().forward(x, use_cache=use_cache, **options)

    torch.manual_seed(0)
    report = conform(Forgetful(16, 16, context_length=8, dropout=0.0, num_heads=4))
    assert not report.conforms and _row(report).status == "FAIL"
    assert report.diagnosis.id is None  # no mistake of the catalogue forgets a cache


def test_without_a_cached_call_or_a_cache_the_check_says_why():
    gqa = conform(attention.GroupedQueryAttention(16, num_heads=4, num_kv_groups=2))
    assert _row(gqa).status == "n/a"
    assert _row(gqa).why == "GroupedQueryAttention keeps no cache that adapter grouped uses"
    mha = conform(torch.nn.MultiheadAttention(16, 4, batch_first=True))
    assert _row(mha).why == "adapter torch-mha gives no cached call (decode=)"


def test_a_user_adapter_s_decode_is_used(monkeypatch):
    """An adapter's own decode: here the package's module run without its cache in two parts
    (the second part's tokens then see only each other), which is not attention after a cache."""
    seen = []

    def decode(module, x, parts):
        seen.append(parts)
        return torch.cat([module(x[:, part]) for part in parts], dim=1)

    def weights(module):
        return Weights(
            module.W_query.weight.mT,
            module.W_key.weight.mT,
            module.W_value.weight.mT,
            W_o=module.out_proj.weight.mT,
            b_o=module.out_proj.bias,
            heads=module.num_heads,
        )

    monkeypatch.setattr(adapters, "_REGISTERED", [])
    register_adapter("two-calls", recognises=lambda m: False, decode=decode)(weights)
    module = attention.MultiHeadAttention(16, 16, context_length=8, dropout=0.0, num_heads=4)
    report = conform(module, adapter="two-calls")
    assert seen == [(slice(0, 2), slice(2, 4), slice(4, 5))] and _row(report).status == "FAIL"


@pytest.mark.skipif(book_kv is None, reason="llms-from-scratch is not installed")
@pytest.mark.parametrize("where", ["llama3", "kv_cache.llama3"])
def test_the_book_s_fast_layer_that_takes_no_mask_conforms(where):
    """`GroupedQueryAttentionFast` (forward(x, cos, sin), causal by torch's kernel's flag)
    takes no mask: read by grouped-causal, never handed one, it conforms as causal GQA with
    RoPE (it was refused: the adapter passed it a mask its signature does not take)."""
    import importlib

    layer_class = importlib.import_module(f"llms_from_scratch.{where}").GroupedQueryAttentionFast
    torch.manual_seed(0)
    report = conform(layer_class(16, 16, 4, 2), variant="gqa+rope")
    assert report.conforms, report.table()
    assert report.convention == "grouped-causal" and report.causal
