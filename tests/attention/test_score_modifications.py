"""The score modifications of today's open models, in the functional API and the modules: logit
softcapping (Gemma 2), linear biases (ALiBi: BLOOM, MPT), attention sinks (GPT-OSS), the output gate
(Qwen 3.5) and the query scale of Gemma 2 and 3, each on both paths, against the NumPy reference, against the plain attention where the modification
vanishes, and bad input named."""

import numpy as np
import pytest
import torch
from reference_variants import band_matrix, modified_attention

from attention import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadAttentionWithSWA,
    ShapeError,
)
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
        parts.append(
            modified_attention(
                q[:, columns],
                k[:, columns],
                v[:, columns],
                scale=width**-0.5,
                allowed=allowed,
                **options,
            )[0]
        )
    return np.concatenate(parts, axis=-1)


def cached(module, x, cuts):
    """The module's rows for x fed through its KV cache in pieces cut at `cuts`, concatenated."""
    bounds = [0, *cuts, x.shape[-2]]
    pieces = zip(bounds[:-1], bounds[1:], strict=True)
    return torch.cat([module(x[:, a:b], use_cache=True) for a, b in pieces], dim=1)


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
        expected = per_head_reference(
            x[b].numpy(),
            w_q.numpy(),
            w_k.numpy(),
            w_v.numpy(),
            heads=1,
            allowed=allowed,
            softcap=1.5,
        )
        np.testing.assert_allclose(got[b].numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("explicit", [False, True])
def test_multi_head_and_grouped_with_a_cap(explicit):
    x, (w_q, w_k, w_v) = inputs(1)
    w_o = torch.eye(C, dtype=torch.float64)
    got = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=2, causal=True, softcap=0.7, return_weights=explicit
    )
    got = got[0] if explicit else got
    allowed = band_matrix(N, N, causal=True)
    for b in range(2):
        expected = per_head_reference(
            x[b].numpy(),
            w_q.numpy(),
            w_k.numpy(),
            w_v.numpy(),
            heads=2,
            allowed=allowed,
            softcap=0.7,
        )
        np.testing.assert_allclose(got[b].numpy(), expected, rtol=0, atol=1e-12)
    grouped = grouped_query_attention(x, w_q, w_k, w_v, w_o, heads=2, causal=True, softcap=0.7)
    torch.testing.assert_close(grouped, got, rtol=0, atol=1e-12)


def test_an_infinite_cap_is_no_cap():
    x, (w_q, w_k, w_v) = inputs(2)
    plain = F.self_attention(x, w_q, w_k, w_v, causal=True)
    capped = F.self_attention(x, w_q, w_k, w_v, causal=True, softcap=1e9)
    torch.testing.assert_close(capped, plain, rtol=0, atol=1e-12)
    assert not torch.allclose(
        F.self_attention(x, w_q, w_k, w_v, causal=True, softcap=1.0), plain, atol=1e-3
    )  # a small cap changes it


def test_the_modules_take_a_cap_and_compute_the_functional_one():
    torch.manual_seed(0)
    x = torch.randn(2, N, 8, dtype=torch.float64) * 4
    for module in (
        MultiHeadAttention(8, 8, N, 0.0, 2, softcap=2.0),
        MultiHeadAttentionWithSWA(8, 8, 0.0, 2, sliding_window_size=3, softcap=2.0),
    ):
        module = module.double().eval()
        expected = F.multi_head_attention(
            x,
            module.w_q if hasattr(module, "w_q") else module.W_query.weight.mT,
            module.W_key.weight.mT,
            module.W_value.weight.mT,
            module.out_proj.weight.mT,
            heads=2,
            b_o=module.out_proj.bias,
            causal=True,
            softcap=2.0,
            window=getattr(module, "sliding_window_size", None),
        )
        torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)
        assert module.softcap == 2.0


