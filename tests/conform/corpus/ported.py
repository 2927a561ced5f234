"""Ports of grouped-query attention (the book's Llama 3 layer, written out) with the bugs ports
have, one at a time, each beside the same layer without it (which conforms). The `grouped`
adapter reads them as it reads `attention.modules.GroupedQueryAttention`: W_query, W_key,
W_value, out_proj, num_heads, num_kv_groups, and the variant from `sliding_window`, `softcap`
and the parameter `sinks`; RoPE is told (``variant="rope"``), and the call passes the book's
cos and sin tables (the halves of each head paired). Sizes: d = c = 16, 4 heads of c_h = 4 in
2 groups."""

import math

import torch
import torch.nn as nn

D, HEADS, GROUPS = 16, 4, 2
WIDTH = D // HEADS


def _rotated(x, cos, sin, interleaved):
    """The book's rotation (feature j with j + c_h/2), or interleaved pairs (2i, 2i + 1) read
    with the same frequencies: the port's bug."""
    n, half = x.shape[-2], x.shape[-1] // 2
    cos, sin = cos[:n], sin[:n]
    if not interleaved:
        first, second = x[..., :half], x[..., half:]
        return x * cos + torch.cat([-second, first], dim=-1) * sin
    even, odd = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, :half], sin[:, :half]
    return torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)


class _Norm(nn.Module):
    """An RMS norm over the last axis with gains `scale` (OLMo's over a whole row of Q or K);
    `per_head`: over each head's c_h features instead, the same gains (the port's bug)."""

    def __init__(self, width, per_head=False):
        super().__init__()
        self.scale, self.eps, self.per_head = nn.Parameter(torch.rand(width) + 0.5), 1e-6, per_head

    def forward(self, x):
        parts = x.unflatten(-1, (-1, WIDTH)) if self.per_head else x[..., None, :]
        normed = parts * torch.rsqrt(parts.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.flatten(-2) * self.scale


class PortedGrouped(nn.Module):
    """Causal grouped-query attention; `bug` is one id of the catalogue, or None. `whole_norm`:
    OLMo's QK-norm of the whole rows; `cached`: the book's KV-cache layer, ``forward(x, blocked,
    cos, sin, start_pos=0, cache=None)`` returning the output and the keys and values kept."""

    def __init__(
        self, bug=None, window=None, softcap=None, sinks=False, whole_norm=False, cached=False
    ):
        super().__init__()
        torch.manual_seed(11)
        self.num_heads, self.num_kv_groups, self.head_dim = HEADS, GROUPS, WIDTH
        self.W_query = nn.Linear(D, D, bias=False)
        self.W_key = nn.Linear(D, GROUPS * WIDTH, bias=False)
        self.W_value = nn.Linear(D, GROUPS * WIDTH, bias=False)
        self.out_proj = nn.Linear(D, D, bias=False)
        self.sliding_window, self.softcap, self.bug, self.cached = window, softcap, bug, cached
        if sinks:
            self.sinks = nn.Parameter(torch.randn(HEADS))
        if whole_norm:
            per_head = bug == "qk-norm-per-head"
            self.q_norm, self.k_norm = _Norm(D, per_head), _Norm(GROUPS * WIDTH, per_head)
            with torch.no_grad():  # the first head's features 4 times the others: a norm of the
                for layer in (self.W_query, self.W_key):  # whole row is far from each head's
                    layer.weight[:WIDTH] *= 4

    def forward(self, x, blocked=None, cos=None, sin=None, start_pos=0, cache=None):
        b, n, _ = x.shape
        bug = self.bug
        q, k = self.W_query(x), self.W_key(x)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, n, HEADS, WIDTH).transpose(1, 2)
        k, v = (t.view(b, n, GROUPS, WIDTH).transpose(1, 2) for t in (k, self.W_value(x)))
        if cos is not None:
            at = 0 if bug == "rope-offset" else start_pos  # tables from the new tokens
            cos, sin = cos[at:], sin[at:]
            q = _rotated(q, cos, sin, bug == "rope-pairing")
            if bug != "rope-not-on-keys":
                k = _rotated(k, cos, sin, bug == "rope-pairing")
        if cache is not None:  # the keys and values of the tokens before
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        kept = (k, v)
        if bug == "gqa-repeat-order":
            k, v = (t.repeat(1, HEADS // GROUPS, 1, 1) for t in (k, v))
        else:
            k, v = (t.repeat_interleave(HEADS // GROUPS, dim=1) for t in (k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(WIDTH)
        if self.softcap is not None and bug != "softcap-missing":
            scores = self.softcap * torch.tanh(scores / self.softcap)
        m, p = start_pos + torch.arange(n)[:, None], torch.arange(k.shape[-2])[None, :]
        keep = p <= m
        if self.sliding_window is not None:
            w = self.sliding_window
            keep = keep & ((p >= m - w) if bug == "window-off-by-one" else (p > m - w))
        if blocked is not None:
            keep = keep & ~blocked
        scores = scores.masked_fill(~keep, -torch.inf)
        if hasattr(self, "sinks") and bug != "sink-missing":
            sink = self.sinks.view(1, HEADS, 1, 1).expand(b, HEADS, n, 1)
            weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            weights = torch.softmax(scores, dim=-1)
        context = torch.nan_to_num(weights) @ (k if bug == "values-are-keys" else v)
        out = self.out_proj(context.transpose(1, 2).reshape(b, n, D))
        return (out, kept) if self.cached else out


#: id -> (its layer's options, what conform is told)
PORTS = {
    "gqa-repeat-order": ({}, {}),
    "rope-pairing": ({}, {"variant": "rope"}),
    "rope-not-on-keys": ({}, {"variant": "rope"}),
    "window-off-by-one": ({"window": 2}, {}),
    "softcap-missing": ({"softcap": 2.0}, {}),
    "sink-missing": ({"sinks": True}, {}),
    "qk-norm-per-head": ({"whole_norm": True}, {}),
    "rope-offset": ({"cached": True}, {"variant": "rope"}),
    "values-are-keys": ({}, {"variant": "rope"}),  # the keys at hand: rotated
}


def port(id, bug=True):
    """The port of `id` (with its bug, or without: the control)."""
    options, _ = PORTS[id]
    return PortedGrouped(id if bug else None, **options)
