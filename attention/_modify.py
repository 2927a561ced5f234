"""The tuple of modifications (`attention.mods`) as the paths read it: checked and ordered once
per call, then asked which keys a block reads, where the queries sit, which tensors are learned,
and run forward and backward over a block. Private: the paths share it; a user states a
modification's methods and never calls these."""

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor

from . import mods as M
from ._shapes import ShapeError
from .mods import Block, Modification, ordered

__all__ = [
    "check",
    "joined",
    "scaled_width",
    "resolved",
    "trimmed",
    "offset_of",
    "sink_kind",
    "sinks_of",
    "masks_only",
    "reach",
    "shifts",
    "moved",
    "row_bounds",
    "key_range",
    "allowed",
    "cut",
    "forward",
    "backward",
    "learned",
    "unbound",
    "bound",
]


#: The built-in modifications a user may give, as `attention.mods` exports them.
_BUILT_IN = ", ".join(
    name
    for name in M.__all__
    if isinstance(kind := getattr(M, name), type)
    and issubclass(kind, Modification)
    and kind is not Modification
)


def check(
    where: str, mods: object, heads: int, *, keywords: bool = False
) -> tuple["Modification", ...]:
    """A user's `mods`: a tuple or list of modification objects (`Modification`), at most one of
    each kind, the per-head tensors with `heads` entries; returned in order. TypeError,
    ValueError or ShapeError naming the argument otherwise (`keywords`: some were built from
    the call's keywords, which the error about two of a kind then names)."""
    if not isinstance(mods, tuple | list):
        raise TypeError(
            f"{where}: mods must be a tuple of modifications (attention.mods), got "
            f"{type(mods).__name__}"
        )
    for i, mod in enumerate(mods):
        if not isinstance(mod, Modification):
            raise TypeError(
                f"{where}: mods[{i}] must be a modification (attention.mods: {_BUILT_IN}, or a "
                f"subclass of Modification), got {type(mod).__name__}"
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
        said = "mods and the keywords say the same thing twice" if keywords else "one of each kind"
        raise ValueError(f"{where}: {error} ({said})") from None


def joined(where: str, built: tuple, given: object, heads: int) -> tuple["Modification", ...]:
    """The modifications of one call: those its keywords `built` and those `given` by `mods=`
    (checked first, `check`), one of each kind, in order."""
    return check(where, (*built, *check(where, given, heads)), heads, keywords=bool(built))


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
