"""The unchecked computations behind `attention.functional` and the modules.

Nothing here checks its arguments: the public functions and the modules' `forward` check first,
then call in here. Keeping checks out of this file keeps it traceable by `torch.compile`.

Shapes use the book's letters: x (*batch, n, d), w (d, c), q (*batch, n, c), k/v (*batch, s, c)
(s = n in self-attention; the keys of another sequence in cross-attention); with heads,
(*batch, h, n, c_h).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _fused
from ._masks import allowed_positions, band_allowed, hide_unattended, masked_softmax


def projection(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """Q = X W (+ b)."""
    if b is None:
        return x @ w
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(
        *x.shape[:-1], w.shape[-1]
    )  # (*batch·n, c) -> (*batch, n, c)


def scale(width: int) -> float:
    """1/√c: the factor that brings q·k of c unit-variance components back to unit variance."""
    return 1.0 / math.sqrt(width)


def scores(q: Tensor, k: Tensor) -> Tensor:
    """Ω = Q Kᵀ."""
    return q @ k.mT  # k: (..., s, c) -> (..., c, s)


def scaled_scores(omega: Tensor, width: int) -> Tensor:
    """Ω / √c."""
    return omega * scale(width)


def softmax_rows(scaled: Tensor, allowed: Tensor | None) -> Tensor:
    """Softmax of each row (over the keys p), masked entries 0."""
    if allowed is None:
        return torch.softmax(scaled, dim=-1)
    return masked_softmax(scaled, allowed)


def weights(omega: Tensor, width: int, allowed: Tensor | None) -> Tensor:
    """A = softmax(Ω / √c) row by row, masked entries 0."""
    return softmax_rows(scaled_scores(omega, width), allowed)


def context(a: Tensor, v: Tensor) -> Tensor:
    """C = A V."""
    return a @ v


def attend_explicitly(
    q: Tensor, k: Tensor, v: Tensor, width: int, allowed: Tensor | None, dropout_p: float
) -> tuple[Tensor, Tensor]:
    """(C, A) step by step: Ω = QKᵀ, A = softmax(Ω/√c), dropout on A, C = AV.

    q: (..., n, c), k, v: (..., s, c); `width` is the c of √c; `allowed` broadcasts to
    (..., n, s).
    """
    a = weights(scores(q, k), width, allowed)
    if dropout_p > 0.0:
        a = F.dropout(a, p=dropout_p)
    return context(a, v), a


def attend_fused(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    width: int,
    causal: bool,
    allowed: Tensor | None,
    window: int | None = None,
) -> Tensor:
    """C from PyTorch's fused kernel (and the exact backward of `attention._fused`).

    q: (*batch, h, n, c_h), k, v: (*batch, h, s, c_h), h ≥ 1; `allowed` (the user's masks,
    causal and the window kept apart, or None) broadcasts to (*batch, 1, n, s). Only a 4-D
    (B, h, n, c_h) input reaches the fused kernel (a 2-D one falls back to the math kernel: 3×
    slower and O(n²) memory), hence the reshapes.
    """
    *lead, heads, n, head_width = q.shape
    s = k.shape[-2]
    q4 = q.reshape(-1, heads, n, head_width)  # (*batch, h, n, c_h) -> (B, h, n, c_h)
    k4 = k.reshape(-1, heads, s, head_width)  # (*batch, h, s, c_h) -> (B, h, s, c_h)
    v4 = v.reshape(-1, heads, s, head_width)
    if allowed is not None:
        rows = allowed.shape[-2]  # 1 for key padding alone, else n
        allowed = torch.broadcast_to(allowed, (*lead, 1, rows, s)).reshape(-1, 1, rows, s)
    out = _fused.attention(q4, k4, v4, scale(width), causal, allowed, window)
    return out.view(*lead, heads, n, head_width)  # (B, h, n, c_h) -> (*batch, h, n, c_h)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    width: int,
    causal: bool,
    allowed: Tensor | None,
    dropout_p: float,
    return_weights: bool,
    heads: bool,
    window: int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """C (or (C, A)) from Q, K, V, choosing the fused or the explicit path; `width` is the c
    of the 1/√c scaling (c_h with heads). `allowed`: the user's masks (`_masks.given_masks`,
    (*batch, 1 or n, s), shared by the heads), causal and the window (with causal: query m
    attends key p iff 0 ≤ m − p < w) kept apart.

    The explicit path serves when A is wanted or dropout is on (so that dropout draws the same
    random numbers as the book's `nn.Dropout` on the weights); otherwise the fused kernel runs
    (with a window narrower than the sequence, block by block). Keys that no query may attend
    are zeroed first (`_masks.hide_unattended`).
    """
    if window is not None and window >= q.shape[-2]:
        window = None  # a window as long as the sequence is the causal mask
    k, v = hide_unattended(k, v, causal, allowed, heads, window)
    if heads and allowed is not None:
        allowed = allowed.unsqueeze(-3)  # (*batch, R, s) -> (*batch, 1, R, s): shared by heads
    if return_weights or dropout_p > 0.0:
        full = allowed_positions(q.shape[-2], q.device, causal, allowed, window)
        c, a = attend_explicitly(q, k, v, width, full, dropout_p)
        return (c, a) if return_weights else c
    if not heads:
        q, k, v = q.unsqueeze(-3), k.unsqueeze(-3), v.unsqueeze(-3)  # (*b, n, c) -> (*b, 1, n, c)
        if allowed is not None:
            allowed = allowed.unsqueeze(-3)  # (*batch, R, s) -> (*batch, 1, R, s)
        out = attend_fused(q, k, v, width, causal, allowed, window)
        return out.squeeze(-3)  # (*batch, 1, n, c) -> (*batch, n, c)
    return attend_fused(q, k, v, width, causal, allowed, window)


def split_heads(t: Tensor, heads: int) -> Tensor:
    """(*batch, n, c) -> (*batch, h, n, c_h): head i takes columns i·c_h … (i+1)·c_h − 1."""
    *lead, n, c = t.shape
    return t.view(*lead, n, heads, c // heads).transpose(-3, -2)  # -> (*batch, h, n, c_h)


def merge_heads(t: Tensor) -> Tensor:
    """(*batch, h, n, c_h) -> (*batch, n, h·c_h): the heads' context vectors side by side."""
    *lead, heads, n, width = t.shape
    return t.transpose(-3, -2).reshape(*lead, n, heads * width)  # -> (*batch, n, c)


def attend_new_rows(
    q: Tensor, k: Tensor, v: Tensor, *, width: int, window: int | None, dropout_p: float,
    heads: bool,
) -> Tensor:  # fmt: skip
    """The context rows of t new tokens during generation: their queries q (..., t, c) against
    the keys k and values v (..., s, c) of every token so far, whose last t rows are the new
    tokens' own. New token i sits at position s − t + i and attends key p iff p ≤ s − t + i
    (and s − t + i − p < w with a window).

    Without cached rows (s = t) this is causal self-attention over the new rows, on the fast
    path; with them, the explicit path on the window's keys (one row of scores per new token).
    """
    t, s = q.shape[-2], k.shape[-2]
    if t == s:
        return attend(
            q, k, v, width=width, causal=True, allowed=None, dropout_p=dropout_p,
            return_weights=False, heads=heads, window=window,
        )  # fmt: skip
    if window is not None and s > window + t - 1:  # the keys no new token can see
        s = window + t - 1
        k, v = k[..., -s:, :], v[..., -s:, :]  # (..., s, c) -> (..., w + t − 1, c)
    # one new token after trimming sees every key: no mask to apply
    allowed = None if t == 1 else band_allowed(range(s - t, s), range(s), window, q.device)
    return attend_explicitly(q, k, v, width, allowed, dropout_p)[0]


def kept_rows(cache: Tensor, window: int | None, dim: int = -2) -> Tensor:
    """The rows of a key or value cache (s rows along `dim`) that later tokens can still
    attend: all of them, or the last w with a window."""
    if window is None or cache.shape[dim] <= window:
        return cache
    return cache.narrow(dim, cache.shape[dim] - window, window)  # s rows -> the last w
