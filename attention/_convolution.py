"""The causal depthwise convolution the recurrent layers put before their rule (Qwen 3.5's and
Kimi Linear's on q, k, v; Mamba-2's on x, B, C): each channel convolved with its own short
filter over the tokens before it, then SiLU, continuing from the inputs a cache kept."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = ["convolved"]


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
