"""The forward pass through PyTorch's fused kernel (`scaled_dot_product_attention`), when the
modifications only mask: whole when the mask is the kernel's causal flag or the user's mask, and
block by block when the masks band the keys (a window, chunks, an offset), each block of query
rows against the keys its band reaches, with the band as the block's mask, so that neither pass
holds an n×n matrix or does n² work."""

import typing

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _modify
from .. import mods as M
from .blocks import plan

__all__ = ["forward"]


def forward(q: Tensor, k: Tensor, v: Tensor, scale: float, mods: tuple, allowed) -> Tensor:
    """C (B, h, n, c_h) for q (B, h, n, c_h), k and v (B, g, s, c_h), masks only in `mods`,
    the user's `allowed` (B or 1, 1, R, s) or None."""
    mods = tuple(mod for mod in mods if mod.is_mask)  # the query scale is in `scale` already
    if mods and mods != (M.Causal(0),):
        return _banded(q, k, v, scale, mods, allowed)
    causal = bool(mods)  # the kernel's own flag: query m reads p ≤ m
    gqa = q.shape[1] != k.shape[1]
    if allowed is None:
        return F.scaled_dot_product_attention(
            q * scale, k, v, is_causal=causal, scale=1.0, enable_gqa=gqa
        )  # the scale on Q first: no overflow of q·k where the scaled scores fit
    # the kernel takes a mask or its causal flag, not both: with a mask, causal joins it
    n = q.shape[-2]
    rule = _modify.allowed(mods, M.Block(0, n, 0, k.shape[-2]), q.device)
    allowed = allowed if rule is None else allowed & rule
    dead = _dead_rows(allowed)
    out = F.scaled_dot_product_attention(
        q * scale, k, v, attn_mask=allowed | dead, scale=1.0, enable_gqa=gqa
    )
    return out.masked_fill(dead, 0.0)  # opened only to avoid 0/0: those rows are zero


def _dead_rows(allowed: Tensor) -> Tensor:
    """(…, R, 1): True for the queries that may attend no key at all."""
    return ~allowed.any(dim=-1, keepdim=True)


def _banded(q: Tensor, k: Tensor, v: Tensor, scale: float, mods: tuple, allowed) -> Tensor:
    """The fused kernel on each block of query rows against the keys its masks reach, with
    the block's mask (and the user's) as the kernel's mask.

    When every mask moves with the query (`_modify.shifts`: causal and a window, not chunks),
    blocks whose keys start at the same distance before their first row see the same mask, so
    one additive mask (0 or −∞, in q's dtype) serves them all: a boolean mask would be turned
    into such a one by the kernel at every call, which costs more than the block's attention
    at small widths.
    """
    batch, heads, n, _ = q.shape
    groups, total = k.shape[1], k.shape[2]
    offset = _modify.offset_of(mods)
    _, rows = plan(batch * groups, n, total, _modify.reach(mods), heads // groups)
    shared: dict[tuple, Tensor] = {}
    out = q.new_empty(q.shape)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        block = M.Block(
            r0 + offset, r1 + offset, *_modify.key_range(mods, r0 + offset, r1 + offset, total)
        )
        first, last, low, high = block
        if high <= low:  # no key for any of these queries: zero rows
            out[:, :, r0:r1] = 0.0
            continue
        where = (first - low, last - first, high - low)
        mask = shared.get(where) if _modify.shifts(mods) else None
        if mask is None:
            rule = typing.cast(Tensor, _modify.allowed(mods, block, q.device))  # banded: some mask
            mask = _additive(rule, q.dtype)
            if _modify.shifts(mods):
                shared[where] = mask
        dead = None
        if allowed is not None:
            rows_of = slice(r0, r1) if allowed.shape[-2] > 1 else slice(None)
            given = (mask == 0) & allowed[..., rows_of, low:high]  # -> (B, 1, b, K)
            dead = _dead_rows(given)  # (B, 1, b, 1)
            mask = _additive(given | dead, q.dtype)
        part = F.scaled_dot_product_attention(
            q[:, :, r0:r1] * scale,
            k[:, :, low:high],
            v[:, :, low:high],
            attn_mask=mask,
            scale=1.0,
            enable_gqa=heads != groups,
        )  # (B, h, b, c_h)
        out[:, :, r0:r1] = part if dead is None else part.masked_fill(dead, 0.0)
    return out


def _additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask as the kernel adds it to the scores: 0 where allowed, −∞ where not."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, float("-inf")
    )
