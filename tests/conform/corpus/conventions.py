"""Minimal restatements of three conventions that attention code in the wild follows, written for
these tests from their public descriptions (attribute names, weight layouts, what forward
returns), so that `derive conform` is tested on each without installing the projects:

- `CausalSelfAttention`, nanoGPT's and minGPT's: one `nn.Linear` `c_attn` packing q, k, v
  (weight 3c × d), `c_proj`, `n_head`; causal; the fused kernel or, with ``flash=False``, the
  written-out path with a `bias` buffer as the causal mask and `attn_dropout` on the weights;
- `Conv1D` and `GPT2Attention`, Hugging Face's GPT-2: a `Conv1D` computes x W + b with W stored
  d × c (no transpose); `c_attn` packs q, k, v; causal with a `bias` buffer, masked scores set to
  the dtype's smallest number; `forward` returns (output, weights);
- `Attention`, timm's vision transformer: `qkv` (an `nn.Linear`, 3c × d), `proj`, `num_heads`,
  `scale` = c_h^(−1/2) applied to q, `attn_drop`; an optional boolean `attn_mask` (True = may
  attend; the written-out path reads it as the fused kernel does, a query with no key getting
  zero weights); not causal.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def split_heads(t, heads):
    """(b, n, c) -> (b, h, n, c_h)"""
    b, n, c = t.shape
    return t.view(b, n, heads, c // heads).transpose(1, 2)


def merge_heads(t):
    """(b, h, n, c_h) -> (b, n, c)"""
    b, h, n, width = t.shape
    return t.transpose(1, 2).contiguous().view(b, n, h * width)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout=0.0, bias=True, flash=True):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd, self.dropout, self.flash = n_head, n_embd, dropout, flash
        if not flash:
            causal = torch.tril(torch.ones(block_size, block_size))
            self.register_buffer("bias", causal.view(1, 1, block_size, block_size))

    def scores(self, q, k):
        return (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))

    def causal_fill(self, scores, n):
        return scores.masked_fill(self.bias[:, :, :n, :n] == 0, float("-inf"))

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (b, n, 3c) -> three (b, n, c)
        q, k, v = (split_heads(t, self.n_head) for t in (q, k, v))
        if self.flash:
            rate = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=rate, is_causal=True)
        else:
            weights = F.softmax(self.causal_fill(self.scores(q, k), n), dim=-1)
            y = self.attn_dropout(weights) @ v
        return self.resid_dropout(self.c_proj(merge_heads(y)))


class Conv1D(nn.Module):
    """x W + b with W stored (nx, nf): the transpose of nn.Linear's layout."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        shape = (*x.shape[:-1], self.nf)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class GPT2Attention(nn.Module):
    def __init__(self, embed_dim, num_heads, max_positions=16, dropout=0.0):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.split_size = embed_dim
        self.scale_attn_weights = True
        self.c_attn = Conv1D(3 * embed_dim, embed_dim)
        self.c_proj = Conv1D(embed_dim, embed_dim)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        causal = torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, max_positions, max_positions))

    def attend(self, q, k, v):
        scores = q @ k.transpose(-1, -2)
        if self.scale_attn_weights:
            scores = scores / torch.full([], v.size(-1) ** 0.5, dtype=scores.dtype)
        n = q.size(-2)
        lowest = torch.finfo(scores.dtype).min
        scores = torch.where(
            self.bias[:, :, :n, :n], scores, torch.full([], lowest, dtype=scores.dtype)
        )
        weights = self.attn_dropout(nn.functional.softmax(scores, dim=-1))
        return weights @ v, weights

    def forward(self, hidden_states):
        q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))
        y, weights = self.attend(q, k, v)
        return self.resid_dropout(self.c_proj(merge_heads(y))), weights


class Attention(nn.Module):
    def __init__(
        self, dim, num_heads=8, qkv_bias=False, attn_drop=0.0, proj_drop=0.0, fused_attn=True
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused_attn = fused_attn
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_mask=None):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (b, h, n, c_h)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_attn:
            rate = self.attn_drop.p if self.training else 0.0
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=rate)
        else:
            scores = (q * self.scale) @ k.transpose(-2, -1)
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            weights = scores.softmax(dim=-1).nan_to_num(0.0)  # no key: zero weights
            x = self.attn_drop(weights) @ v
        x = x.transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(x))
