"""The book's multi-head latent attention class (ch04/05_mla), checked. The formulas:
`attention.latent`."""

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from .. import _core
from .. import mods as M
from .._arguments import check_flag, check_heads, check_positive, check_probability
from .._checks import Weights, checked_forward
from .._shapes import ShapeError
from .._weights import parameter, submodule
from ._common import dropout_rate

__all__ = ["MultiHeadLatentAttention"]


_Bias = Float[Tensor, " c"] | None
_LatentBias = Float[Tensor, " r"] | None
_OutBias = Float[Tensor, " c_out"] | None
_MLA_NAMES = (
    ("W_query.weight", Float[Tensor, "c d"]),  # nn.Linear stores Wᵀ
    ("W_query.bias", _Bias),
    ("W_DKV.weight", Float[Tensor, "r d"]),
    ("W_DKV.bias", _LatentBias),
    ("W_UK.weight", Float[Tensor, "c r"]),
    ("W_UK.bias", _Bias),
    ("W_UV.weight", Float[Tensor, "c r"]),
    ("W_UV.bias", _Bias),
    ("out_proj.weight", Float[Tensor, "c_out c"]),
    ("out_proj.bias", _OutBias),
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
    same latent cache: `cache_c_kv` `(*batch, tokens so far, latent_dim)`, a non-persistent
    buffer, with `ptr_current_pos` the position of the next query.

    `forward(x, use_cache=False)`: causal. With `use_cache`, the new tokens' latents are
    appended to the cache, the queries sit at positions ptr_current_pos … ptr_current_pos + n − 1
    and attend every cached key at or before their position. Without it, the cache is neither
    read nor written and the position goes back to 0 (the book's semantics: call `reset_cache()`
    before a new sequence). Dropout on the weights in training mode, as the book's.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of Q, K, V and of the output; num_heads divides it.
        dropout: the rate of dropout on A in training mode, in [0, 1).
        num_heads: h; each head has width c_h = d_out / num_heads.
        qkv_bias: give `W_query`, `W_DKV`, `W_UK` and `W_UV` biases (`out_proj` always has one).
        latent_dim: r, the width of the latent C_kv that keys and values are made from; None
            for the book's default, max(16, d_out // 8).

    Raises:
        ValueError: when d_in, d_out, num_heads or latent_dim is not a positive int, num_heads
            does not divide d_out, or dropout is not in [0, 1).
        TypeError: when qkv_bias is not a bool.
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
        """The context vectors C of X, causal.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in; with `use_cache`, the new tokens.
            use_cache: append the new tokens' latents to `cache_c_kv` and attend the queries, at
                positions ptr_current_pos onwards, to every cached key at or before theirs;
                False: neither read nor write the cache, and put the position back to 0.

        Returns:
            C, `(*batch, n, d_out)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, or (with `use_cache`) its
                batch is not the cache's.
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
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
        """Query m (at position start + m) attends the keys p ≤ start + m (the book's semantics:
        start need not be the number of cached latents, see the class docstring)."""
        return _core.attend(
            q,
            k,
            v,
            scale=_core.scale(self.head_dim),
            heads=True,
            mods=(M.Causal(start),),
            dropout_p=dropout_rate(self),
        )