def test_grouped_query_attention_module_with_a_window_and_a_cap():
    torch.manual_seed(1)
    module = GroupedQueryAttention(
        8, num_heads=4, num_kv_groups=2, head_dim=2, sliding_window=3, softcap=1.0
    ).double()
    x = torch.randn(2, N, 8, dtype=torch.float64) * 4
    expected = grouped_query_attention(
        x,
        module.W_query.weight.mT,
        module.W_key.weight.mT,
        module.W_value.weight.mT,
        module.out_proj.weight.mT,
        heads=4,
        groups=2,
        causal=True,
        window=3,
        softcap=1.0,
    )
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
    with pytest.raises(
        TypeError, match=r"^self_attention: softcap must be float \| None, got '50'"
    ):
        F.self_attention(x, w_q, w_k, w_v, softcap="50")
    with pytest.raises(ValueError, match=r"^MultiHeadAttention: softcap must be a positive number"):
        MultiHeadAttention(8, 8, N, 0.0, 2, softcap="50")


# -- ALiBi ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "expected"),
    [
        (1, [2**-8]),
        (2, [2**-4, 2**-8]),
        (3, [2**-4, 2**-8, 2**-2]),  # two of the sequence for 2, one of the one for 4
        (8, [2.0**-i for i in range(1, 9)]),
        (12, [2.0**-i for i in range(1, 9)] + [2 ** (-i / 2) for i in (1, 3, 5, 7)]),
    ],
)
def test_the_default_slopes_are_press_et_al_s(heads, expected):
    torch.testing.assert_close(F.alibi_slopes(heads), torch.tensor(expected), rtol=0, atol=0)


