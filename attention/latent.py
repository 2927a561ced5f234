"""Multi-head latent attention (DeepSeek's MLA, the book's ch04/05_mla), checked.

Keys and values come from one low-rank latent C_kv (n × r, r = `latent_dim` ≪ c), the only
thing a decoding cache needs to keep:

$$C_{kv} = X W_{dkv},\\quad K = C_{kv} W_{uk},\\quad V = C_{kv} W_{uv},\\quad Q = X W_q,\\qquad
  C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o,\\quad
  A_i = \\operatorname{softmax}\\!\\big(Q_i K_i^\\top / \\sqrt{c_h}\\big)$$

with W_dkv (d × r), W_uk, W_uv (r × c), h heads of width c_h = c/h as in multi-head attention,
causal. A KV cache of multi-head attention keeps 2c numbers per token and layer; this one keeps r.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from . import _core
from ._arguments import check_flag, check_heads, check_positive, check_probability
from ._checks import Weights, checked, checked_forward
from ._shapes import ShapeError
from ._weights import parameter, submodule

__all__ = ["latent_attention", "MultiHeadLatentAttention"]


@checked
def latent_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_dkv: Float[Tensor, "d r"],
    w_uk: Float[Tensor, "r c"],
    w_uv: Float[Tensor, "r c"],
    w_o: Float[Tensor, "c c_out"] | None = None,
    *,
    heads: int = 1,
    causal: bool = True,
) -> Float[Tensor, "*batch n c_out"]:
    """Multi-head latent attention (the module docstring's formulas): C_kv = X W_dkv (n × r),
    K = C_kv W_uk, V = C_kv W_uv, Q = X W_q, then h heads of width c_h = c/h, concatenated and
    projected by w_o (None: no projection, c_out = c). Causal unless `causal=False`.

    >>> X, W_q, W_dkv, W_u = torch.rand(5, 8), torch.rand(8, 6), torch.rand(8, 2), torch.rand(2, 6)
    >>> latent_attention(X, W_q, W_dkv, W_u, W_u, heads=3).shape
    torch.Size([5, 6])
    """
    check_positive("latent_attention", heads=heads)
    c = w_q.shape[-1]
    if c % heads:
        raise ShapeError(
            f"latent_attention: c={c} (the width of w_q) is not divisible by heads={heads}"
        )
    latent = _core.projection(x, w_dkv, None)  # C_kv: (*batch, n, r)
    q = _core.split_heads(_core.projection(x, w_q, None), heads)  # -> (*batch, h, n, c_h)
    k = _core.split_heads(_core.projection(latent, w_uk, None), heads)
    v = _core.split_heads(_core.projection(latent, w_uv, None), heads)
    out = _core.attend(
        q, k, v, width=c // heads, causal=causal, allowed=None, dropout_p=0.0,
        return_weights=False, heads=True,
    )  # fmt: skip
    out = _core.merge_heads(out)  # (*batch, h, n, c_h) -> (*batch, n, c)
    return out if w_o is None else _core.projection(out, w_o, None)


_MLA_NAMES = (
    ("W_query.weight", Float[Tensor, "c d"]),  # nn.Linear stores Wᵀ
    ("W_query.bias", Float[Tensor, " c"] | None),
    ("W_DKV.weight", Float[Tensor, "r d"]),
    ("W_DKV.bias", Float[Tensor, " r"] | None),
    ("W_UK.weight", Float[Tensor, "c r"]),
    ("W_UK.bias", Float[Tensor, " c"] | None),
    ("W_UV.weight", Float[Tensor, "c r"]),
    ("W_UV.bias", Float[Tensor, " c"] | None),
    ("out_proj.weight", Float[Tensor, "c_out c"]),
    ("out_proj.bias", Float[Tensor, " c_out"] | None),
)
_MLA_LINEARS = ("W_query", "W_DKV", "W_UK", "W_UV", "out_proj")


def _mla_weights(module: nn.Module) -> Weights:
    linears = [submodule(module, name) for name in _MLA_LINEARS]
    tensors = tuple(parameter(lin, part) for lin in linears for part in ("weight", "bias"))
    return _MLA_NAMES, tensors


class MultiHeadLatentAttention(nn.Module):
    """The book's `MultiHeadLatentAttention` (ch04/05_mla): the same constructor, parameters
    (`W_query`, `W_DKV`, `W_UK`, `W_UV`, `out_proj`), creation order and initialisation, so the
    same `torch.manual_seed` gives the same numbers and its state_dicts load unchanged; and the
    same latent cache: `cache_c_kv` (*batch, tokens so far, latent_dim), a non-persistent buffer,
    with `ptr_current_pos` the position of the next query.

    latent_dim: r, default max(16, d_out // 8) as the book's. `forward(x, use_cache=False)`:
    causal. With `use_cache`, the new tokens' latents are appended to the cache, the queries sit
    at positions ptr_current_pos … ptr_current_pos + n − 1 and attend every cached key at or
    before their position. Without it, the cache is neither read nor written and the position
    goes back to 0 (the book's semantics: call `reset_cache()` before a new sequence). Dropout
    on the weights in training mode, as the book's.
    """

    cache_c_kv: Tensor | None

    def __init__(
        self,
        d_in: int,
        d_out: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        latent_dim: int | None = None,
    ):
        where = "MultiHeadLatentAttention"
        check_positive(where, d_in=d_in, d_out=d_out, num_heads=num_heads)
        check_probability(where, dropout=dropout)
        check_flag(where, qkv_bias=qkv_bias)
        if latent_dim is not None:
            check_positive(where, latent_dim=latent_dim)
        check_heads(where, num_heads, d_out=d_out)
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.latent_dim = latent_dim if latent_dim is not None else max(16, d_out // 8)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_DKV = nn.Linear(d_in, self.latent_dim, bias=qkv_bias)  # X -> C_kv
        self.W_UK = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)  # C_kv -> K
        self.W_UV = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)  # C_kv -> V
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("cache_c_kv", None, persistent=False)
        self.ptr_current_pos = 0

    def reset_cache(self) -> None:
        """Forget the cached latents; the next query is at position 0."""
        self.cache_c_kv = None
        self.ptr_current_pos = 0

    @checked_forward(_mla_weights)
    def forward(
        self, x: Float[Tensor, "*batch n d"], use_cache: bool = False
    ) -> Float[Tensor, "*batch n c_out"]:
        """(*batch, n, d_in) -> (*batch, n, d_out), causal; `use_cache`: see the class."""
        n = x.shape[-2]
        latent = self.W_DKV(x)  # the new tokens' C_kv: (*batch, n, r)
        if use_cache:
            latent = self._cached(latent)
            start = self.ptr_current_pos
            self.ptr_current_pos += n
        else:
            start, self.ptr_current_pos = 0, 0
        q = _core.split_heads(self.W_query(x), self.num_heads)  # -> (*batch, h, n, c_h)
        k = _core.split_heads(self.W_UK(latent), self.num_heads)  # -> (*batch, h, T, c_h)
        v = _core.split_heads(self.W_UV(latent), self.num_heads)
        out = self._attend(q, k, v, start)
        return self.out_proj(_core.merge_heads(out))  # (*batch, n, c) -> (*batch, n, d_out)

    def _cached(self, latent: Tensor) -> Tensor:
        """The cache with the new latents appended (and kept): (*batch, T, r)."""
        cache = self.cache_c_kv
        if cache is not None:
            if cache.shape[:-2] != latent.shape[:-2]:
                raise ShapeError(
                    f"MultiHeadLatentAttention.forward: x has batch {tuple(latent.shape[:-2])} "
                    f"but cache_c_kv holds batch {tuple(cache.shape[:-2])}; call reset_cache() "
                    f"before a new batch"
                )
            latent = torch.cat([cache, latent], dim=-2)  # (*batch, T − n, r) -> (*batch, T, r)
        self.cache_c_kv = latent
        return latent

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, start: int) -> Tensor:
        """Query m (at position start + m) attends the keys p ≤ start + m."""
        n, total = q.shape[-2], k.shape[-2]
        p = self.dropout.p if self.training else 0.0
        if start == 0 and total == n and p == 0.0:  # square and causal: the fast path
            return _core.attend(
                q, k, v, width=self.head_dim, causal=True, allowed=None, dropout_p=0.0,
                return_weights=False, heads=True,
            )  # fmt: skip
        positions = torch.arange(start, start + n, device=q.device)
        allowed = torch.arange(total, device=q.device) <= positions[:, None]  # (n, T)
        if p > 0.0:
            return _core.attend_explicitly(q, k, v, self.head_dim, allowed, p)[0]
        *lead, heads, _, width = q.shape
        q4 = q.reshape(-1, heads, n, width)  # (*batch, h, n, c_h) -> (B, h, n, c_h)
        k4, v4 = (t.reshape(-1, heads, total, width) for t in (k, v))  # -> (B, h, T, c_h)
        scale = _core.scale(self.head_dim)
        out = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=allowed, scale=scale)
        return out.view(*lead, heads, n, width)  # (B, h, n, c_h) -> (*batch, h, n, c_h)
