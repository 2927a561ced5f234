"""Masks broadcast against x's batch as torch's do: one (n, n) mask (or (n,) key padding) for a
whole batch, a (1, n, n) one, one per sequence, or one per inner batch entry; on every function
and module that takes a mask, on the fast and the explicit path. Each broadcast mask gives what
the same mask expanded to the whole batch gives; a mask that cannot broadcast is refused with
the letter and both arguments named."""

import pytest
import torch

from attention import (
    CausalAttention,
    CrossAttention,
    MultiHeadAttention,
    MultiHeadAttentionWithSWA,
    MultiHeadAttentionWrapper,
    ShapeError,
)
from attention import functional as F
from attention.grouped import grouped_query_attention

B, N, S, D, C = 3, 5, 4, 6, 4
G = torch.Generator().manual_seed(0)
X = torch.randn(B, N, D, generator=G, dtype=torch.float64)
Y = torch.randn(B, S, D, generator=G, dtype=torch.float64)
W = [torch.randn(D, C, generator=G, dtype=torch.float64) for _ in range(3)]
W_O = torch.randn(C, C, generator=G, dtype=torch.float64)
MASK = torch.rand(N, N, generator=G) > 0.3  # rows may be empty: the zero-row convention too
PADDING = torch.tensor([True, True, False, True, True])


def _module(cls, *args, **kwargs):
    torch.manual_seed(1)
    return cls(*args, **kwargs).double().eval()


def _full(mask, padding):
    """grouped_query_attention's one mask from a full mask and a key padding (n,) or (*, n)."""
    if padding is None:
        return mask
    padding = padding[..., None, :].expand(*padding.shape[:-1], N, N)
    return padding if mask is None else mask & padding


def _calls():
    """(name, call(x-batch, mask, key_padding_mask, y-batch)) for everything that takes masks."""
    mha = _module(MultiHeadAttention, D, C, N, 0.0, 2)
    swa = _module(MultiHeadAttentionWithSWA, D, C, 0.0, 2, sliding_window_size=3)
    causal = _module(CausalAttention, D, C, N, 0.0)
    wrapper = _module(MultiHeadAttentionWrapper, D, C, N, 0.0, 2)
    cross = _module(CrossAttention, D, D, C, num_heads=2)
    return {
        "self_attention": lambda x, m, p: F.self_attention(x, *W, mask=m, key_padding_mask=p),
        "self_attention explicit": lambda x, m, p: F.self_attention(
            x, *W, mask=m, key_padding_mask=p, return_weights=True
        )[0],
        "multi_head_attention": lambda x, m, p: F.multi_head_attention(
            x, *W, W_O, heads=2, causal=True, mask=m, key_padding_mask=p
        ),
        "multi_head_attention explicit": lambda x, m, p: F.multi_head_attention(
            x, *W, W_O, heads=2, mask=m, key_padding_mask=p, return_weights=True
        )[0],
        "grouped_query_attention": lambda x, m, p: grouped_query_attention(
            x, W[0], W[1][:, :2], W[2][:, :2], W_O, heads=2, groups=1, mask=_full(m, p)
        ),
        "cross_attention": lambda x, m, p: F.cross_attention(
            x,
            Y[: x.shape[0]] if x.dim() == 3 else Y[0],
            *W,
            mask=None if m is None else m[..., :S],
            key_padding_mask=None if p is None else p[..., :S],
        ),
        "weights": lambda x, m, p: F.weights(
            x @ W[0] @ (x @ W[1]).mT, C, mask=m, key_padding_mask=p
        ),
        "CausalAttention": lambda x, m, p: causal(x, mask=m, key_padding_mask=p),
        "MultiHeadAttentionWrapper": lambda x, m, p: wrapper(x, mask=m, key_padding_mask=p),
        "MultiHeadAttention": lambda x, m, p: mha(x, mask=m, key_padding_mask=p),
        "MultiHeadAttentionWithSWA": lambda x, m, p: swa(x, mask=m, key_padding_mask=p),
        "CrossAttention": lambda x, m, p: cross(
            x,
            Y[: x.shape[0]],
            mask=None if m is None else m[..., :S],
            key_padding_mask=None if p is None else p[..., :S],
        ),
    }


CALLS = _calls()


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("which", ["mask", "key_padding_mask"])
def test_one_mask_for_the_whole_batch_is_each_sequence_s_mask(name, which):
    call = CALLS[name]
    given = MASK if which == "mask" else PADDING
    options = (lambda m: (m, None)) if which == "mask" else (lambda m: (None, m))
    expected = call(X, *options(given.expand(B, *given.shape)))
    for shape in (given.shape, (1, *given.shape)):
        got = call(X, *options(given.reshape(shape)))
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert not torch.equal(expected, call(X, None, None))  # the mask changes the output


@pytest.mark.parametrize("name", ["self_attention", "multi_head_attention", "MultiHeadAttention"])
def test_a_mask_per_inner_batch_entry_broadcasts_over_the_outer_one(name):
    call = CALLS[name]
    x = X[:2, None].expand(2, 3, N, D).contiguous()  # (2, 3, n, d)
    masks = torch.rand(3, N, N, generator=torch.Generator().manual_seed(2)) > 0.4
    got = call(x, masks, None)
    for outer in range(2):
        for inner in range(3):
            expected = call(x[outer, inner], masks[inner], None)
            torch.testing.assert_close(got[outer, inner], expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "name",
    [
        "self_attention",
        "multi_head_attention",
        "MultiHeadAttention",
        "CrossAttention",
        "grouped_query_attention",
    ],
)
def test_a_mask_that_cannot_broadcast_is_named(name):
    bad = MASK.expand(2, N, N)  # batch 2 against x's 3
    with pytest.raises(
        ShapeError,
        match=r"mask has batch=\(2,\), which does not broadcast to "
        r"x's batch=\(3,\)",
    ):
        CALLS[name](X, bad, None)
    with pytest.raises(ShapeError, match=r"does not broadcast"):  # more dimensions than x's
        CALLS[name](X, MASK.expand(4, B, N, N), None)
