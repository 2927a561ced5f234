"""Variants combined as models run them: generation with a key-value cache joins every variant
on causal attention, its claims proved on the whole combination and its decoding step checked
token by token against the derivation; a claim another part restates for the whole (the rows'
sum with sinks) gives way to it."""

import re

import pytest
import sympy as sp
import torch

import derive
from attention.grouped import grouped_decode_step
from derive.notation import letters as L

#: The decoding step of the attention of the models that run it.
DECODING = {
    "Llama 3.1": "gqa+llama3-rope+kv-cache",
    "Gemma 2, local layers": "gqa+rope+softcap+sliding-window+kv-cache",
    "GPT-OSS, sliding layers": "gqa+rope+sliding-window+sinks+kv-cache",
    "Llama 4, chunked layers": "gqa+chunked+l2-qk-norm+rope+kv-cache",
    "Qwen 3.5, full-attention layers": "gqa+qk-norm+partial-rope+gate+kv-cache",
}


@pytest.mark.parametrize("name", DECODING.values(), ids=DECODING)
def test_each_model_s_decoding_derives_and_decodes_its_rows(name):
    facts = derive.facts(name)
    assert facts and all(fact.holds for fact in facts), [f.name for f in facts if not f.holds]
    assert {"reads_rows", "cache_size", "decode_cost"} <= {fact.name for fact in facts}
    checked = derive.check(name, forward_only=True)
    (trial,) = checked.trials
    decoded = [row for row in trial.rows if row.step == "C · grouped decode step"]
    assert decoded and decoded[0].passed  # the twin fed one token at a time with its cache
    assert all(row.passed for row in trial.rows)


def _fact(name: str, which: str):
    (found,) = [fact for fact in derive.facts(name) if fact.name == which]
    return found


def test_the_cached_rows_are_each_head_s_rows_up_to_m():
    rows = _fact("gqa+rope+kv-cache", "reads_rows").claim.rhs
    assert rows is not sp.nan
    sums = rows.atoms(sp.Sum)
    assert sums and {high for s in sums for _, _, high in s.limits} == {L.m}


@pytest.mark.parametrize(("n", "w"), [(7, 3), (2, 3), (5, 5)])
def test_the_cache_holds_what_the_decoding_step_keeps(n, w):
    """The derived size with a window, min(n, w) rows of g groups, is the DecodeCache's."""
    size = _fact("gqa+sliding-window+kv-cache", "cache_size").claim.rhs
    h, g, c_h, d = 4, 2, 3, 5
    x = torch.randn(1, n, d, dtype=torch.float64)
    w_q = torch.randn(d, h * c_h, dtype=torch.float64)
    w_kv = torch.randn(d, g * c_h, dtype=torch.float64)
    cache = None
    for t in range(n):
        _, cache = grouped_decode_step(
            x[:, t : t + 1], w_q, w_kv, w_kv, None, cache, heads=h, groups=g, window=w
        )
    assert cache is not None
    held = cache.keys.numel() + cache.values.numel()
    assert size.subs({L.c_h: c_h, L.g: g, L.n: n, L.w: w}) == held


def test_a_token_costs_its_one_row():
    """One token: its projections (one row of X), its row of scores and of context against the
    m cached keys, and W_o; a cache of g groups projects g/h of the keys' width."""
    c, d, g, h, m = L.c, L.d, L.g, L.h, L.m
    alone = _fact("kv-cache", "decode_cost").derivation[0].rhs
    assert sp.expand(alone - (3 * 2 * d * c + 2 * c * m + 2 * m * c)) == 0
    grouped = _fact("gqa+kv-cache", "decode_cost").derivation[0].rhs
    expected = 2 * d * c + 2 * 2 * d * (g * c / h) + 2 * c * m + 2 * m * c + 2 * c * c
    assert sp.expand(grouped - expected) == 0


