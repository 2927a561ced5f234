"""Gated DeltaNet (`attention.deltanet.GatedDeltaNet`): the book's ch04/08 class number for number
(same seed, same parameters, same outputs and gradients; its state_dict loads), generation with
the state token by token, Qwen 3.5's options (β per head, grouped keys, the convolution), and the
errors."""

import pytest
import torch
from book_deltanet import BookGatedDeltaNet

from attention import ShapeError
from attention.deltanet import GatedDeltaNet

B, N, D, HEADS, C = 2, 9, 12, 3, 18  # c_h = 6; every size distinct
ARGS = [(D, C, 0.0, HEADS), (D, C, 0.0, HEADS, True)]
TOL = dict(rtol=1e-5, atol=1e-6)


def pair(args, seed=0, **options):
    torch.manual_seed(seed)
    book = BookGatedDeltaNet(*args)
    torch.manual_seed(seed)
    return book, GatedDeltaNet(*args, **options)


@pytest.mark.parametrize("chunk_size", [None, 4, 64])
@pytest.mark.parametrize("args", ARGS)
def test_same_seed_same_parameters_outputs_and_gradients(args, chunk_size):
    book, ours = pair(args, chunk_size=chunk_size)
    assert list(ours.state_dict()) == list(book.state_dict())  # names and creation order
    for name, tensor in book.state_dict().items():
        assert torch.equal(ours.state_dict()[name], tensor), name
    with torch.no_grad():  # the book's initial decay is nearly 1: make it matter
        for module in (book, ours):
            module.A_log.fill_(0.5)
    x = torch.randn(B, N, D)
    expected, got = book(x), ours(x)
    torch.testing.assert_close(got, expected, **TOL)
    expected.square().sum().backward()
    got.square().sum().backward()
    for (name, mine), theirs in zip(ours.named_parameters(), book.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_the_book_s_state_dict_loads_unchanged():
    book, _ = pair(ARGS[1], seed=1)
    _, ours = pair(ARGS[1], seed=2)
    ours.load_state_dict(book.state_dict(), strict=True)
    x = torch.randn(B, N, D)
    torch.testing.assert_close(ours(x), book(x), **TOL)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(beta="head", conv_size=4, key_heads=1, key_dim=5, out_features=7, out_bias=False),
    ],
    ids=["book", "qwen3.5"],
)
def test_generation_with_the_cache_continues_the_sequence(options):
    torch.manual_seed(3)
    ours = GatedDeltaNet(D, C, 0.0, HEADS, chunk_size=4, **options)
    x = torch.randn(B, N, D)
    whole = ours(x)
    ours.reset_cache()
    parts = [ours(x[:, :5], use_cache=True)]
    parts += [ours(x[:, t : t + 1], use_cache=True) for t in range(5, N)]
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, **TOL)
    assert ours.ptr_current_pos == N
    assert ours.cache_state.shape == (B, HEADS, ours.key_dim, C // HEADS)
    ours.reset_cache()
    torch.testing.assert_close(ours(x[:, :3], use_cache=True), whole[:, :3], **TOL)


@torch.no_grad()
def test_the_state_and_the_convolution_each_carry_the_sequence():
    """Each cache is needed: forgetting the state or the convolution's inputs between two
    calls changes the second call's outputs."""
    torch.manual_seed(4)
    ours = GatedDeltaNet(D, C, 0.0, HEADS, beta="head", conv_size=3)
    x = torch.randn(B, N, D)
    whole = ours(x)
    _, state, past = ours.continued(x[:, :4], None, None)
    for kept in ((state, None), (None, past)):
        out, _, _ = ours.continued(x[:, 4:], *kept)
        assert float((out - whole[:, 4:]).abs().max()) > 1e-3
    out, _, _ = ours.continued(x[:, 4:], state, past)
    torch.testing.assert_close(out, whole[:, 4:], **TOL)


@torch.no_grad()
def test_beta_per_channel_and_per_head_differ():
    """The book's β (one per value channel) and Qwen 3.5's (one per head): the same rule on
    different strengths, so another layer — unless each head's channels share one β."""
    torch.manual_seed(5)
    channel = GatedDeltaNet(D, C, 0.0, HEADS)
    head = GatedDeltaNet(D, C, 0.0, HEADS, beta="head")
    for name in ("W_query", "W_key", "W_value", "W_gate", "W_alpha", "out_proj"):
        getattr(head, name).load_state_dict(getattr(channel, name).state_dict())
    channel.W_beta.weight.copy_(head.W_beta.weight.repeat_interleave(C // HEADS, dim=0))
    x = torch.randn(B, N, D)
    torch.testing.assert_close(channel(x), head(x), **TOL)
    channel.W_beta.weight.normal_()
    assert float((channel(x) - head(x)).abs().max()) > 1e-3


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: GatedDeltaNet(D, 17, 0.0, HEADS), "d_out=17 is not divisible by num_heads=3"),
        (lambda: GatedDeltaNet(D, C, 0.0, HEADS, key_heads=2), "key_heads=2"),
        (lambda: GatedDeltaNet(D, C, 0.0, HEADS, beta="token"), "beta must be one of"),
        (lambda: GatedDeltaNet(D, C, 1.5, HEADS), "dropout"),
        (lambda: GatedDeltaNet(D, C, 0.0, HEADS, conv_size=0), "conv_size"),
    ],
)
def test_bad_construction_is_named(build, message):
    with pytest.raises((ShapeError, ValueError), match=message):
        build()


def test_bad_input_is_named():
    ours = GatedDeltaNet(D, C, 0.0, HEADS)
    with pytest.raises(ShapeError, match="W_query.weight has d=12 but x has d=13"):
        ours(torch.randn(B, N, 13))
    ours(torch.randn(B, 2, D), use_cache=True)
    with pytest.raises(ShapeError, match="reset_cache"):
        ours(torch.randn(B + 1, 1, D), use_cache=True)


def test_the_cache_carries_values_not_the_graph_that_made_them():
    """Two cached calls, each with its own backward pass: the second does not reach back into
    the first one's graph (generation, not training through the cache)."""
    torch.manual_seed(6)
    ours = GatedDeltaNet(D, C, 0.0, HEADS)
    x = torch.randn(B, N, D)
    ours(x[:, :4], use_cache=True).sum().backward()
    ours(x[:, 4:], use_cache=True).sum().backward()
    assert not ours.cache_state.requires_grad
