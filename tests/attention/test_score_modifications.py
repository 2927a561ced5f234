"""The score modifications of today's open models, in the functional API and the modules: logit
softcapping (Gemma 2), each on both paths, against the NumPy reference, against the plain
attention where the modification vanishes, and bad input named."""

import numpy as np
import pytest
import torch
from reference_variants import band_matrix, modified_attention

from attention import GroupedQueryAttention, MultiHeadAttention, MultiHeadAttentionWithSWA
from attention import functional as F
from attention.grouped import grouped_query_attention

N, D, C = 6, 5, 4


def inputs(seed=0, batch=(2,), dtype=torch.float64, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, N, D, generator=g, dtype=dtype) * scale
    weights = [torch.randn(D, C, generator=g, dtype=dtype) for _ in range(3)]
    return x, weights


def per_head_reference(x, w_q, w_k, w_v, *, heads, allowed, **options):
    """C of every head (NumPy, entry by entry), concatenated: (n, c)."""
    q, k, v = (x @ w for w in (w_q, w_k, w_v))
    width = q.shape[-1] // heads
    parts = []
    for head in range(heads):
        columns = slice(head * width, (head + 1) * width)
        parts.append(modified_attention(q[:, columns], k[:, columns], v[:, columns],
                                        scale=width**-0.5, allowed=allowed, **options)[0])
    return np.concatenate(parts, axis=-1)


# -- softcapping --------------------------------------------------------------------------------


def test_softcapped_scores_is_the_formula():
    omega = torch.tensor([[0.5, -3.0, 40.0]], dtype=torch.float64)
    expected = 2.0 * np.tanh(omega.numpy() / 2.0)
    np.testing.assert_allclose(F.softcapped_scores(omega, 2.0).numpy(), expected, rtol=1e-15)


@pytest.mark.parametrize("options", [{}, {"causal": True}, {"causal": True, "window": 2}])
@pytest.mark.parametrize("explicit", [False, True])
def test_self_attention_with_a_cap(options, explicit):
    x, (w_q, w_k, w_v) = inputs()
    got = F.self_attention(x, w_q, w_k, w_v, softcap=1.5, return_weights=explicit, **options)
    got = got[0] if explicit else got
    allowed = band_matrix(N, N, causal=options.get("causal", False), window=options.get("window"))
    for b in range(2):
        expected = per_head_reference(x[b].numpy(), w_q.numpy(), w_k.numpy(), w_v.numpy(),
                                      heads=1, allowed=allowed, softcap=1.5)  # fmt: skip
        np.testing.assert_allclose(got[b].numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("explicit", [False, True])
def test_multi_head_and_grouped_with_a_cap(explicit):
    x, (w_q, w_k, w_v) = inputs(1)
    w_o = torch.eye(C, dtype=torch.float64)
    got = F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=2, causal=True, softcap=0.7,
                                 return_weights=explicit)  # fmt: skip
    got = got[0] if explicit else got
    allowed = band_matrix(N, N, causal=True)
    for b in range(2):
        expected = per_head_reference(x[b].numpy(), w_q.numpy(), w_k.numpy(), w_v.numpy(),
                                      heads=2, allowed=allowed, softcap=0.7)  # fmt: skip
        np.testing.assert_allclose(got[b].numpy(), expected, rtol=0, atol=1e-12)
    grouped = grouped_query_attention(x, w_q, w_k, w_v, w_o, heads=2, causal=True, softcap=0.7)
    torch.testing.assert_close(grouped, got, rtol=0, atol=1e-12)


def test_an_infinite_cap_is_no_cap():
    x, (w_q, w_k, w_v) = inputs(2)
    plain = F.self_attention(x, w_q, w_k, w_v, causal=True)
    capped = F.self_attention(x, w_q, w_k, w_v, causal=True, softcap=1e9)
    torch.testing.assert_close(capped, plain, rtol=0, atol=1e-12)
    assert not torch.allclose(F.self_attention(x, w_q, w_k, w_v, causal=True, softcap=1.0),
                              plain, atol=1e-3)  # a small cap changes it  # fmt: skip


def test_the_modules_take_a_cap_and_compute_the_functional_one():
    torch.manual_seed(0)
    x = torch.randn(2, N, 8, dtype=torch.float64) * 4
    for module in (
        MultiHeadAttention(8, 8, N, 0.0, 2, softcap=2.0),
        MultiHeadAttentionWithSWA(8, 8, 0.0, 2, sliding_window_size=3, softcap=2.0),
    ):
        module = module.double().eval()
        expected = F.multi_head_attention(
            x, module.w_q if hasattr(module, "w_q") else module.W_query.weight.mT,
            module.W_key.weight.mT, module.W_value.weight.mT, module.out_proj.weight.mT,
            heads=2, b_o=module.out_proj.bias, causal=True, softcap=2.0,
            window=getattr(module, "sliding_window_size", None),
        )  # fmt: skip
        torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)
        assert module.softcap == 2.0


def test_grouped_query_attention_module_with_a_window_and_a_cap():
    torch.manual_seed(1)
    module = GroupedQueryAttention(8, num_heads=4, num_kv_groups=2, head_dim=2, sliding_window=3,
                                   softcap=1.0).double()  # fmt: skip
    x = torch.randn(2, N, 8, dtype=torch.float64) * 4
    expected = grouped_query_attention(
        x, module.W_query.weight.mT, module.W_key.weight.mT, module.W_value.weight.mT,
        module.out_proj.weight.mT, heads=4, groups=2, causal=True, window=3, softcap=1.0,
    )  # fmt: skip
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cap", [0.0, -1.0, float("inf"), float("nan"), True])
def test_a_bad_cap_is_named(cap):
    x, (w_q, w_k, w_v) = inputs()
    message = rf"softcap must be a positive number or None, got softcap={cap!r}"
    with pytest.raises(ValueError, match=r"^self_attention: " + message.replace("(", r"\(")):
        F.self_attention(x, w_q, w_k, w_v, softcap=cap)
    with pytest.raises(ValueError, match=r"^MultiHeadAttention: softcap must be"):
        MultiHeadAttention(8, 8, N, 0.0, 2, softcap=cap)
    with pytest.raises(ValueError, match=r"^GroupedQueryAttention: softcap must be"):
        GroupedQueryAttention(8, num_heads=2, num_kv_groups=1, softcap=cap)
    with pytest.raises(ValueError, match=r"^softcapped_scores: cap must be"):
        F.softcapped_scores(torch.zeros(2, 2), cap)


def test_a_cap_that_is_no_number_is_a_type_error():
    x, (w_q, w_k, w_v) = inputs()
    with pytest.raises(TypeError, match=r"^self_attention: softcap must be float \| None, got '50'"):
        F.self_attention(x, w_q, w_k, w_v, softcap="50")
    with pytest.raises(ValueError, match=r"^MultiHeadAttention: softcap must be a positive number"):
        MultiHeadAttention(8, 8, N, 0.0, 2, softcap="50")
