"""Plain re-statements of the book's ch. 3 classes (same constructor, names, creation order and
initialisation as *Build a Large Language Model (from Scratch)*), for compatibility tests: the
same seed must give the same numbers, and their state_dicts must load into `attention`'s classes.
Written for these tests from the book's description, unchecked and unoptimised on purpose.
"""

import torch
import torch.nn as nn

# The book's example input, "Your journey starts with one step" (section 3.3), 6 tokens × d = 3.
INPUTS = torch.tensor(
    [
        [0.43, 0.15, 0.89],
        [0.55, 0.87, 0.66],
        [0.57, 0.85, 0.64],
        [0.22, 0.58, 0.33],
        [0.77, 0.25, 0.10],
        [0.05, 0.80, 0.55],
    ]
)


class BookSelfAttentionV1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        scores = queries @ keys.T
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values


class BookSelfAttentionV2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        scores = queries @ keys.T
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values


class BookCausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x):
        _, n, _ = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores.masked_fill_(self.mask.bool()[:n, :n], -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        weights = self.dropout(weights)
        return weights @ values


class BookMultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [
                BookCausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                for _ in range(num_heads)
            ]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class BookMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x):
        b, n, _ = x.shape
        split = (b, n, self.num_heads, self.head_dim)
        keys = self.W_key(x).view(split).transpose(1, 2)
        queries = self.W_query(x).view(split).transpose(1, 2)
        values = self.W_value(x).view(split).transpose(1, 2)
        scores = queries @ keys.transpose(2, 3)
        scores.masked_fill_(self.mask.bool()[:n, :n], -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        weights = self.dropout(weights)
        context = (weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)
        return self.out_proj(context)