def test_alibi_scores_subtract_the_slope_times_the_distance():
    omega = torch.zeros(3, 4, dtype=torch.float64)
    got = F.alibi_scores(omega, 0.5, offset=1)  # queries at positions 1, 2, 3
    expected = [[-0.5 * (m + 1 - p) for p in range(4)] for m in range(3)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("given", [False, True])
def test_multi_head_attention_with_alibi(explicit, given):
    x, (w_q, w_k, w_v) = inputs(3)
    slopes = torch.tensor([0.7, 0.2], dtype=torch.float64) if given else None
    alibi = slopes if given else True
    got = F.multi_head_attention(
        x,
        w_q,
        w_k,
        w_v,
        torch.eye(C, dtype=torch.float64),
        heads=2,
        causal=True,
        alibi=alibi,
        return_weights=explicit,
    )
    got = got[0] if explicit else got
    used = slopes.tolist() if given else F.alibi_slopes(2).tolist()
    allowed = band_matrix(N, N, causal=True)
    for b in range(2):
        q, k, v = (x[b].numpy() @ w.numpy() for w in (w_q, w_k, w_v))
        for head, slope in enumerate(used):
            columns = slice(2 * head, 2 * head + 2)
            expected = modified_attention(
                q[:, columns],
                k[:, columns],
                v[:, columns],
                scale=2**-0.5,
                allowed=allowed,
                slope=slope,
            )[0]
            np.testing.assert_allclose(got[b, :, columns].numpy(), expected, rtol=0, atol=1e-12)


def test_bloom_s_bias_gives_the_same_weights():
    # BLOOM adds μ p (its build_alibi_tensor) where Press et al. subtract μ (m − p): a constant
    # μ m per row, which the softmax does not see
    x, (w_q, w_k, w_v) = inputs(4, batch=())
    slope = 0.3
    _, ours = F.self_attention(
        x,
        w_q,
        w_k,
        w_v,
        causal=True,
        return_weights=True,
        alibi=torch.tensor([slope], dtype=torch.float64),
    )
    scores = (x @ w_q) @ (x @ w_k).T / C**0.5 + slope * torch.arange(N, dtype=torch.float64)
    bloom = scores.masked_fill(~F.causal_mask(N), float("-inf")).softmax(dim=-1)
    torch.testing.assert_close(ours, bloom, rtol=0, atol=1e-14)


def test_zero_slopes_are_plain_attention_and_steep_ones_attend_to_the_last_token():
    x, (w_q, w_k, w_v) = inputs(5, batch=())
    plain = F.self_attention(x, w_q, w_k, w_v, causal=True)
    zero = F.self_attention(x, w_q, w_k, w_v, causal=True, alibi=torch.zeros(1, dtype=x.dtype))
    torch.testing.assert_close(zero, plain, rtol=0, atol=1e-13)  # the fused kernel's rounding
    steep = F.self_attention(
        x, w_q, w_k, w_v, causal=True, alibi=torch.full((1,), 1e3, dtype=x.dtype)
    )
    torch.testing.assert_close(steep, x @ w_v, rtol=0, atol=1e-12)  # each token its own value


def test_learned_slopes_get_the_gradient_of_the_explicit_path():
    x, (w_q, w_k, w_v) = inputs(6)
    slopes = torch.tensor([0.4, 0.05], dtype=torch.float64, requires_grad=True)
    w_o = torch.eye(C, dtype=torch.float64)
    grads = []
    for explicit in (False, True):
        out = F.multi_head_attention(
            x, w_q, w_k, w_v, w_o, heads=2, causal=True, alibi=slopes, return_weights=explicit
        )
        out = out[0] if explicit else out
        grads.append(torch.autograd.grad(out.square().sum(), slopes)[0])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    assert grads[0].abs().min() > 1e-6  # a gradient that could be wrong


def test_the_cache_with_alibi_gives_the_uncached_rows():
    torch.manual_seed(2)
    module = MultiHeadAttention(8, 8, 10, 0.0, 4, alibi=True).double().eval()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    torch.testing.assert_close(cached(module, x, (4, 6)), module(x), rtol=0, atol=1e-12)


def test_the_modules_take_alibi():
    torch.manual_seed(3)
    x = torch.randn(2, N, 8, dtype=torch.float64)
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    for alibi in (True, slopes):
        module = MultiHeadAttention(8, 8, N, 0.0, 2, alibi=alibi).double().eval()
        expected = F.multi_head_attention(
            x,
            module.W_query.weight.mT,
            module.W_key.weight.mT,
            module.W_value.weight.mT,
            module.out_proj.weight.mT,
            heads=2,
            b_o=module.out_proj.bias,
            causal=True,
            alibi=alibi,
        )
        torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)
        assert "alibi_slopes" not in module.state_dict()  # the constructor makes them
        gqa = GroupedQueryAttention(
            8, num_heads=2, num_kv_groups=1, head_dim=4, alibi=alibi
        ).double()
        grouped = grouped_query_attention(
            x,
            gqa.W_query.weight.mT,
            gqa.W_key.weight.mT,
            gqa.W_value.weight.mT,
            gqa.out_proj.weight.mT,
            heads=2,
            groups=1,
            causal=True,
            alibi=alibi,
        )
        torch.testing.assert_close(gqa(x), grouped, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda x, w: F.self_attention(x, w, w, w, alibi=True),
            ValueError,
            r"^self_attention: alibi needs causal=True \(the bias −μ_ℓ \(m − p\) of ALiBi is for the keys p ≤ m\)$",
        ),
        (
            lambda x, w: F.multi_head_attention(
                x, w, w, w, w, heads=2, causal=True, alibi=torch.ones(3, dtype=x.dtype)
            ),
            ShapeError,
            r"^multi_head_attention: alibi has shape \(3,\) but there are heads=2; give one slope per head$",
        ),
        (
            lambda x, w: MultiHeadAttention(4, 4, N, 0.0, 2, alibi=1),
            TypeError,
            r"^MultiHeadAttention: alibi must be a bool or a tensor of slopes, got alibi=1$",
        ),
    ],
)
def test_bad_alibi_is_named(call, error, message):
    x, w = torch.randn(2, N, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    with pytest.raises(error, match=message):
        call(x, w)


# -- attention sinks --------------------------------------------------------------------------------


def test_weights_with_a_sink_is_the_formula():
    omega = torch.tensor([[1.0, 2.0, -1.0]], dtype=torch.float64)
    got = F.weights(omega, 1, sink=0.5)
    expected = np.exp(omega.numpy()) / (np.exp(0.5) + np.exp(omega.numpy()).sum())
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-15)


