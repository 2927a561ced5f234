"""A plain re-statement of the book's `GatedDeltaNet` (the bonus material ch04/08_deltanet of
*Build a Large Language Model (from Scratch)*; it is not in the `llms-from-scratch` package): the
same constructor, parameter names, creation order and initialisation, and its token-by-token
loop. Written for the compatibility tests from the book's description, unchecked and unoptimised
on purpose.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def unit(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


class BookGatedDeltaNet(nn.Module):
    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_gate = nn.Linear(d_in, d_out, bias=False)
        self.W_beta = nn.Linear(d_in, d_out, bias=False)
        self.W_alpha = nn.Linear(d_in, num_heads, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(num_heads))
        self.A_log = nn.Parameter(torch.zeros(num_heads))
        self.norm = nn.RMSNorm(self.head_dim, eps=1e-6)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (
            self.split(self.W_query(x)),
            self.split(self.W_key(x)),
            self.split(self.W_value(x)),
        )
        beta = self.split(torch.sigmoid(self.W_beta(x)))
        decay = -self.A_log.exp().view(1, 1, -1) * F.softplus(self.W_alpha(x) + self.dt_bias)
        gate = self.split(self.W_gate(x))
        q, k = unit(q) / self.head_dim**0.5, unit(k)
        state = x.new_zeros(b, self.num_heads, self.head_dim, self.head_dim)
        rows = []
        for t in range(n):
            state = state * decay[:, t, :, None, None].exp()
            remembered = (state * k[:, :, t, :, None]).sum(dim=-2)
            written = (v[:, :, t] - remembered) * beta[:, :, t]
            state = state + k[:, :, t, :, None] * written[:, :, None, :]
            rows.append((state * q[:, :, t, :, None]).sum(dim=-2))
        context = torch.stack(rows, dim=2).transpose(1, 2)
        context = self.norm(context) * F.silu(gate.transpose(1, 2))
        context = self.dropout(context.reshape(b, n, self.d_out))
        return self.out_proj(context)