def test_with_sinks_the_rows_claim_is_the_sink_s():
    """GPT-OSS's combination: the cache's "the rows sum to one" is restated by the sinks' claim
    (they sum to less than one), and its document derives."""
    names = {fact.name for fact in derive.facts("gqa+rope+sliding-window+sinks+kv-cache")}
    assert "rows_sum_with_sink" in names and "rows_sum_to_one" not in names
    assert "rows_sum_to_one" in {fact.name for fact in derive.facts("gqa+kv-cache")}
    tex = derive.document(derive.DocumentOptions(variant="gqa+rope+sliding-window+sinks"))
    assert "GPT-OSS (its sliding layers, without YaRN)" in tex
    tex = derive.document(derive.DocumentOptions(variant="gqa+sliding-window+sinks+yarn-rope"))
    assert "GPT-OSS (its sliding layers)" in tex and r"\rho_{a}" in tex


def test_a_decoding_step_with_a_given_mask_has_no_twin_and_says_so():
    checked = derive.check("masked+kv-cache", forward_only=True)
    (trial,) = checked.trials
    assert "decode_step takes no mask" in trial.note
    assert not any("decode" in row.step for row in trial.rows)


@pytest.mark.parametrize("name", ["linear-attention+multi-head", "linear-attention+gate"])
def test_linear_attention_runs_heads_with_its_own_twins(name):
    """Linear attention with heads (Katharopoulos et al.'s linear transformer; Qwen 3.5's
    linear layers, with their output gate): each head's weights are its causal scaled scores,
    no softmax. Multi-head attention's twins compute the softmax's heads and hear nothing of
    the change, so the twins are linear attention's, told the heads; without the softmax no
    row sums to one, and linear attention's facts say what holds instead."""
    entry = derive.variant(name)
    (weights,) = [s for s in entry.graph.declarations if s.name == "weights"]
    assert weights.output == "A_l" and isinstance(weights.element.rhs, sp.Piecewise)
    assert {t.function for t in entry.twins} == {"attention.linear.linear_self_attention"}
    names = {fact.name for fact in derive.facts(name)}
    assert "rows_sum_to_one" not in names and any("linear" in n for n in names), names
    (trial,) = derive.check(name, forward_only=True).trials
    forms = [r.step for r in trial.rows if "·" in r.step and "generated" not in r.step]
    if name.endswith("multi-head"):
        assert forms == [
            "C · recurrent form",
            "C · chunked form (chunks of 2)",
            "C · parallel form",
        ]
    else:  # the gate is an option linear_self_attention does not take: no twin runs
        assert forms == []
    assert all(row.passed for row in trial.rows), [r.step for r in trial.rows if not r.passed]


def test_linear_attention_is_causal_already_and_joins_what_is_declared_on_causal_attention():
    """Linear attention's weights are 0 past the query's own position by their formula, so the
    causal mask leaves its graph as it is, and what is declared on causal attention joins it:
    groups of heads sharing keys and values, the QK norms (Gated DeltaNet's L2 norm), the
    cache; each derives and passes derive check."""
    alone = derive.variant("linear-attention").graph.declarations
    assert derive.variant("causal+linear-attention").graph.declarations == alone
    for name, forms in (("gqa+linear-attention", 3), ("l2-qk-norm+linear-attention", 0)):
        entry = derive.variant(name)
        assert "M" not in entry.graph.shapes and "causal" in entry.names
        assert "rows_sum_to_one" not in {fact.name for fact in derive.facts(name)}
        (trial,) = derive.check(name, forward_only=True).trials
        assert all(row.passed for row in trial.rows), [r.step for r in trial.rows if not r.passed]
        twins = [r.step for r in trial.rows if "form" in r.step]  # groups: linear_self_attention
        assert len(twins) == forms, twins  # takes them; the QK norms' gains it does not


