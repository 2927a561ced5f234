"""The score modifications, one immutable object each, written once for every path: the explicit
path (`attention._core`), the fast path (`attention._fused`) and `attention.flash` all take one
tuple of these objects and call the methods below; none of them knows what a softcap or a window
is.

A row of scores passes through the modifications in their `stage` order (`ordered`):

    ω̃_{m,p} = scale · q_m · k_p                        the scaled scores (the scale: a number)
    ω̃_{m,p} ← τ_m ω̃_{m,p}                              `Temperature` (Llama 4's NoPE layers)
    ω̃_{m,p} ← κ tanh(ω̃_{m,p} / κ)                      `Softcap` (Gemma 2)
    ω̃_{m,p} ← min(max(ω̃_{m,p}, −γ), γ)                 `Clamp` (its hard counterpart)
    ω̃_{m,p} ← ω̃_{m,p} − μ_ℓ (m − p)                    `ALiBi` (BLOOM, MPT), a slope per head
    ω̃_{m,p} ← −∞ unless L(m) ≤ p < H(m)                the masks: `Causal` (H = m + 1, its
                                                        `offset` places query m at m + offset),
                                                        `Window` (L = m − w + 1), `Chunked`
                                                        (L, H the ends of m's chunk)
    a_{m,p} = e^{ω̃_{m,p}} / (e^{ζ_ℓ} + Σ_r e^{ω̃_{m,r}})   `Sinks` (GPT-OSS), a logit per head

Each object states, once: its effect on a block of scores (`scores`: queries at positions
first … last − 1, keys low … high − 1), what the backward pass does through it (`backward`: a
factor on the scores' gradient, and its learned parameter's gradient), and, for the masks, the
keys each query may read (`bounds`: L(m) and H(m)), from which the keys a block of queries reads
and the blocks it skips follow (`key_range`). The paths read only the protocol, never the class:
a subclass of yours that states `bounds` alone is a mask on every path (its −∞ written by the
default `scores`, its blocks skipped); one that states `scores` and `backward` is a rule on the
scores; one with `sink = True` and a `parameter` is a sink; `query_offset`, `query_scale` and
`resolved` are the rest. Masks given as boolean tensors stay tensors: they are data, not a
rule.

Build the tuple from the public keywords with `modifications(...)`; the functions and modules
of the package do, and take the same keywords as before.
"""

import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ._arguments import check_cap, check_finite, check_offset, check_positive
from ._shapes import ShapeError

__all__ = [
    "Block",
    "Modification",
    "check",
    "joined",
    "Causal",
    "Window",
    "Chunked",
    "Temperature",
    "Softcap",
    "Clamp",
    "ALiBi",
    "Sinks",
    "QueryScale",
    "modifications",
    "scaled_width",
    "resolved",
    "trimmed",
    "default_slopes",
    "sink_gradient",
    "ordered",
    "offset_of",
    "sinks_of",
    "sink_kind",
    "masks_only",
    "key_range",
    "row_bounds",
    "reach",
    "shifts",
    "moved",
    "allowed",
    "cut",
    "forward",
    "backward",
    "learned",
    "unbound",
    "bound",
    "distance",
    "sink_normalised",
    "online_start",
    "softcap_parts",
]


class Block(NamedTuple):
    """A block of scores: the queries at positions first … last − 1 against the keys at
    positions low … high − 1 (0-based; a query's position counts the tokens before it, a cache's
    included)."""

    first: int
    last: int
    low: int
    high: int


