"""What a score modification computes, written once for every path that applies it (the
explicit path in `_core`, the fast path in `_fused`, `attention.flash`)."""

import functools
import math

import torch
from torch import Tensor

__all__ = ["softcap_parts", "key_range", "distance", "sink_normalised", "online_start"]


def key_range(
    causal: bool, window: int | None, first: int, last: int, total: int
) -> tuple[int, int]:
    """(low, high): the keys low … high − 1 (0-based) that the queries at positions first …
    last − 1 may attend, before any mask of the user's: all `total` without causal; p < last
    with it (p ≤ m); and p > first − w with a window w (m − p < w). The one rule for which
    blocks are skipped: the fast path reads only these keys for a block of rows, and
    `attention.flash` skips a block of keys that lies wholly outside them."""
    if not causal:
        return 0, total
    low = 0 if window is None else max(0, first - window + 1)
    return low, min(total, last)


def distance(first: int, last: int, low: int, high: int, like: Tensor) -> Tensor:
    """m − p for the queries at positions first … last − 1 and the keys low … high − 1:
    (b, K), in `like`'s dtype and device: ALiBi's distance (its bias −μ (m − p)) and the factor
    of its slope's gradient, for the explicit path, the fast path and `attention.flash`. The
    positions are subtracted as integers and the difference rounded once: bfloat16 holds whole
    numbers exactly only up to 256 (float16 to 2048), so positions in it would meet."""
    queries = torch.arange(first, last, device=like.device)
    gaps = queries[:, None] - torch.arange(low, high, device=like.device)
    return gaps.to(like.dtype)


def sink_normalised(
    scores: Tensor, sink: Tensor | None, *, overwrite: bool = False
) -> tuple[Tensor, Tensor | None]:
    """(A, the sink's weight (…, 1) or None): each row's softmax over its keys, with exp(ζ) in its
    denominator where a sink ζ (broadcastable to (…, n, 1)) is given: a key every query sees,
    with no value. The row's maximum (the sink's logit among them) is subtracted first and held
    constant (softmax is shift invariant), so large scores stay finite; a row with no key and no
    sink divides 0 by 1 (zero weights, zero gradients); a NaN (a NaN sink) stays NaN, never
    rows that do not sum to 1. The explicit path and the fast path (`overwrite`: the block's
    scores reused) call it; `attention.flash` starts each row from the sink (`online_start`)."""
    top = scores.amax(dim=-1, keepdim=True)
    if sink is not None:
        top = torch.maximum(top, sink)
    top = top.detach()
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    e = scores.sub_(top).exp_() if overwrite else torch.exp(scores - top)
    total = e.sum(dim=-1, keepdim=True)
    e_sink = None
    if sink is not None:
        e_sink = torch.exp(sink - top)
        total = total + e_sink
    total = torch.where(total == 0, torch.ones_like(total), total)
    weights = e.div_(total) if overwrite else e / total
    return weights, None if e_sink is None else e_sink / total


def online_start(sink: float | None) -> tuple[float, float]:
    """(μ⁽⁰⁾, ℓ⁽⁰⁾): the online softmax's running maximum and sum before any key: (−∞, 0), or
    with a sink ζ the state after reading it as one more key, (ζ, e^{ζ − ζ} = 1)."""
    return (-math.inf, 0.0) if sink is None else (float(sink), 1.0)


@functools.cache
def _range(dtype: torch.dtype) -> tuple[float, float, float]:
    """√max, √eps and the smallest normal number of a floating dtype (torch.finfo is a call)."""
    info = torch.finfo(dtype)
    return math.sqrt(info.max), math.sqrt(info.eps), info.smallest_normal


def softcap_parts(scaled: Tensor, cap: float, *, overwrite: bool = False) -> tuple[Tensor, Tensor]:
    """(κ tanh(ω̃/κ), tanh(ω̃/κ)): the capped scores and the factor's tanh (the gradient takes
    1 − tanh²), right for every positive finite κ in `scaled`'s dtype. The one place softcapping
    is computed: the explicit path, the fast path (`overwrite`: the block's scores reused) and
    `attention.flash` call it.

    The plain route, ω̃/κ then tanh then times κ, fails at the ends of the dtype's range: a κ
    above its largest number is ∞ there (∞ · tanh(0) = NaN), and one below its smallest is 0
    (0/0 at ω̃ = 0). So a κ above the square root of the dtype's largest number (1.8·10¹⁹ in
    float32) takes κ tanh(y) = ω̃ · tanh(y)/y with y = ω̃ · (1/κ), the ratio 1 where y² is below
    the dtype's precision (there κ tanh(ω̃/κ) is ω̃ to that precision); a κ that is 0 in the
    dtype takes tanh(ω̃/κ) = sign(ω̃) (|ω̃/κ| is beyond any float's range, tanh of it is ±1
    exactly, and 0 at ω̃ = 0)."""
    large, precision, small = _range(scaled.dtype)
    if cap > large:
        y = scaled * (1.0 / cap)
        flat = y.abs() < precision
        away = torch.where(flat, 1.0, y)  # no 0/0, not even in the gradient of the branch not taken
        ratio = torch.where(flat, 1.0, torch.tanh(away) / away)
        return scaled * ratio, torch.tanh(y)
    if cap < small and float(torch.tensor(cap, dtype=scaled.dtype)) == 0.0:
        squashed = torch.sign(scaled)
        return squashed * cap, squashed
    squashed = scaled.div_(cap).tanh_() if overwrite else torch.tanh(scaled / cap)
    return squashed * cap, squashed
