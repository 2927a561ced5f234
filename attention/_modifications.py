"""What a score modification computes, written once for every path that applies it (the
explicit path in `_core`, the fast path in `_fused`, `attention.flash`)."""

import functools
import math

import torch
from torch import Tensor

__all__ = ["softcap_parts", "key_range", "distance"]


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
    of its slope's gradient, for the explicit path, the fast path and `attention.flash`."""
    queries = torch.arange(first, last, device=like.device, dtype=like.dtype)
    return queries[:, None] - torch.arange(low, high, device=like.device, dtype=like.dtype)


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
