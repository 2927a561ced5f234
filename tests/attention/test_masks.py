"""Causal and padding masks, fully masked rows, and dropout on the weights."""

import numpy as np
import pytest
import torch
import torch.nn.functional as torch_F
from reference import batched_reference, causal_allowed

from attention import CausalAttention, DtypeError, MultiHeadAttention, ShapeError
from attention import functional as F

BATCH, N, D, C = 3, 6, 4, 5


def make(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, N, D, generator=g, dtype=dtype)
    return x, *(torch.randn(D, C, generator=g, dtype=dtype) / 2 for _ in range(3))


def padding(lengths):
    """(batch, n) key-padding mask: the first `length` tokens of each sequence exist."""
    return torch.arange(N) < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize(
    ("causal", "mask", "allowed"),
    [
        # causal only: p <= m
        (True, None, causal_allowed(N)),
        # key padding: sequences of 6, 4 and 1 tokens
        (False, padding([6, 4, 1]), padding([6, 4, 1])[:, None, :].numpy()),
        # key padding combined with causal
        (True, padding([6, 4, 1]), padding([6, 4, 1])[:, None, :].numpy() & causal_allowed(N)),
        # a full (batch, n, n) mask, with fully masked rows (query 0 of sequence 1 sees nothing)
        (False, torch.rand(BATCH, N, N, generator=torch.Generator().manual_seed(9)) > 0.6, None),
    ],
    ids=["causal", "padding", "padding+causal", "full-mask"],
)
def test_masked_attention_matches_reference(causal, mask, allowed, return_weights):
    x, w_q, w_k, w_v = make()
    if allowed is None:
        mask[1, 0] = False
        allowed = mask.numpy()
    expected_c, expected_a = batched_reference(x, w_q, w_k, w_v, allowed=allowed)
    out = F.self_attention(
        x, w_q, w_k, w_v, causal=causal, mask=mask, return_weights=return_weights
    )
    got_c = out[0] if return_weights else out
    np.testing.assert_allclose(got_c.numpy(), expected_c, rtol=0, atol=1e-12)
    if return_weights:
        np.testing.assert_allclose(out[1].numpy(), expected_a, rtol=0, atol=1e-12)


def test_causal_equals_torch_sdpa_is_causal():
    x, w_q, w_k, w_v = make(dtype=torch.float32)
    q, k, v = (x @ w for w in (w_q, w_k, w_v))
    expected = torch_F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for return_weights in (False, True):
        out = F.self_attention(x, w_q, w_k, w_v, causal=True, return_weights=return_weights)
        got = out[0] if return_weights else out
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
def test_a_later_token_never_changes_an_earlier_row(return_weights):
    x, w_q, w_k, w_v = make()
    for changed in range(1, N):
        edited = x.clone()
        edited[:, changed] += torch.randn(BATCH, D, dtype=x.dtype) * 10
        before = F.self_attention(x, w_q, w_k, w_v, causal=True, return_weights=return_weights)
        after = F.self_attention(edited, w_q, w_k, w_v, causal=True, return_weights=return_weights)
        before, after = (t[0] if return_weights else t for t in (before, after))
        assert torch.equal(before[:, :changed], after[:, :changed]), changed
        assert not torch.allclose(before[:, changed], after[:, changed])  # the edit is seen


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    x, w_q, w_k, w_v = make()
    mask = torch.ones(BATCH, N, N, dtype=torch.bool)
    mask[0, 2] = False  # query 2 of the first sequence may attend to nothing
    for return_weights in (False, True):
        inputs = [t.clone().requires_grad_() for t in (x, w_q, w_k, w_v)]
        out = F.self_attention(*inputs, mask=mask, return_weights=return_weights)
        c = out[0] if return_weights else out
        assert torch.equal(c[0, 2], torch.zeros(C, dtype=c.dtype))
        if return_weights:
            assert torch.equal(out[1][0, 2], torch.zeros(N, dtype=c.dtype))
        assert torch.isfinite(c).all()
        c.square().sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in inputs)


def test_gradcheck_with_masks():
    x, w_q, w_k, w_v = make()
    inputs = tuple(t.requires_grad_() for t in (x[:2, :4], w_q, w_k, w_v))
    mask = padding([6, 4, 1])[:2, :4]
    assert torch.autograd.gradcheck(
        lambda *t: F.self_attention(*t, causal=True, mask=mask), inputs
    )


def test_eval_mode_is_deterministic_and_equals_no_dropout():
    torch.manual_seed(0)
    x = torch.rand(2, 6, 3)
    dropping = CausalAttention(3, 4, 6, dropout=0.5).eval()
    plain = CausalAttention(3, 4, 6, dropout=0.0)
    plain.load_state_dict(dropping.state_dict())
    assert torch.equal(dropping(x), dropping(x))
    assert torch.equal(dropping(x), plain(x))


def test_training_dropout_scales_kept_weights_by_one_over_keep():
    torch.manual_seed(0)
    x = torch.rand(2, 6, 3)
    p = 0.5
    module = CausalAttention(3, 4, 6, dropout=p)
    _, clean = module.eval()(x, return_weights=True)
    module.train()
    _, dropped = module(x, return_weights=True)
    kept = dropped != 0
    assert 0 < kept.sum() < (clean != 0).sum()  # some, not all, weights were dropped
    torch.testing.assert_close(dropped[kept], clean[kept] / (1 - p))
    # dropout acts after the softmax: rows of the dropped weights no longer sum to 1
    assert not torch.allclose(dropped.sum(-1), torch.ones(2, 6))


def test_multi_head_dropout_only_in_training():
    torch.manual_seed(0)
    x = torch.rand(2, 6, 3)
    module = MultiHeadAttention(3, 4, 6, dropout=0.3, num_heads=2)
    assert torch.equal(module.eval()(x), module(x))
    module.train()
    torch.manual_seed(1)
    first = module(x)
    torch.manual_seed(2)
    assert not torch.equal(first, module(x))


@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        (torch.ones(BATCH, N, N), DtypeError, r"mask must be a bool tensor"),
        (torch.ones(BATCH, N, N, dtype=torch.int64), DtypeError, r"mask must be a bool tensor"),
        (torch.ones(BATCH, N - 1, dtype=torch.bool), ShapeError, r"mask has shape \(3, 5\)"),
        (torch.ones(2, N, N, dtype=torch.bool), ShapeError, r"mask has shape \(2, 6, 6\)"),
        (torch.ones(N, dtype=torch.bool), ShapeError, r"mask has shape \(6,\)"),
    ],
    ids=["float", "int", "short-padding", "wrong-batch", "no-batch"],
)
def test_bad_masks_are_named(mask, error, message):
    x, w_q, w_k, w_v = make()
    with pytest.raises(error, match=message):
        F.self_attention(x, w_q, w_k, w_v, mask=mask)
    with pytest.raises(error, match=message.replace("self_attention", "CausalAttention")):
        CausalAttention(D, C, N, 0.0).double()(x, mask=mask)
