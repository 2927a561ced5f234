"""Correct attention in every convention `derive conform` reads: each must conform.

Modules are built by functions with no arguments (a TARGET `correct.py:nanogpt` builds one);
the functions f(q, k, v, ...) are themselves targets. Sizes: d = c = 24, 3 heads of c_h = 8.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for book.py

import book  # noqa: E402
from conventions import Attention, CausalSelfAttention, GPT2Attention  # noqa: E402

import attention  # noqa: E402

D, HEADS, CONTEXT = 24, 3, 16


def _seeded(build):
    def built():
        torch.manual_seed(7)
        return build()

    built.__name__ = build.__name__
    return built


# -- functions f(q, k, v, ...) on (batch, heads, n, c) ----------------------------------------

sdpa_torch = F.scaled_dot_product_attention


def sdpa_written(q, k, v, attn_mask=None, is_causal=False):
    """Written out; a query with no key gets zero weights, as the derivation says."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    n = q.shape[-2]
    allowed = torch.ones(n, n, dtype=torch.bool)
    if is_causal:
        allowed = allowed.tril()
    if attn_mask is not None:
        allowed = allowed & attn_mask
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.nan_to_num(weights, nan=0.0) @ v


def sdpa_lowest(q, k, v, attn_mask=None):
    """Masked with the dtype's lowest number, not −∞: a query with no key averages every
    value (finite, though not derive's zero weights)."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) @ v


# -- modules: the book's classes (tests/book.py) -------------------------------------------

book_v1 = _seeded(lambda: book.BookSelfAttentionV1(D, 8))
book_v2 = _seeded(lambda: book.BookSelfAttentionV2(D, 8, qkv_bias=True))
book_causal = _seeded(lambda: book.BookCausalAttention(D, 8, CONTEXT, 0.0))
book_wrapper = _seeded(lambda: book.BookMultiHeadAttentionWrapper(D, 8, CONTEXT, 0.0, HEADS))
book_mha = _seeded(lambda: book.BookMultiHeadAttention(D, D, CONTEXT, 0.0, HEADS))

# -- this package's own (kind "self") ------------------------------------------------------

ours_v1 = _seeded(lambda: attention.SelfAttentionV1(D, 8))
ours_v2 = _seeded(lambda: attention.SelfAttentionV2(D, 8))
ours_causal = _seeded(lambda: attention.CausalAttention(D, 8, CONTEXT, 0.1, qkv_bias=True))
ours_wrapper = _seeded(lambda: attention.MultiHeadAttentionWrapper(D, 8, CONTEXT, 0.0, HEADS))
ours_mha = _seeded(lambda: attention.MultiHeadAttention(D, D, CONTEXT, 0.0, HEADS))

# -- the conventions of conventions.py and torch's own -----------------------------------------

nanogpt = _seeded(lambda: CausalSelfAttention(D, HEADS, CONTEXT))
nanogpt_written = _seeded(lambda: CausalSelfAttention(D, HEADS, CONTEXT, flash=False))
gpt2 = _seeded(lambda: GPT2Attention(D, HEADS, CONTEXT))
timm = _seeded(lambda: Attention(D, HEADS))
timm_written = _seeded(lambda: Attention(D, HEADS, qkv_bias=True, fused_attn=False))
torch_mha = _seeded(lambda: torch.nn.MultiheadAttention(D, HEADS, batch_first=True))
torch_mha_sequence_first = _seeded(lambda: torch.nn.MultiheadAttention(D, HEADS, bias=False))

FUNCTIONS = ("sdpa_torch", "sdpa_written", "sdpa_lowest")
MODULES = (
    "book_v1",
    "book_v2",
    "book_causal",
    "book_wrapper",
    "book_mha",
    "ours_v1",
    "ours_v2",
    "ours_causal",
    "ours_wrapper",
    "ours_mha",
    "nanogpt",
    "nanogpt_written",
    "gpt2",
    "timm",
    "timm_written",
    "torch_mha",
    "torch_mha_sequence_first",
)
