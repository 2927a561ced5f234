"""YaRN's RoPE scaling (the yarn-rope variant): its declared frequencies and attention factor are
`attention.rope`'s (and so transformers'), derive check fails where the ramp or the factor is
changed, and the score stays relative to p − m."""

import dataclasses
import math

import pytest
import sympy as sp
import torch

import derive
from attention.rope import attention_factor, correction_range, rope_frequencies
from derive.calculus import inline
from derive.graph import self_attention
from derive.graph.entries import yarn_rope
from derive.graph.entries.rope import with_rope
from derive.graph.registry import unregister_variant
from derive.notation import letters as L
from derive.proofs.rope import relative_position

#: (c, β, L_0, β_f, β_s, τ): both ends of the ramp inside the head, the low end held at 0, both
#: roundings, GPT-OSS's own numbers at its width.
CONFIGS = [
    (8, 10_000, 512, 32, 1, 0),
    (8, 10_000, 512, 32, 1, 1),
    (8, 10_000, 64, 32, 1, 1),
    (16, 500_000, 4096, 16, 2, 0),
    (64, 150_000, 4096, 32, 1, 0),
]


def _declared_frequencies(c, beta, length, fast, slow, tau, eta):
    """ω'_j of the declared angles (Φ at m = 2 over m − 1 = 1), pair by pair, the ramp put in."""
    graph = yarn_rope.with_yarn_rope(with_rope(self_attention(causal=True)))
    angle = inline(graph.step("Phi").element.rhs, graph, {"Xi", "Iota_f", "Iota_s"})
    values = {L.c: c, L.beta: beta, L.L_0: length, L.eta: eta, L.m: 2}
    values |= {yarn_rope.BETA_F: fast, yarn_rope.BETA_S: slow, yarn_rope.TAU: tau}
    return [float(angle.xreplace(values | {L.j: j})) for j in range(1, c // 2 + 1)]


@pytest.mark.parametrize(("c", "beta", "length", "fast", "slow", "tau"), CONFIGS)
def test_the_declared_frequencies_are_attention_s(c, beta, length, fast, slow, tau):
    config = {
        "factor": 32.0,
        "beta_fast": fast,
        "beta_slow": slow,
        "original_max_position_embeddings": length,
        "truncate": bool(tau),
    }
    ours = rope_frequencies(c, beta, config, torch.float64).tolist()
    declared = _declared_frequencies(c, beta, length, fast, slow, tau, 32)
    assert declared == pytest.approx(ours, rel=1e-13)
    low, high = correction_range(c, beta, config)
    kept = [i for i in range(c // 2) if i <= low]  # the ramp's low side: frequencies kept
    assert all(declared[i] == pytest.approx(beta ** (-2 * i / c)) for i in kept)


def test_the_attention_factor_is_the_paper_s_and_deepseek_s_ratio():
    assert attention_factor({"factor": 32.0, "beta_fast": 32}) == pytest.approx(
        0.1 * math.log(32) + 1
    )
    deepseek = {"factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32}
    assert attention_factor(deepseek) == 1.0
    assert attention_factor({"factor": 4.0, "attention_factor": 1.5, "beta_fast": 32}) == 1.5
    default = dict(yarn_rope.VARIANT.parameters[-1].__dict__)["default"]
    assert float(default) == pytest.approx(0.1 * math.log(32) + 1)


@pytest.mark.parametrize("tau", [0, 1])
def test_derive_check_passes_at_both_roundings(tau):
    checked = derive.check("yarn-rope", seed=4, n=4, c=8, d=3, L_0=512, tau=tau)
    assert checked.passed, checked.table()
    assert any(row.step == "Q_rot" for trial in checked.trials for row in trial.rows)


def _broken(name, change):
    """yarn-rope registered again under `name`, its graph changed by `change` (its twins,
    YaRN's own, unchanged)."""
    build = yarn_rope.with_yarn_rope
    return dataclasses.replace(yarn_rope.VARIANT, name=name, build=lambda g: change(build(g)))


def _ramp_late(graph):
    share, low = graph.step("Xi").element.rhs, L.base("iotaf")[L.m, L.j]
    return graph.replace("Xi", share.xreplace({low: low + 1}))  # starting one pair late


def _no_ramp(graph):
    return graph.replace("Xi", sp.Integer(0))  # RoPE's frequencies


def _no_factor(graph):
    for letter in ("Q_rot", "K_rot"):
        graph = graph.replace(letter, graph.step(letter).element.rhs.xreplace({yarn_rope.RHO: 1}))
    return graph


@pytest.mark.parametrize("change", [_ramp_late, _no_ramp, _no_factor])
def test_a_changed_ramp_or_factor_fails_check(change):
    name = "yarn-" + change.__name__.strip("_").replace("_", "-")
    derive.register_variant(_broken(name, change))
    try:
        checked = derive.check(name, seed=4, n=4, c=8, d=3, L_0=512, forward_only=True)
    finally:
        unregister_variant(name)
    assert not checked.passed
    failed = {row.step for trial in checked.trials for row in trial.rows if not row.passed}
    assert {"Q_rot", "K_rot"} <= failed


def test_the_score_stays_relative_to_p_minus_m():
    """(A ramp that reads the position breaks the fact; tests/derive/graph/test_models.py shows
    it failing on Llama 3.1's frequencies. On YaRN's the failing proof's simplification takes from
    3 s to minutes by the hash seed, so it is not repeated here.)"""
    graph = yarn_rope.with_yarn_rope(with_rope(self_attention(causal=True)))
    fact = relative_position(graph)
    assert fact.holds and fact.name == "smoothed_relative_position"


def test_yarn_on_llama3_s_frequencies_is_refused_naming_the_step():
    with pytest.raises(ValueError, match=r"two scalings of one step \(compute_rope_params\)"):
        derive.variant("llama3-rope+yarn-rope").graph  # noqa: B018
