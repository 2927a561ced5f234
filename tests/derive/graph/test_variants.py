"""The one registry: each entry's graph, claims and twin, and what SymPy derives for it.
Parametrised over `derive.variants()`: a variant is tested by being registered."""

import pytest
import sympy as sp

import derive
from derive import calculus, proofs
from derive.explicit.forward import ExplicitGraph
from derive.graph import explicit_sizes, variant
from derive.notation import latex
from derive.notation import letters as L
from derive.proofs.claims import prove

VARIANTS = derive.variants()


def test_the_registered_names():
    assert VARIANTS == (
        "self-attention",
        "causal",
        "masked",
        "multi-head",
        "kv-cache",
        "sliding-window",
        "chunked",
        "cross-attention",
        "rope",
        "partial-rope",
        "interleaved-rope",
        "llama3-rope",
        "yarn-rope",
        "linear-rope",
        "gqa",
        "qk-norm",
        "whole-qk-norm",
        "l2-qk-norm",
        "mla",
        "query-scale",
        "temperature-tuning",
        "softcap",
        "clamp",
        "alibi",
        "sinks",
        "gate",
        "flash",
        "linear-attention",
        "deltanet",
        "gated-deltanet",
        "ssd",
        "kda",
        "selective-scan",
    )
    with pytest.raises(
        ValueError,
        match=r"unknown variant 'nope'; did you mean 'rope'\? known: self-attention, causal",
    ):
        derive.variant("nope")


#: The variants whose rows of weights do not sum to 1: a sink's, and attention without the softmax.
UNNORMALISED = (
    "sinks",
    "linear-attention",
    "deltanet",
    "gated-deltanet",
    "ssd",
    "kda",
    "selective-scan",
)
WITHOUT_SOFTMAX = UNNORMALISED[1:]


@pytest.mark.parametrize("name", VARIANTS)
def test_every_claim_of_every_variant_holds(name):
    found = variant(name)
    for claim, stage in found.claims:
        fact = prove(stage.graph, claim, stage.before)
        assert fact.holds, (name, fact.name, fact.residual)
    # a sink takes part of each row's weight (its claim says how much); without the softmax no
    # row is normalised; every other row sums to 1
    assert proofs.rows_sum_to_one(found.graph).holds == (name not in UNNORMALISED)
    assert found.claims or name == "multi-head"  # its one fact is in the backward pass


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_has_matrix_forms_and_a_backward_pass(name):
    graph = variant(name).graph
    for step in calculus.steps(graph):
        assert step.matrix is not None or step.declaration.constant, step.output
    gradients = {g.of for g in calculus.backward(graph)}
    assert set(graph.inputs) - {"M"} <= gradients


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_is_written_out_at_its_default_sizes(name):
    found = variant(name)
    sizes = explicit_sizes(found, 4, 3, 4, {})
    explicit = ExplicitGraph(found.graph, sizes, heads=sizes.get(L.h, 1))
    assert [s.output for s in explicit.steps][-1] == "C"
    for weights in [s for s in explicit.steps if s.name == "weights"]:  # one per head
        if name in WITHOUT_SOFTMAX:  # the causal scores themselves: 0 after the diagonal
            assert all(weights.formula[m, p] == 0 for m in range(4) for p in range(m + 1, 4))
            assert all(weights.formula[m, m] != 0 for m in range(4))
            continue
        for row in range(4):
            total = sp.together(sum(weights.formula.row(row)))
            sinks = [e for e in total.atoms(sp.Indexed) if str(e.base) == "sink"]
            taken = sum(sp.exp(z) for z in sinks) / sp.fraction(total)[1]  # what the sink takes
            assert bool(sinks) == (name == "sinks")
            assert sp.simplify(total + taken - 1) == 0


def test_the_sliding_window_sees_only_its_last_w_keys():
    explicit = ExplicitGraph(variant("sliding-window").graph, {L.n: 5, L.d: 3, L.c: 2, L.w: 2})
    (weights,) = [s for s in explicit.steps if s.name == "weights"]
    nonzero = [[p for p in range(5) if weights.formula[m, p] != 0] for m in range(5)]
    assert nonzero == [[0], [0, 1], [1, 2], [2, 3], [3, 4]]


