"""Hostile input to the public surface, each refused by name or computed right (issue 22's list):
sparse and nested tensors, sizes too large for a float, copying a multi-head module's weights
into a single-head one, RoPE tables on x's device."""

import pytest
import torch

from attention import (
    CausalAttention,
    CrossAttention,
    MultiHeadAttention,
    SelfAttentionV2,
    copy_weights,
)
from attention import functional as F
from attention.grouped import grouped_query_attention

X = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
W = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))


def _sparse(t):
    return t.to_sparse()


def _nested(t):
    return torch.nested.nested_tensor([t, t[:3]], layout=torch.jagged)


CALLS = {
    "self_attention": lambda x: F.self_attention(x, W, W, W),
    "projection": lambda x: F.projection(x, W),
    "multi_head_attention": lambda x: F.multi_head_attention(x, W, W, W, torch.eye(4), heads=2),
    "grouped_query_attention": lambda x: grouped_query_attention(x, W, W, W, heads=2),
    "cross_attention": lambda x: F.cross_attention(x, X, W, W, W),
    "MultiHeadAttention": lambda x: MultiHeadAttention(3, 4, 8, 0.0, 2)(x),
    "CausalAttention": lambda x: CausalAttention(3, 4, 8, 0.0)(x),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize(("make", "kind"), [(_sparse, "sparse_coo"), (_nested, "nested")])
def test_sparse_and_nested_tensors_are_refused_by_name(name, make, kind):
    with pytest.raises(
        TypeError,
        match=rf": x must be a dense tensor, got a {kind} one; "
        r"convert it first",
    ):
        CALLS[name](make(X))
    CALLS[name](X)  # the same values, dense: computed


@pytest.mark.parametrize("step", ["scaled_scores", "weights"])
def test_a_width_too_large_for_a_float_is_named(step):
    with pytest.raises(ValueError, match=rf"^{step}: c is too large, a number of 401 digits"):
        getattr(F, step)(torch.randn(5, 5), 10**400)
    assert getattr(F, step)(torch.randn(5, 5), 2**62).isfinite().all()  # the largest allowed


def test_copying_a_multi_head_module_into_a_single_head_one_is_refused():
    with pytest.raises(
        ValueError,
        match=r"^copy_weights\(MultiHeadAttention -> SelfAttentionV2\): "
        r"source has num_heads=2 but target has one head, no out_proj",
    ):
        copy_weights(MultiHeadAttention(3, 4, 8, 0.0, 2), SelfAttentionV2(3, 4))
    with pytest.raises(ValueError, match=r"source has num_heads=2 but target has num_heads=1"):
        copy_weights(MultiHeadAttention(3, 4, 8, 0.0, 2), MultiHeadAttention(3, 4, 8, 0.0, 1))


def test_copying_between_multi_head_modules_copies_the_output_projection():
    torch.manual_seed(2)
    source, target = MultiHeadAttention(3, 4, 8, 0.0, 2), MultiHeadAttention(3, 4, 8, 0.0, 2)
    x = torch.randn(2, 5, 3)
    assert not torch.equal(source(x), target(x))
    copy_weights(source, target)
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)


def test_grouped_query_attention_s_rope_tables_are_on_x_s_device():
    x, w = torch.randn(2, 5, 8, device="meta"), torch.randn(8, 8, device="meta")
    out = grouped_query_attention(x, w, w, w, w, heads=2, theta_base=1e4, causal=True)
    assert out.device.type == "meta" and out.shape == (2, 5, 8)


@pytest.mark.parametrize("explicit", [False, True])
def test_scores_that_fit_once_scaled_give_finite_attention(explicit):
    """QKᵀ beyond float32's range (1e39) but (QKᵀ)/√c within it (1.25e38, c = 64): the scale
    goes on Q first, on both paths, and C is the float64 one to float32's precision."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 64, generator=g), torch.randn(64, 64, generator=g) / 8
    q = (x @ w).double()
    x = x * (1e39 / float((q @ q.T).abs().max())) ** 0.5
    assert not torch.isfinite((x @ w) @ (x @ w).T).all()  # Ω itself overflows in float32
    out = F.self_attention(x, w, w, w, return_weights=explicit)
    out = out[0] if explicit else out
    expected = F.self_attention(x.double(), w.double(), w.double(), w.double())
    assert torch.isfinite(out).all()
    assert float((out.double() - expected).abs().max()) <= 1e-5 * float(expected.abs().max())


@pytest.mark.parametrize("size", [1.0, 1e13, 1e15])
def test_qk_norm_s_gradient_is_exact_at_large_inputs(size):
    """The RMS normalisation's backward in float32 against float64's, at |x| where autograd's
    own backward of rsqrt (u^(−3/2)) underflows; the forward stays the books' x · rsqrt(u)."""
    from attention import _core

    g = torch.Generator().manual_seed(3)
    x, gain, upstream = (
        torch.randn(4, 8, generator=g) * size,
        torch.randn(8, generator=g),
        torch.randn(4, 8, generator=g),
    )
    leaves = [x.clone().requires_grad_(), gain.clone().requires_grad_()]
    out = _core.rms_norm(*leaves, 1e-6)
    got = torch.autograd.grad(out, leaves, upstream)
    x64, gain64 = (t.double().requires_grad_() for t in (x, gain))
    reference = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * gain64
    expected = torch.autograd.grad(reference, [x64, gain64], upstream.double())
    torch.testing.assert_close(out.double(), reference, rtol=1e-6, atol=0)
    for mine, theirs in zip(got, expected, strict=True):
        assert float((mine.double() - theirs).abs().max()) <= 1e-6 * float(theirs.abs().max())


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_a_dtype_that_is_no_real_float_is_named(dtype):
    from attention import GroupedQueryAttention, compute_rope_params

    expected = rf"dtype must be a floating-point torch.dtype .*, got dtype={dtype}$"
    with pytest.raises(TypeError, match=rf"^compute_rope_params: {expected}"):
        compute_rope_params(4, context_length=8, dtype=dtype)
    with pytest.raises(TypeError, match=rf"^GroupedQueryAttention: {expected}"):
        GroupedQueryAttention(6, num_heads=4, num_kv_groups=2, head_dim=2, dtype=dtype)


