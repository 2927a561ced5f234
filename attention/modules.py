"""The book's attention classes (ch. 3 of *Build a Large Language Model (from Scratch)*), checked.

Each class has the book's constructor arguments, parameter names, creation order and
initialisation, so the same `torch.manual_seed` gives the same numbers and a `state_dict` saved
from the book's class loads unchanged. On top: every `forward` is shape-checked (input, the
module's own weights, result), and the forward pass runs on PyTorch's fused kernel when it can.

Weight orientation. The seed writes Q = X Wq with Wq of shape d×c. `SelfAttentionV1` stores
exactly that (`W_query`: d×c); the `nn.Linear` classes store Wqᵀ (`W_query.weight`: c×d).
Every class exposes the seed's matrices as `w_q`, `w_k`, `w_v` (d×c), and
`copy_weights(source, target)` moves them between any two single-head classes (the book's
exercise 3.1).
"""

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from . import _core
from ._checks import checked_forward
from ._heads import _multi_head_attention, _scaling_width
from ._masks import KeyPaddingArg, MaskArg, given_masks, silence_isolated
from ._shapes import ShapeError, check_flag, check_positive, check_probability
from ._weights import (
    SeedWeights,
    copy_weights,
    heads_weights,
    multi_head_weights,
    v1_weights,
    v2_weights,
)

__all__ = [
    "SelfAttentionV1",
    "SelfAttentionV2",
    "CausalAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
    "copy_weights",
]

Context = Float[Tensor, "*batch n c"]
ContextAndWeights = tuple[Float[Tensor, "*batch n c"], Float[Tensor, "*batch n n"]]


def _dropout_p(module: nn.Module) -> float:
    """The module's dropout rate in training mode, 0 in eval mode (and without dropout)."""
    dropout = getattr(module, "dropout", None)
    return dropout.p if dropout is not None and module.training else 0.0


def _linear_attend(
    module: nn.Module,
    x: Tensor,
    *,
    causal: bool,
    mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """The forward of the `nn.Linear` single-head modules: mask, project, scale by √c, dropout,
    AV. Positions that neither attend nor are attended are zeroed first (`silence_isolated`)."""
    allowed = given_masks(mask, key_padding_mask)
    x = silence_isolated(x, causal, allowed)
    q, k, v = module.W_query(x), module.W_key(x), module.W_value(x)
    return _core.attend(
        q, k, v, width=_scaling_width(module.w_q), causal=causal, allowed=allowed,
        dropout_p=_dropout_p(module), return_weights=return_weights, heads=False,
    )  # fmt: skip


class SelfAttentionV1(SeedWeights, nn.Module):
    """The book's `SelfAttention_v1`: Wq, Wk, Wv as three `nn.Parameter` of shape (d_in, d_out).

    $$C = \\operatorname{softmax}\\!\\big(X W_q (X W_k)^\\top / \\sqrt{c}\\big)\\, X W_v$$

    with d = d_in and c = d_out; weights drawn by `torch.rand` as in the book.

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
        """C (*batch, n, c) from X (*batch, n, d); with `return_weights`, (C, A)."""
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return _core.attend(
            q, k, v, width=_scaling_width(self.W_query), causal=False, allowed=None,
            dropout_p=0.0, return_weights=return_weights, heads=False,
        )  # fmt: skip


class SelfAttentionV2(SeedWeights, nn.Module):
    """The book's `SelfAttention_v2`: Wq, Wk, Wv as three `nn.Linear(d_in, d_out, qkv_bias)`.

    Same formula as V1 (plus optional biases); `nn.Linear` stores `W_query.weight` = Wqᵀ (c×d),
    and `self.w_q` gives Wq (d×c). Initialisation is `nn.Linear`'s, as in the book.
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
        """C (*batch, n, c) from X (*batch, n, d); with `return_weights`, (C, A)."""
        return _linear_attend(self, x, causal=False, return_weights=return_weights)


class CausalAttention(SeedWeights, nn.Module):
    """The book's `CausalAttention`: V2 plus a causal mask and dropout on the weights.

    $$a_{m,p} = 0 \\text{ for } p > m, \\qquad
      A = \\operatorname{dropout}\\!\\big(\\operatorname{softmax}(\\text{masked }
          \\Omega/\\sqrt{c})\\big)$$

    The `mask` buffer (context_length × context_length, 1 above the diagonal) is kept as in the
    book so that its state_dicts load; inputs may have at most `context_length` tokens. Dropout
    acts in training mode only. `forward` also takes a boolean `mask` (*batch, n, n) (True = may
    attend) and a `key_padding_mask` (*batch, n) (True = the key exists: the opposite of
    torch.nn.MultiheadAttention's), combined with the causal one.
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
        """C (*batch, n, c) from X (*batch, n, d), n ≤ context_length; with `return_weights`,
        (C, A)."""
        _within_context("CausalAttention.forward", x.shape[-2], self.mask.shape[-1])
        return _linear_attend(
            self, x, causal=True, mask=mask, key_padding_mask=key_padding_mask,
            return_weights=return_weights,
        )  # fmt: skip


def _within_context(where: str, n: int, context_length: int, owner: str = "") -> None:
    if n > context_length:
        raise ShapeError(
            f"{where}: x has n={n} tokens but {owner}context_length={context_length}; "
            f"inputs may have at most context_length tokens"
        )


class MultiHeadAttentionWrapper(nn.Module):
    """The book's `MultiHeadAttentionWrapper`: `num_heads` independent `CausalAttention` heads,
    run one after the other and concatenated; output width num_heads · d_out.

    Its `forward` checks every head's weights itself, so an error names the wrapper and the head
    (`heads[2].W_query.weight has d=3 but x has d=4`), not the inner `CausalAttention`.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
    ):
        check_positive("MultiHeadAttentionWrapper", num_heads=num_heads)
        check_flag("MultiHeadAttentionWrapper", qkv_bias=qkv_bias)
        super().__init__()
        self.heads = nn.ModuleList(
            [
                CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                for _ in range(num_heads)
            ]
        )

    @checked_forward(heads_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        *,
        mask: MaskArg = None,
        key_padding_mask: KeyPaddingArg = None,
    ) -> Float[Tensor, "*batch n c_out"]:
        """(*batch, n, d) -> (*batch, n, num_heads · d_out); masks as in CausalAttention."""
        for index, head in enumerate(self.heads):
            where = "MultiHeadAttentionWrapper.forward"
            _within_context(where, x.shape[-2], head.mask.shape[-1], f"heads[{index}] has ")
        return torch.cat(
            [head(x, mask=mask, key_padding_mask=key_padding_mask) for head in self.heads], dim=-1
        )


