"""For every id of the catalogue of mistakes, an implementation that makes it: each must fail, and
`derive conform` must name its id. Each is a correct implementation of `correct.py` with the one
line people get wrong, written as people write it. Sizes: d = c = 24, 3 heads of c_h = 8.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for book.py

import book  # noqa: E402
from conventions import Attention, CausalSelfAttention, merge_heads, split_heads  # noqa: E402
from correct import CONTEXT, HEADS, D, _seeded  # noqa: E402
from ported import PORTS, port  # noqa: E402


class _NoScale(CausalSelfAttention):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1)  # the fallback path forgot 1/√c_h


class _LeaksFuture(CausalSelfAttention):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, flash=False, **kwargs)
        self.bias = torch.tril(torch.ones(CONTEXT, CONTEXT), diagonal=1).view(
            1, 1, CONTEXT, CONTEXT
        )


class _ModelWidth(Attention):
    def __init__(self, dim, num_heads):
        super().__init__(dim, num_heads, fused_attn=False)
        self.scale = dim**-0.5  # the model's width, not the head's


class _ScaledTwice(Attention):
    def forward(self, x, attn_mask=None):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale  # and the kernel scales again
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class _ColumnsSoftmax(book.BookMultiHeadAttention):
    def forward(self, x):
        b, n, _ = x.shape
        keys, queries, values = (
            split_heads(layer(x), self.num_heads)
            for layer in (self.W_key, self.W_query, self.W_value)
        )
        scores = (queries @ keys.transpose(2, 3)).masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-2)  # over the queries
        context = (weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)
        return self.out_proj(context)


class _HeadsMixed(book.BookMultiHeadAttention):
    def forward(self, x):
        b, n, _ = x.shape
        keys, queries, values = (
            split_heads(layer(x), self.num_heads)
            for layer in (self.W_key, self.W_query, self.W_value)
        )
        scores = (queries @ keys.transpose(2, 3)).masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        context = (weights @ values).contiguous().view(b, n, self.d_out)  # no .transpose(1, 2)
        return self.out_proj(context)


class _SplitWithoutTranspose(CausalSelfAttention):
    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        shape = (b, self.n_head, n, c // self.n_head)
        q, k, v = (t.reshape(shape) for t in (q, k, v))  # (b, h, n, c_h), no transpose
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(merge_heads(y))


class _FilledWithZero(book.BookCausalAttention):
    def forward(self, x):
        n = x.shape[1]
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask.bool()[:n, :n], 0.0)  # 0, not −∞
        return torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1) @ values


class _DiagonalMaskedFinite(book.BookMultiHeadAttention):
    """x-transformers' convention: masked scores filled with −finfo.max, not −∞ (a query with
    nothing to attend averages every value); here the causal mask hides the diagonal too."""

    def forward(self, x, mask=None):
        n = x.shape[1]
        keys, queries, values = (
            split_heads(layer(x), self.num_heads)
            for layer in (self.W_key, self.W_query, self.W_value)
        )
        hidden = torch.ones(n, n, dtype=torch.bool).triu(diagonal=0)  # the diagonal too
        if mask is not None:
            hidden = hidden | ~mask
        scores = (queries @ keys.transpose(2, 3)) / self.head_dim**0.5
        scores = scores.masked_fill(hidden, -torch.finfo(scores.dtype).max)
        return self.out_proj(merge_heads(torch.softmax(scores, dim=-1) @ values))


class _NoCausalMask(book.BookMultiHeadAttention):
    """A decoder's layer (it says so: is_causal) run without its causal mask."""

    is_causal = True

    def forward(self, x):
        keys, queries, values = (
            split_heads(layer(x), self.num_heads)
            for layer in (self.W_key, self.W_query, self.W_value)
        )
        weights = torch.softmax(queries @ keys.transpose(2, 3) / self.head_dim**0.5, dim=-1)
        return self.out_proj(merge_heads(weights @ values))


class _DiagonalMasked(book.BookCausalAttention):
    def __init__(self, *args):
        super().__init__(*args)
        self.mask = torch.triu(torch.ones(CONTEXT, CONTEXT), diagonal=0)  # the diagonal too


