"""Shape-checked trainable self-attention in PyTorch (the numeric half of attention-derive).

    from attention import SelfAttentionV1, SelfAttentionV2, CausalAttention
    from attention import MultiHeadAttentionWrapper, MultiHeadAttention, copy_weights
    from attention import MultiHeadAttentionWithSWA, CrossAttention  # the variants
    from attention.functional import self_attention, multi_head_attention  # and each step
    from attention.functional import cross_attention, decode_step, sliding_window_mask
    from attention import mods  # the score modifications as objects: mods=(mods.Chunked(8),)
    from attention import GatedDeltaNet, linear  # attention without the softmax (ch04/08)
    from attention import Mamba, Mamba2, ssm  # Mamba's and Mamba-2's layers (linear.ssd)
    from attention import KimiDeltaAttention  # Kimi Linear's KDA layer, on linear.kimi_delta_rule

Checks (jaxtyping + beartype, on every public function and `forward`) are on by default; turn
them off with `JAXTYPING_DISABLE=1` or `jaxtyping.config.update("jaxtyping_disable", True)`.
"""

from . import functional, linear, mods, ssm
from ._shapes import AttentionError, DeviceError, DtypeError, ShapeError, checks_enabled
from .deltanet import GatedDeltaNet
from .grouped import GroupedQueryAttention, RMSNorm
from .interop import from_torch_multihead, to_torch_multihead, torch_masks
from .kimi import KimiDeltaAttention
from .latent import MultiHeadLatentAttention
from .modules import (
    CausalAttention,
    CrossAttention,
    MultiHeadAttention,
    MultiHeadAttentionWithSWA,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
    copy_weights,
)
from .rope import apply_rope, compute_rope_params
from .ssm import Mamba, Mamba2

__all__ = [
    "functional",
    "mods",
    "SelfAttentionV1",
    "SelfAttentionV2",
    "CausalAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
    "MultiHeadAttentionWithSWA",
    "CrossAttention",
    "copy_weights",
    "to_torch_multihead",
    "from_torch_multihead",
    "torch_masks",
    "AttentionError",
    "ShapeError",
    "DtypeError",
    "DeviceError",
    "checks_enabled",
]

# RoPE, grouped-query attention, QK-norm (the book's Llama 3 and Qwen 3)
__all__ += ["compute_rope_params", "apply_rope", "GroupedQueryAttention", "RMSNorm"]

# multi-head latent attention (DeepSeek's, the book's ch04/05_mla)
__all__ += ["MultiHeadLatentAttention"]

# linear attention, DeltaNet and Gated DeltaNet (the book's ch04/08_deltanet, Qwen 3.5's layers)
__all__ += ["linear", "GatedDeltaNet"]

# Mamba's selective scan (Mamba, Falcon Mamba, Jamba), Mamba-2's state-space dual layer (Mamba 2,
# Bamba, Granite 4, Nemotron-H, Zamba 2), and Kimi
# Delta Attention (Kimi Linear's linear layers)
__all__ += ["ssm", "Mamba", "Mamba2", "KimiDeltaAttention"]