@dataclass(frozen=True)
class Modification:
    """What every modification states. The defaults: no effect on the scores, nothing in the
    backward pass, every key allowed, no learned parameter."""

    #: Where in a row's computation it acts (the module docstring's order).
    stage: ClassVar[int] = 0
    #: The name of its learned tensor field, if it has one (a tensor of one number per head).
    parameter: ClassVar[str | None] = None
    #: Whether its tensor is a sink's logit per head, e^{ζ_ℓ} in each row's denominator (`Sinks`):
    #: the paths then normalise each row with it (`sink_normalised`) and give its gradient.
    sink: ClassVar[bool] = False

    def scores(self, s: Tensor, block: Block, param: Tensor | None, inplace: bool) -> tuple:
        """(the block's scores after it, what its backward needs). s: (…, b, K); `param`: its
        tensor, shaped by the path to broadcast against s (one number per head); `inplace`: s
        may be overwritten (no autograd through it). The default: a mask (one that states
        `bounds`) puts −∞ at the keys it rules out; anything else leaves s as it is."""
        if self.is_mask:
            return _cut(s, block, self.bounds, inplace), None
        return s, None

    @property
    def is_mask(self) -> bool:
        """Whether it rules keys out: its class states `bounds`. The paths read a mask's
        bounds for the blocks each query reads and skips, and the masks alone go to torch's
        fused kernel."""
        return type(self).bounds is not Modification.bounds

    @property
    def changes_scores(self) -> bool:
        """Whether it changes the scores' values: its class states its own `scores` (a mask
        that only states `bounds` does not)."""
        return type(self).scores is not Modification.scores

    def query_offset(self) -> int:
        """The position of the first query, where it places the queries after a cache's keys
        (`Causal.offset`); 0 otherwise."""
        return 0

    def query_scale(self) -> float | None:
        """The c of the factor 1/√c of q·k, where it sets one (`QueryScale`); None otherwise."""
        return None

    def resolved(self, heads: int, like: Tensor) -> "Modification":
        """The same with what it takes from the call filled in (ALiBi's default slopes for
        `heads` heads, in `like`'s dtype and device): itself by default."""
        return self

    def backward(
        self, d_s: Tensor, saved: Any, block: Block, param: Tensor | None
    ) -> Tensor | None:
        """Given dL/d(its output) `d_s` (…, b, K): turns it into dL/d(its input) in place, and
        returns its parameter's gradient summed over the block's rows and keys (…,), or None."""
        return None

    def bounds(self, m):
        """(L(m), H(m)): query m (an int or an integer tensor of positions) may read the keys
        L(m) ≤ p < H(m); None for no bound. Both never decrease as m grows."""
        return None, None

    def reach(self) -> int | None:
        """At most how many keys before its own a query reads (m − L(m)); None: unbounded."""
        return None

    #: Whether it moves with the positions (L(m + t) = L(m) + t, H likewise, the same change
    #: of the scores): a block's mask then depends only on where its keys start relative to
    #: its queries, and a cache that dropped its first keys may count positions from its own.
    shifts: ClassVar[bool] = True

    def moved(self, start: int) -> "Modification":
        """The same modification for positions counted from `start` (a cache whose first key
        sits at position `start`): itself where it shifts."""
        return self


# ---------------------------------------------------------------------------------------------
# The masks: which keys a query may read


@dataclass(frozen=True)
class Causal(Modification):
    """Query m reads the keys p ≤ m + offset: it sits at position m + `offset` (the tokens of a
    cache before it) and reads no later token."""

    offset: int = 0
    stage: ClassVar[int] = 30

    def __post_init__(self):
        check_offset("Causal", self.offset)

    def bounds(self, m):
        return None, m + 1

    def query_offset(self) -> int:
        return self.offset


@dataclass(frozen=True)
class Window(Modification):
    """A sliding window of w tokens: query m reads the keys p > m − w (with `Causal`:
    0 ≤ m − p < w; Mistral, Gemma's and GPT-OSS's local layers)."""

    size: int
    stage: ClassVar[int] = 31

    def __post_init__(self):
        check_positive("Window", size=self.size)

    def bounds(self, m):
        return m - self.size + 1, None

    def reach(self) -> int | None:
        return self.size - 1


