"""The backward pass of FlashAttention, derived: the weights recomputed from the log-sum-exp,
the scores' gradient with D = rowsum(dC ∘ C), each gradient gathered block by block; and each
fact fails when its formula is changed."""

import pytest
import sympy as sp

import derive
from derive.notation import letters as L
from derive.proofs import blocked_backward as B
from derive.proofs import online_softmax as O

SELF = derive.variant("self-attention").graph


def test_the_weights_are_recomputed_from_the_log_sum_exp():
    assert B.recomputed_weights(SELF).holds
    # the running maximum is not the log-sum-exp: weights from it are wrong
    assert not B.recomputed_weights(SELF, at=O.MU_T).holds


def test_the_scores_gradient_needs_only_d_of_each_row():
    fact = B.gradient_with_rowsum(SELF)
    assert fact.holds
    rhs = fact.derivation[-1].rhs
    assert not rhs.has(L.base("da")[L.m, L.r])  # no row sum over the weights left
    assert rhs.has(L.base("ctx")[L.m, L.j]) and rhs.has(L.base("dctx")[L.m, L.j])


@pytest.mark.parametrize(("letter", "size"), [("V", L.B_r), ("K", L.B_r), ("Q", L.B_c)])
def test_each_gradient_gathered_block_by_block(letter, size):
    fact = B.accumulated(SELF, letter)
    assert fact.holds, fact.residual
    (limit,) = fact.claim.rhs.limits
    assert limit[2] == (sp.Symbol("t", integer=True, nonnegative=True) + 1) * size


def _share(weight_at, with_d=True):
    m, p, j = L.m, L.p, L.j
    weight = sp.exp(L.base("omegatilde")[m, p] - weight_at)
    return weight * (L.base("da")[m, p] - (B.D if with_d else 0)) * L.base("q")[m, j] / sp.sqrt(L.c)


def test_a_share_computed_otherwise_is_not_the_gradient():
    assert B.accumulated(SELF, "K", share=_share(B.LSE_M)).holds  # the reference's own term
    assert not B.accumulated(SELF, "K", share=_share(O.MU_T)).holds  # at the maximum
    assert not B.accumulated(SELF, "K", share=_share(B.LSE_M, with_d=False)).holds  # no D


def test_a_graph_with_a_mask_is_refused():
    with pytest.raises(ValueError, match=r"one head without a mask; causal .*has a mask"):
        B.accumulated(derive.variant("causal").graph, "V")


def test_the_cost_is_what_the_blocked_reference_computes():
    """The derived FLOPs of the products against torch's flop counter on attention.flash, at
    sizes where n is not a multiple of the blocks; the state against what it holds."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from attention import flash

    fact = B.cost(SELF)
    counted = {", ".join(map(str, line.lhs.args)): line.rhs for line in fact.derivation}
    n, c, blocks = 7, 3, {"block_rows": 3, "block_keys": 2}
    at = {L.n: n, L.c: c, L.B_c: 2}
    q, k, v, dc = (torch.randn(n, c, dtype=torch.float64) for _ in range(4))
    with FlopCounterMode(display=False) as forward:
        state = flash.online_softmax(q, k, v, **blocks)
    assert forward.get_total_flops() == counted[r"\text{forward}"].xreplace(at)
    with FlopCounterMode(display=False) as backward:
        flash.blocked_backward(q, k, v, state.c, state.lse, dc, **blocks)
    # D = rowsum(dC ∘ C) is no matrix product: the counter does not see it
    d = 2 * n * c
    total = counted[r"\text{backward}"] + counted[r"\text{recomputed}"]
    assert backward.get_total_flops() == total.xreplace(at) - d
    held = state.mu[0].numel() + state.ell[0].numel() + state.o[0].numel()
    assert held == counted["mu, ell, O"].xreplace(at)
