"""grouped_query_attention and its steps: against the formulas written out, against multi-head
attention at g = h and g = 1, the fast path's gradients, and the errors."""

import jaxtyping
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reference_variants import gqa_reference, rms_reference
from torch.utils._python_dispatch import TorchDispatchMode

from attention import ShapeError, _fused
from attention import functional as F
from attention.grouped import expand_groups, grouped_query_attention, rms_norm

N, D, C_H, D_OUT = 5, 7, 4, 3  # every size distinct


def make(heads, groups, batch=(), seed=0, dtype=torch.float64, whole=False):
    """Inputs; `whole`: QK-norm gains of the whole rows of Q and K (OLMo's), not of a head."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, N, D, generator=g, dtype=dtype)
    w_q = torch.randn(D, heads * C_H, generator=g, dtype=dtype) / D**0.5
    w_k, w_v = (torch.randn(D, groups * C_H, generator=g, dtype=dtype) / D**0.5 for _ in "kv")
    w_o = torch.randn(heads * C_H, D_OUT, generator=g, dtype=dtype)
    widths = (heads * C_H, groups * C_H) if whole else (C_H, C_H)
    gains = (torch.rand(width, generator=g, dtype=dtype) + 0.5 for width in widths)
    mask = torch.rand(*batch, N, N, generator=g) > 0.4
    return x, w_q, w_k, w_v, w_o, *gains, mask


# (heads, groups, batch, options): one composition per row
CASES = [
    (6, 2, (), {}),  # grouped-query attention, bidirectional
    (6, 6, (), {"causal": True}),  # g = h: multi-head attention
    (6, 1, (), {"causal": True}),  # g = 1: multi-query attention
    (6, 3, (2,), {"causal": True, "theta_base": 100.0}),  # Llama 3: causal, RoPE
    (6, 2, (2,), {"causal": True, "theta_base": 100.0, "qk_norm": True}),  # Qwen 3
    (4, 2, (2,), {"qk_norm": True}),  # QK-norm alone
    (6, 2, (2,), {"causal": True, "theta_base": 100.0, "qk_norm": "whole"}),  # OLMo 3
    (4, 1, (), {"qk_norm": "whole"}),  # QK-norm over all heads, one key/value head
    (6, 2, (3,), {"mask": True}),  # a mask of its own per sequence
    (4, 2, (2,), {"mask": True, "causal": True, "theta_base": 10.0}),  # all of them
    (1, 1, (), {"no_w_o": True}),  # plain single-head attention
    (4, 2, (2, 3), {"no_w_o": True, "causal": True}),  # two batch dimensions, no W_o
]


def call_both(heads, groups, batch, options, dtype=torch.float64):
    whole = options.get("qk_norm") == "whole"
    x, w_q, w_k, w_v, w_o, q_gain, k_gain, mask = make(
        heads, groups, batch, dtype=dtype, whole=whole
    )
    kwargs = {
        "causal": options.get("causal", False),
        "theta_base": options.get("theta_base"),
        "q_gain": q_gain if options.get("qk_norm") else None,
        "k_gain": k_gain if options.get("qk_norm") else None,
    }
    mask = mask if options.get("mask") else None
    w_o = None if options.get("no_w_o") else w_o
    got = grouped_query_attention(
        x, w_q, w_k, w_v, w_o, heads=heads, groups=groups, mask=mask, **kwargs
    )
    expected = np.zeros(got.shape)
    for index in np.ndindex(*batch):
        expected[index] = gqa_reference(
            x[index],
            w_q,
            w_k,
            w_v,
            w_o,
            heads=heads,
            groups=groups,
            mask=None if mask is None else mask[index],
            **kwargs,
        )
    return got, expected


@pytest.mark.parametrize(("heads", "groups", "batch", "options"), CASES)
def test_matches_the_formulas_written_out(heads, groups, batch, options):
    got, expected = call_both(heads, groups, batch, options)
    d_out = heads * C_H if options.get("no_w_o") else D_OUT
    assert got.shape == (*batch, N, d_out)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_g_equal_h_is_multi_head_attention(causal):
    x, w_q, w_k, w_v, w_o, *_ = make(6, 6, (2,))
    expected = F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=6, causal=causal)
    got = grouped_query_attention(x, w_q, w_k, w_v, w_o, heads=6, causal=causal)  # groups=None
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-13)


def test_g_equal_1_is_multi_query_attention():
    x, w_q, w_k, w_v, w_o, *_ = make(6, 1, (2,))
    # every head reads the one key/value group: multi-head attention with K, V tiled h times
    expected = F.multi_head_attention(x, w_q, w_k.repeat(1, 6), w_v.repeat(1, 6), w_o, heads=6)
    got = grouped_query_attention(x, w_q, w_k, w_v, w_o, heads=6, groups=1)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-13)


def test_each_head_reads_group_floor_of_l_minus_1_times_g_over_h_plus_1():
    heads, groups = 6, 3
    t = torch.arange(groups, dtype=torch.float64).view(groups, 1, 1).expand(groups, N, C_H)
    expanded = expand_groups(t, heads)
    for ell in range(1, heads + 1):  # 1-based, as the formulas write it
        gamma = (ell - 1) * groups // heads + 1
        assert torch.all(expanded[ell - 1] == gamma - 1)
    assert torch.equal(expanded, t.repeat_interleave(2, dim=0))  # the book's repeat_interleave


def test_rms_norm_matches_its_formula():
    x = torch.randn(2, N, C_H, dtype=torch.float64)
    gain = torch.rand(C_H, dtype=torch.float64)
    for index in np.ndindex(2):
        np.testing.assert_allclose(
            rms_norm(x, gain)[index].numpy(), rms_reference(x[index], gain), rtol=1e-14
        )


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(
            (
                str(func.overloadpacket),
                [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)],
            )
        )
        return func(*args, **(kwargs or {}))


class Calls(torch.overrides.TorchFunctionMode):
    """The torch functions our code calls, with their tensors' shapes and their keywords."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        self.calls.append((getattr(func, "__name__", str(func)), shapes, dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def _kernel_takes_groups() -> bool:
    """Whether this torch's CPU kernel takes grouped K, V as they are (torch 2.13's does; 2.7's
    runs grouped queries through its math fallback, which expands K and V itself)."""
    q, kv = torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 3, 4)
    with Log() as log:
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
    return any("scaled_dot_product" in name for name, _ in log.calls)


