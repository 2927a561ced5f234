"""Score modifications at the ends of a float's range, on every path that applies them (the
fast path, the explicit one, `attention.flash`, the step function): values and gradients
against a float64 reference whose modified scores are computed with 50 digits (mpmath), so
that the reference itself does not round where the code under test must not."""

import math

import mpmath
import pytest
import torch

from attention import flash
from attention import functional as F
from attention import mods as M

mpmath.mp.dps = 50

#: caps beyond float32's largest number, near float64's, and below either's smallest
CAPS = [1e39, 1e300, 1.7e308, 5e-324, 1e-45, 1e-30, 3.0]
DTYPES = [torch.float32, torch.float64]


def _capped_reference(scaled: torch.Tensor, cap: float) -> torch.Tensor:
    """κ tanh(ω̃/κ) in 50 digits, with its derivative 1 − tanh²(ω̃/κ): a float64 tensor whose
    value and gradient are the exact ones rounded once."""
    values, factors = [], []
    for w in scaled.detach().double().flatten().tolist():
        t = mpmath.tanh(mpmath.mpf(w) / mpmath.mpf(cap))
        values.append(float(mpmath.mpf(cap) * t))
        factors.append(float(1 - t**2))
    value = torch.tensor(values, dtype=torch.float64).view(scaled.shape)
    factor = torch.tensor(factors, dtype=torch.float64).view(scaled.shape)
    return value + (scaled - scaled.detach()) * factor


def _reference(q, k, v, cap):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    scaled = q @ k.mT / math.sqrt(q.shape[-1])
    capped = _capped_reference(scaled, cap)
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    a = capped.masked_fill(~causal, -math.inf).softmax(-1)
    return a @ v, (q, k, v)


