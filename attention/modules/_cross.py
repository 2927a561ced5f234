"""`CrossAttention`: multi-head attention whose queries come from X and whose keys and values
come from another sequence Y (a decoder reading an encoder's output, text reading an image).
The book has no such class; this one is laid out as its `MultiHeadAttention` is (`W_query`,
`W_key`, `W_value`, `out_proj`, `dropout`), with `W_key` and `W_value` reading d_kv columns.
"""

from jaxtyping import Bool, Float
from torch import Tensor

from .._arguments import check_positive
from .._checks import checked_forward
from .._weights import BookWeights, cross_weights
from ._common import MultiHeadModule, OutputProjection, build_heads, forward_layer

__all__ = ["CrossAttention"]


class CrossAttention(OutputProjection, BookWeights, MultiHeadModule):
    """h heads of cross-attention, concatenated and projected by `out_proj`.

    $$C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o + b_o,\\qquad
      A_i = \\operatorname{softmax}\\!\\big(Q_i K_i^\\top / \\sqrt{c_h}\\big),\\quad
      Q = X W_q,\\ K = Y W_k,\\ V = Y W_v$$

    Ω and A are n × s per head, never causal. `forward(x, y)` also takes `mask` and
    `key_padding_mask`, shared by the heads; dropout acts on the weights in training mode. With
    num_heads=1 and `out_proj` the identity it is `functional.cross_attention`.

    Args:
        d_in: d, the width of X (the queries' sequence).
        d_kv: d_y, the width of Y (the keys' and values' sequence).
        d_out: c, the width of Q, K, V and of the output; num_heads divides it.
        dropout: the rate of dropout on A in training mode, in [0, 1).
        num_heads: h; each head has width c_h = d_out / num_heads.
        qkv_bias: give `W_query`, `W_key` and `W_value` biases (`out_proj` always has one).

    Raises:
        ValueError: when d_in, d_kv, d_out or num_heads is not a positive int, num_heads does
            not divide d_out, or dropout is not in [0, 1).
        TypeError: when qkv_bias is not a bool.

    >>> import torch
    >>> from attention import CrossAttention
    >>> cross = CrossAttention(d_in=3, d_kv=5, d_out=4, num_heads=2)
    >>> cross(torch.rand(6, 3), torch.rand(7, 5)).shape
    torch.Size([6, 4])
    """

    def __init__(
        self,
        d_in: int,
        d_kv: int,
        d_out: int,
        dropout: float = 0.0,
        num_heads: int = 1,
        qkv_bias: bool = False,
    ):
        check_positive("CrossAttention", d_kv=d_kv)  # build_heads reads None as d_in
        build_heads(
            self,
            "CrossAttention",
            d_in=d_in,
            d_kv=d_kv,
            d_out=d_out,
            num_heads=num_heads,
            dropout=dropout,
            qkv_bias=qkv_bias,
        )

    @checked_forward(cross_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        y: Float[Tensor, "*batch s d_y"],
        *,
        mask: Bool[Tensor, "*#batch n s"] | None = None,
        key_padding_mask: Bool[Tensor, "*#batch s"] | None = None,
        return_weights: bool = False,
    ) -> (
        Float[Tensor, "*batch n c_out"]
        | tuple[Float[Tensor, "*batch n c_out"], Float[Tensor, "*batch h n s"]]
    ):
        """The context vectors C of X's queries, read from Y's keys and values.

        Args:
            x: the queries' sequence X, `(*batch, n, d)` with d = d_in.
            y: the keys' and values' sequence Y, `(*batch, s, d_y)` with d_y = d_kv, the same
                batch as x.
            mask: True where query m may attend key p, `(*batch, n, s)` (its batch broadcasts
                against x's), shared by the heads; None for none. A query left with no key gets
                a row of zeros.
            key_padding_mask: True where key p exists, `(*batch, s)` (the opposite of
                torch.nn.MultiheadAttention's); None for none.
            return_weights: also return the attention weights A (after dropout, in training mode).

        Returns:
            C, `(*batch, n, d_out)`; with `return_weights=True`, the pair (C, A), A
                `(*batch, h, n, s)`.

        Raises:
            ShapeError: when x or y does not have the shape above, their batches differ, or a
                mask does not fit them.
            DtypeError: when x or y is not a float tensor of the weights' dtype, or a mask is not
                bool.
            DeviceError: when x, y or a mask is not on the weights' device.
        """
        return forward_layer(
            self,
            x,
            y=y,
            mask=mask,
            key_padding_mask=key_padding_mask,
            return_weights=return_weights,
        )