def test_fast_path_never_repeats_keys_and_values():
    x, w_q, w_k, w_v, w_o, *_ = make(6, 2, (2,), dtype=torch.float32)
    with Calls() as ours, Log() as log:
        grouped_query_attention(x, w_q, w_k, w_v, w_o, heads=6, groups=2, causal=True)
    names = [name for name, *_ in ours.calls]
    assert not any("repeat" in name or name in ("expand", "softmax") for name in names), names
    sdpa = [
        (shapes, kw) for name, shapes, kw in ours.calls if name == "scaled_dot_product_attention"
    ]
    assert len(sdpa) == 1 and sdpa[0][1].get("enable_gqa") is True  # K, V handed over as they are
    assert sdpa[0][0][:3] == [(2, 6, N, C_H), (2, 2, N, C_H), (2, 2, N, C_H)]
    if _kernel_takes_groups():  # and nothing below repeats them either, down to torch's kernel
        names = [name for name, _ in log.calls]
        assert not any("repeat" in name or name == "aten._softmax" for name in names), names
        fused = [shapes for name, shapes in log.calls if "scaled_dot_product" in name]
        assert len(fused) == 1
        assert fused[0][:3] == [(2, 6, N, C_H), (2, 2, N, C_H), (2, 2, N, C_H)]


