"""The online softmax (FlashAttention's forward), derived: the running sum and output carried
from block to block at a symbolic block and size, the context and the log-sum-exp after the last
block, every split of a few keys into blocks; and each proof fails when an update is changed."""

import pytest
import sympy as sp
from sympy import Sum, exp

from derive.proofs import online_softmax as O


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


def test_after_the_last_block_the_context_and_the_log_sum_exp():
    context, lse = O.context(), O.log_sum_exp()
    assert context.holds and lse.holds
    keys = O.T * O.BLOCK
    total = sp.Sum(exp(O._score(O._p)), (O._p, 1, keys))
    assert lse.claim.rhs == sp.log(total)
    assert context.claim.rhs.has(total) and not context.claim.rhs.has(O.MU[0])


def test_every_split_of_three_keys_gives_the_softmax():
    found = O.every_split(3)
    assert set(found) == {(1, 1, 1), (1, 2), (2, 1), (3,)}
    assert all(difference == 0 for difference in found.values())


def test_a_changed_update_is_caught_at_explicit_sizes_too():
    found = O.every_split(3, sum_rule=without_rescaling)
    assert found[(3,)] == 0  # one block: nothing to rescale
    assert any(difference != 0 for difference in found.values())