@pytest.mark.parametrize("explicit", [False, True])
def test_multi_head_attention_with_sinks(explicit):
    x, (w_q, w_k, w_v) = inputs(7)
    sinks = torch.tensor([0.5, -1.0], dtype=torch.float64)
    got = F.multi_head_attention(
        x,
        w_q,
        w_k,
        w_v,
        torch.eye(C, dtype=torch.float64),
        heads=2,
        causal=True,
        window=3,
        sinks=sinks,
        return_weights=explicit,
    )
    got = got[0] if explicit else got
    allowed = band_matrix(N, N, causal=True, window=3)
    for b in range(2):
        q, k, v = (x[b].numpy() @ w.numpy() for w in (w_q, w_k, w_v))
        for head, sink in enumerate(sinks.tolist()):
            columns = slice(2 * head, 2 * head + 2)
            expected = modified_attention(
                q[:, columns],
                k[:, columns],
                v[:, columns],
                scale=2**-0.5,
                allowed=allowed,
                sink=sink,
            )[0]
            np.testing.assert_allclose(got[b, :, columns].numpy(), expected, rtol=0, atol=1e-12)


def test_a_sink_takes_the_rest_of_each_row_and_minus_infinity_is_no_sink():
    x, (w_q, w_k, w_v) = inputs(8, batch=(), scale=0.3)  # scores of about 1: no row saturated
    sink = torch.tensor([1.5], dtype=torch.float64)
    _, a = F.self_attention(x, w_q, w_k, w_v, causal=True, sinks=sink, return_weights=True)
    scores = (x @ w_q) @ (x @ w_k).T / C**0.5
    denominators = torch.exp(scores).masked_fill(~F.causal_mask(N), 0).sum(-1) + torch.exp(sink)
    torch.testing.assert_close(a.sum(-1), 1 - torch.exp(sink) / denominators, rtol=0, atol=1e-14)
    assert (a.sum(-1) < 1).all()
    plain = F.self_attention(x, w_q, w_k, w_v, causal=True)
    gone = F.self_attention(x, w_q, w_k, w_v, causal=True, sinks=torch.full_like(sink, -1e4))
    torch.testing.assert_close(gone, plain, rtol=0, atol=1e-13)


def test_the_modules_sinks_are_gpt_oss_s_parameter():
    torch.manual_seed(9)
    plain = MultiHeadAttention(8, 8, N, 0.0, 4)
    torch.manual_seed(9)
    module = MultiHeadAttention(8, 8, N, 0.0, 4, sinks=True)
    assert module.sinks.shape == (4,) and module.sinks.requires_grad
    assert 0 < float(module.sinks.detach().abs().max()) < 0.1  # N(0, 0.02²), GPT-OSS's
    for name, weight in plain.state_dict().items():  # created last: the book's seeds hold
        torch.testing.assert_close(module.state_dict()[name], weight, rtol=0, atol=0)
    x = torch.randn(2, N, 8)
    expected = F.multi_head_attention(
        x,
        module.W_query.weight.mT,
        module.W_key.weight.mT,
        module.W_value.weight.mT,
        module.out_proj.weight.mT,
        heads=4,
        b_o=module.out_proj.bias,
        causal=True,
        sinks=module.sinks,
    )
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-6)
    module(x).sum().backward()
    assert module.sinks.grad is not None and module.sinks.grad.abs().max() > 0


def test_the_cache_with_sinks_and_a_window_gives_the_uncached_rows():
    torch.manual_seed(4)
    module = MultiHeadAttentionWithSWA(8, 8, 0.0, 2, sliding_window_size=3, sinks=True)
    module = module.double().eval()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    torch.testing.assert_close(cached(module, x, (3, 4)), module(x), rtol=0, atol=1e-12)


