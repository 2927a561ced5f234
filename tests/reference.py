"""An independent NumPy float64 reference, written from the seed's formulas, index by index.

It shares no code with `attention` or `derive`: loops over m, p, j as the seed writes them, so a
test comparing against it fails if either implementation drops the 1/√c, takes the softmax over
the wrong axis, swaps K and V, or shifts a mask.
"""

import math

import numpy as np


def attention_reference(x, w_q, w_k, w_v, *, allowed=None):
    """C and A for one sequence: x (n, d), w (d, c); allowed (n, n) bool, True = may attend."""
    x, w_q, w_k, w_v = (np.asarray(t, dtype=np.float64) for t in (x, w_q, w_k, w_v))
    n, c = x.shape[0], w_q.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    omega = np.array(
        [[sum(q[m, j] * k[p, j] for j in range(c)) for p in range(n)] for m in range(n)]
    )
    allowed = np.ones((n, n), dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    a = np.zeros((n, n))
    for m in range(n):
        keys = [p for p in range(n) if allowed[m, p]]
        if not keys:
            continue  # a query with nothing to attend to: zero weights, zero context
        top = max(omega[m, p] / math.sqrt(c) for p in keys)
        total = sum(math.exp(omega[m, r] / math.sqrt(c) - top) for r in keys)
        for p in keys:
            a[m, p] = math.exp(omega[m, p] / math.sqrt(c) - top) / total
    context = np.array(
        [[sum(a[m, p] * v[p, j] for p in range(n)) for j in range(c)] for m in range(n)]
    )
    return context, a


def batched_reference(x, w_q, w_k, w_v, *, allowed=None):
    """attention_reference over any leading batch dimensions of x (and of allowed)."""
    x = np.asarray(x, dtype=np.float64)
    lead = x.shape[:-2]
    n, c = x.shape[-2], np.asarray(w_q).shape[1]
    out, weights = np.zeros((*lead, n, c)), np.zeros((*lead, n, n))
    for index in np.ndindex(*lead):
        mask = None if allowed is None else np.broadcast_to(allowed, (*lead, n, n))[index]
        out[index], weights[index] = attention_reference(x[index], w_q, w_k, w_v, allowed=mask)
    return out, weights


def causal_allowed(n):
    """True where p <= m."""
    return np.tril(np.ones((n, n), dtype=bool))


def window_allowed(n, w):
    """True where 0 <= m - p < w: query m sees its last w tokens, itself included."""
    return np.array([[0 <= m - p < w for p in range(n)] for m in range(n)], dtype=bool)


def cross_reference(x, y, w_q, w_k, w_v, *, allowed=None):
    """C and A of cross-attention for one sequence: queries from x (n, d), keys and values from
    y (s, d_y), Q = X Wq, K = Y Wk, V = Y Wv; allowed (n, s) bool, True = may attend."""
    x, y, w_q, w_k, w_v = (np.asarray(t, dtype=np.float64) for t in (x, y, w_q, w_k, w_v))
    n, s, c = x.shape[0], y.shape[0], w_q.shape[1]
    q, k, v = x @ w_q, y @ w_k, y @ w_v
    omega = [[sum(q[m, j] * k[p, j] for j in range(c)) for p in range(s)] for m in range(n)]
    allowed = np.ones((n, s), dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    a = np.zeros((n, s))
    for m in range(n):
        keys = [p for p in range(s) if allowed[m, p]]
        if not keys:
            continue
        top = max(omega[m][p] / math.sqrt(c) for p in keys)
        total = sum(math.exp(omega[m][r] / math.sqrt(c) - top) for r in keys)
        for p in keys:
            a[m, p] = math.exp(omega[m][p] / math.sqrt(c) - top) / total
    context = np.array(
        [[sum(a[m, p] * v[p, j] for p in range(s)) for j in range(c)] for m in range(n)]
    )
    return context, a
