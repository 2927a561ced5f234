"""Plain re-statements of the book's generation code with a key-value cache (the bonus material
of ch. 4 of *Build a Large Language Model (from Scratch)*: the KV-cache `MultiHeadAttention`, the
sliding-window `MultiHeadAttentionWithSWA`, and the small GPT that uses them), for compatibility
tests: same constructors, names, creation order and initialisation, so the same seed gives the
same parameters; `attention`'s classes must run inside this GPT unchanged and generate the same
tokens. Written for these tests from the book's description, unchecked and unoptimised on
purpose. (The `llms-from-scratch` package ships an older cache API, passed in from outside.)

The GPT builds its attention from the module-level names `MultiHeadAttention` and
`MultiHeadAttentionWithSWA`, so that a test swaps `attention`'s classes in by rebinding them.
"""

import torch
import torch.nn as nn


class BookKVMultiHeadAttention(nn.Module):
    """The KV-cache `MultiHeadAttention`: ch. 3's, plus `cache_k`, `cache_v` (non-persistent
    buffers), `ptr_current_pos` and `reset_cache()`; its `mask` buffer is non-persistent."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        upper = torch.triu(torch.ones(context_length, context_length), diagonal=1)
        self.register_buffer("mask", upper, persistent=False)
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        split = (b, n, self.num_heads, self.head_dim)
        keys, values = self.W_key(x).view(split), self.W_value(x).view(split)
        queries = self.W_query(x).view(split).transpose(1, 2)
        if use_cache:  # the new keys and values join the cache, in the (b, n, h, c_h) layout
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=1)
                values = torch.cat([self.cache_v, values], dim=1)
            self.cache_k, self.cache_v = keys, values
        keys, values = keys.transpose(1, 2), values.transpose(1, 2)
        scores = queries @ keys.transpose(2, 3)
        start = self.ptr_current_pos if use_cache else 0
        blocked = self.mask.bool()[start : start + n, : keys.shape[-2]]
        if use_cache:
            self.ptr_current_pos += n
        scores.masked_fill_(blocked, -torch.inf)
        weights = self.dropout(torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1))
        context = (weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)
        return self.out_proj(context)

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None
        self.ptr_current_pos = 0


class BookMultiHeadAttentionWithSWA(nn.Module):
    """`MultiHeadAttentionWithSWA`: query m attends key p iff 0 ≤ m − p < sliding_window_size
    (causal when None); the cache keeps the last sliding_window_size keys and values."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, sliding_window_size=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.sliding_window_size = sliding_window_size
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        split = (b, n, self.num_heads, self.head_dim)
        keys, values = self.W_key(x).view(split), self.W_value(x).view(split)
        queries = self.W_query(x).view(split).transpose(1, 2)
        w = self.sliding_window_size
        q_start = k_start = 0
        if use_cache:
            old = 0 if self.cache_k is None else self.cache_k.size(1)
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=1)
                values = torch.cat([self.cache_v, values], dim=1)
            every = keys.size(1)
            if w is not None:  # attend to w − 1 older keys and the chunk; keep the last w
                self.cache_k, self.cache_v = keys[:, -min(every, w) :], values[:, -min(every, w) :]
                keys, values = (
                    keys[:, -min(every, w + n - 1) :],
                    values[:, -min(every, w + n - 1) :],
                )
            else:
                self.cache_k, self.cache_v = keys, values
            q_start = self.ptr_current_pos
            k_start = self.ptr_current_pos - old + (every - keys.size(1))
            self.ptr_current_pos += n
        else:
            self.ptr_current_pos = 0
        keys, values = keys.transpose(1, 2), values.transpose(1, 2)
        scores = queries @ keys.transpose(2, 3)
        behind = (
            torch.arange(q_start, q_start + n)[:, None]
            - torch.arange(k_start, k_start + keys.shape[-2])[None, :]
        )
        width = keys.shape[-2] + 1 if w is None else w
        scores.masked_fill_((behind < 0) | (behind >= width), -torch.inf)
        weights = self.dropout(torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1))
        context = (weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)
        return self.out_proj(context)

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None
        self.ptr_current_pos = 0


#: What the GPT below builds its attention from (tests rebind these to swap classes in).
MultiHeadAttention = BookKVMultiHeadAttention
MultiHeadAttentionWithSWA = BookMultiHeadAttentionWithSWA


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean, var = x.mean(dim=-1, keepdim=True), x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        inner = torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))
        return 0.5 * x * (1 + torch.tanh(inner))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        e = cfg["emb_dim"]
        self.layers = nn.Sequential(nn.Linear(e, 4 * e), GELU(), nn.Linear(4 * e, e))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        e = cfg["emb_dim"]
        if "sliding_window_size" in cfg:
            self.att = MultiHeadAttentionWithSWA(
                d_in=e,
                d_out=e,
                num_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                qkv_bias=cfg["qkv_bias"],
                sliding_window_size=cfg["sliding_window_size"],
            )
        else:
            self.att = MultiHeadAttention(
                d_in=e,
                d_out=e,
                context_length=cfg["context_length"],
                num_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                qkv_bias=cfg["qkv_bias"],
            )
        self.ff = FeedForward(cfg)
        self.norm1, self.norm2 = LayerNorm(e), LayerNorm(e)
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x, use_cache=False):
        x = x + self.drop_shortcut(self.att(self.norm1(x), use_cache=use_cache))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    """The GPT of ch. 4 with the cache: positions continue from `current_pos` under use_cache.
    With `sliding_window_size` in cfg, `sliding_window_stride` K puts K sliding-window layers
    before each regular one (K ≤ 0: 0 for none, negative for all)."""

    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        blocks = []
        for i in range(cfg["n_layers"]):
            block = TransformerBlock(cfg)
            if "sliding_window_size" in cfg:
                stride = int(cfg["sliding_window_stride"])
                windowed = stride < 0 if stride <= 0 else i % (stride + 1) < stride
                block.att.sliding_window_size = cfg["sliding_window_size"] if windowed else None
            blocks.append(block)
        self.trf_blocks = nn.ModuleList(blocks)
        self.current_pos = 0
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx, use_cache=False):
        n = in_idx.shape[1]
        start = self.current_pos if use_cache else 0
        if use_cache:
            self.current_pos += n
        positions = torch.arange(start, start + n, device=in_idx.device)
        x = self.drop_emb(self.tok_emb(in_idx) + self.pos_emb(positions).unsqueeze(0))
        for block in self.trf_blocks:
            x = block(x, use_cache=use_cache)
        return self.out_head(self.final_norm(x))

    def reset_kv_cache(self):
        for block in self.trf_blocks:
            block.att.reset_cache()
        self.current_pos = 0


def generate_text_simple_cached(model, idx, max_new_tokens, context_size=None, use_cache=True):
    """Greedy decoding: the prompt once, then one token at a time against the cache (or, without
    the cache, the whole sequence again at every step)."""
    model.eval()
    context = context_size or model.pos_emb.num_embeddings
    with torch.no_grad():
        if use_cache:
            model.reset_kv_cache()
            logits = model(idx[:, -context:], use_cache=True)
            for _ in range(max_new_tokens):
                next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
                idx = torch.cat([idx, next_idx], dim=1)
                logits = model(next_idx, use_cache=True)
        else:
            for _ in range(max_new_tokens):
                logits = model(idx[:, -context:], use_cache=False)
                idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return idx