def test_bad_sinks_are_named():
    x, w = torch.randn(2, N, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    with pytest.raises(
        ShapeError,
        match=r"^multi_head_attention: sinks has shape \(3,\) but "
        r"there are heads=2; give one sink per head$",
    ):
        F.multi_head_attention(x, w, w, w, w, heads=2, sinks=torch.zeros(3, dtype=x.dtype))
    with pytest.raises(
        TypeError,
        match=r"^MultiHeadAttention: sinks must be a tensor of one sink "
        r"per head, got str$",
    ):
        MultiHeadAttention(4, 4, N, 0.0, 2, sinks="yes")


# -- the output gate ----------------------------------------------------------------------------


def test_output_gate_is_the_formula():
    c = torch.tensor([[1.0, -2.0, 3.0]], dtype=torch.float64)
    gamma = torch.tensor([[0.0, 1.0, -2.0]], dtype=torch.float64)
    expected = c.numpy() / (1 + np.exp(-gamma.numpy()))
    np.testing.assert_allclose(F.output_gate(c, gamma).numpy(), expected, rtol=1e-15)


@pytest.mark.parametrize("explicit", [False, True])
def test_multi_head_attention_with_a_gate(explicit):
    x, (w_q, w_k, w_v) = inputs(11)
    g = torch.Generator().manual_seed(12)
    w_g, b_g = (
        torch.randn(D, C, generator=g, dtype=x.dtype),
        torch.randn(C, generator=g, dtype=x.dtype),
    )
    w_o = torch.randn(C, 3, generator=g, dtype=x.dtype)
    got = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=2, causal=True, w_g=w_g, b_g=b_g, return_weights=explicit
    )
    got = got[0] if explicit else got
    allowed = band_matrix(N, N, causal=True)
    for b in range(2):
        heads = per_head_reference(
            x[b].numpy(), w_q.numpy(), w_k.numpy(), w_v.numpy(), heads=2, allowed=allowed
        )
        gate = 1 / (1 + np.exp(-(x[b].numpy() @ w_g.numpy() + b_g.numpy())))
        np.testing.assert_allclose(got[b].numpy(), (heads * gate) @ w_o.numpy(), rtol=0, atol=1e-12)


def test_a_gate_wide_open_is_no_gate_and_a_closed_one_silences():
    x, (w_q, w_k, w_v) = inputs(13)
    w_o = torch.eye(C, dtype=x.dtype)
    plain = F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=2, causal=True)
    zeros = torch.zeros(D, C, dtype=x.dtype)
    for logit, factor in ((1e3, 1.0), (-1e3, 0.0), (0.0, 0.5)):
        b_g = torch.full((C,), logit, dtype=x.dtype)
        gated = F.multi_head_attention(
            x, w_q, w_k, w_v, w_o, heads=2, causal=True, w_g=zeros, b_g=b_g
        )
        torch.testing.assert_close(gated, plain * factor, rtol=0, atol=1e-14)


@pytest.mark.parametrize("cls", ["mha", "swa", "gqa"])
def test_the_modules_gate_is_qwen_3_5_s_layout(cls):
    """W_query's output (…, 2h·c_h): each head's c_h queries, then its c_h gate logits."""
    torch.manual_seed(14)
    heads, width = 2, 3
    if cls == "mha":
        module = MultiHeadAttention(5, heads * width, N, 0.0, heads, qkv_bias=True, gate=True)
    elif cls == "swa":
        module = MultiHeadAttentionWithSWA(
            5, heads * width, 0.0, heads, sliding_window_size=2, gate=True
        )
    else:
        module = GroupedQueryAttention(
            5, num_heads=heads, num_kv_groups=1, head_dim=width, gate=True
        )
    module = module.double().eval()
    assert module.gate and module.W_query.weight.shape == (2 * heads * width, 5)
    blocks = module.W_query.weight.detach().view(heads, 2, width, 5)  # (h, query|gate, c_h, d)
    w_q, w_g = (blocks[:, part].reshape(heads * width, 5).mT for part in (0, 1))
    bias = module.W_query.bias
    b_q, b_g = (None, None) if bias is None else bias.detach().view(heads, 2, width).unbind(1)
    x = torch.randn(2, N, 5, dtype=torch.float64)
    w_k, w_v = module.W_key.weight.mT, module.W_value.weight.mT
    if cls == "gqa":
        expected = grouped_query_attention(
            x, w_q, w_k, w_v, module.out_proj.weight.mT, heads=heads, groups=1, causal=True, w_g=w_g
        )
    else:
        expected = F.multi_head_attention(
            x,
            w_q,
            w_k,
            w_v,
            module.out_proj.weight.mT,
            heads=heads,
            b_q=None if b_q is None else b_q.flatten(),
            b_k=module.W_key.bias,
            b_v=module.W_value.bias,
            b_o=module.out_proj.bias,
            causal=True,
            window=2 if cls == "swa" else None,
            w_g=w_g,
            b_g=None if b_g is None else b_g.flatten(),
        )
    blocked = {"blocked": ~F.causal_mask(N)} if cls == "gqa" else {}  # the books' mask
    torch.testing.assert_close(module(x, **blocked), expected, rtol=0, atol=1e-13)
    if cls != "gqa":  # the cache gives the same rows
        torch.testing.assert_close(cached(module, x, (2,)), expected, rtol=0, atol=1e-13)


