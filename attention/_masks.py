"""Masks: which key p each query m may attend to, and a softmax that respects them.

Convention (the same as `torch.nn.functional.scaled_dot_product_attention`'s boolean mask):
True = may attend. Two kinds of mask, each with its own argument:

- `mask` (*batch, n, n): a full mask, entry (m, p) for query m and key p;
- `key_padding_mask` (*batch, n): True where the key exists (the same for every query). This is
  the opposite of `torch.nn.MultiheadAttention`'s `key_padding_mask`, where True = ignore.

A mask's leading dimensions broadcast against x's as torch broadcasts (right-aligned, each 1 or
x's, or fewer): one (n, n) mask, such as `causal_mask(n)`, serves a whole batch. Their
annotations say so with jaxtyping's '*#batch'; a mask that does not broadcast is refused with
both batches named (`attention._shapes`).

`causal` keeps p ≤ m, the diagonal included; a `window` w (with causal) keeps 0 ≤ m − p < w,
the query's last w tokens (sliding-window attention). All combine (logical and). Inside, the
user's masks become one `allowed` tensor of shape (*batch, 1, n) (key padding alone) or
(*batch, n, n), broadcastable against the scores; causal and the window are kept apart so that
the fused kernel can use its own causal flag, and the window its blocks.

Cross-attention has n queries and s keys: its masks are (*batch, n, s) and (*batch, s), and it
is never causal (the keys are another sequence).

Masked positions have no influence, even when they hold NaN or ±inf (see `hide_unattended`).
"""

import torch
from jaxtyping import Bool
from torch import Tensor

from . import _modify
from . import mods as M
from ._scores import sink_normalised

Mask = Tensor | None
#: The annotation of a full mask argument: entry (m, p) True where query m may attend key p.
MaskArg = Bool[Tensor, "*#batch n n"] | None
#: Key padding: True where key p exists (torch.nn.MultiheadAttention's True means the opposite).
KeyPaddingArg = Bool[Tensor, "*#batch n"] | None


def causal_allowed(n: int, device: torch.device) -> Tensor:
    """(n, n) lower-triangular: True where p ≤ m (`mods.Causal`'s rule)."""
    return _modify.allowed((M.Causal(),), M.Block(0, n, 0, n), device)  # pyright: ignore[reportReturnType]  # a mask given


def window_allowed(n: int, window: int, device: torch.device) -> Tensor:
    """(n, n): True where 0 ≤ m − p < w (the sliding window, the diagonal included)."""
    rule = (M.Causal(), M.Window(window))
    return _modify.allowed(rule, M.Block(0, n, 0, n), device)  # pyright: ignore[reportReturnType]  # masks given


def given_masks(mask: Mask, key_padding_mask: Mask) -> Tensor | None:
    """The user's masks as one `allowed` (causal not included); None if neither was given."""
    if key_padding_mask is None:
        return mask
    padding = key_padding_mask.unsqueeze(-2)  # (*batch, n) -> (*batch, 1, n): same for all m
    return padding if mask is None else mask & padding


def allowed_positions(
    n: int, device: torch.device, mods: tuple, allowed: Mask, *, keys: int | None = None
) -> Tensor | None:
    """True where query m may attend key p, broadcastable to (*batch, n, s) (s = `keys`, n if
    None): the masks of `mods` (query m at position m + their offset) and the user's `allowed`;
    None if all may."""
    offset = _modify.offset_of(mods)
    s = n if keys is None else keys
    rule = _modify.allowed(mods, M.Block(offset, offset + n, 0, s), device)
    if rule is None:
        return allowed
    return rule if allowed is None else allowed & rule


def attended_keys(mods: tuple, allowed: Tensor) -> Tensor:
    """(*batch, s): True for the keys that at least one query may attend (self-attention)."""
    if allowed.shape[-2] == 1:  # key padding: under every mask of mods, p is read by query p
        return allowed.squeeze(-2)  # (*batch, 1, s) -> (*batch, s)
    n = allowed.shape[-1]
    return allowed_positions(n, allowed.device, mods, allowed).any(dim=-2)  # pyright: ignore[reportOptionalMemberAccess]  # allowed given