@dataclass(frozen=True)
class Chunked(Modification):
    """Chunked attention (Llama 4's `attention_chunk_size` C): the positions fall into chunks
    of C tokens, 0 … C − 1, C … 2C − 1, …, and query m reads the keys of its own chunk only,
    ⌊p / C⌋ = ⌊m / C⌋ (with `Causal`: the keys from its chunk's start to m). A query's cost is
    bounded by C, whatever the sequence's length."""

    size: int
    start: int = 0
    stage: ClassVar[int] = 32
    shifts: ClassVar[bool] = False

    def __post_init__(self):
        check_positive("Chunked", size=self.size)
        check_offset("Chunked", self.start)

    def bounds(self, m):
        first = ((m + self.start) // self.size) * self.size - self.start  # m's chunk's start
        return first, first + self.size

    def moved(self, start: int) -> "Chunked":
        return Chunked(self.size, self.start + start)

    def reach(self) -> int | None:
        return self.size - 1


def _cut(s: Tensor, block: Block, bounds, inplace: bool) -> Tensor:
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


# ---------------------------------------------------------------------------------------------
# What changes the scores' values


@dataclass(frozen=True)
class QueryScale(Modification):
    """The scale 1/√`scalar` of q·k in place of 1/√c_h (Gemma 2 and 3's
    `query_pre_attn_scalar`). It acts on the queries before their products (so that q·k does
    not overflow where the scaled scores fit), read by `scaled_width`; nothing on a block."""

    scalar: float
    stage: ClassVar[int] = 0

    def __post_init__(self):
        check_finite("QueryScale", "scalar", self.scalar)
        check_cap("QueryScale", "scalar", self.scalar)

    def query_scale(self) -> float | None:
        return self.scalar


@dataclass(frozen=True)
class Temperature(Modification):
    """Llama 4's temperature tuning on its layers without RoPE (after Nakanishi's
    Scalable-Softmax): query m's scores multiplied by τ_m = α log(1 + ⌊(m + 1)/F⌋) + 1 (`scale`
    α, `floor` F, m the 0-based position), so that long contexts keep sharp weights; τ_m = 1 for
    m + 1 < F, and F → ∞ gives plain attention. Hugging Face multiplies the queries by τ_m before
    their products, the same numbers."""

    floor: float
    scale: float
    start: int = 0
    stage: ClassVar[int] = 10
    shifts: ClassVar[bool] = False

    def __post_init__(self):
        check_finite("Temperature", "floor", self.floor)
        check_cap("Temperature", "floor", self.floor)
        check_finite("Temperature", "scale", self.scale)

    def factors(self, first: int, last: int, like: Tensor) -> Tensor:
        """τ_m for the positions first … last − 1, (b, 1), in `like`'s dtype and device."""
        positions = torch.arange(first, last, device=like.device, dtype=torch.float64) + self.start
        tau = torch.log1p(torch.floor((positions + 1.0) / self.floor)) * self.scale + 1.0
        return tau.to(like.dtype)[:, None]

    def moved(self, start: int) -> "Temperature":
        return Temperature(self.floor, self.scale, self.start + start)

    def scores(self, s, block, param, inplace):
        tau = self.factors(block.first, block.last, s)
        return (s.mul_(tau) if inplace else s * tau), tau

    def backward(self, d_s, saved, block, param):
        d_s.mul_(saved)  # ∂(τ_m ω̃)/∂ω̃ = τ_m
        return None


@dataclass(frozen=True)
class Softcap(Modification):
    """Logit softcapping (Gemma 2): each score ω̃ replaced by κ tanh(ω̃ / κ), within (−κ, κ);
    the gradient takes 1 − tanh²(ω̃ / κ)."""

    cap: float
    stage: ClassVar[int] = 20

    def __post_init__(self):
        check_finite("Softcap", "cap", self.cap)
        check_cap("Softcap", "cap", self.cap)

    def scores(self, s, block, param, inplace):
        return softcap_parts(s, self.cap, overwrite=inplace)

    def backward(self, d_s, saved, block, param):
        d_s.mul_(saved.square_().neg_().add_(1.0))  # 1 − tanh², saved's memory reused
        return None


@dataclass(frozen=True)
class Clamp(Modification):
    """Clamping: each score ω̃ held within [−γ, γ] (`bound` γ), the hard counterpart of
    `Softcap`; a score beyond the bound passes no gradient back (torch.clamp's rule: the bound
    itself still does). `derive latex --variant clamp` derives it; the guide adds it as the
    example of a modification of one's own (docs/guides/modifications.md)."""

    bound: float
    stage: ClassVar[int] = 22

    def __post_init__(self):
        check_finite("Clamp", "bound", self.bound)
        check_cap("Clamp", "bound", self.bound)

    def scores(self, s, block, param, inplace):
        inside = s.abs() <= self.bound  # where the gradient passes: −γ ≤ ω̃ ≤ γ
        return (
            s.clamp_(-self.bound, self.bound) if inplace else s.clamp(-self.bound, self.bound)
        ), inside

    def backward(self, d_s, saved, block, param):
        d_s.mul_(saved)
        return None


@dataclass(frozen=True, eq=False)
class ALiBi(Modification):
    """ALiBi (Press, Smith and Lewis, 2022; BLOOM, MPT): −μ_ℓ (m − p) added to head ℓ's scores,
    a slope μ_ℓ per head (`slopes`, (h,), learned if it requires grad; with `Causal`). Its
    slope's gradient is −Σ_{m,p} dω̃_{m,p} (m − p)."""

    slopes: Tensor | None = None
    stage: ClassVar[int] = 25
    parameter: ClassVar[str | None] = "slopes"

    def __post_init__(self):
        _check_per_head("ALiBi", "slopes", self.slopes)

    def resolved(self, heads: int, like: Tensor) -> "ALiBi":
        """With no slopes given, Press et al.'s for `heads` heads (`default_slopes`), in
        `like`'s dtype and device."""
        if self.slopes is not None:
            return self
        return ALiBi(default_slopes(heads, dtype=like.dtype, device=like.device))

    def scores(self, s, block, param, inplace):
        slope = typing.cast(Tensor, param)  # the path gives it: the slopes are resolved first
        gaps = distance(*block, s)
        return (s.addcmul_(slope, gaps, value=-1.0) if inplace else s - slope * gaps), None

    def backward(self, d_s, saved, block, param):
        if param is None:  # not learned
            return None
        return -(d_s * distance(*block, d_s)).sum(dim=(-2, -1))


@functools.cache
def _geometric(heads: int) -> tuple[float, ...]:
    """Press et al.'s geometric sequence: for h a power of 2, μ_ℓ = 2^(−8ℓ/h), ℓ = 1 … h; for
    other h, the sequence of the power of 2 below h, then every other slope of the sequence for
    twice that power, as many as are missing (BLOOM's `_get_alibi_slopes`, restated)."""
    below = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * i / below) for i in range(1, below + 1)]
    extra = [2.0 ** (-8.0 * i / (2 * below)) for i in range(1, 2 * below + 1, 2)]
    return tuple(slopes + extra[: heads - below])


