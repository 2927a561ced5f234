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

    Args:
        t: Q, K, V or any `(*batch, n, c)`, c a multiple of h.
        heads: h, the number of heads.

    Returns:
        The heads, `(*batch, h, n, c_h)`.

    Raises:
        ValueError: when heads is not a positive integer.
        TypeError: when heads is not an int.
        ShapeError: when heads does not divide c.
        DtypeError: when t is not a float tensor.
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
    """Concatenate the heads' context vectors side by side (the inverse of `split_heads`).

    Args:
        t: the heads, `(*batch, h, n, c_h)`.

    Returns:
        The heads side by side, `(*batch, n, c)` with c = h·c_h: head i in columns
            i·c_h … (i+1)·c_h−1.

    Raises:
        ShapeError: when t has fewer than 3 dimensions.
        DtypeError: when t is not a float tensor.
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
    heads go through one fused kernel call when the weights are not requested.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: Wq, `(d, c)`, c a multiple of h.
        w_k: Wk, `(d, c)`.
        w_v: Wv, `(d, c)`.
        w_o: W_o, `(c, c_out)`.
        heads: h, the number of heads.
        b_q: a bias of Q, `(c,)`; None for none.
        b_k: a bias of K, `(c,)`; None for none.
        b_v: a bias of V, `(c,)`; None for none.
        b_o: a bias of the output, `(c_out,)`; None for none.
        causal: token m attends to the tokens p ≤ m only.
        window: w, with causal: token m attends to its last w tokens only, 0 ≤ m − p < w; None
            for no window.
        mask: True where query m may attend key p, `(*batch, n, n)` (its batch broadcasts
            against x's), shared by the heads; None for none.
        key_padding_mask: True where key p exists, `(*batch, n)` (the opposite of
            torch.nn.MultiheadAttention's), shared by the heads; None for none.
        dropout_p: dropout on A after the softmax, applied whenever > 0.
        return_weights: return the heads' A with C.
        softcap: κ, each scaled score ω̃ replaced by κ tanh(ω̃/κ) (Gemma 2); None for none.
        alibi: with causal, −μ_ℓ (m − p) added to head ℓ's scores (BLOOM): True for Press et
            al.'s slopes (`alibi_slopes`), a float tensor of h slopes `(h,)`, False for none.
        sinks: h logits ζ_ℓ, `(h,)`: exp(ζ_ℓ) in each row's denominator of head ℓ (GPT-OSS's
            attention sinks); None for none.
        w_g: the output gate's W_g, `(d, c)`: the merged heads multiplied by σ(X W_g + b_g)
            before W_o (Qwen 3.5's gate, each head's block of columns its own; `output_gate`);
            None for no gate.
        b_g: the gate's bias, `(c,)`, with w_g; None for none.
        query_pre_attn_scalar: the scale 1/√query_pre_attn_scalar in place of 1/√c_h (Gemma 2
            and 3); None for 1/√c_h.
        mods: more modifications, as objects (`attention.mods`: `Chunked`, `Temperature`, a
            researcher's own subclass of `Modification`, …), applied with those the keywords
            build (one of each kind).

    Returns:
        The output C, `(*batch, n, c_out)`; with `return_weights=True`, the pair (C, A), A
            `(*batch, h, n, n)` after dropout.

    Raises:
        ValueError: when heads is not a positive integer, dropout_p is not in [0, 1), window is
            not a positive integer or is given without causal, softcap or
            query_pre_attn_scalar is not a positive number, alibi is given without causal, b_g
            is given without w_g, or a kind of modification is given twice (in mods, or by mods
            and a keyword).
        TypeError: when an argument is not of its annotated type (a flag not a bool, mods not
            a tuple, alibi neither a bool nor a tensor), or a mod is not a `Modification`.
        ShapeError: when heads does not divide c, the weights, biases or masks do not fit x or
            one another, or alibi, sinks or a mod's tensor does not have h entries.
        DtypeError: when x or a weight, bias, alibi or sinks tensor is not float or not x's
            dtype, or a mask is not bool.
        DeviceError: when a tensor is not on x's device.
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
