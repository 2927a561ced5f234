"""The online softmax (FlashAttention's forward), derived: the running sum and output carried
from block to block at a symbolic block and size, the context and the log-sum-exp after the last
block, every split of a few keys into blocks; and each proof fails when an update is changed."""

import math
from dataclasses import replace

import pytest
import sympy as sp
from sympy import Sum, exp

import derive
from derive.graph import Graph
from derive.notation import letters as L
from derive.proofs import online_softmax as O
from derive.proofs import streamed as S


def without_rescaling(previous, mu, mu_next, first, last, p=O._p):
    """ℓ^{(t)} added as it is: the old maximum left in it."""
    return previous + Sum(exp(O._score(p) - mu_next), (p, first, last))


def at_the_old_maximum(previous, mu, mu_next, first, last, p=O._p):
    """The block's exponentials taken at μ^{(t)}, not μ^{(t+1)}."""
    return exp(mu - mu_next) * previous + Sum(exp(O._score(p) - mu), (p, first, last))


def test_the_invariant_is_carried_from_block_to_block():
    for fact in (O.step(), O.step(O.output_update, O.seen_output)):
        assert fact.holds, fact.residual
        assert fact.claim.rhs.free_symbols >= {O.BLOCK, O.MU[1]}  # symbolic block and size
        assert not fact.claim.rhs.has(O.MU[0])  # the old maximum is gone


@pytest.mark.parametrize("changed", [without_rescaling, at_the_old_maximum])
def test_a_changed_update_breaks_the_invariant(changed):
    assert not O.step(changed).holds


SELF = derive.variant("self-attention").graph


def test_after_the_last_block_the_context_and_the_log_sum_exp():
    context, lse = O.context(SELF), O.log_sum_exp(SELF)
    assert context.holds and lse.holds
    keys = O.T * O.BLOCK
    total = sp.Sum(exp(O._score(O._p)), (O._p, 1, keys))
    assert lse.claim.rhs == sp.log(total)
    assert context.claim.rhs.has(total) and not context.claim.rhs.has(O.MU_T)


def _weights_as(graph, rhs):
    """`graph` with its weights declared as `rhs` (a changed softmax)."""
    step = graph.step("A")
    changed = replace(step, element=sp.Eq(step.element.lhs, rhs, evaluate=False))
    return Graph(
        graph.name, tuple(changed if s is step else s for s in graph.declarations), graph.relations
    )


def test_the_context_and_the_log_sum_exp_are_the_graphs_own():
    """Read off the declared weights: weights at twice the scores are not what the online
    softmax computes, and neither fact holds for them."""
    twice = sp.exp(2 * O._score(L.p)) / sp.Sum(sp.exp(2 * O._score(L.r)), (L.r, 1, L.n))
    changed = _weights_as(SELF, twice)
    assert not O.context(changed).holds and not O.log_sum_exp(changed).holds


@pytest.mark.parametrize("name", ["causal", "multi-head"])
def test_a_graph_it_is_not_derived_for_is_refused(name):
    with pytest.raises(ValueError, match=r"one head without a mask; .* has (a mask|heads)"):
        O.context(derive.variant(name).graph)


def test_the_states_a_check_compares_are_the_invariants_values():
    omega = sp.Matrix([[1, 3, 2], [0, -1, 4]])
    values = sp.Matrix([[1, 0], [0, 1], [2, 2]])
    found = O.states(SELF, {"Omega_scaled": omega, "V": values}, {"B_c": 2})
    assert [[row[0] for row in block] for block in found["mu"]] == [[3, 0], [3, 4]]
    e = math.e
    flat = [[row[0] for row in block] for block in found["ell"]]
    assert flat[0] == pytest.approx([e**-2 + 1, 1 + e**-1])
    assert flat[1] == pytest.approx([e**-2 + 1 + e**-1, e**-4 + e**-5 + 1])
    assert found["o"][1][0] == pytest.approx([e**-2 + 2 * e**-1, 1 + 2 * e**-1])


def test_every_split_of_three_keys_gives_the_softmax():
    found = O.every_split(3)
    assert set(found) == {(1, 1, 1), (1, 2), (2, 1), (3,)}
    assert all(difference == 0 for difference in found.values())


def test_a_changed_update_is_caught_at_explicit_sizes_too():
    found = O.every_split(3, sum_rule=without_rescaling)
    assert found[(3,)] == 0  # one block: nothing to rescale
    assert any(difference != 0 for difference in found.values())


