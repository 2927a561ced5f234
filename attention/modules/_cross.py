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

    d_in = d (the width of X), d_kv = d_y (the width of Y), d_out = c; Ω and A are n × s per
    head, never causal. `forward(x, y)` also takes `mask` (*batch, n, s) and
    `key_padding_mask` (*batch, s) (True = the key exists), shared by the heads; dropout acts
    on the weights in training mode. With num_heads=1 and `out_proj` the identity it is
    `functional.cross_attention`.

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
        """(*batch, n, d), (*batch, s, d_y) -> (*batch, n, d_out); with `return_weights`, also
        A (*batch, h, n, s)."""
        return forward_layer(
            self,
            x,
            y=y,
            mask=mask,
            key_padding_mask=key_padding_mask,
            return_weights=return_weights,
        )
