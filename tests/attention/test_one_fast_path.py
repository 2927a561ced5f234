"""The one fast path (`attention._fused` through `attention._core.attend`): every option at once
— groups of heads, causal, windows, an offset (new tokens after a cache), s keys, masks,
softcapping, ALiBi, sinks — against an independent NumPy reference (values), against the
explicit path (values and gradients, sinks' included), exact at any score scale, and blockwise.
"""

import threading

import numpy as np
import pytest
import torch
from gradient_bound import grouped_rounding_bound, worst_ratio
from hypothesis import given
from hypothesis import strategies as st
from reference_variants import band_matrix, modified_attention
from test_fused import Record

from attention import _core, _fused, _modify
from attention import mods as M


@st.composite
def cases(draw):
    """Tensors and options of one call: (B, h, n, c_h) queries in g groups over s keys."""
    batch = draw(st.integers(1, 2), label="batch")
    groups = draw(st.integers(1, 2), label="g")
    heads = groups * draw(st.integers(1, 3), label="h/g")
    n, width = draw(st.integers(1, 6), label="n"), draw(st.integers(1, 3), label="c_h")
    causal = draw(st.booleans(), label="causal")
    offset = draw(st.integers(0, 3), label="offset") if causal else 0
    keys = n + offset if causal else draw(st.integers(1, 6), label="s")
    window = draw(st.none() | st.integers(1, 4), label="window") if causal else None
    masking = draw(st.sampled_from(["none", "padding", "full"]), label="mask")
    if offset:
        masking = "none"  # the user's masks come with self- and cross-attention only
    softcap = draw(st.none() | st.floats(0.5, 20.0), label="softcap")
    alibi = causal and draw(st.booleans(), label="alibi")
    sinks = draw(st.booleans(), label="sinks")
    scale = 10 ** draw(st.floats(0, 3), label="log10 scale")
    seed = draw(st.integers(0, 2**16), label="seed")
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n, width, generator=g, dtype=torch.float64) * scale
    k = torch.randn(batch, groups, keys, width, generator=g, dtype=torch.float64)
    v = torch.randn(batch, groups, keys, width, generator=g, dtype=torch.float64)
    allowed = None
    if masking == "padding":
        allowed = (torch.rand(batch, keys, generator=g) > 0.3).unsqueeze(-2)  # (B, 1, s)
    elif masking == "full":
        allowed = torch.rand(batch, n, keys, generator=g) > 0.3
    options = {
        "scale": width**-0.5,
        "causal": causal,
        "window": window,
        "offset": offset,
        "allowed": allowed,
        "softcap": softcap,
        "slopes": torch.rand(heads, generator=g, dtype=torch.float64) if alibi else None,
        "sinks": torch.randn(heads, generator=g, dtype=torch.float64) * 2 if sinks else None,
    }
    upstream = torch.randn(batch, heads, n, width, generator=g, dtype=torch.float64)
    return (q, k, v), options, upstream


def attend(tensors, options, *, explicit, dtype=torch.float64, grad=None):
    """C (and with `grad`, the gradients of q, k, v, the sinks and ALiBi's slopes) through the
    fast or the explicit path, in `dtype`."""
    leaves = [t.to(dtype).requires_grad_(grad is not None) for t in tensors]
    learned = {
        name: None
        if options[name] is None
        else options[name].to(dtype).requires_grad_(grad is not None)
        for name in ("sinks", "slopes")
    }
    out = _core.attend(
        *leaves,
        heads=True,
        return_weights=explicit,
        scale=options["scale"],
        allowed=options["allowed"],
        mods=mods_of({**options, **learned}),
    )
    out = out[0] if explicit else out
    if grad is None:
        return out
    inputs = leaves + [t for t in learned.values() if t is not None]  # ALiBi's slopes learned
    return torch.autograd.grad(out, inputs, grad.to(dtype))


def mods_of(options):
    """The modifications (`attention.mods`) of the options of `cases`."""
    return M.modifications(
        causal=options["causal"],
        offset=options["offset"],
        window=options["window"],
        softcap=options["softcap"],
        alibi=False if options["slopes"] is None else options["slopes"],
        sinks=options["sinks"],
    )


def reference(tensors, options):
    """The NumPy reference, head by head: head ℓ reads group ℓ // (h/g)."""
    q, k, v = (t.numpy() for t in tensors)
    batch, heads, n, _ = q.shape
    groups, keys = k.shape[1], k.shape[2]
    band = band_matrix(
        n, keys, causal=options["causal"], window=options["window"], offset=options["offset"]
    )
    out = np.zeros(q.shape)
    for b in range(batch):
        allowed = band.copy()
        if options["allowed"] is not None:
            allowed &= np.broadcast_to(options["allowed"][b].numpy(), (n, keys))
        for head in range(heads):
            group = head // (heads // groups)
            slopes, sinks = options["slopes"], options["sinks"]
            out[b, head] = modified_attention(
                q[b, head],
                k[b, group],
                v[b, group],
                scale=options["scale"],
                allowed=allowed,
                softcap=options["softcap"],
                offset=options["offset"],
                slope=None if slopes is None else float(slopes[head]),
                sink=None if sinks is None else float(sinks[head]),
            )[0]
    return out