@pytest.mark.parametrize("n, block", [(3, 2), (4, 2), (5, 3), (3, 1)])
def test_the_pages_block_states_are_the_references_state(n, block):
    import torch

    from attention import flash

    c = 2
    g = torch.Generator().manual_seed(n * 10 + block)
    q, k, v = (torch.randn(n, c, generator=g, dtype=torch.float64) for _ in range(3))
    state = flash.online_softmax(q, k, v, block_rows=2, block_keys=block)
    scores = (q @ k.T / math.sqrt(c)).tolist()
    found = O.block_states(SELF, {L.n: n, L.c: c, L.B_c: block})
    assert len(found) == 3 * math.ceil(n / block)
    table = {L.base("omegatilde")[m + 1, p + 1]: scores[m][p] for m in range(n) for p in range(n)}
    table |= {L.base("v")[p + 1, j + 1]: v[p, j].item() for p in range(n) for j in range(c)}
    for t in range(math.ceil(n / block)):
        mu, ell, out = found[3 * t : 3 * t + 3]
        maxima = [float(mu.formulas[m, 0].xreplace(table)) for m in range(n)]
        assert maxima == pytest.approx(state.mu[t].tolist(), abs=1e-12)
        at = table | {mu.entries[m, 0]: maxima[m] for m in range(n)}
        sums = [float(ell.formulas[m, 0].xreplace(at)) for m in range(n)]
        assert sums == pytest.approx(state.ell[t].tolist(), rel=1e-12)
        outputs = [float(out.formulas[m, j].xreplace(at)) for m in range(n) for j in range(c)]
        assert outputs == pytest.approx(state.o[t].flatten().tolist(), rel=1e-12)
        seen = min((t + 1) * block, n)
        assert {e.indices[0] for e in out.seen} == set(range(1, seen + 1))  # the keys seen


@pytest.mark.parametrize("name", ["softcap", "alibi", "sinks", "causal", "sliding-window"])
def test_a_modification_is_streamed_as_its_own_scores(name):
    graph = derive.variant(name).graph
    fact = S.modified_context(graph)
    assert fact.holds, fact.residual
    base, besides, _ = S.streamed(graph)
    assert fact.derivation[0].rhs.has(base) and (besides != 0) == (name == "sinks")


def test_a_sink_is_one_more_term_of_the_sum():
    assert S.sink_step().holds
    assert not S.sink_step(without_rescaling).holds  # the sink's term must be rescaled too
    sinks = derive.variant("sinks").graph
    assert not S.modified_context(sinks, start=sp.S.Zero).holds  # ℓ^{(0)} = 0: no sink


def test_a_masked_block_changes_nothing():
    assert S.skipped_update().holds

    def counted(previous, mu, mu_next, first, last, p=O._p):  # one more per block, by mistake
        return exp(mu - mu_next) * previous + 1 + Sum(exp(O._score(p) - mu_next), (p, first, last))

    assert not S.skipped_update(counted).holds


@pytest.mark.parametrize("name", ["causal", "sliding-window"])
def test_the_skipped_blocks_are_the_masks(name):
    graph = derive.variant(name).graph
    fact = S.skipped_blocks(graph)
    assert fact.holds
    i, j = sp.symbols("i j", integer=True, positive=True)
    # the last query of the block read as its first: blocks with allowed pairs would be skipped
    wrong = (j - 1) * L.B_c + 1 > (i - 1) * L.B_r + 1
    assert not S._rule_agrees(S._allowed(graph), wrong, (8, 9))
    assert not S.skipped_blocks(graph, rule=wrong).holds
    if name == "causal":  # the derived rule written another way (integers): it holds too
        assert S.skipped_blocks(graph, rule=(j - 1) * L.B_c >= i * L.B_r).holds


def test_the_skip_rule_of_causal_attention_reads_the_block_sizes():
    rule = S.skipped_blocks(derive.variant("causal").graph).claim.rhs
    i, j = sp.symbols("i j", integer=True, positive=True)
    at = {L.B_r: 2, L.B_c: 3}
    # queries 1-2 skip keys 4-6 and 7-9; queries 3-4 and 5-6 read key 4 and 5, skip 7-9
    assert [bool(rule.xreplace(at | {i: 1, j: jj})) for jj in (1, 2, 3)] == [False, True, True]
    assert [bool(rule.xreplace(at | {i: 2, j: jj})) for jj in (1, 2, 3)] == [False, False, True]
    assert [bool(rule.xreplace(at | {i: 3, j: jj})) for jj in (1, 2, 3)] == [False, False, True]


def test_streaming_needs_one_head():
    with pytest.raises(ValueError, match="one head"):
        S.streamed(derive.variant("multi-head").graph)