def default_slopes(heads: int, *, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """ALiBi's default slopes μ (h,) (Press, Smith and Lewis, *Train Short, Test Long*, 2022)."""
    return torch.tensor(_geometric(heads), dtype=dtype, device=device)


@dataclass(frozen=True, eq=False)
class Sinks(Modification):
    """Attention sinks (GPT-OSS): a logit ζ_ℓ per head (`logits`, (h,)), e^{ζ_ℓ} in each row's
    denominator, a key every query reads that has no value. It acts in the softmax
    (`sink_normalised`, `online_start`), not on the scores; its gradient is
    −Σ_m a_{m,ζ} rowsum(A ∘ dA)_m (`sink_gradient`)."""

    logits: Tensor | None = None
    stage: ClassVar[int] = 40
    parameter: ClassVar[str | None] = "logits"
    sink: ClassVar[bool] = True

    def __post_init__(self):
        _check_per_head("Sinks", "logits", self.logits)


def _check_per_head(where: str, name: str, value: object) -> None:
    """None, or a float tensor of one number per head (its count is checked by the call that
    knows the heads, `check`); TypeError or ShapeError naming it."""
    if value is None:
        return
    if not isinstance(value, Tensor) or not value.is_floating_point():
        raise TypeError(
            f"{where}: {name} must be a float tensor of one number per head, got "
            f"{type(value).__name__ if not isinstance(value, Tensor) else value.dtype}"
        )
    if value.dim() > 1:
        raise ShapeError(
            f"{where}: {name} must be a tensor of one number per head, (h,), got shape "
            f"{tuple(value.shape)}"
        )


def check(where: str, mods: object, heads: int) -> tuple["Modification", ...]:
    """A user's `mods`: a tuple or list of modification objects (`Modification`), at most one of
    each kind, the per-head tensors with `heads` entries; returned in order. TypeError,
    ValueError or ShapeError naming the argument otherwise."""
    if not isinstance(mods, tuple | list):
        raise TypeError(
            f"{where}: mods must be a tuple of modifications (attention.mods), got "
            f"{type(mods).__name__}"
        )
    for i, mod in enumerate(mods):
        if not isinstance(mod, Modification):
            raise TypeError(
                f"{where}: mods[{i}] must be a modification (attention.mods: Causal, Window, "
                f"Chunked, Temperature, Softcap, ALiBi, Sinks, QueryScale, or a subclass of "
                f"Modification), got {type(mod).__name__}"
            )
        if mod.parameter is not None:
            value = getattr(mod, mod.parameter)
            if value is not None and value.numel() != heads and value.dim() == 1:
                raise ShapeError(
                    f"{where}: mods[{i}] ({type(mod).__name__}) has {mod.parameter} of shape "
                    f"{tuple(value.shape)} but there are heads={heads}; give one per head"
                )
    try:
        return ordered(mods)
    except ValueError as error:
        raise ValueError(
            f"{where}: {error} (mods and the keywords say the same thing twice)"
        ) from None


def joined(where: str, built: tuple, given: object, heads: int) -> tuple["Modification", ...]:
    """The modifications of one call: those its keywords `built` and those `given` by `mods=`
    (checked first, `check`), one of each kind, in order."""
    return check(where, (*built, *check(where, given, heads)), heads)


def sink_gradient(sink_weight: Tensor, along: Tensor) -> Tensor:
    """dζ_ℓ summed over a block's rows: −Σ_m a_{m,ζ} rowsum(A ∘ dA)_m, from the sink's weights
    (…, b) and the rows' Σ_p a_{m,p} dA_{m,p} (…, b)."""
    return -(sink_weight * along).sum(dim=-1)


# ---------------------------------------------------------------------------------------------
# The tuple: built once, read by every path


def ordered(mods) -> tuple[Modification, ...]:
    """The modifications in the order they act (their `stage`); two of the same kind are a
    mistake of the caller (ValueError)."""
    kinds = [type(mod) for mod in mods]
    for kind in set(kinds):
        if kinds.count(kind) > 1:
            raise ValueError(f"modifications: {kind.__name__} given twice")
    return tuple(sorted(mods, key=lambda mod: mod.stage))


def modifications(
    *,
    causal: bool = False,
    offset: int = 0,
    window: int | None = None,
    chunk: int | None = None,
    temperature: Temperature | None = None,
    softcap: float | None = None,
    alibi: bool | Tensor = False,
    sinks: Tensor | None = None,
    query_pre_attn_scalar: float | None = None,
) -> tuple[Modification, ...]:
    """The tuple of modifications for the public keywords (checked by the caller): `causal` with
    the queries at `offset`, a `window` w, `chunk` C, Llama 4's `temperature`, a `softcap` κ,
    ALiBi (`alibi`: True for the default slopes, or the slopes (h,)), the `sinks`' logits (h,),
    the query scale 1/√`query_pre_attn_scalar`."""
    mods: list[Modification] = []
    if query_pre_attn_scalar is not None:
        mods.append(QueryScale(query_pre_attn_scalar))
    if causal:
        mods.append(Causal(offset))
    if window is not None:
        mods.append(Window(window))
    if chunk is not None:
        mods.append(Chunked(chunk))
    if temperature is not None:
        mods.append(temperature)
    if softcap is not None:
        mods.append(Softcap(softcap))
    if alibi is not False:
        mods.append(ALiBi(None if alibi is True else alibi))
    if sinks is not None:
        mods.append(Sinks(sinks))
    return ordered(mods)


def scaled_width(mods, width: int) -> float:
    """The c of the factor 1/√c of q·k: a modification's `query_scale` (`QueryScale.scalar`)
    if one sets it, else `width` (c_h)."""
    return next((c for mod in mods if (c := mod.query_scale()) is not None), width)


def resolved(mods, heads: int, like: Tensor) -> tuple[Modification, ...]:
    """The modifications with what they take from the call filled in (`Modification.resolved`:
    ALiBi's default slopes for `heads` heads, in `like`'s dtype and device)."""
    return tuple(mod.resolved(heads, like) for mod in mods)


def trimmed(mods, block: Block) -> tuple[Modification, ...]:
    """The modifications without the masks that rule out no key of `block` (a window wider
    than the sequence, one chunk holding it all): the fused kernel then takes the rest whole."""
    kept = []
    for mod in mods:
        if mod.is_mask and mod.query_offset() == 0:  # a mask that places the queries stays
            lower, _ = mod.bounds(block.last - 1)
            _, upper = mod.bounds(block.first)
            if (lower is None or lower <= block.low) and (upper is None or upper >= block.high):
                continue
        kept.append(mod)
    return tuple(kept)


def offset_of(mods) -> int:
    """The position of the first query (a modification's `query_offset`: `Causal.offset`; 0
    where none places the queries)."""
    return next((offset for mod in mods if (offset := mod.query_offset())), 0)


def sink_kind(mods) -> str | None:
    """The kind (class name) of the modification whose tensor is a sink's logits, or None."""
    return next((type(mod).__name__ for mod in mods if mod.sink), None)


def sinks_of(mods) -> Tensor | None:
    """The sinks' logits (h,), or None."""
    return next((getattr(mod, mod.parameter) for mod in mods if mod.sink and mod.parameter), None)


def masks_only(mods) -> bool:
    """Whether the modifications only mask (no value changed, no sink; the query scale is
    applied before the products): then torch's fused kernel computes the scores itself, given
    the masks."""
    return all(not mod.changes_scores and not mod.sink for mod in mods)


def _masks(mods) -> list[Modification]:
    return [mod for mod in mods if mod.is_mask]


def reach(mods) -> int | None:
    """At most how many keys before its own any query reads (None: unbounded)."""
    reaches = [r for mod in _masks(mods) if (r := mod.reach()) is not None]
    return min(reaches) if reaches else None


def shifts(mods) -> bool:
    """Whether every mask moves with the query (`Modification.shifts`)."""
    return all(mod.shifts for mod in _masks(mods))


def moved(mods, start: int) -> tuple[Modification, ...]:
    """The modifications for positions counted from `start` (`Modification.moved`)."""
    return tuple(mod.moved(start) for mod in mods)


def row_bounds(mods, m):
    """(L(m), H(m)) of all the masks together (the largest L, the smallest H; None where none
    bounds), for m an int or an integer tensor."""
    low = high = None
    for mod in _masks(mods):
        lo, hi = mod.bounds(m)
        if lo is not None:
            low = lo if low is None else _larger(low, lo)
        if hi is not None:
            high = hi if high is None else _smaller(high, hi)
    return low, high


def _larger(a, b):
    return torch.maximum(a, b) if isinstance(a, Tensor) else max(a, b)


def _smaller(a, b):
    return torch.minimum(a, b) if isinstance(a, Tensor) else min(a, b)


def key_range(mods, first: int, last: int, total: int) -> tuple[int, int]:
    """(low, high): the keys low … high − 1 that the queries at positions first … last − 1 may
    read among `total`, before any mask of the user's: from the first query's L to the last
    query's H (both grow with m). The one rule for which keys a block reads (the fast path) and
    which blocks are skipped (`attention.flash`); empty when high ≤ low."""
    low, _ = row_bounds(mods, first)
    _, high = row_bounds(mods, last - 1)
    return (0 if low is None else max(0, int(low))), (
        total if high is None else min(total, int(high))
    )


def allowed(mods, block: Block, device: torch.device) -> Tensor | None:
    """(b, K) True where the block's query m may read key p (L(m) ≤ p < H(m)); None if every
    key may be read."""
    first, last, low, high = block
    queries = torch.arange(first, last, device=device)[:, None]
    keys = torch.arange(low, high, device=device)[None, :]
    below, above = row_bounds(mods, queries)
    result = None
    if below is not None:
        result = keys >= below
    if above is not None:
        result = keys < above if result is None else result & (keys < above)
    return result


def cut(s: Tensor, mods, block: Block, inplace: bool = True) -> Tensor:
    """s with −∞ at the keys the masks forbid (each mask's `scores`)."""
    for mod in _masks(mods):
        s = mod.scores(s, block, None, inplace)[0]
    return s


def forward(
    s: Tensor, mods, block: Block, params: Mapping[str, Tensor], inplace: bool
) -> tuple[Tensor, list]:
    """The block's scaled scores s through every modification in order (the masks included),
    and what each one's backward needs. `params`: each parameter's tensor by its modification's
    kind (the class name), shaped by the path to broadcast against s."""
    saved = []
    for mod in mods:
        s, kept = mod.scores(s, block, params.get(type(mod).__name__), inplace)
        saved.append(kept)
    return s, saved


def backward(
    d_s: Tensor, mods, saved: list, block: Block, params: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """dL/d(the scaled scores) in place from dL/d(the modified scores) `d_s`, through every
    modification in reverse order; returns each learned parameter's gradient summed over the
    block, by its modification's kind."""
    grads = {}
    for mod, kept in zip(reversed(mods), reversed(saved), strict=True):
        name = type(mod).__name__
        grad = mod.backward(d_s, kept, block, params.get(name))
        if grad is not None:
            grads[name] = grad
    return grads


def learned(mods) -> dict[str, Tensor]:
    """The modifications' tensors (ALiBi's slopes, the sinks' logits) by kind."""
    found = {}
    for mod in mods:
        if mod.parameter is not None and getattr(mod, mod.parameter) is not None:
            found[type(mod).__name__] = getattr(mod, mod.parameter)
    return found


def unbound(mods) -> tuple[tuple[Modification, ...], tuple[Tensor, ...]]:
    """(the modifications without their tensors, the tensors in order): an autograd Function
    takes tensors as arguments of their own (so that their gradients flow) and the rest as
    constants. `bound` puts them back."""
    tensors = []
    bare = []
    for mod in mods:
        if mod.parameter is not None and getattr(mod, mod.parameter) is not None:
            tensors.append(getattr(mod, mod.parameter))
            mod = replace(mod, **{mod.parameter: None})
        bare.append(mod)
    return tuple(bare), tuple(tensors)


def bound(bare, tensors) -> tuple[Modification, ...]:
    """The modifications of `unbound` with their tensors back."""
    given = iter(tensors)
    return tuple(
        replace(mod, **{mod.parameter: next(given)}) if mod.parameter is not None else mod
        for mod in bare
    )


# ---------------------------------------------------------------------------------------------
# The numbers behind them


def distance(first: int, last: int, low: int, high: int, like: Tensor) -> Tensor:
    """m − p for the queries at positions first … last − 1 and the keys low … high − 1:
    (b, K), in `like`'s dtype and device: ALiBi's distance and the factor of its slope's
    gradient. The positions are subtracted as integers and the difference rounded once: bfloat16
    holds whole numbers exactly only up to 256 (float16 to 2048), so positions in it would
    meet."""
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