def test_a_wider_window_than_the_sequence_is_causal_and_a_narrow_one_is_not():
    found = variant("sliding-window")
    ((same, stage),) = [(c, s) for c, s in found.claims if type(c).__name__ == "SameAs"]
    assert prove(found.graph, same, stage.before).holds
    assert stage.before == variant("causal").graph
    narrow = type(same)(same.other, assume=((L.w, sp.S.One),))  # only w ≥ 1: not causal
    assert not prove(found.graph, narrow, stage.before).holds


def test_the_window_costs_n_w_not_n_squared():
    found = variant("sliding-window")
    (pairs,) = [c for c, _ in found.claims if type(c).__name__ == "AllowedPairs"]
    fact = prove(found.graph, pairs)
    counted = fact.derivation[-2].rhs
    assert sp.expand(counted - (L.w * (L.w + 1) / 2 + L.w * (L.n - L.w))) == 0
    assert sp.expand(fact.derivation[-1].rhs - 4 * L.c * counted) == 0
    assert counted.xreplace({L.w: L.n}).expand() == (L.n * (L.n + 1) / 2).expand()  # causal


def test_the_cache_reads_only_earlier_rows_and_saves_a_factor_m():
    found = variant("kv-cache")
    facts = {type(c).__name__: prove(found.graph, c) for c, _ in found.claims}
    row = facts["ReadsRows"].derivation[-1].rhs
    assert {limit[2] for s in row.atoms(sp.Sum) for limit in s.limits} == {L.m}
    assert facts["CacheSize"].derivation[-1].rhs == 2 * L.n * L.c
    one, whole = (e.rhs for e in facts["DecodeCost"].derivation)
    assert sp.expand(one - (6 * L.d * L.c + 4 * L.m * L.c)) == 0
    assert sp.expand(whole - (6 * L.m * L.d * L.c + 4 * L.m**2 * L.c)) == 0


def test_cross_attention_reads_y_and_is_self_attention_when_y_is_x():
    found = variant("cross-attention")
    assert found.graph.inputs == ("X", "W_q", "Y", "W_k", "W_v")
    shapes = found.graph.shapes
    assert (shapes["Omega"], shapes["K"], shapes["C"]) == ((L.n, L.s), (L.s, L.c), (L.n, L.c))
    assert (
        sp.expand(
            calculus.flop_count(found.graph)
            - (2 * L.n * L.d * L.c + 4 * L.s * L.d_y * L.c + 4 * L.n * L.s * L.c)
        )
        == 0
    )
    gradients = {g.output: g for g in calculus.backward(found.graph)}
    assert latex(gradients["dY"].matrix) == r"\bar{Y} = \bar{K} W_k^\top + \bar{V} W_v^\top"
    ((same, stage),) = [(c, s) for c, s in found.claims if type(c).__name__ == "SameAs"]
    assert prove(found.graph, same, stage.before).holds
    wrong = type(same)(same.other, substitute=((L.s, L.n),))  # Y not replaced: not the same
    assert not prove(found.graph, wrong, stage.before).holds


@pytest.mark.parametrize("name", VARIANTS)
def test_the_two_derivations_of_every_variants_backward_pass_agree(name):
    from derive.explicit.gradients import ExplicitGradients

    found = variant(name)
    sizes = explicit_sizes(found, 3, 2, 4, {})
    gradients = ExplicitGradients(ExplicitGraph(found.graph, sizes, heads=sizes.get(L.h, 1)))
    assert gradients.proven()
    assert gradients.rowsum_residual().is_zero_matrix


def test_the_score_modifications_compose_in_the_order_attention_applies_them():
    """Temperature, then the cap, then ALiBi, each reading the scores the one before made (as
    `attention.mods` applies them); the cap read the scaled scores, skipping the temperature,
    before `after_scores`."""
    graph = variant("temperature-tuning+softcap+alibi").graph
    reads = {step.name: set(step.inputs) for step in graph.declarations}
    assert reads["temperature_scores"] == {"Omega_scaled"}
    assert reads["softcapped_scores"] == {"Omega_tempered"}
    assert "Omega_capped" in reads["alibi_scores"]
    names = [step.name for step in graph.declarations]
    assert names.index("temperature_scores") < names.index("softcapped_scores")
