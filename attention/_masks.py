"""Masks: which key p each query m may attend to, and a softmax that respects them.

Convention (the same as `torch.nn.functional.scaled_dot_product_attention`'s boolean mask):
True = may attend. A full mask has shape (*batch, n, n), a key-padding mask (*batch, n) says which
keys exist (the same for every query). `causal` keeps p ≤ m, the diagonal included.
"""

import torch
from torch import Tensor

Mask = Tensor | None


def causal_allowed(n: int, device: torch.device) -> Tensor:
    """(n, n) lower-triangular: True where p ≤ m."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def allowed_positions(
    n: int, device: torch.device, causal: bool, mask: Mask, key_padding: bool
) -> Tensor | None:
    """True where query m may attend key p, broadcastable to (*batch, n, n); None if all may."""
    allowed = None
    if mask is not None:
        allowed = mask.unsqueeze(-2) if key_padding else mask  # (*batch, n) -> (*batch, 1, n)
    if causal:
        lower = causal_allowed(n, device)
        allowed = lower if allowed is None else allowed & lower
    return allowed


def masked_softmax(scaled: Tensor, allowed: Tensor) -> Tensor:
    """Row-wise softmax over allowed positions; disallowed entries and fully masked rows are 0.

    The row maximum is taken over allowed entries only (and treated as a constant, softmax being
    shift invariant), so scores of ±1e4 stay finite, and a row with no allowed key divides 0 by 1
    instead of 0 by 0: its weights, and their gradients, are zeros, never NaN.
    """
    scaled = scaled.masked_fill(~allowed, float("-inf"))
    row_max = scaled.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exponentials = torch.exp(scaled - row_max)
    total = exponentials.sum(dim=-1, keepdim=True)
    return exponentials / torch.where(total > 0, total, torch.ones_like(total))


def fully_masked_rows(allowed: Tensor) -> Tensor:
    """(…, n): True for the queries that may attend no key at all."""
    return ~allowed.any(dim=-1)


def keep_every_row_attending(allowed: Tensor) -> Tensor:
    """`allowed` with fully masked rows opened up, so that a fused kernel never divides by zero
    (the caller zeroes those rows' outputs afterwards, which also zeroes their gradients)."""
    return allowed | fully_masked_rows(allowed).unsqueeze(-1)