def test_a_gate_s_bias_needs_its_weight():
    x, w = torch.randn(2, N, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    with pytest.raises(
        ValueError,
        match=r"^multi_head_attention: b_g is the bias of the output "
        r"gate; give w_g with it$",
    ):
        F.multi_head_attention(x, w, w, w, w, heads=2, b_g=torch.zeros(4, dtype=x.dtype))
    with pytest.raises(ShapeError, match=r"w_g"):
        F.multi_head_attention(x, w, w, w, w, heads=2, w_g=torch.zeros(4, 2, dtype=x.dtype))
    with pytest.raises(
        TypeError, match=r"^MultiHeadAttention: gate must be a bool, got gate=.yes.$"
    ):
        MultiHeadAttention(4, 4, N, 0.0, 2, gate="yes")


# -- the query scale of Gemma 2 and 3 ------------------------------------------------------------


@pytest.mark.parametrize("explicit", [False, True])
def test_query_pre_attn_scalar_replaces_the_head_width(explicit):
    x, (w_q, w_k, w_v) = inputs(15)
    w_o = torch.eye(C, dtype=x.dtype)
    got = F.multi_head_attention(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        heads=2,
        causal=True,
        query_pre_attn_scalar=7.0,
        return_weights=explicit,
    )
    got = got[0] if explicit else got
    allowed = band_matrix(N, N, causal=True)
    for b in range(2):
        q, k, v = (x[b].numpy() @ w.numpy() for w in (w_q, w_k, w_v))
        for head in range(2):
            columns = slice(2 * head, 2 * head + 2)
            expected = modified_attention(
                q[:, columns], k[:, columns], v[:, columns], scale=7.0**-0.5, allowed=allowed
            )[0]
            np.testing.assert_allclose(got[b, :, columns].numpy(), expected, rtol=0, atol=1e-12)
    same = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=2, causal=True, query_pre_attn_scalar=2.0
    )  # c_h = 2: the book's scale
    torch.testing.assert_close(
        same,
        F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=2, causal=True),
        rtol=0,
        atol=1e-15,
    )


def test_the_modules_take_query_pre_attn_scalar():
    torch.manual_seed(16)
    module = GroupedQueryAttention(
        8, num_heads=2, num_kv_groups=1, head_dim=4, query_pre_attn_scalar=3.0
    ).double()
    assert module.query_pre_attn_scalar == 3.0
    x = torch.randn(2, N, 8, dtype=torch.float64)
    expected = grouped_query_attention(
        x,
        module.W_query.weight.mT,
        module.W_key.weight.mT,
        module.W_value.weight.mT,
        module.out_proj.weight.mT,
        heads=2,
        groups=1,
        causal=True,
        query_pre_attn_scalar=3.0,
    )
    torch.testing.assert_close(module(x, ~F.causal_mask(N)), expected, rtol=0, atol=1e-13)
    with pytest.raises(
        ValueError,
        match=r"^MultiHeadAttention: query_pre_attn_scalar must be a "
        r"positive number or None, got query_pre_attn_scalar=0$",
    ):
        MultiHeadAttention(4, 4, N, 0.0, 2, query_pre_attn_scalar=0)
