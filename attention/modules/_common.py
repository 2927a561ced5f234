"""What the module classes share: the layers of multi-head attention (in the book's order), the
dropout rate a forward uses, the context-length check, the output projection's W_o."""

import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from .._shapes import ShapeError

__all__ = ["add_head_layers", "dropout_rate", "within_context", "OutputProjection"]


def add_head_layers(
    module: nn.Module, d_in: int, d_kv: int, d_out: int, num_heads: int, dropout: float,
    qkv_bias: bool,
) -> None:  # fmt: skip
    """The layers of the book's `MultiHeadAttention`, created in its order (the same seed gives
    the same weights): W_query (d_in), W_key and W_value (d_kv), out_proj, dropout."""
    module.d_out = d_out
    module.num_heads = num_heads
    module.head_dim = d_out // num_heads
    module.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
    module.W_key = nn.Linear(d_kv, d_out, bias=qkv_bias)
    module.W_value = nn.Linear(d_kv, d_out, bias=qkv_bias)
    module.out_proj = nn.Linear(d_out, d_out)
    module.dropout = nn.Dropout(dropout)


def dropout_rate(module: nn.Module) -> float:
    """The module's dropout rate in training mode, 0 in eval mode (and without dropout)."""
    dropout = getattr(module, "dropout", None)
    return dropout.p if dropout is not None and module.training else 0.0


def within_context(where: str, n: int, context_length: int, owner: str = "") -> None:
    """ShapeError unless n ≤ context_length."""
    if n > context_length:
        raise ShapeError(
            f"{where}: x has n={n} tokens but {owner}context_length={context_length}; "
            f"inputs may have at most context_length tokens"
        )


class OutputProjection:
    """W_o of a module whose heads are mixed by `out_proj` (an nn.Linear, which stores W_oᵀ)."""

    out_proj: nn.Linear

    @property
    def w_o(self) -> Float[Tensor, "c c_out"]:
        """W_o as the book's formulas write it (c×c_out): C = [heads] W_o + b_o."""
        return self.out_proj.weight.mT