def reference_torch(x, w_q, w_k, w_v, w_o, q_gain, k_gain, mask, heads, groups, theta_base):
    """The book's way in float64 torch (repeat K and V, explicit softmax), for autograd."""
    from attention.rope import compute_rope_params, rotate

    b, n, _ = x.shape
    q = (x @ w_q).view(b, n, heads, C_H).transpose(1, 2)
    k = (x @ w_k).view(b, n, groups, C_H).transpose(1, 2)
    v = (x @ w_v).view(b, n, groups, C_H).transpose(1, 2)
    q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * q_gain
    k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * k_gain
    cos, sin = compute_rope_params(C_H, theta_base, n, dtype=torch.float64)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    k, v = k.repeat_interleave(heads // groups, 1), v.repeat_interleave(heads // groups, 1)
    allowed = torch.ones(n, n, dtype=torch.bool).tril() & mask[:, None]
    scores = (q @ k.mT / C_H**0.5).masked_fill(~allowed, -torch.inf)
    a = torch.softmax(scores, dim=-1).nan_to_num()
    return (a @ v).transpose(1, 2).reshape(b, n, heads * C_H) @ w_o


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_fast_path_gradients_against_float64(scale, monkeypatch):
    inputs = list(make(6, 2, (2,), dtype=torch.float64))
    inputs[5] = inputs[5] * scale  # q_gain: QK-norm undoes any scale of x, the gain does not
    *tensors, mask = inputs
    exact = [t.clone().requires_grad_() for t in tensors]
    expected = torch.autograd.grad(reference_torch(*exact, mask, 6, 2, 100.0).square().sum(), exact)
    calls = []
    monkeypatch.setattr(_fused, "gradients", lambda *a: calls.append(1) or GRADIENTS(*a))
    fast = [t.float().requires_grad_() for t in tensors]
    x, w_q, w_k, w_v, w_o, q_gain, k_gain = fast
    out = grouped_query_attention(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        heads=6,
        groups=2,
        causal=True,
        theta_base=100.0,
        q_gain=q_gain,
        k_gain=k_gain,
        mask=mask,
    )
    got = torch.autograd.grad(out.square().sum(), fast)
    assert calls  # through our backward, not the kernel's
    explicit = [t.float().requires_grad_() for t in tensors]  # the book's way, in float32
    bound = torch.autograd.grad(
        reference_torch(*explicit, mask, 6, 2, 100.0).square().sum(), explicit
    )
    names = ("x", "w_q", "w_k", "w_v", "w_o", "q_gain", "k_gain")
    for name, g, b, e in zip(names, got, bound, expected, strict=True):
        error = float((g.double() - e).abs().max() / e.abs().max())
        floor = float((b.double() - e).abs().max() / e.abs().max())
        assert error <= 2 * floor + 1e-6, (name, error, floor)


GRADIENTS = _fused.gradients


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"groups": 4},
            ValueError,
            r"grouped_query_attention: heads=6 is not divisible by groups=4; each key/value group serves heads / groups query heads",
        ),
        (
            {"heads": 5, "groups": 1},
            ShapeError,
            r"grouped_query_attention: c=24 \(the width of w_q\) is not divisible by heads=5",
        ),
        (
            {"groups": 3},
            ShapeError,
            r"grouped_query_attention: w_k has c_kv=8 but groups · c_h = 3 · 4 = 12 \(c_h = c / heads = 24 / 6\)",
        ),
        (
            {"w_v": torch.ones(D, 12, dtype=torch.float64)},
            ShapeError,
            r"grouped_query_attention: w_v has c_kv=12 but w_k has c_kv=8",
        ),
        (
            {"q_gain": torch.ones(3, dtype=torch.float64)},
            ShapeError,
            r"grouped_query_attention: q_gain has 3 gains, but QK-norm takes one head's c_h = c / heads = 4 \(per head\) or the whole row's 24 \(over all heads\)",
        ),
        (
            {
                "q_gain": torch.ones(4, dtype=torch.float64),
                "k_gain": torch.ones(5, dtype=torch.float64),
            },
            ShapeError,
            r"grouped_query_attention: k_gain has 5 gains, but QK-norm takes one head's c_h = c / heads = 4 \(per head\) or the whole row's 8 \(over all heads\)",
        ),
        (
            {
                "q_gain": torch.ones(24, dtype=torch.float64),
                "k_gain": torch.ones(4, dtype=torch.float64),
            },
            ShapeError,
            r"grouped_query_attention: q_gain has 24 gains and k_gain 4: one normalises per head \(c_h = 4\), the other over all heads \(c = 24, c_kv = 8\)",
        ),
        (
            {"x": torch.ones(N, 6, dtype=torch.float64)},
            ShapeError,
            r"grouped_query_attention: w_q has d=7 but x has d=6",
        ),
        (
            {"mask": torch.ones(4, 4, dtype=torch.bool)},
            ShapeError,
            r"grouped_query_attention: mask has n=4 but x has n=5",
        ),
        (
            {
                "w_q": torch.ones(D, 18, dtype=torch.float64),
                "w_k": torch.ones(D, 6, dtype=torch.float64),
                "w_v": torch.ones(D, 6, dtype=torch.float64),
                "w_o": None,
                "theta_base": 10.0,
            },
            ShapeError,
            r"grouped_query_attention: c_h=3 is odd; RoPE rotates pairs",
        ),
        (
            {"theta_base": 10.0, "rope_width": 3},
            ShapeError,
            r"grouped_query_attention: rope_width=3 is odd; RoPE rotates pairs",
        ),
        (
            {"theta_base": 10.0, "rope_width": 64},
            ShapeError,
            r"grouped_query_attention: rope_width must be an int from 1 to the width c_h = \d+, got rope_width=64",
        ),
        (
            {"rope_width": 2},
            ValueError,
            r"grouped_query_attention: rope_width=2 without theta_base: no RoPE to change",
        ),
        (
            {"eps": -1.0},
            ValueError,
            r"grouped_query_attention: eps must be non-negative, got eps=-1.0",
        ),
    ],
)
def test_bad_input_names_the_argument_and_both_sizes(change, error, message):
    x, w_q, w_k, w_v, w_o, *_ = make(6, 2)
    arguments = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o, "heads": 6, "groups": 2}
    arguments.update(change)
    with pytest.raises(error, match=message):
        grouped_query_attention(**arguments)


