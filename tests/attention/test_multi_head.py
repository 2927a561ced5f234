"""Multi-head attention: against the reference, torch's own module, and the wrapper of heads."""

import numpy as np
import pytest
import torch
from reference import batched_reference, causal_allowed
from torch.utils._python_dispatch import TorchDispatchMode

from attention import (
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    from_torch_multihead,
    to_torch_multihead,
)
from attention import functional as F

B, N, D, HEADS, C_H = 2, 5, 3, 3, 2  # c = 6, c_out = 7: every size distinct where it can be
C, C_OUT = HEADS * C_H, 7


def make(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=dtype)
    w_q, w_k, w_v = (torch.randn(D, C, generator=g, dtype=dtype) for _ in range(3))
    return x, w_q, w_k, w_v, torch.randn(C, C_OUT, generator=g, dtype=dtype)


def reference(x, w_q, w_k, w_v, w_o, allowed=None):
    """Each head on its own columns, concatenated, projected: built from the 1-head reference."""
    per_head = [
        batched_reference(
            x, *(w[:, i * C_H : (i + 1) * C_H] for w in (w_q, w_k, w_v)), allowed=allowed
        )
        for i in range(HEADS)
    ]
    concatenated = np.concatenate([c for c, _ in per_head], axis=-1)
    return concatenated @ w_o.numpy(), np.stack([a for _, a in per_head], axis=-3)


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_matches_reference(causal, return_weights):
    x, w_q, w_k, w_v, w_o = make()
    expected_c, expected_a = reference(x, w_q, w_k, w_v, w_o, causal_allowed(N) if causal else None)
    out = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=HEADS, causal=causal, return_weights=return_weights
    )
    got = out[0] if return_weights else out
    assert got.shape == (B, N, C_OUT)
    np.testing.assert_allclose(got.numpy(), expected_c, rtol=0, atol=1e-12)
    if return_weights:
        assert out[1].shape == (B, HEADS, N, N)
        np.testing.assert_allclose(out[1].numpy(), expected_a, rtol=0, atol=1e-12)


def test_split_and_merge_heads_are_inverse_and_take_column_blocks():
    t = torch.arange(B * N * C, dtype=torch.float64).view(B, N, C)
    heads = F.split_heads(t, HEADS)
    assert heads.shape == (B, HEADS, N, C_H)
    assert torch.equal(heads[:, 1], t[..., C_H : 2 * C_H])  # head 1 = columns c_h … 2c_h − 1
    assert torch.equal(F.merge_heads(heads), t)


def test_gradcheck_multi_head():
    x, w_q, w_k, w_v, w_o = make()
    inputs = tuple(t.requires_grad_() for t in (x, w_q, w_k, w_v, w_o))
    assert torch.autograd.gradcheck(
        lambda *t: F.multi_head_attention(*t, heads=HEADS, causal=True), inputs
    )


class CountCalls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_all_heads_go_through_one_fused_kernel_call():
    torch.manual_seed(0)
    module = MultiHeadAttention(8, 12, 16, 0.0, num_heads=4).eval()
    with CountCalls() as counter:
        module(torch.rand(2, 16, 8))
    fused = [c for c in counter.calls if "scaled_dot_product" in c]
    assert len(fused) == 1, counter.calls
    assert not any(c == "aten._softmax" for c in counter.calls)  # no explicit path


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_same_outputs_as_torch_multihead_attention(qkv_bias):
    torch.manual_seed(0)
    ours = MultiHeadAttention(12, 12, 10, 0.0, num_heads=4, qkv_bias=qkv_bias).double().eval()
    twin = to_torch_multihead(ours)
    x = torch.randn(3, 10, 12, dtype=torch.float64)
    blocked = ~F.causal_mask(10)  # torch's boolean masks mark what may NOT be attended
    expected, expected_a = twin(x, x, x, attn_mask=blocked, average_attn_weights=False)
    torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-12)
    got, got_a = ours(x, return_weights=True)
    torch.testing.assert_close(got_a, expected_a, rtol=0, atol=1e-12)
    back = from_torch_multihead(twin, context_length=10)
    torch.testing.assert_close(back(x), expected, rtol=0, atol=1e-12)


def test_padding_mask_agrees_with_torch_key_padding_mask():
    torch.manual_seed(1)
    ours = MultiHeadAttention(6, 6, 8, 0.0, num_heads=2).double()
    twin = to_torch_multihead(ours)
    x = torch.randn(2, 8, 6, dtype=torch.float64)
    exists = torch.arange(8) < torch.tensor([[8], [5]])  # second sequence: 5 real tokens
    expected, _ = twin(x, x, x, attn_mask=~F.causal_mask(8), key_padding_mask=~exists)
    torch.testing.assert_close(ours(x, key_padding_mask=exists), expected, rtol=0, atol=1e-12)


def test_to_torch_needs_equal_widths():
    with pytest.raises(ValueError, match=r"needs d_in = d_out, got d_in=3, d_out=4"):
        to_torch_multihead(MultiHeadAttention(3, 4, 6, 0.0, 2))


def test_wrapper_equals_fused_heads_with_identity_output_projection():
    torch.manual_seed(0)
    d_in, d_out, heads, n = 5, 3, 4, 7
    wrapper = MultiHeadAttentionWrapper(d_in, d_out, n, 0.0, num_heads=heads).double()
    fused = MultiHeadAttention(d_in, d_out * heads, n, 0.0, num_heads=heads).double()
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            stacked = torch.cat([getattr(h, name).weight for h in wrapper.heads])  # (h·c_h, d)
            getattr(fused, name).weight.copy_(stacked)
        fused.out_proj.weight.copy_(torch.eye(d_out * heads))
        fused.out_proj.bias.zero_()
    x = torch.randn(2, n, d_in, dtype=torch.float64)
    torch.testing.assert_close(fused(x), wrapper(x), rtol=0, atol=1e-12)
