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


def full_mask(seed=9):
    """(batch, n, n) random full mask; query 0 of sequence 1 may attend nothing."""
    mask = torch.rand(BATCH, N, N, generator=torch.Generator().manual_seed(seed)) > 0.6
    mask[1, 0] = False
    return mask


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize(
    ("causal", "mask", "key_padding_mask", "allowed"),
    [
        # causal only: p <= m
        (True, None, None, causal_allowed(N)),
        # key padding: sequences of 6, 4 and 1 tokens
        (False, None, padding([6, 4, 1]), padding([6, 4, 1])[:, None, :].numpy()),
        # key padding combined with causal
        (
            True,
            None,
            padding([6, 4, 1]),
            padding([6, 4, 1])[:, None, :].numpy() & causal_allowed(N),
        ),
        # a sequence with no key at all: every row of it is zero
        (False, None, padding([6, 0, 2]), padding([6, 0, 2])[:, None, :].numpy()),
        # a full (batch, n, n) mask, with a fully masked row
        (False, full_mask(), None, full_mask().numpy()),
        # a full mask, key padding and causal, all three at once
        (
            True,
            full_mask(),
            padding([6, 4, 1]),
            full_mask().numpy() & padding([6, 4, 1])[:, None, :].numpy() & causal_allowed(N),
        ),
    ],
    ids=["causal", "padding", "padding+causal", "empty-sequence", "full-mask", "all-three"],
)
def test_masked_attention_matches_reference(
    causal, mask, key_padding_mask, allowed, return_weights
):
    x, w_q, w_k, w_v = make()
    expected_c, expected_a = batched_reference(x, w_q, w_k, w_v, allowed=allowed)
    out = F.self_attention(
        x,
        w_q,
        w_k,
        w_v,
        causal=causal,
        mask=mask,
        key_padding_mask=key_padding_mask,
        return_weights=return_weights,
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
    kpm = padding([6, 4, 1])[:2, :4]
    assert torch.autograd.gradcheck(
        lambda *t: F.self_attention(*t, causal=True, key_padding_mask=kpm), inputs
    )
    mask = full_mask()[:2, :4, :4]
    assert torch.autograd.gradcheck(lambda *t: F.self_attention(*t, mask=mask), inputs)


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
    ("argument", "mask", "error", "message"),
    [
        # a float mask
        ("mask", torch.ones(BATCH, N, N), DtypeError, r"mask must be a bool tensor"),
        # an integer key-padding mask
        (
            "key_padding_mask",
            torch.ones(BATCH, N, dtype=torch.int64),
            DtypeError,
            r"key_padding_mask must be a bool tensor",
        ),
        # a full mask for 5 tokens: the message says that n = 6 came from x
        (
            "mask",
            torch.ones(BATCH, N - 1, N - 1, dtype=torch.bool),
            ShapeError,
            r"mask has n=5 but x has n=6 \(mask: shape \(3, 5, 5\)",
        ),
        # key padding for 5 tokens
        (
            "key_padding_mask",
            torch.ones(BATCH, N - 1, dtype=torch.bool),
            ShapeError,
            r"key_padding_mask has n=5 but x has n=6",
        ),
        # a full mask for another batch
        (
            "mask",
            torch.ones(2, N, N, dtype=torch.bool),
            ShapeError,
            r"mask has batch=\(2,\), which does not broadcast to x's batch=\(3,\)",
        ),
        # key padding given as `mask`: never silently read as key padding, and the hint says so
        (
            "mask",
            torch.ones(BATCH, N, dtype=torch.bool),
            ShapeError,
            r"mask has n=3 but x has n=6.*fits key_padding_mask \(\*batch, n\)",
        ),
        # a full mask given as key padding
        (
            "key_padding_mask",
            torch.ones(BATCH, N, N, dtype=torch.bool),
            ShapeError,
            r"key_padding_mask has batch=\(3, 6\), which does not broadcast to x's batch=\(3,\)"
            r".*fits mask \(\*batch, n, n\)",
        ),
    ],
    ids=[
        "float",
        "int-padding",
        "short-mask",
        "short-padding",
        "wrong-batch",
        "padding-as-mask",
        "mask-as-padding",
    ],
)
def test_bad_masks_are_named(argument, mask, error, message):
    x, w_q, w_k, w_v = make()
    with pytest.raises(error, match=rf"^self_attention: {message}"):
        F.self_attention(x, w_q, w_k, w_v, **{argument: mask})
    with pytest.raises(error, match=rf"^CausalAttention.forward: {message}"):
        CausalAttention(D, C, N, 0.0).double()(x, **{argument: mask})
