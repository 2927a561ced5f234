"""`functional.decode_step`: new rows against a cache of keys and values give exactly the rows of
causal (or sliding-window) self-attention, one token at a time or in chunks; bad caches are
named."""

import re

import numpy as np
import pytest
import torch
from reference import batched_reference, causal_allowed, window_allowed

from attention import DtypeError, ShapeError
from attention import functional as F
from attention import mods as M
from attention.grouped import DecodeCache, grouped_decode_step, grouped_query_attention


def make(batch, n, d, c, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, d, generator=g, dtype=dtype)
    return x, *(torch.randn(d, c, generator=g, dtype=dtype) for _ in range(3))


def decode(x, weights, chunks, window=None):
    """The rows of x fed in chunks of the given sizes; all the rows, and every cache returned."""
    rows, caches, cache, start = [], [], None, 0
    for size in chunks:
        row, cache = F.decode_step(x[..., start : start + size, :], *weights, cache, window=window)
        rows.append(row)
        caches.append(cache)
        start += size
    return torch.cat(rows, dim=-2), caches


@pytest.mark.parametrize(
    ("batch", "chunks", "window"),
    [
        ((), [1] * 7, None),  # one token at a time, as derive check --variant kv-cache does
        ((2,), [3, 1, 1, 2], None),  # a prompt, then tokens, then a chunk
        ((2, 3), [7], None),  # everything at once: plain causal attention
        ((2,), [1] * 7, 3),  # a sliding window, one token at a time
        ((), [4, 1, 2], 2),  # a window shorter than the prompt and than a chunk
        ((2,), [2, 1, 1, 1, 1, 1], 9),  # a window longer than the sequence: causal
    ],
)
def test_decoding_gives_the_rows_of_causal_attention(batch, chunks, window):
    n = sum(chunks)
    x, *weights = make(batch, n, 3, 2)
    allowed = causal_allowed(n) if window is None else window_allowed(n, window)
    expected, _ = batched_reference(x, *weights, allowed=allowed)
    got, caches = decode(x, weights, chunks, window)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)
    whole = F.self_attention(x, *weights, causal=True, window=window)
    torch.testing.assert_close(got, whole, rtol=0, atol=1e-12)
    seen = np.cumsum(chunks)
    for (k, v), m in zip(caches, seen, strict=True):
        kept = m if window is None else min(m, window)
        assert k.shape == v.shape == (*batch, kept, 2)
        torch.testing.assert_close(k, x[..., m - kept : m, :] @ weights[1], rtol=0, atol=1e-14)


def test_float32_token_by_token_stays_within_1e_5_of_the_fast_path():
    x, *weights = make((2,), 40, 16, 8, dtype=torch.float32)
    weights = [w / 4 for w in weights]  # unit-variance projections, as nn.Linear's are
    got, _ = decode(x, weights, [1] * 40)
    torch.testing.assert_close(got, F.self_attention(x, *weights, causal=True), rtol=0, atol=1e-5)


