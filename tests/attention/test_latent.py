"""Multi-head latent attention: the book's class (ch04/05_mla) number for number, its latent
cache, the formulas written out, and the errors."""

import jaxtyping
import numpy as np
import pytest
import torch
from book_latent import BookMultiHeadLatentAttention
from reference_variants import latent_reference

from attention import MultiHeadLatentAttention, ShapeError, _fused
from attention import functional as F
from attention.latent import latent_attention

B, N, D, HEADS, C_H, R = 2, 7, 12, 3, 6, 5  # c = 18; every size distinct
C = HEADS * C_H

# constructor arguments: one row per way of building it
ARGS = [
    (D, C, 0.0, HEADS),  # the book's default latent_dim: max(16, d_out // 8) = 16
    (D, C, 0.0, HEADS, True, R),  # biases, a latent of 5
    (D, 64 * 3, 0.0, 3, False, None),  # d_out // 8 = 24 > 16
]


def pair(args, seed=0):
    torch.manual_seed(seed)
    book = BookMultiHeadLatentAttention(*args)
    torch.manual_seed(seed)
    return book, MultiHeadLatentAttention(*args)


@pytest.mark.parametrize("args", ARGS)
def test_same_seed_same_parameters_and_numbers(args):
    book, ours = pair(args)
    assert ours.latent_dim == book.latent_dim
    assert list(ours.state_dict()) == list(book.state_dict())  # names and creation order
    for name, tensor in book.state_dict().items():
        assert torch.equal(ours.state_dict()[name], tensor), name
    x = torch.randn(B, N, D)
    torch.testing.assert_close(ours(x), book(x))


def test_book_state_dict_loads_unchanged():
    book, _ = pair(ARGS[1], seed=1)
    _, ours = pair(ARGS[1], seed=2)
    ours.load_state_dict(book.state_dict(), strict=True)
    x = torch.randn(B, N, D)
    torch.testing.assert_close(ours(x), book(x))


def test_dropout_draws_the_books_random_numbers():
    book, ours = pair((D, C, 0.3, HEADS))
    x = torch.randn(B, N, D)
    torch.manual_seed(5)
    expected = book(x)
    torch.manual_seed(5)
    got = ours(x)
    torch.testing.assert_close(got, expected)
    ours.eval()
    assert not torch.allclose(ours(x), got)  # dropout acted in training mode only


def test_latent_cache_token_by_token_equals_the_books_and_the_whole_sequence():
    book, ours = pair(ARGS[1])
    x = torch.randn(B, N, D)
    whole = ours(x)
    pieces = []
    for chunk in (x[:, :3], x[:, 3:4], x[:, 4:6], x[:, 6:]):  # a prompt, then new tokens
        expected = book(chunk, use_cache=True)
        pieces.append(ours(chunk, use_cache=True))
        torch.testing.assert_close(pieces[-1], expected)
        assert ours.cache_c_kv.shape == book.cache_c_kv.shape
        assert ours.ptr_current_pos == book.ptr_current_pos
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)
    assert ours.cache_c_kv.shape == (B, N, R)  # r numbers per token: the latent, nothing else
    ours.reset_cache()
    assert ours.cache_c_kv is None and ours.ptr_current_pos == 0


def test_without_the_cache_it_is_untouched_and_the_position_resets_as_the_books():
    book, ours = pair(ARGS[1])
    x = torch.randn(B, N, D)
    for module in (book, ours):
        module(x[:, :4], use_cache=True)
    torch.testing.assert_close(ours(x), book(x))  # use_cache=False: position back to 0
    assert ours.cache_c_kv.shape == (B, 4, R) and ours.ptr_current_pos == 0
    # the book's semantics from there: the old latents stay, the queries start at 0 again
    torch.testing.assert_close(ours(x[:, 4:], use_cache=True), book(x[:, 4:], use_cache=True))


def test_cache_is_not_a_persistent_buffer():
    _, ours = pair(ARGS[1])
    ours(torch.randn(B, N, D), use_cache=True)
    assert "cache_c_kv" not in ours.state_dict()


