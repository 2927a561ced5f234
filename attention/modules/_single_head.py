"""The book's single-head attention classes (sections 3.3–3.5 of *Build a Large Language Model
(from Scratch)*), checked.

Each class has the book's constructor arguments, parameter names, creation order and
initialisation, so the same `torch.manual_seed` gives the same numbers and a `state_dict` saved
from the book's class loads unchanged. On top: every `forward` is shape-checked (input, the
module's own weights, result), and the forward pass runs on PyTorch's fused kernel when it can.

Weight orientation. The book writes Q = X Wq with Wq of shape d×c. `SelfAttentionV1` stores
exactly that (`W_query`: d×c); the `nn.Linear` classes store Wqᵀ (`W_query.weight`: c×d).
Every class exposes the book's matrices as `w_q`, `w_k`, `w_v` (d×c), and
`copy_weights(source, target)` moves them between any two single-head classes (the book's
exercise 3.1).
"""

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from .. import mods as M
from .._arguments import check_flag, check_positive, check_probability
from .._checks import checked_forward
from .._layer import LayerWeights, attention_layer, one_head
from .._masks import KeyPaddingArg, MaskArg, given_masks
from .._weights import BookWeights, copy_weights, v1_weights, v2_weights
from ._common import dropout_rate, within_context

__all__ = ["SelfAttentionV1", "SelfAttentionV2", "CausalAttention", "copy_weights"]

Context = Float[Tensor, "*batch n c"]
ContextAndWeights = tuple[Float[Tensor, "*batch n c"], Float[Tensor, "*batch n n"]]