def test_the_cache_is_what_it_returned_and_gradients_flow():
    x, *weights = make((), 5, 3, 2)
    leaves = [w.clone().requires_grad_() for w in weights]
    rows, _ = decode(x, leaves, [2, 1, 1, 1])
    grads = torch.autograd.grad(rows.sum(), leaves)
    expected = torch.autograd.grad(F.self_attention(x, *leaves, causal=True).sum(), leaves)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("cache", "error", "message"),
    [
        # a cache of another width c
        (
            lambda: (torch.randn(4, 3), torch.randn(4, 3)),
            ShapeError,
            r"^decode_step: cache\[0\] has c=3 but w_q has c=2",
        ),
        # keys and values of different lengths
        (
            lambda: (torch.randn(4, 2), torch.randn(3, 2)),
            ShapeError,
            r"^decode_step: cache\[1\] has m=3 but cache\[0\] has m=4",
        ),
        # a cache for another batch
        (
            lambda: (torch.randn(2, 4, 2), torch.randn(2, 4, 2)),
            ShapeError,
            r"^decode_step: cache\[0\] has batch=\(2,\) but x_new has batch=\(\)",
        ),
        # K alone, not (K, V)
        (
            lambda: torch.randn(4, 2),
            TypeError,
            r"^decode_step: cache must be None or a tuple of 2 tensors of shapes \(\*batch, m, c\), \(\*batch, m, c\), got Tensor",
        ),
        # a list where a tuple is returned
        (
            lambda: [torch.randn(4, 2), torch.randn(4, 2)],
            TypeError,
            r"cache must be None or a tuple of 2 tensors.*got list",
        ),
        # three tensors
        (
            lambda: (torch.randn(4, 2),) * 3,
            TypeError,
            r"cache must be None or a tuple of 2 tensors.*got a tuple of 3",
        ),
        # None inside the tuple
        (
            lambda: (torch.randn(4, 2), None),
            TypeError,
            r"^decode_step: cache\[1\] must be a torch.Tensor of shape \(\*batch, m, c\), got None",
        ),
        # an integer cache
        (
            lambda: (torch.ones(4, 2, dtype=torch.int64),) * 2,
            DtypeError,
            r"^decode_step: cache\[0\] must be a floating-point",
        ),
        # float64 cache, float32 tensors
        (
            lambda: (torch.randn(4, 2, dtype=torch.float64),) * 2,
            DtypeError,
            r"^decode_step: cache\[0\] has dtype torch.float64 but x_new has torch.float32",
        ),
        # a cache on another device
        (
            lambda: (torch.randn(4, 2, device="meta"),) * 2,
            ValueError,
            r"^decode_step: cache\[0\] is on meta but x_new is on cpu",
        ),
    ],
    ids=[
        "width",
        "lengths",
        "batch",
        "tensor",
        "list",
        "three",
        "none-inside",
        "integer",
        "dtype",
        "device",
    ],
)
def test_a_bad_cache_is_named(cache, error, message):
    x, *weights = make((), 1, 3, 2, dtype=torch.float32)
    F.decode_step(x, *weights, (torch.randn(4, 2), torch.randn(4, 2)))  # a good call first
    with pytest.raises(error, match=message):
        F.decode_step(x, *weights, cache())


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"x_new": torch.randn(1, 4)}, ShapeError, r"^decode_step: w_q has d=3 but x_new has d=4"),
        (
            {"x_new": torch.randn(3)},
            ShapeError,
            r"^decode_step: x_new must have shape \(\*batch, t, d\)",
        ),
        (
            {"x_new": torch.randn(0, 3)},
            ShapeError,
            r"^decode_step: x_new has t=0; every dimension must be at least 1",
        ),
        ({"w_v": torch.randn(3, 5)}, ShapeError, r"^decode_step: w_v has c=5 but w_q has c=2"),
        (
            {"window": 0},
            ValueError,
            r"^decode_step: window must be a positive integer or None, got window=0",
        ),
        (
            {"window": True},
            ValueError,
            r"^decode_step: window must be a positive integer or None, got window=True",
        ),
    ],
)
def test_bad_input_is_named(changes, error, message):
    x, w_q, w_k, w_v = make((), 1, 3, 2, dtype=torch.float32)
    arguments = {"x_new": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, **changes}
    positional = [arguments.pop(name) for name in ("x_new", "w_q", "w_k", "w_v")]
    with pytest.raises(error, match=message):
        F.decode_step(*positional, **arguments)


# grouped_decode_step: every option of grouped-query attention, decoded -------------------------

H, G, CH = 4, 2, 4


def _grouped(n, d=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    w_q = torch.randn(d, H * CH, generator=g, dtype=torch.float64)
    w_k, w_v = (torch.randn(d, G * CH, generator=g, dtype=torch.float64) for _ in range(2))
    w_o = torch.randn(H * CH, 5, generator=g, dtype=torch.float64)
    return x, (w_q, w_k, w_v, w_o)


def _f64(*shape):
    return torch.linspace(0.5, 1.5, int(np.prod(shape)), dtype=torch.float64).reshape(shape)


#: Each composition of grouped_query_attention a model decodes with (its keywords).
DECODED = {
    "gqa": {},
    "rope": {"theta_base": 100.0},
    "interleaved partial rope": {"theta_base": 100.0, "rope_interleaved": True, "rope_width": 2},
    "llama3 rope": {
        "theta_base": 10.0,
        "freq_config": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_context_length": 4,
        },
    },
    "window": {"window": 3},
    "softcap": {"softcap": 2.0},
    "alibi": {"alibi": True},
    "sinks": {"sinks": _f64(H) - 1.0},
    "gate": {"w_g": _f64(6, H * CH) - 1.0},
    "qk-norm": {"q_gain": _f64(CH), "k_gain": _f64(CH)},
    "whole qk-norm": {"q_gain": _f64(H * CH), "k_gain": _f64(G * CH)},
    "chunked": {"mods": (M.Chunked(3),)},
    "temperature": {"mods": (M.Temperature(2.0, 0.1),)},
    "gpt-oss": {"theta_base": 10.0, "window": 2, "sinks": _f64(H) - 1.0},
    "gemma 2": {"theta_base": 10.0, "window": 2, "softcap": 1.5, "query_pre_attn_scalar": 3.0},
}


