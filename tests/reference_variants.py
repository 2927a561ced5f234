"""Independent NumPy float64 references for RoPE, RMS norm, grouped-query and latent attention,
written from the formulas entry by entry (loops over heads, rows and pairs), sharing no code with
`attention`. Single sequences: x (n, d); the tests loop over batches themselves.
"""

import math

import numpy as np


def rope_reference(x, base, offset=0):
    """Each pair (j, j + c/2) of row m rotated by (offset + m)·base^(−2j/c)."""
    x = np.asarray(x, dtype=np.float64)
    n, c = x.shape
    out = np.zeros_like(x)
    for m in range(n):
        for j in range(c // 2):
            angle = (offset + m) * base ** (-2 * j / c)
            x1, x2 = x[m, j], x[m, j + c // 2]
            out[m, j] = x1 * math.cos(angle) - x2 * math.sin(angle)
            out[m, j + c // 2] = x2 * math.cos(angle) + x1 * math.sin(angle)
    return out


def rms_reference(x, gain, eps=1e-6):
    """Row m divided by √(mean of its squares + ε), times the gains."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    for m in range(x.shape[0]):
        rms = math.sqrt(sum(v * v for v in x[m]) / x.shape[1] + eps)
        out[m] = x[m] / rms * np.asarray(gain, dtype=np.float64)
    return out


def softmax_attention(q, k, v, allowed):
    """softmax(q kᵀ/√c_h) v over the allowed keys, row by row; a row with none: zeros."""
    n, width = q.shape
    out = np.zeros((n, v.shape[1]))
    for m in range(n):
        keys = [p for p in range(k.shape[0]) if allowed[m, p]]
        if not keys:
            continue
        scores = {p: float(q[m] @ k[p]) / math.sqrt(width) for p in keys}
        top = max(scores.values())
        total = sum(math.exp(s - top) for s in scores.values())
        for p in keys:
            out[m] += math.exp(scores[p] - top) / total * v[p]
    return out


def allowed_matrix(n, causal=False, mask=None, keys=None):
    """(n, keys) True where query m may attend key p: p ≤ m with causal, and the mask."""
    keys = n if keys is None else keys
    allowed = np.ones((n, keys), dtype=bool)
    if causal:
        allowed &= np.tril(np.ones((n, keys), dtype=bool))
    if mask is not None:
        allowed &= np.asarray(mask, dtype=bool)
    return allowed


def gqa_reference(
    x,
    w_q,
    w_k,
    w_v,
    w_o=None,
    *,
    heads,
    groups,
    causal=False,
    theta_base=None,
    q_gain=None,
    k_gain=None,
    eps=1e-6,
    mask=None,
):
    """Head ℓ (1-based) on its columns of Q and on key/value group γ = ⌊(ℓ−1)·g/h⌋ + 1;
    QK-norm, then RoPE, then attention; heads side by side, times W_o. Gains as wide as Q's
    and K's rows: QK-norm of the whole rows, before the heads are taken (OLMo)."""
    x, w_q, w_k, w_v = (np.asarray(t, dtype=np.float64) for t in (x, w_q, w_k, w_v))
    width = w_q.shape[1] // heads
    q_all, k_all, v_all = x @ w_q, x @ w_k, x @ w_v
    if q_gain is not None and len(q_gain) == q_all.shape[1] != width:  # over all heads
        q_all, k_all = rms_reference(q_all, q_gain, eps), rms_reference(k_all, k_gain, eps)
        q_gain = None
    allowed = allowed_matrix(x.shape[0], causal, mask)
    columns = []
    for ell in range(1, heads + 1):
        gamma = (ell - 1) * groups // heads + 1
        q = q_all[:, (ell - 1) * width : ell * width]
        k = k_all[:, (gamma - 1) * width : gamma * width]
        v = v_all[:, (gamma - 1) * width : gamma * width]
        if q_gain is not None:
            q, k = rms_reference(q, q_gain, eps), rms_reference(k, k_gain, eps)
        if theta_base is not None:
            q, k = rope_reference(q, theta_base), rope_reference(k, theta_base)
        columns.append(softmax_attention(q, k, v, allowed))
    out = np.concatenate(columns, axis=1)
    return out if w_o is None else out @ np.asarray(w_o, dtype=np.float64)


def latent_reference(x, w_q, w_dkv, w_uk, w_uv, w_o=None, *, heads, causal=True):
    """Decompress: C_kv = X W_dkv, K = C_kv W_uk, V = C_kv W_uv; then h heads of c/h columns."""
    x = np.asarray(x, dtype=np.float64)
    latent = x @ np.asarray(w_dkv, dtype=np.float64)
    k_all, v_all = latent @ np.asarray(w_uk, np.float64), latent @ np.asarray(w_uv, np.float64)
    q_all = x @ np.asarray(w_q, dtype=np.float64)
    width = q_all.shape[1] // heads
    allowed = allowed_matrix(x.shape[0], causal)
    columns = [
        softmax_attention(
            *(t[:, i * width : (i + 1) * width] for t in (q_all, k_all, v_all)), allowed
        )
        for i in range(heads)
    ]
    out = np.concatenate(columns, axis=1)
    return out if w_o is None else out @ np.asarray(w_o, dtype=np.float64)


def modified_attention(q, k, v, *, scale, allowed, softcap=None, slope=None, offset=0, sink=None):
    """One head of attention with every score modification, entry by entry: ω̃ = scale · q·k,
    then cap · tanh(ω̃/cap), then − μ (m + offset − p) (ALiBi), over the allowed keys, and a
    sink logit σ in each row's denominator (its weight carries no value). q (n, c_h), k and v
    (s, c_h), allowed (n, s). A row with no allowed key: zeros."""
    n = q.shape[0]
    out = np.zeros((n, v.shape[1]))
    weights = np.zeros((n, k.shape[0]))
    for m in range(n):
        logits = {}
        for p in range(k.shape[0]):
            if not allowed[m, p]:
                continue
            score = scale * float(np.dot(q[m], k[p]))
            if softcap is not None:
                score = softcap * math.tanh(score / softcap)
            if slope is not None:
                score -= slope * (m + offset - p)
            logits[p] = score
        if not logits:
            continue
        top = max([*logits.values(), *([] if sink is None else [sink])])
        total = sum(math.exp(value - top) for value in logits.values())
        if sink is not None:
            total += math.exp(sink - top)
        for p, value in logits.items():
            weights[m, p] = math.exp(value - top) / total
            out[m] += weights[m, p] * v[p]
    return out, weights


def band_matrix(n, s, *, causal, window=None, offset=0):
    """(n, s): True where query m (at position m + offset) may attend key p: all without causal;
    p ≤ m + offset with it, and m + offset − p < w with a window."""
    allowed = np.ones((n, s), dtype=bool)
    if causal:
        for m in range(n):
            for p in range(s):
                distance = m + offset - p
                allowed[m, p] = distance >= 0 and (window is None or distance < window)
    return allowed
