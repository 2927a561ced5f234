"""Interop with torch.nn.MultiheadAttention, and errors from inside the wrapper of heads."""

import pytest
import torch
import torch.nn as nn

from attention import (
    CausalAttention,
    DtypeError,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
    ShapeError,
    copy_weights,
    from_torch_multihead,
    to_torch_multihead,
    torch_masks,
)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: copy_weights(None, SelfAttentionV1(3, 2)),
            r"^copy_weights: source must be an attention module with the book's Wq, Wk, Wv .*got NoneType",
        ),
        (
            lambda: copy_weights(SelfAttentionV1(3, 2), nn.Linear(3, 2)),
            r"^copy_weights: target must be .*got Linear",
        ),
        (
            lambda: to_torch_multihead(SelfAttentionV2(4, 4)),
            r"^to_torch_multihead: module must be an attention.MultiHeadAttention, got SelfAttentionV2",
        ),
        (lambda: to_torch_multihead(None), r"^to_torch_multihead: module must be .*got NoneType"),
        (
            lambda: from_torch_multihead(None, 6),
            r"^from_torch_multihead: twin must be a torch.nn.MultiheadAttention, got NoneType",
        ),
        (
            lambda: from_torch_multihead(MultiHeadAttention(4, 4, 6, 0.0, 2), 6),
            r"^from_torch_multihead: twin must be a torch.nn.MultiheadAttention, got MultiHeadAttention",
        ),
    ],
    ids=["copy-none", "copy-linear", "to-v2", "to-none", "from-none", "from-ours"],
)
def test_interop_arguments_are_type_checked(call, message):
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: nn.MultiheadAttention(6, 2, batch_first=True, add_bias_kv=True),
            r"twin has add_bias_kv=True, add_zero_attn=False; MultiHeadAttention has no extra keys",
        ),
        (
            lambda: nn.MultiheadAttention(6, 2, batch_first=True, add_zero_attn=True),
            r"add_zero_attn=True",
        ),
        (
            lambda: nn.MultiheadAttention(6, 2, batch_first=True, kdim=4, vdim=4),
            r"packed in_proj_weight \(kdim = vdim = embed_dim\), got kdim=4, vdim=4, embed_dim=6",
        ),
    ],
)
def test_from_torch_refuses_what_ours_cannot_compute(build, message):
    with pytest.raises(ValueError, match=message):
        from_torch_multihead(build(), 8)


def test_from_torch_without_biases():
    torch.manual_seed(0)
    twin = nn.MultiheadAttention(6, 2, bias=False, batch_first=True).double()
    ours = from_torch_multihead(twin, context_length=5)
    assert ours.W_query.bias is None and torch.equal(ours.out_proj.bias, torch.zeros(6).double())
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    expected, _ = twin(x, x, x, **torch_masks(5, 2))
    torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-12)


def test_torch_masks_translate_both_masks():
    torch.manual_seed(2)
    ours = MultiHeadAttention(6, 6, 7, 0.0, num_heads=3).double()
    twin = to_torch_multihead(ours)
    x = torch.randn(2, 7, 6, dtype=torch.float64)
    exists = torch.arange(7) < torch.tensor([[7], [5]])  # the second sequence: 5 tokens
    mask = torch.rand(2, 7, 7) > 0.3
    mask[..., 0] = True  # every query may attend token 0: no fully masked row (torch gives NaN)
    masks = torch_masks(7, 3, mask=mask, key_padding_mask=exists)
    assert masks["attn_mask"].shape == (2 * 3, 7, 7)
    expected, _ = twin(x, x, x, **masks)
    got = ours(x, mask=mask, key_padding_mask=exists)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    # and the inversion matters: the masks as given would mean their opposite to torch
    wrong, _ = twin(x, x, x, key_padding_mask=exists, attn_mask=~masks["attn_mask"])
    assert not torch.allclose(wrong.nan_to_num(), got)


def test_torch_masks_checks_n():
    with pytest.raises(ShapeError, match=r"torch_masks: key_padding_mask has n=4 but n=5"):
        torch_masks(5, 2, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))


@pytest.mark.parametrize(
    ("change", "x", "error", "message"),
    [
        # x of the wrong width: the first head is named
        (
            lambda w: None,
            torch.rand(2, 6, 4),
            ShapeError,
            r"^MultiHeadAttentionWrapper.forward: heads\[0\].W_query.weight has d=3 but x has d=4",
        ),
        # only head 2 differs from x
        (
            lambda w: setattr(w.heads[2], "W_key", nn.Linear(5, 2, bias=False)),
            torch.rand(2, 6, 3),
            ShapeError,
            r"^MultiHeadAttentionWrapper.forward: heads\[2\].W_key.weight has d=5 but x has d=3",
        ),
        # head 1 in float64
        (
            lambda w: w.heads[1].double(),
            torch.rand(2, 6, 3),
            DtypeError,
            r"^MultiHeadAttentionWrapper.forward: heads\[1\].W_query.weight has dtype torch.float64",
        ),
        # longer than the heads' context
        (
            lambda w: None,
            torch.rand(2, 7, 3),
            ShapeError,
            r"^MultiHeadAttentionWrapper.forward: x has n=7 tokens but heads\[0\] has context_length=6",
        ),
    ],
    ids=["x", "head-2", "head-1-dtype", "context"],
)
def test_wrapper_errors_name_the_wrapper_and_the_head(change, x, error, message):
    wrapper = MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=3)
    wrapper(torch.rand(2, 6, 3))  # a good call first
    change(wrapper)
    with pytest.raises(error, match=message):
        wrapper(x)


@pytest.mark.parametrize(
    "build",
    [
        lambda: SelfAttentionV2(3, 2, qkv_bias="no"),
        lambda: CausalAttention(3, 2, 6, 0.0, qkv_bias=1),
        lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2, qkv_bias="no"),
        lambda: MultiHeadAttention(3, 4, 6, 0.0, 2, qkv_bias=None),
    ],
    ids=["V2", "causal", "wrapper", "multi-head"],
)
def test_qkv_bias_must_be_a_bool(build):
    with pytest.raises(TypeError, match=r": qkv_bias must be a bool, got qkv_bias="):
        build()