def attending_queries(mods: tuple, allowed: Tensor) -> Tensor:
    """(*batch, n) or (*batch, 1): True for the queries that may attend at least one key."""
    if allowed.shape[-2] == 1:
        padding = allowed.squeeze(-2)  # (*batch, 1, n) -> (*batch, n)
        n = padding.shape[-1]
        low, high = _modify.row_bounds(mods, torch.arange(n, device=padding.device))
        if low is None and high is None:
            return padding.any(dim=-1, keepdim=True)  # the same answer for every query
        # query m reads the keys L(m) ≤ p < H(m): is any of them there? (counts by cumsum)
        seen = torch.nn.functional.pad(padding.long().cumsum(dim=-1), (1, 0))  # (*batch, n + 1)
        low = torch.zeros(n, dtype=torch.long) if low is None else torch.as_tensor(low).clamp(0, n)
        high = (
            torch.full((n,), n, dtype=torch.long)
            if high is None
            else torch.as_tensor(high).clamp(0, n)
        )
        return seen[..., high.to(seen.device)] > seen[..., low.to(seen.device)]
    n = allowed.shape[-1]
    return allowed_positions(n, allowed.device, mods, allowed).any(dim=-1)  # pyright: ignore[reportOptionalMemberAccess]  # allowed given


def silence_isolated(x: Tensor, mods: tuple, allowed: Mask) -> Tensor:
    """X with zeros at the positions that neither attend nor are attended (*batch, n, d).

    Such a position's output is zero by convention and no other output reads it, so replacing
    its input changes nothing, except that NaN or ±inf there no longer reach the gradients of
    the weights through the projections' backward pass (0 · NaN is NaN).
    """
    if allowed is None:
        return x
    isolated = ~(attended_keys(mods, allowed) | attending_queries(mods, allowed))
    return x.masked_fill(isolated.unsqueeze(-1), 0.0)  # (*batch, n) -> (*batch, n, 1)


def silence_cross(x: Tensor, y: Tensor, allowed: Mask) -> tuple[Tensor, Tensor]:
    """X with zeros at the queries that attend no key, Y at the keys no query attends.

    Cross-attention's queries and keys are different sequences, so each side is silenced on its
    own: such a query's output is zero by convention, such a key's weights are all zero, and
    neither reads the other's rows, so NaN or ±inf there reach no output and no gradient.
    """
    if allowed is None:
        return x, y
    blind = ~attending_queries((), allowed)  # (*batch, n), or (*batch, 1) for key padding
    unseen = ~attended_keys((), allowed)  # (*batch, s)
    x = x.masked_fill(blind.unsqueeze(-1), 0.0)  # (*batch, n) -> (*batch, n, 1)
    return x, y.masked_fill(unseen.unsqueeze(-1), 0.0)  # (*batch, s) -> (*batch, s, 1)


def hide_unattended(k: Tensor, v: Tensor, mods: tuple, allowed: Mask, heads: bool) -> tuple:
    """K and V with zero rows at the keys no query may attend.

    Their weights are exactly 0, but 0 · NaN and 0 · inf are NaN: without this, one NaN in a
    masked-out key would turn every row of C = AV (and of the fused kernel's output) into NaN.
    With `heads`, k and v are (*batch, h, n, c_h) and the mask is shared by the heads.
    """
    if allowed is None:
        return k, v
    hidden = ~attended_keys(mods, allowed)
    if heads:
        hidden = hidden.unsqueeze(-2)  # (*batch, n) -> (*batch, 1, n): shared by the heads
    hidden = hidden.unsqueeze(-1)  # (..., n) -> (..., n, 1)
    return k.masked_fill(hidden, 0.0), v.masked_fill(hidden, 0.0)


def masked_softmax(scaled: Tensor, allowed: Tensor | None, sinks: Tensor | None = None) -> Tensor:
    """Row-wise softmax over allowed positions; disallowed entries and fully masked rows are 0.
    With `sinks` (broadcastable to (..., n, 1)), each row's denominator also holds exp(σ): the
    row's weights sum to 1 − exp(σ)/(exp(σ) + Σ exp(ω̃)).

    The row maximum is taken over allowed entries (and the sink) only, and treated as a constant,
    softmax being shift invariant, so scores of ±1e4 stay finite, and a row with no allowed key
    divides 0 by 1 instead of 0 by 0: its weights, and their gradients, are zeros, never NaN.
    """
    if allowed is not None:
        scaled = scaled.masked_fill(~allowed, float("-inf"))
    return sink_normalised(scaled, sinks)[0]


def book_mask(blocked: Tensor | None, n: int) -> tuple[bool, int | None, Tensor | None]:
    """(causal, window, allowed) from the books' (n, n) mask (True = may NOT attend): the causal
    flag when it is the causal mask, the causal flag and a window w when it is the band of the
    last w tokens (the book's Gemma 3 `mask_local`), else allowed = ~blocked."""
    if blocked is None:
        return False, None, None
    allowed = ~blocked
    if n == 0:
        return False, None, allowed
    width = int(allowed[-1].sum())  # the last query sees its last w tokens in a band
    if width >= 1 and torch.equal(allowed, window_allowed(n, width, blocked.device)):
        return True, (width if width < n else None), None
    return False, None, allowed


def fully_masked_rows(allowed: Tensor) -> Tensor:
    """(…, n): True for the queries that may attend no key at all."""
    return ~allowed.any(dim=-1)
