"""A plain re-statement of the book's `MultiHeadLatentAttention` (ch04/05_mla of *Build a Large
Language Model (from Scratch)*; it is not in the `llms-from-scratch` package): the same
constructor, parameter names, creation order and initialisation, the same latent cache. Written
for the compatibility tests from the book's description, unchecked and unoptimised on purpose.
"""

import torch
import torch.nn as nn


class BookMultiHeadLatentAttention(nn.Module):
    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, latent_dim=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.latent_dim = latent_dim if latent_dim is not None else max(16, d_out // 8)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_DKV = nn.Linear(d_in, self.latent_dim, bias=qkv_bias)
        self.W_UK = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)
        self.W_UV = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("cache_c_kv", None, persistent=False)
        self.ptr_current_pos = 0

    def reset_cache(self):
        self.cache_c_kv = None
        self.ptr_current_pos = 0

    def heads(self, t):
        b, tokens, _ = t.shape
        return t.view(b, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        latent = self.W_DKV(x)
        if use_cache:
            if self.cache_c_kv is not None:
                latent = torch.cat([self.cache_c_kv, latent], dim=1)
            self.cache_c_kv = latent
            start = self.ptr_current_pos
            self.ptr_current_pos += n
        else:
            start = 0
            self.ptr_current_pos = 0
        queries = self.heads(self.W_query(x))
        keys, values = self.heads(self.W_UK(latent)), self.heads(self.W_UV(latent))
        scores = queries @ keys.transpose(-2, -1)
        query_pos = torch.arange(start, start + n)
        key_pos = torch.arange(keys.shape[-2])
        scores = scores.masked_fill(query_pos[:, None] < key_pos[None, :], -torch.inf)
        weights = self.dropout(torch.softmax(scores / self.head_dim**0.5, dim=-1))
        context = (weights @ values).transpose(1, 2).reshape(b, n, self.d_out)
        return self.out_proj(context)
