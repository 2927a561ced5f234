"""The unchecked computations behind `attention.functional` and the modules.

Nothing here checks its arguments: the public functions and the modules' `forward` check first,
then call in here. Keeping checks out of this file keeps it traceable by `torch.compile`.

Shapes use the seed's letters: x (*batch, n, d), w (d, c), q/k/v (*batch, n, c); with heads,
(*batch, h, n, c_h).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _fused
from ._masks import allowed_positions, hide_unattended, masked_softmax


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
    return q @ k.mT  # k: (..., n, c) -> (..., c, n)


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

    q, k, v: (..., n, c); `width` is the c of √c; `allowed` broadcasts to (..., n, n).
    """
    a = weights(scores(q, k), width, allowed)
    if dropout_p > 0.0:
        a = F.dropout(a, p=dropout_p)
    return context(a, v), a


def attend_fused(
    q: Tensor, k: Tensor, v: Tensor, width: int, causal: bool, allowed: Tensor | None
) -> Tensor:
    """C from PyTorch's fused kernel (and the exact backward of `attention._fused`).

    q, k, v: (*batch, h, n, c_h), h ≥ 1; `allowed` (the user's masks, causal kept apart, or None)
    broadcasts to (*batch, 1, n, n). Only a 4-D (B, h, n, c_h) input reaches the fused kernel (a
    2-D one falls back to the math kernel: 3× slower and O(n²) memory), hence the reshapes.
    """
    *lead, heads, n, head_width = q.shape
    q4 = q.reshape(-1, heads, n, head_width)  # (*batch, h, n, c_h) -> (B, h, n, c_h)
    k4 = k.reshape(-1, heads, n, head_width)
    v4 = v.reshape(-1, heads, n, head_width)
    if allowed is not None:
        rows = allowed.shape[-2]  # 1 for key padding alone, else n
        allowed = torch.broadcast_to(allowed, (*lead, 1, rows, n)).reshape(-1, 1, rows, n)
    out = _fused.attention(q4, k4, v4, scale(width), causal, allowed)
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
) -> Tensor | tuple[Tensor, Tensor]:
    """C (or (C, A)) from Q, K, V, choosing the fused or the explicit path; `width` is the c
    of the 1/√c scaling (c_h with heads). `allowed`: the user's masks (`_masks.given_masks`,
    (*batch, 1 or n, n), shared by the heads), causal kept apart.

    The explicit path serves when A is wanted or dropout is on (so that dropout draws the same
    random numbers as the book's `nn.Dropout` on the weights); otherwise the fused kernel runs.
    Keys that no query may attend are zeroed first (`_masks.hide_unattended`).
    """
    k, v = hide_unattended(k, v, causal, allowed, heads)
    if heads and allowed is not None:
        allowed = allowed.unsqueeze(-3)  # (*batch, R, n) -> (*batch, 1, R, n): shared by heads
    if return_weights or dropout_p > 0.0:
        full = allowed_positions(q.shape[-2], q.device, causal, allowed)
        c, a = attend_explicitly(q, k, v, width, full, dropout_p)
        return (c, a) if return_weights else c
    if not heads:
        q, k, v = q.unsqueeze(-3), k.unsqueeze(-3), v.unsqueeze(-3)  # (*b, n, c) -> (*b, 1, n, c)
        if allowed is not None:
            allowed = allowed.unsqueeze(-3)  # (*batch, R, n) -> (*batch, 1, R, n)
        return attend_fused(q, k, v, width, causal, allowed).squeeze(-3)  # -> (*batch, n, c)
    return attend_fused(q, k, v, width, causal, allowed)


def split_heads(t: Tensor, heads: int) -> Tensor:
    """(*batch, n, c) -> (*batch, h, n, c_h): head i takes columns i·c_h … (i+1)·c_h − 1."""
    *lead, n, c = t.shape
    return t.view(*lead, n, heads, c // heads).transpose(-3, -2)  # -> (*batch, h, n, c_h)


def merge_heads(t: Tensor) -> Tensor:
    """(*batch, h, n, c_h) -> (*batch, n, h·c_h): the heads' context vectors side by side."""
    *lead, heads, n, width = t.shape
    return t.transpose(-3, -2).reshape(*lead, n, heads * width)  # -> (*batch, n, c)