@given(cases())
def test_both_paths_compute_the_formulas_written_out(case):
    tensors, options, _ = case
    expected = reference(tensors, options)
    largest = max(1.0, float(np.abs(expected).max()))
    for explicit in (False, True):
        got = attend(tensors, options, explicit=explicit).detach().numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10 * largest)


@given(cases())
def test_the_fast_gradients_are_the_explicit_ones_in_float64(case):
    tensors, options, upstream = case
    fast = attend(tensors, options, explicit=False, grad=upstream)
    explicit = attend(tensors, options, explicit=True, grad=upstream)
    largest = max(float(e.abs().max()) for e in explicit)
    for got, expected in zip(fast, explicit, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-10 * max(largest, 1e-30))


def rounded(case):
    """The case with every tensor (and the slopes and sinks) rounded to float32 first, so that
    the float64 reference and the float32 paths start from the same numbers."""
    tensors, options, upstream = case
    exactly = lambda t: None if t is None else t.float().double()  # noqa: E731
    learned = {name: exactly(options[name]) for name in ("slopes", "sinks")}
    return tuple(exactly(t) for t in tensors), {**options, **learned}, exactly(upstream)


@given(cases())
def test_the_fast_gradients_are_within_the_derived_rounding_bound_at_any_scale(case):
    # Every entry of every float32 gradient of the fast path (q, k, v, the sinks, ALiBi's
    # slopes) within the derived rounding bound of the float64 reference (`gradient_bound.
    # walk_grouped`: the running-error walk of tests/attention/test_fused.py, step by step as
    # `_fused._sweep` takes them: grouped keys, softcap, ALiBi, sinks, offsets and masks
    # included), at every scale of the scores; torch's own backward, which recomputes the
    # weights from a float32 log-sum-exp, misses test_fused.py's bound by 10⁶ and more from
    # s = 30. The walk's float64 values are the reference's.
    tensors, options, upstream = rounded(case)
    exact = attend(tensors, options, explicit=True, grad=upstream)
    values, radii = grouped_rounding_bound(tensors, upstream, options)
    largest = max(float(r.abs().max()) for r in exact)
    for value, expected in zip(values, exact, strict=True):
        torch.testing.assert_close(value, expected, rtol=0, atol=1e-10 * max(largest, 1e-30))
    got = attend(tensors, options, explicit=False, dtype=torch.float32, grad=upstream)
    assert worst_ratio(got, exact, radii) <= 1.0


def test_the_rounding_bound_catches_a_gradient_off_by_a_ten_thousandth():
    # every option at once (groups, causal, a window, an offset, softcap, ALiBi, sinks): the
    # fast path within the bound, and each of its five gradients times 1 + 10⁻⁴ outside it
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 5, 3, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 7, 3, generator=g, dtype=torch.float64) for _ in "kv")
    options = {
        "scale": 3**-0.5,
        "causal": True,
        "window": 3,
        "offset": 2,
        "allowed": None,
        "softcap": 5.0,
        "slopes": torch.rand(4, generator=g, dtype=torch.float64),
        "sinks": torch.randn(4, generator=g, dtype=torch.float64),
    }
    upstream = torch.randn(2, 4, 5, 3, generator=g, dtype=torch.float64)
    tensors, options, upstream = rounded(((q, k, v), options, upstream))
    exact = attend(tensors, options, explicit=True, grad=upstream)
    _, radii = grouped_rounding_bound(tensors, upstream, options)
    got = attend(tensors, options, explicit=False, dtype=torch.float32, grad=upstream)
    assert len(got) == 5 and worst_ratio(got, exact, radii) <= 1.0
    for gradient, expected, radius in zip(got, exact, radii, strict=True):
        assert worst_ratio([gradient * (1 + 1e-4)], [expected], [radius]) > 1.0


def test_a_sink_takes_weight_and_carries_no_value():
    # one query, one key: a = e^ω / (e^ω + e^σ); with σ = ω, half the weight, half of v
    q, k, v = torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1) * 2.0, torch.full((1, 1, 1, 1), 3.0)
    sinks = torch.tensor([2.0])  # ω = q·k = 2 at scale 1
    mods = (M.Sinks(sinks),)
    out = _core.attend(q, k, v, scale=1.0, heads=True, mods=mods)
    torch.testing.assert_close(out, torch.full((1, 1, 1, 1), 1.5))
    _, a = _core.attend(q, k, v, scale=1.0, heads=True, mods=mods, return_weights=True)
    torch.testing.assert_close(a, torch.full((1, 1, 1, 1), 0.5))