def _one_head(
    module: "SelfAttentionV1 | SelfAttentionV2 | CausalAttention",
    x: Tensor,
    *,
    causal: bool,
    mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """The forward of the single-head modules: `attention` with one head, the module's W_q,
    W_k, W_v and their biases (`nn.Linear`'s; V1 has none), and its dropout rate (V1: none);
    A (*batch, n, n)."""
    b_q, b_k, b_v = (
        getattr(p, "bias", None) for p in (module.W_query, module.W_key, module.W_value)
    )
    weights = LayerWeights(module.w_q, module.w_k, module.w_v, b_q=b_q, b_k=b_k, b_v=b_v)
    return one_head(
        attention_layer(
            x,
            weights,
            heads=1,
            mods=M.modifications(causal=causal),
            allowed=given_masks(mask, key_padding_mask),
            dropout_p=dropout_rate(module),
            return_weights=return_weights,
        )
    )


class SelfAttentionV1(BookWeights, nn.Module):
    """The book's `SelfAttention_v1`: Wq, Wk, Wv as three `nn.Parameter` of shape (d_in, d_out).

    $$C = \\operatorname{softmax}\\!\\big(X W_q (X W_k)^\\top / \\sqrt{c}\\big)\\, X W_v$$

    with d = d_in and c = d_out; weights drawn by `torch.rand` as in the book.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of Q, K, V and of the output.

    Raises:
        ValueError: when d_in or d_out is not a positive int.

    >>> import torch
    >>> from attention import SelfAttentionV1
    >>> _ = torch.manual_seed(123)
    >>> sa = SelfAttentionV1(d_in=3, d_out=2)
    >>> sa(torch.rand(6, 3)).shape
    torch.Size([6, 2])
    """

    def __init__(self, d_in: int, d_out: int):
        check_positive("SelfAttentionV1", d_in=d_in, d_out=d_out)
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    @checked_forward(v1_weights)
    def forward(
        self, x: Float[Tensor, "*batch n d"], *, return_weights: bool = False
    ) -> Context | ContextAndWeights:
        """The context vectors C of X.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in.
            return_weights: also return the attention weights A.

        Returns:
            C, `(*batch, n, c)`; with `return_weights=True`, the pair (C, A), A `(*batch, n, n)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in.
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
        return _one_head(self, x, causal=False, return_weights=return_weights)


class SelfAttentionV2(BookWeights, nn.Module):
    """The book's `SelfAttention_v2`: Wq, Wk, Wv as three `nn.Linear(d_in, d_out, qkv_bias)`.

    Same formula as V1 (plus optional biases); `nn.Linear` stores `W_query.weight` = Wqᵀ (c×d),
    and `self.w_q` gives Wq (d×c). Initialisation is `nn.Linear`'s, as in the book.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of Q, K, V and of the output.
        qkv_bias: give `W_query`, `W_key` and `W_value` biases.

    Raises:
        ValueError: when d_in or d_out is not a positive int.
        TypeError: when qkv_bias is not a bool.
    """

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False):
        check_positive("SelfAttentionV2", d_in=d_in, d_out=d_out)
        check_flag("SelfAttentionV2", qkv_bias=qkv_bias)
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    @checked_forward(v2_weights)
    def forward(
        self, x: Float[Tensor, "*batch n d"], *, return_weights: bool = False
    ) -> Context | ContextAndWeights:
        """The context vectors C of X.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in.
            return_weights: also return the attention weights A.

        Returns:
            C, `(*batch, n, c)`; with `return_weights=True`, the pair (C, A), A `(*batch, n, n)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in.
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
        return _one_head(self, x, causal=False, return_weights=return_weights)


class CausalAttention(BookWeights, nn.Module):
    """The book's `CausalAttention`: V2 plus a causal mask and dropout on the weights.

    $$a_{m,p} = 0 \\text{ for } p > m, \\qquad
      A = \\operatorname{dropout}\\!\\big(\\operatorname{softmax}(\\text{masked }
          \\Omega/\\sqrt{c})\\big)$$

    The `mask` buffer (context_length × context_length, 1 above the diagonal) is kept as in the
    book so that its state_dicts load; inputs may have at most `context_length` tokens. Dropout
    acts in training mode only. `forward` also takes a boolean `mask` and a `key_padding_mask`,
    combined with the causal one.

    Args:
        d_in: d, the width of each input row.
        d_out: c, the width of Q, K, V and of the output.
        context_length: the most tokens an input may have (the side of the `mask` buffer).
        dropout: the rate of dropout on A in training mode, in [0, 1).
        qkv_bias: give `W_query`, `W_key` and `W_value` biases.

    Raises:
        ValueError: when d_in, d_out or context_length is not a positive int, or dropout is not
            in [0, 1).
        TypeError: when qkv_bias is not a bool.
    """

    mask: Tensor

    def __init__(
        self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False
    ):
        check_positive("CausalAttention", d_in=d_in, d_out=d_out, context_length=context_length)
        check_probability("CausalAttention", dropout=dropout)
        check_flag("CausalAttention", qkv_bias=qkv_bias)
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    @checked_forward(v2_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        *,
        mask: MaskArg = None,
        key_padding_mask: KeyPaddingArg = None,
        return_weights: bool = False,
    ) -> Context | ContextAndWeights:
        """The context vectors C of X, causal.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in and n ≤ context_length.
            mask: True where query m may attend key p, `(*batch, n, n)` (its batch broadcasts
                against x's); None for none. A query left with no key gets a row of zeros.
            key_padding_mask: True where key p exists, `(*batch, n)` (the opposite of
                torch.nn.MultiheadAttention's); None for none.
            return_weights: also return the attention weights A (after dropout, in training mode).

        Returns:
            C, `(*batch, n, c)`; with `return_weights=True`, the pair (C, A), A `(*batch, n, n)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, n passes context_length, or
                a mask does not fit x.
            DtypeError: when x is not a float tensor of the weights' dtype, or a mask is not bool.
            DeviceError: when x or a mask is not on the weights' device.
        """
        within_context("CausalAttention.forward", x.shape[-2], self.mask.shape[-1])
        return _one_head(
            self,
            x,
            causal=True,
            mask=mask,
            key_padding_mask=key_padding_mask,
            return_weights=return_weights,
        )