def test_cache_memory_against_multi_head_attention():
    _, ours = pair(ARGS[2])
    ours(torch.randn(B, N, D), use_cache=True)
    kv_cache = 2 * B * N * ours.d_out  # multi-head attention keeps K and V: 2·d_out per token
    assert ours.cache_c_kv.numel() == B * N * 24 == kv_cache * 24 // (2 * 192)  # 1/16 of it


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("with_w_o", [True, False])
def test_functional_matches_decompressing_by_the_formulas(causal, with_w_o):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    w_q, w_dkv = (
        torch.randn(D, C, generator=g, dtype=torch.float64),
        torch.randn(D, R, generator=g, dtype=torch.float64),
    )
    w_uk, w_uv = (torch.randn(R, C, generator=g, dtype=torch.float64) for _ in "kv")
    w_o = torch.randn(C, 4, generator=g, dtype=torch.float64) if with_w_o else None
    got = latent_attention(x, w_q, w_dkv, w_uk, w_uv, w_o, heads=HEADS, causal=causal)
    assert got.shape == (B, N, 4 if with_w_o else C)
    for b in range(B):
        expected = latent_reference(x[b], w_q, w_dkv, w_uk, w_uv, w_o, heads=HEADS, causal=causal)
        np.testing.assert_allclose(got[b].numpy(), expected, rtol=0, atol=1e-12)
    if with_w_o:  # absorbed: multi-head attention with W_k = W_dkv W_uk, W_v = W_dkv W_uv
        mha = F.multi_head_attention(
            x, w_q, w_dkv @ w_uk, w_dkv @ w_uv, w_o, heads=HEADS, causal=causal
        )
        torch.testing.assert_close(got, mha, rtol=0, atol=1e-12)


def test_module_is_the_functional_form_with_its_weights():
    _, ours = pair(ARGS[0])
    x = torch.randn(B, N, D)
    weights = (ours.W_query, ours.W_DKV, ours.W_UK, ours.W_UV, ours.out_proj)
    expected = latent_attention(x, *(w.weight.T for w in weights), heads=HEADS) + ours.out_proj.bias
    torch.testing.assert_close(ours(x), expected)


def test_fast_path_gradients_against_the_books_in_float64(monkeypatch):
    book, ours = pair(ARGS[1])
    book.double()
    calls = []
    original = _fused.gradients
    monkeypatch.setattr(_fused, "gradients", lambda *a: calls.append(1) or original(*a))
    x = torch.randn(B, N, D, generator=torch.Generator().manual_seed(3))
    ours(x).square().sum().backward()
    book(x.double()).square().sum().backward()
    assert calls  # through the fast path's own backward
    expected = dict(book.named_parameters())
    scale = max(float(p.grad.abs().max()) for p in expected.values())
    for name, parameter in ours.named_parameters():  # W_UK.bias: exactly 0 (softmax's shift)
        torch.testing.assert_close(
            parameter.grad.double(), expected[name].grad, rtol=1e-5, atol=1e-6 * scale, msg=name
        )


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            (D, C, 0.0, HEADS, False, 0),
            ValueError,
            r"MultiHeadLatentAttention: latent_dim must be a positive integer, got latent_dim=0",
        ),
        (
            (D, C, 0.0, HEADS, False, -3),
            ValueError,
            r"MultiHeadLatentAttention: latent_dim must be a positive integer, got latent_dim=-3",
        ),
        (
            (D, 20, 0.0, HEADS),
            ValueError,
            r"MultiHeadLatentAttention: d_out=20 is not divisible by num_heads=3",
        ),
        (
            (D, C, 1.5, HEADS),
            ValueError,
            r"MultiHeadLatentAttention: dropout must be in \[0, 1\), got dropout=1.5",
        ),
        (
            (D, C, 0.0, HEADS, "no"),
            TypeError,
            r"MultiHeadLatentAttention: qkv_bias must be a bool, got qkv_bias='no'",
        ),
    ],
)
def test_construction_errors_name_the_argument(args, error, message):
    with pytest.raises(error, match=message):
        MultiHeadLatentAttention(*args)


def test_forward_errors_name_both_sizes():
    _, ours = pair(ARGS[1])
    with pytest.raises(
        ShapeError,
        match=r"MultiHeadLatentAttention.forward: W_query.weight has d=12 but x has d=11",
    ):
        ours(torch.randn(B, N, 11))
    ours(torch.randn(B, 3, D), use_cache=True)
    with pytest.raises(
        ShapeError,
        match=r"MultiHeadLatentAttention.forward: x has batch \(3,\) but cache_c_kv holds batch \(2,\); call reset_cache\(\) before a new batch",
    ):
        ours(torch.randn(3, 1, D), use_cache=True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": 4}, r"latent_attention: c=18 \(the width of w_q\) is not divisible by heads=4"),
        ({"w_uk": torch.ones(4, C)}, r"latent_attention: w_uk has r=4 but w_dkv has r=5"),
        ({"w_uv": torch.ones(R, 12)}, r"latent_attention: w_uv has c=12 but w_q has c=18"),
    ],
)
def test_functional_errors(change, message):
    arguments = {
        "x": torch.ones(N, D),
        "w_q": torch.ones(D, C),
        "w_dkv": torch.ones(D, R),
        "w_uk": torch.ones(R, C),
        "w_uv": torch.ones(R, C),
        "heads": HEADS,
    }
    arguments.update(change)
    with pytest.raises(ShapeError, match=message):
        latent_attention(**arguments)


def test_checks_off_gives_the_same_numbers():
    _, ours = pair(ARGS[1])
    x = torch.randn(B, N, D)
    checked = ours(x)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        assert torch.equal(ours(x), checked)
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
