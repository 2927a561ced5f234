"""The causal depthwise convolution the recurrent layers put before their rule (Qwen 3.5's and
Kimi Linear's on q, k, v; Mamba-2's on x, B, C): each channel convolved with its own short
filter over the tokens before it, then SiLU, continuing from the inputs a cache kept; and the
call that continues a sequence from a module's own cache (the state and those inputs)."""

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ._shapes import ShapeError

__all__ = ["convolved", "continued_from_cache"]


def convolved(conv: nn.Conv1d, x: Tensor, past: Tensor | None) -> tuple[Tensor, Tensor]:
    """SiLU(conv(x) + bias) of x (*batch, n, channels), each token reading the w − 1 inputs
    before it, `past` (*batch, w − 1, channels; zeros for a new sequence) before the first;
    returns (output, the last w − 1 inputs), what the next call continues from."""
    width = conv.kernel_size[0]
    if past is None:
        past = x.new_zeros((*x.shape[:-2], width - 1, x.shape[-1]))
    full = torch.cat([past.to(x.dtype), x], dim=-2)  # (*batch, w − 1 + n, channels)
    flat = full.reshape(-1, *full.shape[-2:]).transpose(-2, -1)
    out = F.conv1d(flat, conv.weight, conv.bias, groups=flat.shape[-2])
    out = F.silu(out).transpose(-2, -1).reshape(*full.shape[:-2], -1, x.shape[-1])
    return out, full[..., full.shape[-2] - (width - 1) :, :]


def continued_from_cache(module: Any, x: Tensor, where: str, state_rank: int) -> Tensor:
    """`module.continued(x, state, past)` (a recurrent module of this package: Mamba2, Mamba,
    KimiDeltaAttention) from the state and convolution inputs the module keeps
    (`cache_state`, `cache_conv`; None after `reset_cache()`), which it keeps again after x,
    detached (generation, not training). `state_rank`: the state's own dimensions after the
    batch's (3 for a head's matrix per head, 2 for Mamba's per channel); a cache of another batch
    is refused, naming `where`."""
    state = module.cache_state
    if state is not None and state.shape[:-state_rank] != x.shape[:-2]:
        raise ShapeError(
            f"{where}: x has batch {tuple(x.shape[:-2])} but the cache holds "
            f"{tuple(state.shape[:-state_rank])}; call reset_cache() to start another sequence"
        )
    out, state, past = module.continued(x, state, module.cache_conv)
    module.cache_state = state.detach()
    module.cache_conv = None if past is None else past.detach()
    return out