#: Cross-attention joined to what the models' cross layers have: heads, groups, QK-norm, a gate.
CROSS = {
    "Whisper, BART": "multi-head+cross-attention",
    "Llama 3.2 Vision": "gqa+qk-norm+cross-attention",
    "gated, with a padding mask": "multi-head+gate+masked+cross-attention",
}


@pytest.mark.parametrize("name", CROSS.values(), ids=CROSS)
def test_cross_attention_joins_heads_groups_norms_and_a_gate(name):
    entry = derive.variant(name)
    graph = entry.graph
    assert "Y" in graph.inputs and graph.shapes["W_k"][0] == L.d_y
    k_rows = graph.shapes["K_l"][0]
    assert k_rows == L.s  # each head's keys: s rows of Y
    (weights,) = [s for s in graph.declarations if s.name == "weights"]
    assert weights.shapes[weights.output] == (L.n, L.s)
    assert all(limit[2] != L.n for s in weights.element.rhs.atoms(sp.Sum) for limit in s.limits)
    assert "causal" not in {v.name for v in entry.chain}  # gqa's causal base taken out
    facts = derive.facts(name)
    assert all(fact.holds for fact in facts), [f.title for f in facts if not f.holds]
    (trial,) = derive.check(name, forward_only=True).trials
    assert [r.step for r in trial.rows if "·" in r.step] == [
        "C · grouped cross-attention",
        "C · generated",
    ]
    assert all(row.passed for row in trial.rows)


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        (
            "rope+cross-attention",
            "the rotary angles (Phi): a pattern of the queries' and the keys'",
        ),
        ("alibi+cross-attention", "the distances (Delta): a pattern"),
        ("sliding-window+cross-attention", "the sliding-window mask cuts the causal mask"),
        ("causal+cross-attention", "cross-attention takes causal out of what it joins"),
        ("kv-cache+cross-attention", "kv-cache declares no step, only what holds of causal"),
        ("flash+causal", "flash joins no other variant: its facts (the online softmax"),
        (
            "cross-attention+linear-attention",
            "weights without the softmax (the causal scaled scores) (A): its formula compares "
            "a query's position with a key's (m >= p, one sequence)",
        ),
        ("linear-attention+sinks", "causal linear attention has no softmax for a sink to join"),
        ("linear-attention+alibi", "no softmax for ALiBi's bias, a factor e^(−μ (m − p))"),
        ("linear-attention+sliding-window", "cuts the causal mask, which causal linear attention"),
    ],
)
def test_a_refused_pair_names_its_rule_and_the_step(name, rule):
    with pytest.raises(ValueError, match=re.escape(rule)):
        derive.variant(name)


def test_two_patterns_mask_where_both_allow_a_key():
    """A window cut at the chunks' borders: the window's condition and the chunk's, both; a key
    one of them forbids is masked (at w < χ the window cuts inside a chunk)."""
    graph = derive.variant("sliding-window+chunked").graph
    (_, allowed), _ = graph.step("M").element.rhs.args
    window = derive.variant("sliding-window").graph.step("M").element.rhs.args[0][1]
    chunk = derive.variant("chunked").graph.step("M").element.rhs.args[0][1]
    assert allowed == sp.And(window, chunk)
    (trial,) = derive.check("sliding-window+chunked", w=2, chi=4, n=6, forward_only=True).trials
    assert all(row.passed for row in trial.rows) and any("fused" in r.step for r in trial.rows)


def test_a_claim_about_what_a_step_reads_follows_the_step():
    """ALiBi's bias is what its step adds to the scores it reads: after softcapping, the capped
    scores (ω_b − ω_cap), and its facts hold for the combination."""
    facts = derive.facts("alibi+softcap")
    assert all(fact.holds for fact in facts), [f.title for f in facts if not f.holds]
    (distance,) = [f for f in facts if f.title == "The bias depends on the distance only"]
    bases = {e.base for e in distance.claim.lhs.atoms(sp.Indexed)}
    assert L.base("omegacap") in bases and L.base("omegatilde") not in bases
