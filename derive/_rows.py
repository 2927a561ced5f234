"""Rows of the explicit softmax, and which keys each query may attend to (causal, masks).

a_{m,p} = exp(ω_{m,p}/√c) / Σ_{r allowed} exp(ω_{m,r}/√c), and 0 where p is not allowed; a row
with no allowed key is all zeros, as in `attention.functional.weights`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Add, ImmutableMatrix, exp, sqrt

from ._values import to_rows

__all__ = ["softmax_rows", "allowed_keys"]


def softmax_rows(
    omega: ImmutableMatrix, width: sp.Symbol, allowed: list[list[bool]]
) -> ImmutableMatrix:
    """a_{m,p} = exp(ω_{m,p}/√c) / Σ_{r allowed} exp(ω_{m,r}/√c); 0 where p is not allowed.

    A row with no allowed key is all zeros (the convention of `attention.functional.weights`).
    """
    rows = []
    for m, keep in enumerate(allowed):
        terms = [exp(omega[m, p] / sqrt(width)) if keep[p] else None for p in range(len(keep))]
        total = Add(*[term for term in terms if term is not None])
        rows.append([sp.S.Zero if term is None else term / total for term in terms])
    return ImmutableMatrix(rows)


def allowed_keys(n: int, causal: bool, mask: object) -> list[list[bool]]:
    """Which keys each query may attend to: all, p ≤ m (causal), or a boolean mask."""
    if mask is None:
        return [[not causal or p <= m for p in range(n)] for m in range(n)]
    rows = to_rows("mask", mask)
    if isinstance(rows, list) and len(rows) == n and all(isinstance(e, bool) for e in rows):
        return [list(rows) for _ in range(n)]  # key padding: the same keys for every query
    if (
        isinstance(rows, list)
        and len(rows) == n
        and all(isinstance(row, list) and len(row) == n for row in rows)
        and all(isinstance(e, bool) for row in rows for e in row)
    ):
        return [list(row) for row in rows]
    raise ValueError(
        f"mask must be booleans of shape ({n}, {n}) or key padding of shape ({n},) "
        "(True = may attend)"
    )