def test_checks_off_gives_the_same_numbers_and_skips_the_checks():
    x, w_q, w_k, w_v, w_o, q_gain, k_gain, _ = make(6, 2, (2,))
    kwargs = {
        "heads": 6,
        "groups": 2,
        "causal": True,
        "theta_base": 10.0,
        "q_gain": q_gain,
        "k_gain": k_gain,
    }
    checked = grouped_query_attention(x, w_q, w_k, w_v, w_o, **kwargs)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        torch.testing.assert_close(
            grouped_query_attention(x, w_q, w_k, w_v, w_o, **kwargs), checked, rtol=0, atol=0
        )
        wrong = torch.ones(4, 4, dtype=torch.bool)  # n = 4 for n = 5 tokens: not our check now
        with pytest.raises(RuntimeError):
            grouped_query_attention(x, w_q, w_k, w_v, w_o, mask=wrong, **kwargs)
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


@given(
    heads_per_group=st.integers(1, 3),
    groups=st.integers(1, 3),
    n=st.integers(1, 6),
    width=st.sampled_from([2, 4]),
    batch=st.sampled_from([(), (2,)]),
    causal=st.booleans(),
)
def test_grouped_is_multi_head_with_each_groups_columns_repeated(
    heads_per_group, groups, n, width, batch, causal
):
    heads = heads_per_group * groups
    g = torch.Generator().manual_seed(heads * 100 + n)
    x = torch.randn(*batch, n, 3, generator=g, dtype=torch.float64)
    w_q = torch.randn(3, heads * width, generator=g, dtype=torch.float64)
    w_k, w_v = (torch.randn(3, groups * width, generator=g, dtype=torch.float64) for _ in "kv")
    w_o = torch.randn(heads * width, 5, generator=g, dtype=torch.float64)

    def per_head(w):  # (d, g·c_h) -> (d, h·c_h): head ℓ gets group ⌊(ℓ−1)·g/h⌋ + 1's columns
        return w.view(3, groups, 1, width).expand(3, groups, heads_per_group, width).reshape(3, -1)

    expected = F.multi_head_attention(
        x, w_q, per_head(w_k), per_head(w_v), w_o, heads=heads, causal=causal
    )
    got = grouped_query_attention(x, w_q, w_k, w_v, w_o, heads=heads, groups=groups, causal=causal)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_bfloat16_x_with_float32_gains_rotates_and_normalises_in_float32():
    x, w_q, w_k, w_v, w_o, q_gain, k_gain, _ = make(6, 2, (2,), dtype=torch.float32)
    kwargs = {"heads": 6, "groups": 2, "causal": True, "theta_base": 100.0}
    low = [t.to(torch.bfloat16) for t in (x, w_q, w_k, w_v, w_o)]
    got = grouped_query_attention(*low, q_gain=q_gain, k_gain=k_gain, **kwargs)  # gains: float32
    assert got.dtype == torch.bfloat16
    expected = grouped_query_attention(
        *(t.float() for t in low), q_gain=q_gain, k_gain=k_gain, **kwargs
    )
    torch.testing.assert_close(got.float(), expected, rtol=0.05, atol=0.05)


def test_interleaved_rope_is_the_rotation_of_neighbouring_pairs_per_head():
    """grouped_query_attention(rope_interleaved=True), which reorders W_q's and W_k's columns,
    against each head's queries and keys rotated pair by neighbouring pair (rope_rotation),
    attention written out; with a partial rotation too."""
    from attention.rope import rope_rotation

    torch.manual_seed(3)
    x = torch.randn(5, 8, dtype=torch.float64)
    w_q, w_k, w_v = (torch.randn(8, 12, dtype=torch.float64) for _ in range(3))
    gain = torch.rand(6, dtype=torch.float64) + 0.5
    for rotated in (None, 4):
        got = grouped_query_attention(
            x,
            w_q,
            w_k,
            w_v,
            heads=2,
            causal=True,
            theta_base=50,
            rope_width=rotated,
            rope_interleaved=True,
            q_gain=gain,
            k_gain=gain,
        )
        heads = []
        for h in range(2):
            cols = slice(6 * h, 6 * h + 6)
            q, k = (rms_norm_reference(x @ w[:, cols], gain) for w in (w_q, w_k))
            q, k = (
                rope_rotation(t, theta_base=50, rotated=rotated, interleaved=True) for t in (q, k)
            )
            scores = (q @ k.T / 6**0.5).masked_fill(
                torch.ones(5, 5, dtype=torch.bool).triu(1), -torch.inf
            )
            heads.append(torch.softmax(scores, dim=-1) @ (x @ w_v[:, cols]))
        torch.testing.assert_close(got, torch.cat(heads, dim=-1), rtol=0, atol=1e-12)
        book = grouped_query_attention(
            x,
            w_q,
            w_k,
            w_v,
            heads=2,
            causal=True,
            theta_base=50,
            rope_width=rotated,
            q_gain=gain,
            k_gain=gain,
        )
        assert (book - got).abs().max() > 1e-3


def rms_norm_reference(t, gain, eps=1e-6):
    return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gain
