"""The key-value cache of the book's generation classes (the KV-cache and sliding-window
attention bonus material of ch. 4 of *Build a Large Language Model (from Scratch)*).

`forward(x, use_cache=True)` attends the new rows of x to the keys and values of every token
seen since `reset_cache()` (with a sliding window, the last w only), then keeps their own keys
and values for the next call. As in the book, the cache lives in two non-persistent buffers,
`cache_k` and `cache_v`, in the layout the book gives them, (*batch, m, h, c_h) before the heads
are moved forward (so `cache_k.size(1)` counts the cached tokens; g key/value groups in place
of h heads where the module groups them), and `ptr_current_pos` counts
the tokens seen. A call that fails (past `context_length`, a different batch) changes nothing.
"""

import typing

import torch
import torch.nn as nn
from torch import Tensor

from .. import _core, _modify
from .. import mods as M
from .._layer import finish, normalise_and_rotate, project_heads
from .._shapes import DeviceError, DtypeError, ShapeError
from ._common import MultiHeadModule, dropout_rate, layer_weights, module_mods

__all__ = ["KVCache", "refuse_masks_with_cache"]


class KVCache:
    """The book's `cache_k`, `cache_v`, `ptr_current_pos` and `reset_cache()`, and the cached
    forward pass of a multi-head module (W_query, W_key, W_value, out_proj, num_heads, head_dim)."""

    cache_k: Tensor | None
    cache_v: Tensor | None
    ptr_current_pos: int

    def _init_cache(self) -> None:
        module: nn.Module = self  # type: ignore[assignment]  # a mixin of modules
        module.register_buffer("cache_k", None, persistent=False)
        module.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def reset_cache(self) -> None:
        """Forget the cached keys and values: the next `forward(x, use_cache=True)` starts a new
        sequence at position 0 (the book's `reset_cache`). Harmless on a fresh module."""
        self.cache_k, self.cache_v = None, None
        self.ptr_current_pos = 0

    def _cached_forward(
        self,
        where: str,
        x: Tensor,
        window: int | None,
        context_length: int | None,
        rope: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """(*batch, t, d) -> (*batch, t, d_out): the new rows against the cache, which grows
        (with `rope`, the new queries and keys rotated at their positions)."""
        module: MultiHeadModule = self  # type: ignore[assignment]  # a mixin of multi-head modules
        cached_k, cached_v = self.cache_k, self.cache_v
        t = x.shape[-2]
        if cached_k is not None:
            _check_cache(where, x, cached_k)
        if context_length is not None and self.ptr_current_pos + t > context_length:
            raise ShapeError(
                f"{where}: use_cache=True past context_length={context_length}: the cache holds "
                f"{self.ptr_current_pos} tokens and x adds n={t}; call reset_cache() to start a "
                f"new sequence (the cache is unchanged)"
            )
        heads = module.num_heads
        groups = getattr(module, "num_kv_groups", heads)
        weights = layer_weights(module)
        q, keys, values, gate = project_heads(x, weights, heads=heads, groups=groups)
        q, keys = normalise_and_rotate(q, keys, weights, rope, self.ptr_current_pos)
        keys, values = keys.transpose(-3, -2), values.transpose(-3, -2)  # -> (*b, t, g, c_h)
        if cached_k is not None:
            keys = torch.cat([cached_k, keys], dim=-3)  # (*b, m, g, c_h) + t rows -> m + t rows
            cached_v = typing.cast(Tensor, cached_v)  # set and reset with cache_k
            values = torch.cat([cached_v, values], dim=-3)
        start = self.ptr_current_pos + t - keys.shape[-3]  # the first kept key's position
        mods = _modify.moved(module_mods(module, *M.modifications(window=window)), start)
        per_head = _core.attend_new_rows(
            q,
            keys.transpose(-3, -2),
            values.transpose(-3, -2),  # -> (*batch, g, m + t, c_h)
            scale=_core.scale(_modify.scaled_width(mods, q.shape[-1])),
            mods=mods,
            dropout_p=dropout_rate(module),
            heads=True,
        )
        out = finish(per_head, gate, weights)  # (*batch, h, t, c_h) -> (*batch, t, c_out)
        self.cache_k = _core.kept_rows(keys, window, dim=-3)
        self.cache_v = _core.kept_rows(values, window, dim=-3)
        self.ptr_current_pos += t
        return out


def refuse_masks_with_cache(where: str, **given: object) -> None:
    """use_cache=True computes causal rows against the cache: no masks, no weights returned."""
    named = [name for name, value in given.items() if value is not None and value is not False]
    if named:
        raise ValueError(
            f"{where}: use_cache=True takes no mask, key_padding_mask or return_weights, "
            f"got {', '.join(named)}"
        )


def _check_cache(where: str, x: Tensor, cached: Tensor) -> None:
    """x must continue the cached sequences: the same batch, dtype and device."""
    if cached.shape[:-3] != x.shape[:-2]:
        raise ShapeError(
            f"{where}: x has batch={tuple(x.shape[:-2])} but cache_k has "
            f"batch={tuple(cached.shape[:-3])}; call reset_cache() to start new sequences"
        )
    if cached.dtype != x.dtype:
        raise DtypeError(
            f"{where}: x has dtype {x.dtype} but cache_k has {cached.dtype}; call reset_cache()"
        )
    if cached.device != x.device:
        raise DeviceError(
            f"{where}: x is on {x.device} but cache_k is on {cached.device}; call reset_cache()"
        )