@pytest.mark.parametrize("options", DECODED.values(), ids=DECODED)
@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 2, 1]], ids=["token by token", "chunks"])
def test_grouped_decoding_gives_the_rows_of_grouped_query_attention(options, chunks):
    n = sum(chunks)
    x, weights = _grouped(n)
    whole = grouped_query_attention(x, *weights, heads=H, groups=G, causal=True, **options)
    rows, cache, start = [], None, 0
    for size in chunks:
        row, cache = grouped_decode_step(
            x[..., start : start + size, :], *weights, cache, heads=H, groups=G, **options
        )
        rows.append(row)
        start += size
        kept = start if options.get("window") is None else min(start, options["window"])
        assert cache.keys.shape == cache.values.shape == (2, G, kept, CH)  # g groups, not h
        assert cache.position == start
    torch.testing.assert_close(torch.cat(rows, dim=-2), whole, rtol=0, atol=1e-11)


def test_a_decoded_token_at_the_wrong_position_is_not_the_row():
    """The cache's position is what RoPE rotates the new token by: one token off, another row."""
    x, weights = _grouped(5)
    options = {"heads": H, "groups": G, "theta_base": 10.0}
    whole = grouped_query_attention(x, *weights, causal=True, **options)
    _, cache = grouped_decode_step(x[:, :4], *weights, **options)
    row, _ = grouped_decode_step(x[:, 4:], *weights, cache, **options)
    torch.testing.assert_close(row, whole[:, 4:], rtol=0, atol=1e-11)
    moved = cache._replace(position=cache.position + 1)
    off, _ = grouped_decode_step(x[:, 4:], *weights, moved, **options)
    assert (off - whole[:, 4:]).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("cache", "error", "message"),
    [
        ((torch.zeros(2, G, 3, CH),) * 2, TypeError, "cache must be attention.grouped.DecodeCache"),
        ("batch", ShapeError, "x_new has batch=(2,) but the cache has batch=(3,)"),
        ("dtype", DtypeError, "x_new has dtype torch.float64 but the cache holds torch.float32"),
        ("position", ValueError, "cache.position=1 is less than the 3 keys the cache holds"),
        ("groups", ShapeError, f"cache.keys has g={G + 1}, c_h={CH} but this call's groups"),
        ("width", ShapeError, f"cache.values has g={G}, c_h={CH + 1} but this call's groups"),
    ],
    ids=["not a cache", "batch", "dtype", "position", "groups", "width"],
)
def test_a_bad_decode_cache_is_named(cache, error, message):
    x, weights = _grouped(4)
    keys = torch.zeros(2, G, 3, CH, dtype=torch.float64)
    other = torch.zeros(3, G, 3, CH, dtype=torch.float64)
    made = {
        "batch": lambda: DecodeCache(other, other, 3),
        "dtype": lambda: DecodeCache(keys.float(), keys.float(), 3),
        "position": lambda: DecodeCache(keys, keys, 1),
        "groups": lambda: DecodeCache(*(torch.zeros(2, G + 1, 3, CH, dtype=torch.float64),) * 2, 3),
        "width": lambda: DecodeCache(keys, torch.zeros(2, G, 3, CH + 1, dtype=torch.float64), 3),
    }
    cache = made[cache]() if isinstance(cache, str) else cache
    with pytest.raises(error, match=re.escape(message)):
        grouped_decode_step(x[:, :1], *weights, cache, heads=H, groups=G)
