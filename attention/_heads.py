"""Multi-head attention, checked: split the c columns into h heads, attend per head, merge, and
project by W_o (`attention._layer`, which the modules call too). Re-exported by
`attention.functional`.
"""

from jaxtyping import Float
from torch import Tensor

from . import _core, _modify
from . import mods as M
from ._arguments import (
    check_alibi,
    check_cap,
    check_gate,
    check_per_head,
    check_positive,
    check_probability,
    check_window,
)
from ._checks import checked
from ._layer import LayerWeights, attention_layer
from ._masks import KeyPaddingArg, MaskArg, given_masks
from ._shapes import ShapeError

__all__ = ["split_heads", "merge_heads", "multi_head_attention"]


@checked
def split_heads(t: Float[Tensor, "*batch n c"], heads: int) -> Float[Tensor, "*batch h n c_h"]:
    """Split the c columns into h heads of c_h = c / h: head i takes columns i·c_h … (i+1)·c_h−1.

    (*batch, n, c) -> (*batch, h, n, c_h)
    """
    check_positive("split_heads", heads=heads)
    if t.shape[-1] % heads:
        raise ShapeError(
            f"split_heads: c={t.shape[-1]} is not divisible by heads={heads}; "
            f"c must be a multiple of the number of heads"
        )
    return _core.split_heads(t, heads)


@checked
def merge_heads(t: Float[Tensor, "*batch h n c_h"]) -> Float[Tensor, "*batch n c"]:
    """Concatenate the heads' context vectors side by side.

    (*batch, h, n, c_h) -> (*batch, n, c) with c = h·c_h.
    """
    return _core.merge_heads(t)


@checked
def multi_head_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c"],
    w_o: Float[Tensor, "c c_out"],
    *,
    heads: int,
    b_q: Float[Tensor, " c"] | None = None,
    b_k: Float[Tensor, " c"] | None = None,
    b_v: Float[Tensor, " c"] | None = None,
    b_o: Float[Tensor, " c_out"] | None = None,
    causal: bool = False,
    window: int | None = None,
    mask: MaskArg = None,
    key_padding_mask: KeyPaddingArg = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    softcap: float | None = None,
    alibi: bool | Float[Tensor, " h"] = False,
    sinks: Float[Tensor, " h"] | None = None,
    w_g: Float[Tensor, "d c"] | None = None,
    b_g: Float[Tensor, " c"] | None = None,
    query_pre_attn_scalar: float | None = None,
    mods: tuple = (),
) -> (
    Float[Tensor, "*batch n c_out"]
    | tuple[Float[Tensor, "*batch n c_out"], Float[Tensor, "*batch h n n"]]
):
    """Multi-head attention: h heads of width c_h = c / h, concatenated, then projected by W_o.

    $$C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o (+ b_o), \\qquad
      A_i = \\operatorname{softmax}\\!\\big(Q_i K_i^\\top / \\sqrt{c_h}\\big)$$

    where Q_i, K_i, V_i are columns i·c_h … (i+1)·c_h−1 of Q = X Wq, K = X Wk, V = X Wv. All
    heads go through one fused kernel call when the weights are not requested. `mask`
    (*batch, n, n) and `key_padding_mask` (*batch, n) as in `self_attention`, shared by the
    heads, and `window` (with causal) as in `self_attention`. softcap: κ, each scaled score ω̃
    replaced by κ tanh(ω̃/κ) (Gemma 2). alibi (with causal): −μ_ℓ (m − p) added to head ℓ's
    scores (BLOOM), True for Press et al.'s slopes (`alibi_slopes`) or a tensor of h slopes.
    sinks: h logits ζ_ℓ, exp(ζ_ℓ) in each row's denominator of head ℓ (GPT-OSS's attention
    sinks). w_g, b_g: the output gate's W_g (d, c) and bias: the merged heads multiplied by
    σ(X W_g + b_g) before W_o (Qwen 3.5's gate, each head's block of columns its own;
    `output_gate`). query_pre_attn_scalar: the scale 1/√query_pre_attn_scalar in place of
    1/√c_h (Gemma 2 and 3). mods: more modifications, as objects (`attention.mods`: `Chunked`,
    `Temperature`, a researcher's own subclass of `Modification`, …), applied with those the
    keywords build (one of each kind). Returns C (*batch, n, c_out), or (C, A) with A
    (*batch, h, n, n).
    """
    check_positive("multi_head_attention", heads=heads)
    check_probability("multi_head_attention", dropout_p=dropout_p)
    check_window("multi_head_attention", "window", window, causal)
    check_cap("multi_head_attention", "softcap", softcap)
    check_alibi("multi_head_attention", alibi, heads, causal)
    check_per_head("multi_head_attention", "sinks", sinks, heads, "sink")
    check_cap("multi_head_attention", "query_pre_attn_scalar", query_pre_attn_scalar)
    check_gate("multi_head_attention", w_g, b_g)
    c = w_q.shape[-1]
    if c % heads:
        raise ShapeError(
            f"multi_head_attention: c={c} (the width of w_q) is not divisible by heads={heads}"
        )
    weights = LayerWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, w_g=w_g, b_g=b_g)
    built = M.modifications(
        causal=causal,
        window=window,
        softcap=softcap,
        alibi=alibi,
        sinks=sinks,
        query_pre_attn_scalar=query_pre_attn_scalar,
    )
    mods = _modify.joined("multi_head_attention", built, mods, heads)
    return attention_layer(
        x,
        weights,
        heads=heads,
        mods=mods,
        allowed=given_masks(mask, key_padding_mask),
        dropout_p=dropout_p,
        return_weights=return_weights,
    )