def test_bfloat16_rope_tables_round_only_the_result():
    """Llama 3.1's tables in bfloat16: the angles computed in float32, only cos and sin rounded
    (half a bfloat16 ulp of 1 at most, 2⁻⁹), not θ before m·θ (which was off by 0.227)."""
    from attention import compute_rope_params

    config = {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_context_length": 8192,
    }
    exact = compute_rope_params(64, 5e5, 256, config, torch.float64)
    for got, expected in zip(
        compute_rope_params(64, 5e5, 256, config, torch.bfloat16), exact, strict=True
    ):
        assert float((got.double() - expected).abs().max()) <= 2.0**-9 + 2e-5


@pytest.mark.parametrize("size", [1.0, 1e10, 1e15])
@pytest.mark.parametrize("causal", [False, True])
def test_the_written_out_backward_is_exact_where_the_softmax_saturates(size, causal):
    """At x ×1e15 every row of A is one-hot in float32 and dΩ is exactly 0; the row sum taken
    from A and dA keeps it 0, where rowsum(dC ∘ C) rounded differently from dA left ε·|dA|,
    which dQ = dΩ K multiplied into NaN or 1e25 (the exact dX is about 30)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 16, generator=g) * size
    weights = [torch.randn(16, 16, generator=g) for _ in range(3)]
    grad_c = torch.randn(5, 16, generator=g)
    got = F.self_attention_backward(x, *weights, grad_c, causal=causal)
    leaves = [t.double().requires_grad_() for t in (x, *weights)]
    F.self_attention(*leaves, causal=causal).backward(grad_c.double())
    for mine, leaf in zip(got, leaves, strict=True):
        expected = leaf.grad
        assert torch.isfinite(mine).all()
        assert float((mine.double() - expected).abs().max()) <= 1e-5 * float(expected.abs().max())


def test_a_signature_that_passed_on_the_cpu_does_not_pass_on_another_device():
    """The memory of passed signatures leaves a CPU tensor's device out of its key (see
    `_checks._call_key`): another device must still be a new signature, and checked."""
    from attention import DeviceError, SelfAttentionV1

    module = SelfAttentionV1(3, 2)
    module(torch.randn(6, 3))  # passed, remembered
    with pytest.raises(DeviceError, match=r"W_query is on cpu but x is on meta"):
        module(torch.randn(6, 3, device="meta"))
    F.self_attention(X, W, W, W)  # passed, remembered
    with pytest.raises(DeviceError, match=r"x is on meta"):
        F.self_attention(torch.empty_like(X, device="meta"), W, W, W)


@pytest.mark.parametrize(
    "layer", [None, torch.nn.Linear(2, 2), MultiHeadAttention(4, 4, 8, 0.0, 2)], ids=repr
)
def test_from_bloom_says_what_it_expected(layer):
    from attention.huggingface import from_bloom

    with pytest.raises(
        TypeError,
        match=rf"^from_bloom: layer must be BLOOM's attention layer .*got {type(layer).__name__}, which has no",
    ):
        from_bloom(layer)


#: every size of every module constructor, each given None: refused by its name
CONSTRUCTORS = {
    "CrossAttention": (CrossAttention, {"d_in": 3, "d_kv": 5, "d_out": 4}),
    "MultiHeadAttention": (
        MultiHeadAttention,
        {"d_in": 3, "d_out": 4, "context_length": 8, "dropout": 0.0, "num_heads": 2},
    ),
    "CausalAttention": (
        CausalAttention,
        {"d_in": 3, "d_out": 4, "context_length": 8, "dropout": 0.0},
    ),
    "SelfAttentionV2": (SelfAttentionV2, {"d_in": 3, "d_out": 4}),
}


@pytest.mark.parametrize(
    ("name", "size"),
    [(n, s) for n, (_, sizes) in CONSTRUCTORS.items() for s in sizes if s != "dropout"],
)
def test_a_size_given_as_none_is_refused_by_name(name, size):
    cls, sizes = CONSTRUCTORS[name]
    cls(**sizes)
    with pytest.raises(ValueError, match=rf"^{name}: {size} must be a positive integer"):
        cls(**{**sizes, size: None})