class _DropoutFirst(book.BookCausalAttention):
    def forward(self, x):
        _, n, _ = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        scores = self.dropout(queries @ keys.transpose(1, 2))  # dropout on the scores
        scores = scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        return torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def _written(q, k, v, attn_mask, is_causal, scale, weigh, values):
    scores = q @ k.transpose(-2, -1) * (scale or q.shape[-1] ** -0.5)
    n = q.shape[-2]
    allowed = torch.ones(n, n, dtype=torch.bool).tril() if is_causal else None
    if attn_mask is not None:
        allowed = attn_mask if allowed is None else allowed & attn_mask
    return weigh(scores, allowed) @ values(v, k)


def _softmax_then_zero(scores, allowed):
    weights = torch.softmax(scores, dim=-1)
    return weights if allowed is None else weights.masked_fill(~allowed, 0.0)  # not renormalised


def _masked_softmax(scores, allowed):
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)  # a row with no key: 0/0 = NaN


def scale_by_c(q, k, v, attn_mask=None, is_causal=False):
    scale = 1 / q.shape[-1]  # by c, not √c
    return _written(q, k, v, attn_mask, is_causal, scale, _masked_zeroed, lambda v, k: v)


def values_are_keys(q, k, v, attn_mask=None, is_causal=False):
    return _written(q, k, v, attn_mask, is_causal, None, _masked_zeroed, lambda v, k: k)


def _masked_zeroed(scores, allowed):
    return torch.nan_to_num(_masked_softmax(scores, allowed), nan=0.0)


def mask_inverted(q, k, v, attn_mask=None, is_causal=False):
    inverted = None if attn_mask is None else ~attn_mask  # True read as "masked"
    return _written(q, k, v, inverted, is_causal, None, _masked_zeroed, lambda v, k: v)


def mask_after_softmax(q, k, v, attn_mask=None, is_causal=False):
    return _written(q, k, v, attn_mask, is_causal, None, _softmax_then_zero, lambda v, k: v)


def nan_on_empty_rows(q, k, v, attn_mask=None, is_causal=False):
    return _written(q, k, v, attn_mask, is_causal, None, _masked_softmax, lambda v, k: v)


no_scale = _seeded(lambda: _NoScale(D, HEADS, CONTEXT, flash=False))
scale_by_model_width = _seeded(lambda: _ModelWidth(D, HEADS))
scale_by_head_width = _seeded(lambda: _ScaledTwice(D, HEADS))  # ω/c_h: 1/√c_h twice
softmax_over_queries = _seeded(lambda: _ColumnsSoftmax(D, D, CONTEXT, 0.0, HEADS))
causal_diagonal_masked = _seeded(lambda: _DiagonalMasked(D, 8, CONTEXT, 0.0))
causal_leaks_future = _seeded(lambda: _LeaksFuture(D, HEADS, CONTEXT))
causal_diagonal_masked_finite = _seeded(lambda: _DiagonalMaskedFinite(D, D, CONTEXT, 0.0, HEADS))
causal_mask_missing = _seeded(lambda: _NoCausalMask(D, D, CONTEXT, 0.0, HEADS))
dropout_before_softmax = _seeded(lambda: _DropoutFirst(D, 8, CONTEXT, 0.0))
heads_mixed = _seeded(lambda: _HeadsMixed(D, D, CONTEXT, 0.0, HEADS))
heads_split_without_transpose = _seeded(lambda: _SplitWithoutTranspose(D, HEADS, CONTEXT))
mask_filled_with_zero = _seeded(lambda: _FilledWithZero(D, 8, CONTEXT, 0.0))

#: catalogue id -> the name of its broken implementation here
BROKEN = {
    name.replace("_", "-"): name
    for name in (
        "no_scale",
        "scale_by_c",
        "scale_by_model_width",
        "scale_by_head_width",
        "softmax_over_queries",
        "values_are_keys",
        "causal_diagonal_masked",
        "causal_leaks_future",
        "mask_inverted",
        "mask_filled_with_zero",
        "mask_after_softmax",
        "dropout_before_softmax",
        "heads_mixed",
        "heads_split_without_transpose",
        "nan_on_empty_rows",
    )
} | {id: f"port:{id}" for id in PORTS}
#: what conform is told of a broken implementation, by id (RoPE is not the module's)
OPTIONS = {id: told for id, (_, told) in PORTS.items()}


def implementation(id):
    """The broken implementation of `id`: a module, or a function."""
    name = BROKEN[id]
    return port(name.removeprefix("port:")) if name.startswith("port:") else globals()[name]
