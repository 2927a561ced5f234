# pyright: strict
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
of the package do, and take the same keywords as before. `distance` gives m − p over a block,
for a rule of one's own that reads the positions. What the paths do with the tuple (check and
order it, find the keys a block reads, run it forward and backward over a block) is private
(`attention._modify`, the numbers in `attention._scores`): a modification is its methods.
"""

import functools
import math
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ._arguments import check_cap, check_finite, check_offset, check_positive
from ._scores import distance, masked_outside, softcap_parts
from ._shapes import ShapeError

__all__ = [
    "Modification",
    "Block",
    "Causal",
    "Window",
    "Chunked",
    "QueryScale",
    "Temperature",
    "Softcap",
    "Clamp",
    "ALiBi",
    "Sinks",
    "default_slopes",
    "distance",
    "modifications",
]


#: Where each built-in rule on a row of scores acts, declared once for both sides: each object
#: below takes its `stage` from its row, and derive gives each registered variant its `rank`
#: from the same rows (`derive.graph.order`, which reads this table from this file as text,
#: without importing attention or torch), so that a combination derives its rules in the order
#: they run here (temperature tuning, softcapping, clamping and ALiBi do not commute). Each row
#: names the rule as derive's registry names its variant. The masks are not in it: a −∞
#: commutes with every rule, and derive places a mask by the step it replaces (`Causal`,
#: `Window` and `Chunked` state their stages, 30 to 32). A user's rule states its own stage.
SCORE_RULES: tuple[tuple[str, int], ...] = (
    ("query-scale", 0),
    ("temperature-tuning", 10),
    ("softcap", 20),
    ("clamp", 22),
    ("alibi", 25),
    ("sinks", 40),
)


def _stage(rule: str) -> int:
    """The stage of a built-in rule on the scores, from its row of `SCORE_RULES`."""
    return dict(SCORE_RULES)[rule]


#: A position (0-based), or an integer tensor of positions.
Position = int | Tensor
#: One end of the keys a query may read, L(m) or H(m), for a `Position`; None: no bound.
Bound = int | Tensor | None


class Block(NamedTuple):
    """A block of scores: the queries at positions first … last − 1 against the keys at
    positions low … high − 1 (0-based; a query's position counts the tokens before it, a cache's
    included).

    Args:
        first: the position of the block's first query.
        last: one past the position of its last query (b = last − first rows).
        low: the position of its first key.
        high: one past the position of its last key (K = high − low columns).
    """

    first: int
    last: int
    low: int
    high: int


@dataclass(frozen=True)
class Modification:
    """What every modification states. The defaults: no effect on the scores, nothing in the
    backward pass, every key allowed, no learned parameter."""

    #: Where in a row's computation it acts (the module docstring's order); the built-in rules
    #: on the scores take theirs from `SCORE_RULES`, which derive's ranks read.
    stage: ClassVar[int] = 0
    #: The name of its learned tensor field, if it has one (a tensor of one number per head).
    parameter: ClassVar[str | None] = None
    #: Whether its tensor is a sink's logit per head, e^{ζ_ℓ} in each row's denominator (`Sinks`):
    #: the paths then normalise each row with it (`sink_normalised`) and give its gradient.
    sink: ClassVar[bool] = False
    #: Whether it is the causal mask (`Causal`): a decoding step puts `Causal(offset)` in its
    #: place, the new queries sitting after the cache's keys (and adds it where it is absent:
    #: decoding is causal).
    causal: ClassVar[bool] = False
    #: Whether it belongs to one call, not to a module (`Causal`, `Window`): a module's forward
    #: takes it from its mask argument (and `sliding_window=`), so a module built with it in
    #: `mods=` is refused.
    of_the_call: ClassVar[bool] = False
    #: Whether it is made for causal attention (ALiBi's bias counts m − p ≥ 0; Llama 4's chunks
    #: hold the keys up to the query's): the book's grouped module built with it masks causally.
    needs_causal: ClassVar[bool] = False
    #: The module buffer that keeps its tensor (ALiBi's given slopes: ``alibi_slopes``), read at
    #: each call so that it follows `.to()`; None (the default) where a module keeps none.
    buffer: ClassVar[str | None] = None

    def scores(
        self, s: Tensor, block: Block, param: Tensor | None, inplace: bool
    ) -> tuple[Tensor, Any]:
        """The block's scores after it, and what its backward needs. The default: a mask (one
        that states `bounds`) puts −∞ at the keys it rules out; anything else leaves s as it is.

        Args:
            s: the block's scores as they reach it, `(..., b, K)`.
            block: the positions of the block's queries and keys.
            param: its learned tensor (one number per head), shaped by the path to broadcast
                against s; None where it has none.
            inplace: whether s may be overwritten (no autograd through it).

        Returns:
            The pair (the scores after it, `(..., b, K)`; what its `backward` needs, None for
                nothing). The default saves None.
        """
        if self.is_mask:
            return masked_outside(s, block, self.bounds, inplace), None
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
        """Where it places the queries after a cache's keys (`Causal.offset`).

        Returns:
            The position of the first query; 0 by default.
        """
        return 0

    def query_scale(self) -> float | None:
        """The c of the factor 1/√c of q·k, where it sets one (`QueryScale`).

        Returns:
            That c, or None (the default) to keep the head width c_h.
        """
        return None

    def resolved(self, heads: int, like: Tensor) -> "Modification":
        """The same with what it takes from the call filled in (ALiBi's default slopes).

        Args:
            heads: the call's number of heads h.
            like: a tensor whose dtype and device a filled-in tensor takes.

        Returns:
            The modification ready for the call; itself by default.
        """
        return self

    def backward(
        self, d_s: Tensor, saved: Any, block: Block, param: Tensor | None
    ) -> Tensor | None:
        """Turns dL/d(its output) into dL/d(its input) in place. The default leaves d_s alone.

        Args:
            d_s: dL/d(its output) over the block, `(..., b, K)`; overwritten with dL/d(its input).
            saved: what its `scores` returned for its backward.
            block: the positions of the block's queries and keys.
            param: its learned tensor, shaped as `scores` got it; None where it has none.

        Returns:
            Its parameter's gradient summed over the block's rows and keys, `(...,)`; None where
                it has no parameter to train (the default).
        """
        return None

    def bounds(self, m: Position) -> tuple[Bound, Bound]:
        """The keys query m may read: L(m) ≤ p < H(m). Both never decrease as m grows.

        Args:
            m: a query's position (0-based, a cache's tokens counted), or an integer tensor of
                positions.

        Returns:
            The pair (L(m), H(m)), each like m; None for no bound (the default: both None).
        """
        return None, None

    def reach(self) -> int | None:
        """At most how many keys before its own a query reads.

        Returns:
            The largest m − L(m); None (the default) where it is unbounded.
        """
        return None

    #: Whether it moves with the positions (L(m + t) = L(m) + t, H likewise, the same change
    #: of the scores): a block's mask then depends only on where its keys start relative to
    #: its queries, and a cache that dropped its first keys may count positions from its own.
    shifts: ClassVar[bool] = True

    def moved(self, start: int) -> "Modification":
        """The same modification for positions counted from `start`.

        Args:
            start: the position where the new count's 0 sits (a cache whose first key sits
                there).

        Returns:
            The modification for the new positions; itself (the default) where it `shifts`.
        """
        return self


# ---------------------------------------------------------------------------------------------
# The masks: which keys a query may read


@dataclass(frozen=True)
class Causal(Modification):
    """Query m reads the keys p ≤ m + offset: it sits at position m + `offset` (the tokens of a
    cache before it) and reads no later token.

    Args:
        offset: the number of tokens before the first query (a cache's keys); 0 by default.

    Raises:
        TypeError: when offset is not an integer (a bool included).
        ValueError: when offset is negative.
    """

    offset: int = 0
    stage: ClassVar[int] = 30
    causal: ClassVar[bool] = True
    of_the_call: ClassVar[bool] = True

    def __post_init__(self):
        check_offset("Causal", self.offset)

    def bounds(self, m: Position) -> tuple[Bound, Bound]:
        """The keys query m may read: every key up to its own.

        Args:
            m: a query's position (its offset included), or an integer tensor of positions.

        Returns:
            The pair (None, m + 1).
        """
        return None, m + 1

    def query_offset(self) -> int:
        """Where the queries sit after a cache's keys.

        Returns:
            The position of the first query, `offset`.
        """
        return self.offset


@dataclass(frozen=True)
class Window(Modification):
    """A sliding window of w tokens: query m reads the keys p > m − w (with `Causal`:
    0 ≤ m − p < w; Mistral, Gemma's and GPT-OSS's local layers).

    Args:
        size: the window's width w, in tokens.

    Raises:
        ValueError: when size is not a positive integer.
    """

    size: int
    stage: ClassVar[int] = 31
    of_the_call: ClassVar[bool] = True

    def __post_init__(self):
        check_positive("Window", size=self.size)

    def bounds(self, m: Position) -> tuple[Bound, Bound]:
        """The keys query m may read: none more than w − 1 before its own.

        Args:
            m: a query's position, or an integer tensor of positions.

        Returns:
            The pair (m − w + 1, None); the window bounds no later key.
        """
        return m - self.size + 1, None

    def reach(self) -> int | None:
        """At most how many keys before its own a query reads.

        Returns:
            w − 1.
        """
        return self.size - 1


@dataclass(frozen=True)
class Chunked(Modification):
    """Chunked attention (Llama 4's `attention_chunk_size` C): the positions fall into chunks
    of C tokens, 0 … C − 1, C … 2C − 1, …, and query m reads the keys of its own chunk only,
    ⌊p / C⌋ = ⌊m / C⌋ (with `Causal`: the keys from its chunk's start to m). A query's cost is
    bounded by C, whatever the sequence's length.

    Args:
        size: the chunk's length C, in tokens.
        start: the position, in the sequence whose chunks these are, of this object's position
            0 (set by `moved` for a cache that dropped its first keys); 0 by default.

    Raises:
        ValueError: when size is not a positive integer, or start is negative.
        TypeError: when start is not an integer.
    """

    size: int
    start: int = 0
    stage: ClassVar[int] = 32
    shifts: ClassVar[bool] = False
    needs_causal: ClassVar[bool] = True

    def __post_init__(self):
        check_positive("Chunked", size=self.size)
        check_offset("Chunked", self.start, name="start")

    def bounds(self, m: Position) -> tuple[Bound, Bound]:
        """The keys query m may read: those of its own chunk.

        Args:
            m: a query's position, or an integer tensor of positions.

        Returns:
            The pair (the first position of m's chunk, the first position of the next chunk).
        """
        first = ((m + self.start) // self.size) * self.size - self.start  # m's chunk's start
        return first, first + self.size

    def moved(self, start: int) -> "Chunked":
        """The same chunks for positions counted from `start` (chunks do not shift).

        Args:
            start: the position where the new count's 0 sits.

        Returns:
            A `Chunked` of the same size whose `start` is increased by `start`.
        """
        return Chunked(self.size, self.start + start)

    def reach(self) -> int | None:
        """At most how many keys before its own a query reads.

        Returns:
            C − 1.
        """
        return self.size - 1


# ---------------------------------------------------------------------------------------------
# What changes the scores' values


@dataclass(frozen=True)
class QueryScale(Modification):
    """The scale 1/√`scalar` of q·k in place of 1/√c_h (Gemma 2 and 3's
    `query_pre_attn_scalar`). It acts on the queries before their products (so that q·k does
    not overflow where the scaled scores fit), read by `scaled_width`; nothing on a block.

    Args:
        scalar: the c of the scale 1/√c, a positive finite number.

    Raises:
        ValueError: when scalar is not a positive finite number.
    """

    scalar: float
    stage: ClassVar[int] = _stage("query-scale")

    def __post_init__(self):
        check_finite("QueryScale", "scalar", self.scalar)
        check_cap("QueryScale", "scalar", self.scalar)

    def query_scale(self) -> float | None:
        """The c of the factor 1/√c of q·k.

        Returns:
            `scalar`.
        """
        return self.scalar


@dataclass(frozen=True)
class Temperature(Modification):
    """Llama 4's temperature tuning on its layers without RoPE (after Nakanishi's
    Scalable-Softmax): query m's scores multiplied by τ_m = α log(1 + ⌊(m + 1)/F⌋) + 1 (`scale`
    α, `floor` F, m the 0-based position), so that long contexts keep sharp weights; τ_m = 1 for
    m + 1 < F, and F → ∞ gives plain attention. Hugging Face multiplies the queries by τ_m before
    their products, the same numbers.

    Args:
        floor: F, a positive finite number (Llama 4's `floor_scale`).
        scale: α, a finite number (Llama 4's `attn_scale`).
        start: the position, in the sequence, of this object's position 0 (set by `moved`);
            0 by default.

    Raises:
        ValueError: when floor is not a positive finite number, scale is not finite, or start
            is negative.
        TypeError: when start is not an int.
    """

    floor: float
    scale: float
    start: int = 0
    stage: ClassVar[int] = _stage("temperature-tuning")
    shifts: ClassVar[bool] = False

    def __post_init__(self):
        check_finite("Temperature", "floor", self.floor)
        check_cap("Temperature", "floor", self.floor)
        check_finite("Temperature", "scale", self.scale)
        check_offset("Temperature", self.start, name="start")

    def factors(self, first: int, last: int, like: Tensor) -> Tensor:
        """τ_m for the queries at positions first … last − 1 (computed in float64, then cast).

        Args:
            first: the first query's position.
            last: one past the last query's position.
            like: a tensor whose dtype and device the factors take.

        Returns:
            The factors τ_m, `(b, 1)` with b = last − first.
        """
        positions = torch.arange(first, last, device=like.device, dtype=torch.float64) + self.start
        tau = torch.log1p(torch.floor((positions + 1.0) / self.floor)) * self.scale + 1.0
        return tau.to(like.dtype)[:, None]

    def moved(self, start: int) -> "Temperature":
        """The same factors for positions counted from `start` (they do not shift).

        Args:
            start: the position where the new count's 0 sits.

        Returns:
            A `Temperature` with the same F and α whose `start` is increased by `start`.
        """
        return Temperature(self.floor, self.scale, self.start + start)

    def scores(
        self, s: Tensor, block: Block, param: Tensor | None, inplace: bool
    ) -> tuple[Tensor, Any]:
        """Multiplies each query's scores by its τ_m.

        Args:
            s: the block's scores, `(..., b, K)`.
            block: the positions of the block's queries and keys.
            param: unused (no learned tensor).
            inplace: whether s may be overwritten.

        Returns:
            The pair (τ_m ω̃ over the block, `(..., b, K)`; the factors τ_m, `(b, 1)`).
        """
        tau = self.factors(block.first, block.last, s)
        return (s.mul_(tau) if inplace else s * tau), tau

    def backward(
        self, d_s: Tensor, saved: Any, block: Block, param: Tensor | None
    ) -> Tensor | None:
        """Multiplies the gradient by τ_m, in place.

        Args:
            d_s: dL/d(its output), `(..., b, K)`; overwritten with dL/d(its input).
            saved: the factors τ_m that `scores` returned, `(b, 1)`.
            block: the positions of the block's queries and keys.
            param: unused (no learned tensor).

        Returns:
            None: it has no parameter.
        """
        d_s.mul_(saved)  # ∂(τ_m ω̃)/∂ω̃ = τ_m
        return None


@dataclass(frozen=True)
class Softcap(Modification):
    """Logit softcapping (Gemma 2): each score ω̃ replaced by κ tanh(ω̃ / κ), within (−κ, κ);
    the gradient takes 1 − tanh²(ω̃ / κ).

    Args:
        cap: κ, a positive finite number.

    Raises:
        ValueError: when cap is not a positive finite number.
    """

    cap: float
    stage: ClassVar[int] = _stage("softcap")

    def __post_init__(self):
        check_finite("Softcap", "cap", self.cap)
        check_cap("Softcap", "cap", self.cap)

    def scores(
        self, s: Tensor, block: Block, param: Tensor | None, inplace: bool
    ) -> tuple[Tensor, Any]:
        """Caps the block's scores (`softcap_parts`, right for every κ in s's dtype).

        Args:
            s: the block's scores, `(..., b, K)`.
            block: the positions of the block's queries and keys (unused).
            param: unused (no learned tensor).
            inplace: whether s may be overwritten (it may then hold tanh(ω̃ / κ)).

        Returns:
            The pair (κ tanh(ω̃ / κ); tanh(ω̃ / κ)), both `(..., b, K)`.
        """
        return softcap_parts(s, self.cap, overwrite=inplace)

    def backward(
        self, d_s: Tensor, saved: Any, block: Block, param: Tensor | None
    ) -> Tensor | None:
        """Multiplies the gradient by 1 − tanh²(ω̃ / κ), in place.

        Args:
            d_s: dL/d(its output), `(..., b, K)`; overwritten with dL/d(its input).
            saved: the tanh(ω̃ / κ) that `scores` returned; overwritten (its memory is reused).
            block: the positions of the block's queries and keys (unused).
            param: unused (no learned tensor).

        Returns:
            None: it has no parameter.
        """
        d_s.mul_(saved.square_().neg_().add_(1.0))  # 1 − tanh², saved's memory reused
        return None


@dataclass(frozen=True)
class Clamp(Modification):
    """Clamping: each score ω̃ held within [−γ, γ] (`bound` γ), the hard counterpart of
    `Softcap`; a score beyond the bound passes no gradient back (torch.clamp's rule: the bound
    itself still does). `derive latex --variant clamp` derives it; the guide adds it as the
    example of a modification of one's own (docs/guides/modifications.md).

    Args:
        bound: γ, a positive finite number.

    Raises:
        ValueError: when bound is not a positive finite number.
    """

    bound: float
    stage: ClassVar[int] = _stage("clamp")

    def __post_init__(self):
        check_finite("Clamp", "bound", self.bound)
        check_cap("Clamp", "bound", self.bound)

    def scores(
        self, s: Tensor, block: Block, param: Tensor | None, inplace: bool
    ) -> tuple[Tensor, Any]:
        """Clamps the block's scores to [−γ, γ].

        Args:
            s: the block's scores, `(..., b, K)`.
            block: the positions of the block's queries and keys (unused).
            param: unused (no learned tensor).
            inplace: whether s may be overwritten.

        Returns:
            The pair (the clamped scores; True where −γ ≤ ω̃ ≤ γ), both `(..., b, K)`.
        """
        inside = s.abs() <= self.bound  # where the gradient passes: −γ ≤ ω̃ ≤ γ
        return (
            s.clamp_(-self.bound, self.bound) if inplace else s.clamp(-self.bound, self.bound)
        ), inside

    def backward(
        self, d_s: Tensor, saved: Any, block: Block, param: Tensor | None
    ) -> Tensor | None:
        """Zeroes the gradient of the scores beyond the bound, in place.

        Args:
            d_s: dL/d(its output), `(..., b, K)`; overwritten with dL/d(its input).
            saved: the boolean tensor that `scores` returned, True where the gradient passes.
            block: the positions of the block's queries and keys (unused).
            param: unused (no learned tensor).

        Returns:
            None: it has no parameter.
        """
        d_s.mul_(saved)
        return None


@dataclass(frozen=True, eq=False)
class ALiBi(Modification):
    """ALiBi (Press, Smith and Lewis, 2022; BLOOM, MPT): −μ_ℓ (m − p) added to head ℓ's scores,
    a slope μ_ℓ per head (with `Causal`). Its slope's gradient is −Σ_{m,p} dω̃_{m,p} (m − p).

    Args:
        slopes: the slopes μ, a float tensor `(h,)`, learned if it requires grad; None (the
            default) for Press et al.'s (`default_slopes`), filled in by `resolved`.

    Raises:
        TypeError: when slopes is neither None nor a float tensor.
        ShapeError: when slopes has more than one dimension (their count, h, is checked by
            the call that knows the heads).
    """

    slopes: Tensor | None = None
    stage: ClassVar[int] = _stage("alibi")
    parameter: ClassVar[str | None] = "slopes"
    needs_causal: ClassVar[bool] = True
    buffer: ClassVar[str | None] = "alibi_slopes"

    def __post_init__(self):
        _check_per_head("ALiBi", "slopes", self.slopes)

    def resolved(self, heads: int, like: Tensor) -> "ALiBi":
        """With no slopes given, Press et al.'s (`default_slopes`).

        Args:
            heads: the number of heads h to make slopes for.
            like: a tensor whose dtype and device the default slopes take.

        Returns:
            Itself where it has slopes; otherwise a new `ALiBi` with the default slopes `(h,)`.
        """
        if self.slopes is not None:
            return self
        return ALiBi(default_slopes(heads, dtype=like.dtype, device=like.device))

    def scores(
        self, s: Tensor, block: Block, param: Tensor | None, inplace: bool
    ) -> tuple[Tensor, Any]:
        """Subtracts μ_ℓ (m − p) from the block's scores.

        Args:
            s: the block's scores, `(..., b, K)`.
            block: the positions of the block's queries and keys (m and p).
            param: the slopes, shaped by the path to broadcast against s; required (the slopes
                are read from here, not from the object, so `resolved` must have run).
            inplace: whether s may be overwritten.

        Returns:
            The pair (the biased scores, `(..., b, K)`; None).
        """
        slope = typing.cast(Tensor, param)  # the path gives it: the slopes are resolved first
        gaps = distance(*block, s)
        return (s.addcmul_(slope, gaps, value=-1.0) if inplace else s - slope * gaps), None

    def backward(
        self, d_s: Tensor, saved: Any, block: Block, param: Tensor | None
    ) -> Tensor | None:
        """The slopes' gradient; the scores' gradient passes unchanged (the bias is additive).

        Args:
            d_s: dL/d(its output), `(..., b, K)`; left as it is.
            saved: unused (None).
            block: the positions of the block's queries and keys (m and p).
            param: the slopes as `scores` got them; None where they are not learned.

        Returns:
            −Σ_{m,p} dω̃_{m,p} (m − p), `(...,)`; None where param is None.
        """
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


def default_slopes(
    heads: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """ALiBi's default slopes μ (Press, Smith and Lewis, *Train Short, Test Long*, 2022): for h a
    power of 2, μ_ℓ = 2^(−8ℓ/h), ℓ = 1 … h; for other h, BLOOM's interleaved extension.

    Args:
        heads: the number of heads h.
        dtype: the slopes' dtype; float32 by default.
        device: the slopes' device; None for torch's default.

    Returns:
        The slopes μ, `(h,)`.

    Raises:
        ValueError: when heads is not a positive integer.
    """
    check_positive("default_slopes", heads=heads)
    return torch.tensor(_geometric(heads), dtype=dtype, device=device)


@dataclass(frozen=True, eq=False)
class Sinks(Modification):
    """Attention sinks (GPT-OSS): a logit ζ_ℓ per head (`logits`, (h,)), e^{ζ_ℓ} in each row's
    denominator, a key every query reads that has no value. It acts in the softmax
    (`sink_normalised`, `online_start`), not on the scores; its gradient is
    −Σ_m a_{m,ζ} rowsum(A ∘ dA)_m (`sink_gradient`).

    Args:
        logits: the sinks' logits ζ, a float tensor `(h,)`, learned if it requires grad; None
            (the default) for no sink.

    Raises:
        TypeError: when logits is neither None nor a float tensor.
        ShapeError: when logits has more than one dimension (their count, h, is checked by
            the call that knows the heads).
    """

    logits: Tensor | None = None
    stage: ClassVar[int] = _stage("sinks")
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


# ---------------------------------------------------------------------------------------------
# The tuple of one call


def ordered(mods: Iterable[Modification]) -> tuple[Modification, ...]:
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
    """The tuple of modifications for the public keywords (checked by the caller; each object
    also checks its own values).

    Args:
        causal: whether each query reads no later key (`Causal`).
        offset: the number of tokens before the first query (a cache's); read only with causal.
        window: a sliding window's width w (`Window`); None for none.
        chunk: the chunk length C of chunked attention (`Chunked`); None for none.
        temperature: Llama 4's temperature tuning (`Temperature`), added as given; None for none.
        softcap: the softcap κ (`Softcap`); None for none.
        alibi: ALiBi's slopes, a float tensor `(h,)`, or True for the default slopes (`ALiBi`);
            False for none (None, which the public functions refuse, gives the default slopes).
        sinks: the sinks' logits, `(h,)` (`Sinks`); None for none.
        query_pre_attn_scalar: the c of the scale 1/√c of q·k (`QueryScale`); None for c_h.

    Returns:
        The modifications, in the order they act (their `stage`).

    Raises:
        ValueError: when a value is out of range (a negative offset, a window, chunk, softcap
            or query_pre_attn_scalar that is not positive).
        TypeError: when offset (with causal) is not an integer, or alibi (other than True) or
            sinks is not a float tensor.
        ShapeError: when alibi's slopes or sinks has more than one dimension.
    """
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
