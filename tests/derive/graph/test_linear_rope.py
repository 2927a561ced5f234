"""Linear RoPE scaling (position interpolation, the linear-rope variant): its declared frequencies
are `attention.rope`'s and transformers' (every one divided by η), derive check fails where the
division is left out or applied twice, and the score stays relative to p − m."""

import dataclasses

import pytest
import torch

import derive
from attention.rope import rope_frequencies
from derive.graph import self_attention
from derive.graph.entries import linear_rope
from derive.graph.entries.rope import with_rope
from derive.graph.registry import unregister_variant
from derive.notation import letters as L
from derive.proofs.rope import relative_position


@pytest.mark.parametrize(("c", "beta", "eta"), [(8, 10_000, 4), (16, 500_000, 2), (6, 100, 8)])
def test_the_declared_frequencies_are_attention_s_and_transformers(c, beta, eta):
    graph = linear_rope.with_linear_rope(with_rope(self_attention(causal=True)))
    angle = graph.step("Phi").element.rhs  # at m = 2: (m − 1) · ω'_j = ω'_j
    values = {L.c: c, L.beta: beta, L.eta: eta, L.m: 2}
    declared = [float(angle.xreplace(values | {L.j: j})) for j in range(1, c // 2 + 1)]
    config = {"rope_type": "linear", "factor": float(eta)}
    ours = rope_frequencies(c, beta, config, torch.float64).tolist()
    assert declared == pytest.approx(ours, rel=1e-13)
    assert ours == pytest.approx([beta ** (-2 * i / c) / eta for i in range(c // 2)], rel=1e-13)
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = transformers.LlamaConfig(
        hidden_size=4 * c,
        num_attention_heads=4,
        rope_parameters={"rope_type": "linear", "factor": float(eta), "rope_theta": float(beta)},
    )
    theirs, factor = ROPE_INIT_FUNCTIONS["linear"](model, "cpu")
    assert factor == 1.0 and theirs.double().tolist() == pytest.approx(ours, rel=1e-6)


def test_derive_check_passes_with_the_factor_given():
    checked = derive.check("linear-rope", seed=3, n=4, c=8, d=3, eta=3)
    assert checked.passed, checked.table()
    assert any(row.step == "Q_rot" for trial in checked.trials for row in trial.rows)


def _scaled_again(graph):  # η applied twice: what a port that divides positions and frequencies
    angle = graph.step("Phi").element.rhs
    return graph.replace("Phi", angle / L.eta)


def _not_scaled(graph):  # RoPE's own frequencies
    return graph.replace("Phi", graph.step("Phi").element.rhs.xreplace({L.eta: 1}))


@pytest.mark.parametrize("change", [_scaled_again, _not_scaled])
def test_a_changed_scaling_fails_check(change):
    name = "linear-rope" + change.__name__.replace("_", "-")
    build = linear_rope.with_linear_rope
    variant = dataclasses.replace(linear_rope.VARIANT, name=name, build=lambda g: change(build(g)))
    derive.register_variant(variant)
    try:
        checked = derive.check(name, seed=3, n=4, c=8, d=3, eta=3, forward_only=True)
    finally:
        unregister_variant(name)
    failed = {row.step for trial in checked.trials for row in trial.rows if not row.passed}
    assert not checked.passed and {"Q_rot", "K_rot"} <= failed


def test_the_score_stays_relative_to_p_minus_m():
    graph = linear_rope.with_linear_rope(with_rope(self_attention(causal=True)))
    assert relative_position(graph).holds


@pytest.mark.parametrize("other", ["llama3-rope", "yarn-rope"])
def test_two_scalings_of_the_frequencies_are_refused_naming_the_step(other):
    with pytest.raises(ValueError, match=r"two scalings of one step \(compute_rope_params\)"):
        derive.variant(f"{other}+linear-rope").graph  # noqa: B018
