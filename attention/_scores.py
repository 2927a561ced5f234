"""The numbers behind the score modifications (`attention.mods`), shared by the objects and the
paths: ALiBi's distances, the softcap's two parts, the −∞ of a mask outside its bounds, the
softmax with a sink's logit in its denominator, and the online softmax's start."""

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "Bounds",
    "masked_outside",
    "distance",
    "sink_normalised",
    "online_start",
    "softcap_parts",
    "sink_gradient",
]

#: A mask's (L(m), H(m)) for m an int or an integer tensor of positions (None: no bound).
Bounds = Callable[[Any], tuple[Any, Any]]


def masked_outside(
    s: Tensor, block: tuple[int, int, int, int], bounds: Bounds, inplace: bool
) -> Tensor:
    """s with −∞ at the keys outside L(m) ≤ p < H(m) of `bounds`. Only two strips of columns can
    hold such keys (the bounds grow with m): those before L(last − 1) and those from H(first)
    on; the rest of the block is read by every query and left alone."""
    first, last, low, high = block
    lower, _ = bounds(last - 1)
    _, upper = bounds(first)
    strips = []
    if lower is not None and lower > low:
        strips.append((low, min(high, lower)))
    if upper is not None and upper < high:
        strips.append((max(low, upper), high))
    if not strips:
        return s
    if not inplace:
        s = s.clone()
    queries = torch.arange(first, last, device=s.device)[:, None]
    below, above = bounds(queries)
    for start, stop in strips:
        keys = torch.arange(start, stop, device=s.device)[None, :]
        outside = torch.zeros(last - first, stop - start, dtype=torch.bool, device=s.device)
        if below is not None:
            outside |= keys < below
        if above is not None:
            outside |= keys >= above
        s[..., start - low : stop - low].masked_fill_(outside, float("-inf"))
    return s


def distance(first: int, last: int, low: int, high: int, like: Tensor) -> Tensor:
    """m − p for the queries at positions first … last − 1 and the keys low … high − 1: ALiBi's
    distance and the factor of its slope's gradient. The positions are subtracted as integers
    and the difference rounded once: bfloat16 holds whole numbers exactly only up to 256
    (float16 to 2048), so positions in it would meet.

    Args:
        first: the first query's position (0-based).
        last: one past the last query's position.
        low: the first key's position.
        high: one past the last key's position.
        like: a tensor whose dtype and device the result takes.

    Returns:
        The distances m − p, `(b, K)` with b = last − first and K = high − low.
    """
    queries = torch.arange(first, last, device=like.device)
    gaps = queries[:, None] - torch.arange(low, high, device=like.device)
    return gaps.to(like.dtype)


def sink_normalised(
    scores: Tensor, sink: Tensor | None, *, overwrite: bool = False
) -> tuple[Tensor, Tensor | None]:
    """(A, the sink's weight (…, 1) or None): each row's softmax over its keys, with exp(ζ) in its
    denominator where a sink ζ (broadcastable to (…, n, 1)) is given. The row's maximum (the
    sink's logit among them) is subtracted first and held constant (softmax is shift
    invariant), so large scores stay finite; a row with no key and no sink divides 0 by 1 (zero
    weights, zero gradients); a NaN (a NaN sink) stays NaN, never rows that do not sum to 1.
    The explicit path and the fast path (`overwrite`: the block's scores reused) call it;
    `attention.flash` starts each row from the sink (`online_start`)."""
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


def _limits(dtype: torch.dtype) -> tuple[float, float, float]:
    info = torch.finfo(dtype)
    return math.sqrt(info.max), math.sqrt(info.eps), info.smallest_normal


#: √max, √eps and the smallest normal number of each floating dtype, computed once (a dict
#: look-up, which torch.compile traces; a cached function call it does not).
_RANGES = {
    dtype: _limits(dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}


def _range(dtype: torch.dtype) -> tuple[float, float, float]:
    """√max, √eps and the smallest normal number of a floating dtype (torch.finfo is a call)."""
    found = _RANGES.get(dtype)
    return found if found is not None else _limits(dtype)


def softcap_parts(scaled: Tensor, cap: float, *, overwrite: bool = False) -> tuple[Tensor, Tensor]:
    """(κ tanh(ω̃/κ), tanh(ω̃/κ)): the capped scores and the factor's tanh (the gradient takes
    1 − tanh²), right for every positive finite κ in `scaled`'s dtype.

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


def sink_gradient(sink_weight: Tensor, along: Tensor) -> Tensor:
    """dζ_ℓ summed over a block's rows: −Σ_m a_{m,ζ} rowsum(A ∘ dA)_m, from the sink's weights
    (…, b) and the rows' Σ_p a_{m,p} dA_{m,p} (…, b)."""
    return -(sink_weight * along).sum(dim=-1)