class MultiHeadAttention(SeedWeights, nn.Module):
    """The book's `MultiHeadAttention`: h fused causal heads of width c_h = d_out / num_heads,
    concatenated and projected by `out_proj`.

    $$C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o + b_o,\\qquad
      A_i = \\operatorname{dropout}\\!\\big(\\operatorname{softmax}(\\text{masked } Q_i K_i^\\top /
      \\sqrt{c_h})\\big)$$

    Head i uses columns i·c_h … (i+1)·c_h−1 of Q, K, V. Without weights or dropout, all heads run in
    one fused `scaled_dot_product_attention` call with its causal flag. `forward` also takes a
    `mask` (*batch, n, n) and a `key_padding_mask` (*batch, n) as CausalAttention does, shared by
    all heads.
    """

    mask: Tensor

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
    ):
        where = "MultiHeadAttention"
        check_positive(
            where, d_in=d_in, d_out=d_out, context_length=context_length, num_heads=num_heads
        )
        check_probability(where, dropout=dropout)
        check_flag(where, qkv_bias=qkv_bias)
        if d_out % num_heads:
            raise ValueError(
                f"{where}: d_out={d_out} is not divisible by num_heads={num_heads}; "
                f"each head needs width d_out / num_heads"
            )
        super().__init__()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    @property
    def w_o(self) -> Float[Tensor, "c c_out"]:
        """W_o as the seed would write it (c×c_out): C = [heads] W_o + b_o."""
        return self.out_proj.weight.mT

    @checked_forward(multi_head_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        *,
        mask: MaskArg = None,
        key_padding_mask: KeyPaddingArg = None,
        return_weights: bool = False,
    ) -> (
        Float[Tensor, "*batch n c_out"]
        | tuple[Float[Tensor, "*batch n c_out"], Float[Tensor, "*batch h n n"]]
    ):
        """(*batch, n, d) -> (*batch, n, d_out); with `return_weights`, also A (*batch, h, n, n)."""
        _within_context("MultiHeadAttention.forward", x.shape[-2], self.mask.shape[-1])
        return _multi_head_attention(
            x, self.W_query.weight.mT, self.W_key.weight.mT, self.W_value.weight.mT,
            self.out_proj.weight.mT, self.num_heads,
            self.W_query.bias, self.W_key.bias, self.W_value.bias, self.out_proj.bias,
            True, given_masks(mask, key_padding_mask), _dropout_p(self), return_weights,
        )  # fmt: skip