def _qkv(dtype):
    g = torch.Generator().manual_seed(3)
    return [torch.randn(2, 6, 4, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


def _fast(q, k, v, cap, explicit=False):
    """multi_head_attention with X = [q | k | v] and projections that pick each: the fast path
    (or, with return_weights, the explicit one) on exactly these q, k, v, two heads."""
    x = torch.cat([q, k, v], dim=-1).transpose(0, 1).reshape(6, 24)[None]  # (1, 6, 2·12)
    eye = torch.eye(24, dtype=q.dtype)
    w_q = eye[:, [*range(0, 4), *range(12, 16)]]
    w_k = eye[:, [*range(4, 8), *range(16, 20)]]
    w_v = eye[:, [*range(8, 12), *range(20, 24)]]
    w_o = torch.eye(8, dtype=q.dtype)
    out = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=2, causal=True, softcap=cap, return_weights=explicit
    )
    out = out[0] if explicit else out
    return out[0].view(6, 2, 4).transpose(0, 1)  # (2 heads, 6, 4)


def _autograd(run):
    def both(q, k, v, cap, dc):
        out = run(q, k, v, cap)
        return out, torch.autograd.grad(out, (q, k, v), dc)

    return both


def _flash(q, k, v, cap, dc):
    """FlashAttention's forward pass, and its own backward pass (from C and the log-sum-exp)."""
    options = dict(block_rows=2, block_keys=4, causal=True, softcap=cap)
    out = flash.flash_attention(q, k, v, **options)
    found = flash.flash_gradients(q.detach(), k.detach(), v.detach(), dc, **options)
    return out, (found.dQ, found.dK, found.dV)


PATHS = {
    "fast path": _autograd(_fast),
    "explicit path": _autograd(lambda q, k, v, cap: _fast(q, k, v, cap, explicit=True)),
    "flash": _flash,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("path", sorted(PATHS))
def test_any_valid_cap_computes_its_formula_with_its_gradients(path, cap, dtype):
    q, k, v = (t.requires_grad_() for t in _qkv(dtype))
    upstream = torch.linspace(-1, 1, q.numel(), dtype=torch.float64).view(q.shape)
    out, got = PATHS[path](q, k, v, cap, upstream.to(dtype))
    expected, leaves = _reference(q, k, v, cap)
    tolerance = 2e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out.double(), expected, rtol=tolerance, atol=tolerance)
    wanted = torch.autograd.grad(expected, leaves, upstream)
    for name, mine, theirs in zip("qkv", got, wanted, strict=True):
        assert mine.isfinite().all(), f"d{name} not finite"
        scale = max(1.0, theirs.abs().max().item())
        torch.testing.assert_close(mine.double(), theirs, rtol=tolerance, atol=tolerance * scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cap", CAPS)
def test_the_step_function_caps_like_its_formula(cap, dtype):
    scaled = torch.tensor([[-6.0, -1e-3, 0.0], [2.5, 1e-20, 6.0]], dtype=dtype)
    got = F.softcapped_scores(scaled.clone(), cap)
    expected = _capped_reference(scaled.double(), cap).to(dtype)  # the exact value, rounded
    torch.testing.assert_close(got, expected, rtol=4 * torch.finfo(dtype).eps, atol=0.0)


# -- a NaN sink: NaN in, NaN out (a Python number refused by name), never unnormalised rows ---


def _sink_paths():
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(4))
    w, w_o = torch.eye(8), torch.eye(8)
    sinks = torch.tensor([float("nan"), 0.5])

    def fast():
        return F.multi_head_attention(x, w, w, w, w_o, heads=2, causal=True, sinks=sinks)

    def explicit():  # the weights of each head
        _, a = F.multi_head_attention(
            x, w, w, w, w_o, heads=2, causal=True, sinks=sinks, return_weights=True
        )
        return a

    def module():
        from attention import MultiHeadAttention

        layer = MultiHeadAttention(8, 8, 5, 0.0, 2, sinks=True)
        with torch.no_grad():
            layer.sinks.copy_(sinks)
        return layer(x)

    def step():
        return F.weights(torch.randn(4, 4), 4, causal=True, sink=torch.tensor(float("nan")))

    return {"fast path": fast, "explicit path": explicit, "module": module, "weights": step}


@pytest.mark.parametrize("path", sorted(_sink_paths()))
def test_a_nan_sink_gives_nan_where_it_is_read(path):
    out = _sink_paths()[path]()
    if path == "explicit path":  # head 0 reads the NaN sink, head 1 a finite one
        assert out[:, 0].isnan().all() and out[:, 1].isfinite().all()
        assert (out[:, 1].sum(dim=-1) < 1).all()  # a sink takes its share of each row
    else:  # every output reads head 0 (W_o mixes the heads: NaN · 0 is NaN), every row a sink
        assert out.isnan().all()


def test_a_nan_sink_given_as_a_number_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^weights: sink must be a number .*got sink=nan"):
        F.weights(torch.randn(3, 3), 3, sink=float("nan"))
    with pytest.raises(ValueError, match=r"flash_attention: the sink's logit must be a finite"):
        nan = (M.Sinks(torch.tensor([math.nan])),)
        flash.flash_attention(*_qkv(torch.float32), block_rows=2, block_keys=2, mods=nan)


# -- attention.flash in every floating dtype, with every modification ------------------------

#: the modifications flash takes, and what each does to the float64 reference's scores
FLASH_MODS = {
    "none": {},
    "causal": {"causal": True},
    "window": {"causal": True, "window": 3},
    "softcap": {"softcap": 3.0},
    "alibi": {"causal": True, "slope": 0.5},
    "sink": {"sink": 0.3},
}
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _as_flash(options, dtype):
    """The options as flash takes them: ALiBi's slope and the sink's logit as objects of one
    number in `dtype`, the rest by keyword."""
    options = dict(options)
    number = lambda key: torch.tensor([options.pop(key)], dtype=dtype)  # noqa: E731
    mods = (M.ALiBi(number("slope")),) if "slope" in options else ()
    mods += (M.Sinks(number("sink")),) if "sink" in options else ()
    return options | {"mods": mods}


def _flash_reference(q, k, v, mods):
    """C in float64 from the (rounded) q, k, v, every modification written out in plain torch."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = q @ k.mT / math.sqrt(q.shape[-1])
    if "softcap" in mods:
        s = mods["softcap"] * torch.tanh(s / mods["softcap"])
    m, p = torch.arange(s.shape[-2])[:, None], torch.arange(s.shape[-1])[None]
    if "slope" in mods:
        s = s - mods["slope"] * (m - p)
    if mods.get("causal"):
        s = s.masked_fill(p > m, -math.inf)
    if "window" in mods:
        s = s.masked_fill(m - p >= mods["window"], -math.inf)
    if "sink" in mods:
        column = torch.full((*s.shape[:-1], 1), mods["sink"], dtype=s.dtype)
        a = torch.cat([s, column], dim=-1).softmax(-1)[..., :-1]
    else:
        a = s.softmax(-1)
    return a @ v, (q, k, v)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mods", sorted(FLASH_MODS))
def test_flash_computes_in_the_dtype_it_is_given(mods, dtype):
    """Float16, bfloat16, float32 and float64 in, the same dtype out, within the rounding of a
    sum of n + c terms in that dtype (γ = (n + c)·eps of the largest value; float64 in, float64
    precision out: nothing inside computes in float32)."""
    g = torch.Generator().manual_seed(5)
    q, k, v, dc = (torch.randn(2, 7, 4, generator=g, dtype=torch.float64).to(dtype) for _ in "qkvd")
    options = dict(block_rows=2, block_keys=3, **_as_flash(FLASH_MODS[mods], dtype))
    out = flash.flash_attention(q, k, v, **options)
    found = flash.flash_gradients(q, k, v, dc, **options)
    expected, leaves = _flash_reference(q, k, v, FLASH_MODS[mods])
    wanted = torch.autograd.grad(expected, leaves, dc.double())
    gamma = (7 + 4) * torch.finfo(dtype).eps
    pairs = [(out, expected), *zip((found.dQ, found.dK, found.dV), wanted, strict=True)]
    for got, reference in pairs:
        assert got.dtype == dtype
        bound = 4 * gamma * max(1.0, reference.abs().max().item())
        assert (got.double() - reference).abs().max().item() <= bound


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_alibi_s_distances_are_whole_numbers_at_any_position(dtype):
    """m − p rounded once into the dtype: bfloat16 holds whole numbers exactly only up to 256,
    so positions taken in it first would meet (1000 … 1003 all 1000)."""
    from attention._scores import distance

    like = torch.zeros((), dtype=dtype)
    got = distance(1000, 1004, 990, 1004, like)
    exact = torch.arange(1000, 1004)[:, None] - torch.arange(990, 1004)[None, :]
    assert torch.equal(got, exact.to(dtype))
    assert got[3, 13] == 0 and got[3, 12] == 1  # the nearest keys apart, in every dtype