def test_alibi_subtracts_the_slope_times_the_distance():
    # two keys of equal score, query at position 1: the bias −μ (1 − p) favours key 1 by e^μ
    q, k = torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1)
    v = torch.tensor([[[[0.0], [1.0]]]])
    slopes = torch.tensor([0.5])
    mods = M.modifications(causal=True, alibi=slopes)
    out = _core.attend(q, k, v, scale=1.0, heads=True, mods=mods)
    favoured = torch.exp(torch.tensor(0.5))
    torch.testing.assert_close(out[0, 0, 1, 0], favoured / (1 + favoured))


def test_softcapping_bounds_the_scores_by_the_cap():
    q, k = torch.full((1, 1, 1, 1), 100.0), torch.tensor([[[[1.0], [-1.0]]]])
    v = torch.tensor([[[[1.0], [0.0]]]])
    mods = (M.Softcap(2.0),)
    _, a = _core.attend(q, k, v, scale=1.0, heads=True, mods=mods, return_weights=True)
    capped = torch.tanh(torch.tensor(50.0)) * 2  # ω̃ = ±100 -> ±2 tanh(50)
    torch.testing.assert_close(a[0, 0, 0, 0], torch.sigmoid(2 * capped))


@pytest.mark.parametrize(
    ("options", "groups"),
    [
        ({"causal": True, "window": 64, "sinks": True}, 2),  # GPT-OSS's: GQA, window, sinks
        ({"causal": True, "softcap": 50.0, "alibi": True}, 1),
        ({"causal": True, "window": 100, "softcap": 30.0}, 4),
    ],
)
def test_the_backward_never_holds_an_n_by_n_matrix(options, groups):
    n, heads, width = 1024, 4, 8
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, heads, n, width, generator=g, requires_grad=True)
    k, v = (torch.randn(1, groups, n, width, generator=g, requires_grad=True) for _ in "kv")
    sinks = torch.randn(heads, generator=g, requires_grad=True) if options.get("sinks") else None
    slopes = torch.rand(heads, generator=g) if options.get("alibi") else None
    out = _core.attend(
        q,
        k,
        v,
        scale=width**-0.5,
        heads=True,
        mods=M.modifications(
            causal=True,
            window=options.get("window"),
            softcap=options.get("softcap"),
            alibi=False if slopes is None else slopes,
            sinks=sinks,
        ),
    )
    leaves = [q, k, v] + ([sinks] if sinks is not None else [])
    with Record() as record:
        torch.autograd.grad(out, leaves, torch.randn(out.shape, generator=g))
    largest = max(size for _, size in record.ops)
    assert largest <= _fused.BLOCK_ENTRIES < n * n, largest  # blocks of slices, not n × n


@pytest.mark.parametrize(
    ("slices", "n", "heads"), [(1, 6, 1), (8, 1024, 4), (2, 4096, 3), (12, 16384, 8)]
)
def test_a_groups_heads_share_the_blocks_budget(slices, n, heads):
    pack, rows = _fused.plan(slices, n, heads=heads)
    assert 1 <= pack <= slices and 1 <= rows <= n
    assert rows == n or heads * rows >= _fused.MIN_ROWS  # the products' rows: h/g heads' rows
    assert heads * rows * n <= max(_fused.ROW_ENTRIES, 2 * _fused.MIN_ROWS * n)


@pytest.mark.parametrize("sinks", [False, True])
def test_the_packs_on_a_pool_of_threads_give_the_serial_gradients(monkeypatch, sinks):
    """`blocks.each`: the packs side by side on a pool (torch's threads at 1 meanwhile, restored) and
    one after the other give the same numbers; the pool's threads did the work."""
    g = torch.Generator().manual_seed(3)
    q, k, v, grad = (torch.randn(2, 4, 300, 8, generator=g, dtype=torch.float64) for _ in range(4))
    logits = torch.randn(4, generator=g, dtype=torch.float64) if sinks else None
    mods = M.modifications(causal=True, softcap=20.0, sinks=logits)
    seen = set()
    original = _modify.forward

    def spy(*args, **kwargs):  # every block's scores go through the modifications
        seen.add(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(_modify, "forward", spy)
    threads = torch.get_num_threads()
    results = {}
    for pool in (1, 3):
        monkeypatch.setattr(_fused.blocks, "PACK_THREADS", pool)
        monkeypatch.setattr(_fused.blocks, "ROW_ENTRIES", 2**12)  # several packs and blocks
        monkeypatch.setattr(_fused.blocks, "BLOCK_ENTRIES", 2**14)  # at n = 300
        dq, dk, dv, learned = _fused.gradients(q, k, v, grad, 8**-0.5, mods)
        results[pool] = (dq, dk, dv, *learned.values())
        assert torch.get_num_threads() == threads
    for serial, pooled in zip(results[1], results[3], strict=True):
        if serial is not None:
            torch.testing.assert_close(pooled, serial, rtol=1e-13, atol=1e-13)
    assert any(name.startswith("attention") for name in seen)  # the pool's threads
    assert threading.current_thread().name in seen  # and the caller's, with PACK_THREADS = 1
