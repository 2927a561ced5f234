"""Scaled dot-product self-attention, one checked function per step of the book's derivation.

With X (n×d) and learnable Wq, Wk, Wv (each d×c):

$$Q = X W_q,\\quad K = X W_k,\\quad V = X W_v,\\quad \\Omega = Q K^\\top,\\quad
  A = \\operatorname{softmax}(\\Omega / \\sqrt{c}),\\quad C = A V$$

the softmax taken row by row (over p in ω_{m,p}). Every function accepts leading batch dimensions
(`*batch`) and is checked at runtime with jaxtyping + beartype (see `attention._shapes`; switch
checks off with `JAXTYPING_DISABLE=1`). The symbolic twin of each step has the same name in
`derive`.

`self_attention` has two paths: without weights or dropout, PyTorch's fused
`scaled_dot_product_attention` on a 4-D layout (the only one that reaches its fused kernel), with
a backward pass of our own that is exact at any score scale (`attention._fused`); with them, the
explicit path, the steps below one after the other: five matrix products, one transpose.

The steps take n queries and s keys (s = n in self-attention), so that they serve
`cross_attention` too (queries from X, keys and values from another sequence Y, s × d_y).
`self_attention(..., causal=True, window=w)` is sliding-window attention (query m attends key p
iff 0 ≤ m − p < w: `sliding_window_mask`); `decode_step` computes the rows of causal attention
for new tokens against a cache of the earlier tokens' keys and values (generation).

Masks: True = may attend. `mask` (*batch, n, n) is a full mask, entry (m, p) for query m and key p;
`key_padding_mask` (*batch, n) is True where the key exists (the opposite of
`torch.nn.MultiheadAttention`'s `key_padding_mask`, where True = ignore); `causal` keeps p ≤ m.
All three combine. A query with no allowed key gets zero weights and a zero context row (never
NaN), and finite gradients. Keys no query may attend have no influence on any output, NaN and ±inf
included; a position that neither attends nor is attended has none on the gradients either.
"""

import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from . import _core, _masks, _modify
from . import mods as M
from ._arguments import (
    check_alibi,
    check_cap,
    check_finite,
    check_offset,
    check_positive,
    check_probability,
    check_window,
)
from ._backward import Gradients, self_attention_backward, self_attention_gradients
from ._checks import checked
from ._heads import (
    merge_heads,
    multi_head_attention,
    split_heads,
)
from ._layer import LayerWeights, attention, attention_layer, one_head
from ._masks import (
    KeyPaddingArg,
    MaskArg,
    allowed_positions,
    given_masks,
)
from ._shapes import ShapeError
from ._variants import chunked_mask, cross_attention, decode_step, sliding_window_mask

__all__ = [
    "attention",
    "LayerWeights",
    "projection",
    "scores",
    "scaled_scores",
    "masked_scores",
    "softcapped_scores",
    "alibi_scores",
    "alibi_slopes",
    "temperature_scores",
    "chunked_mask",
    "weights",
    "context",
    "output_gate",
    "causal_mask",
    "sliding_window_mask",
    "self_attention",
    "split_heads",
    "merge_heads",
    "multi_head_attention",
    "cross_attention",
    "decode_step",
    "self_attention_backward",
    "self_attention_gradients",
    "Gradients",
]

#: The masks of the steps, for n queries and s keys (s = n in self-attention).
StepMaskArg = Bool[Tensor, "*#batch n s"] | None
StepKeyPaddingArg = Bool[Tensor, "*#batch s"] | None


@checked
def projection(
    x: Float[Tensor, "*batch n d"],
    w: Float[Tensor, "d c"],
    b: Float[Tensor, " c"] | None = None,
) -> Float[Tensor, "*batch n c"]:
    """Project the inputs into query, key or value space: $Q = X W_q$ (+ b).

    $$q_{m,j} = \\sum_{i=1}^{d} x_{m,i} (W_q)_{i,j}$$

    Args:
        x: the input X, `(*batch, n, d)`.
        w: W, `(d, c)`, in the book's orientation (`nn.Linear` stores Wᵀ).
        b: a bias added to every row, `(c,)`; None for none.

    Returns:
        X W (+ b), `(*batch, n, c)`.

    Raises:
        ShapeError: when w's rows are not x's d, or b's width is not w's c.
        DtypeError: when x, w or b is not a float tensor, or their dtypes differ.
        DeviceError: when they are not on one device.

    >>> import torch
    >>> from attention.functional import projection
    >>> projection(torch.ones(5, 3), torch.ones(3, 2)).shape
    torch.Size([5, 2])
    """
    return _core.projection(x, w, b)


@checked
def scores(
    q: Float[Tensor, "*batch n c"], k: Float[Tensor, "*batch s c"]
) -> Float[Tensor, "*batch n s"]:
    """Attention scores $\\Omega = Q K^\\top$ (one transpose, one matrix product).

    $$\\omega_{m,p} = q_m \\cdot k_p = \\sum_{j=1}^{c} q_{m,j} k_{p,j}$$

    Args:
        q: the n queries Q, `(*batch, n, c)`.
        k: the s keys K, `(*batch, s, c)`; s = n in self-attention.

    Returns:
        Ω, `(*batch, n, s)`.

    Raises:
        ShapeError: when q and k differ in c or in their batch dimensions.
        DtypeError: when q or k is not a float tensor, or their dtypes differ.
        DeviceError: when they are not on one device.
    """
    return _core.scores(q, k)


@checked
def scaled_scores(omega: Float[Tensor, "*batch n s"], c: float) -> Float[Tensor, "*batch n s"]:
    """Scores over the square root of the context width, $\\Omega / \\sqrt{c}$.

    If the c components of q and k are independent with mean 0 and variance 1, q·k has variance
    c; dividing by √c brings it back to 1 and keeps the softmax away from a step function. A
    model may take another number for c (Gemma's `query_pre_attn_scalar`; `derive latex
    --variant query-scale`), so c is any positive number.

    Args:
        omega: the scores Ω, `(*batch, n, s)`.
        c: the c of 1/√c: the width of q and k, or the model's own number.

    Returns:
        Ω / √c, `(*batch, n, s)`.

    Raises:
        ValueError: when c is not a positive finite number.
        TypeError: when c is not a number.
        DtypeError: when omega is not a float tensor.
    """
    if isinstance(c, int) and not isinstance(c, bool):
        check_positive("scaled_scores", c=c)  # a width: also one too large for a float
    else:
        check_cap("scaled_scores", "c", c)
    return _core.scaled_scores(omega, c)


@checked
def masked_scores(
    omega: Float[Tensor, "*batch n s"], mask: Bool[Tensor, "*#batch n s"]
) -> Float[Tensor, "*batch n s"]:
    """The scores where a query may attend, −∞ where it may not: $\\hat\\Omega = \\tilde\\Omega
    + M$ with $M_{m,p} = 0$ where `mask` is True and $-\\infty$ where it is False (the
    declaration of `derive`; `weights` takes the mask itself, so that a row with no key gets
    zero weights rather than 0/0).

    Args:
        omega: the scores, `(*batch, n, s)`.
        mask: True where query m may attend key p, `(*batch, n, s)` (its batch broadcasts
            against omega's).

    Returns:
        The masked scores Ω̂, `(*batch, n, s)`.

    Raises:
        ShapeError: when mask does not fit omega.
        DtypeError: when omega is not a float tensor, or mask is not bool.
        DeviceError: when they are not on one device.

    >>> import torch
    >>> masked_scores(torch.zeros(2, 2), causal_mask(2))
    tensor([[0., -inf],
            [0., 0.]])
    """
    return omega.masked_fill(~mask, float("-inf"))


@checked
def softcapped_scores(
    omega_scaled: Float[Tensor, "*batch n s"], cap: float
) -> Float[Tensor, "*batch n s"]:
    """Logit softcapping (Gemma 2): $\\breve\\omega_{m,p} = \\kappa \\tanh(\\tilde\\omega_{m,p} /
    \\kappa)$, every scaled score squashed into (−κ, κ), nearly unchanged where |ω̃| ≪ κ.

    Args:
        omega_scaled: the scaled scores Ω̃ = Ω / √c, `(*batch, n, s)`.
        cap: κ, a positive number.

    Returns:
        The softcapped scores, `(*batch, n, s)`.

    Raises:
        ValueError: when cap is not a positive finite number.
        TypeError: when cap is not a number.
        DtypeError: when omega_scaled is not a float tensor.

    >>> import torch
    >>> softcapped_scores(torch.tensor([[0.1, 100.0]]), cap=2.0)
    tensor([[0.0999, 2.0000]])
    """
    check_cap("softcapped_scores", "cap", cap)
    return _core.softcapped(omega_scaled, cap)


@checked
def alibi_scores(
    omega_scaled: Float[Tensor, "*batch n s"],
    slope: float | Float[Tensor, ""],
    *,
    offset: int = 0,
) -> Float[Tensor, "*batch n s"]:
    """ALiBi (Press, Smith and Lewis, 2022; BLOOM, MPT): one head's scores with a bias linear
    in the distance, $\\dot\\omega_{m,p} = \\tilde\\omega_{m,p} - \\mu\\,(m - p)$, query m
    at position m + offset (after a cache), key p at p.

    Args:
        omega_scaled: one head's scaled scores Ω̃, `(*batch, n, s)`.
        slope: μ, a number or a 0-d tensor `()` (learned slopes get their gradient).
        offset: the position of the first query: the tokens before it in a cache; 0 by
            default.

    Returns:
        The biased scores, `(*batch, n, s)`.

    Raises:
        ValueError: when offset is negative.
        TypeError: when slope is neither a number nor a tensor, or offset is not an int.
        ShapeError: when a tensor slope is not 0-d.
        DtypeError: when omega_scaled is not a float tensor, or a tensor slope's dtype is not
            omega_scaled's.
        DeviceError: when a tensor slope is not on omega_scaled's device.

    >>> import torch
    >>> alibi_scores(torch.zeros(2, 2), 0.5)
    tensor([[ 0.0000,  0.5000],
            [-0.5000,  0.0000]])
    """
    check_offset("alibi_scores", offset)
    n, s = omega_scaled.shape[-2:]
    slope = torch.as_tensor(slope, dtype=omega_scaled.dtype, device=omega_scaled.device)
    block = M.Block(offset, offset + n, 0, s)
    return M.ALiBi(slope.reshape(1)).scores(omega_scaled, block, slope, inplace=False)[0]


@checked
def temperature_scores(
    omega_scaled: Float[Tensor, "*batch n s"], floor: float, scale: float, *, offset: int = 0
) -> Float[Tensor, "*batch n s"]:
    """Llama 4's temperature tuning (its layers without RoPE): row m of the scores multiplied
    by $\\tau_m = \\alpha \\log(1 + \\lfloor m / F \\rfloor) + 1$ (m the 1-based position, query
    m at position m + offset after a cache; `floor` F, `scale` α), so that the weights of long
    contexts stay sharp; τ_m = 1 while m < F (`attention.mods.Temperature`).

    Args:
        omega_scaled: the scaled scores Ω̃, `(*batch, n, s)`.
        floor: F, a positive finite number (Llama 4's `floor_scale`).
        scale: α, a finite number (Llama 4's `attn_scale`).
        offset: the tokens before the first query (a cache's); 0 by default.

    Returns:
        The scores with row m multiplied by τ_m, `(*batch, n, s)`.

    Raises:
        ValueError: when floor is not a positive finite number, scale is not finite, or
            offset is negative.
        TypeError: when floor or scale is not a number, or offset is not an int.
        DtypeError: when omega_scaled is not a float tensor.

    >>> import torch
    >>> temperature_scores(torch.ones(3, 3), floor=2.0, scale=1.0)[:, 0]
    tensor([1.0000, 1.6931, 1.6931])
    """
    check_offset("temperature_scores", offset)
    check_finite("temperature_scores", "floor", floor)  # named here, not as Temperature
    check_cap("temperature_scores", "floor", floor)
    check_finite("temperature_scores", "scale", scale)
    mod = M.Temperature(floor, scale)
    n, s = omega_scaled.shape[-2:]
    return mod.scores(omega_scaled, M.Block(offset, offset + n, 0, s), None, inplace=False)[0]


@checked
def alibi_slopes(heads: int) -> Float[Tensor, " h"]:
    """ALiBi's default slopes, one per head (Press et al.; BLOOM's `_get_alibi_slopes`): for h
    a power of 2, μ_ℓ = 2^(−8ℓ/h), ℓ = 1 … h; otherwise those of the power of 2 below h, then
    every other slope of the sequence for twice that power.

    Args:
        heads: h, the number of heads.

    Returns:
        The slopes μ_1 … μ_h, `(h,)`, float32 on the CPU.

    Raises:
        ValueError: when heads is not a positive integer.
        TypeError: when heads is not an int.

    >>> alibi_slopes(4)
    tensor([0.2500, 0.0625, 0.0156, 0.0039])
    """
    check_positive("alibi_slopes", heads=heads)
    return M.default_slopes(heads)


@checked
def weights(
    omega: Float[Tensor, "*batch n s"],
    c: int,
    *,
    causal: bool = False,
    window: int | None = None,
    mask: StepMaskArg = None,
    key_padding_mask: StepKeyPaddingArg = None,
    sink: float | Float[Tensor, ""] | None = None,
) -> Float[Tensor, "*batch n s"]:
    """Attention weights $A = \\operatorname{softmax}(\\Omega / \\sqrt{c})$, row by row.

    $$a_{m,p} = \\frac{\\exp(\\omega_{m,p}/\\sqrt{c})}
                     {\\sum_{r=1}^{n} \\exp(\\omega_{m,r}/\\sqrt{c})}$$

    With `causal` (Ω square, s = n), a_{m,p} = 0 for p > m, and with a `window` w also for
    p ≤ m − w; with `mask` (*batch, n, s), a_{m,p} = 0 where it is False; with
    `key_padding_mask` (*batch, s), a_{m,p} = 0 where key p is False (True = the key exists; the
    opposite of torch.nn.MultiheadAttention's). The sum over r runs over allowed keys only. Each
    row sums to 1, or is all zeros when no key is allowed. With a `sink` ζ (an attention sink's
    logit, a number or a 0-d tensor), exp(ζ) joins each row's denominator: a row sums to
    1 − e^ζ / (e^ζ + Σ_r …).

    Args:
        omega: the scores Ω, `(*batch, n, s)`.
        c: the width c of the scale 1/√c.
        causal: keep only the keys p ≤ m (Ω square).
        window: w, with causal: keep only the keys 0 ≤ m − p < w; None for no window.
        mask: True where query m may attend key p, `(*batch, n, s)` (its batch broadcasts
            against omega's); None for none.
        key_padding_mask: True where key p exists, `(*batch, s)`; None for none.
        sink: ζ, a number or a 0-d tensor `()` (−∞: no sink); None for none.

    Returns:
        A, `(*batch, n, s)`.

    Raises:
        ValueError: when c is not a positive integer, window is not a positive integer or is
            given without causal, or sink is the float NaN.
        TypeError: when c is not an int, window neither an int nor None, or causal not a
            bool.
        ShapeError: when causal is given with n ≠ s, a mask does not fit omega, or a tensor
            sink is not 0-d.
        DtypeError: when omega is not a float tensor, a mask is not bool, or a tensor sink's
            dtype is not omega's.
        DeviceError: when a mask or sink is not on omega's device.
    """
    check_positive("weights", c=c)
    check_window("weights", "window", window, causal)
    n, s = omega.shape[-2:]
    if causal and n != s:
        raise ShapeError(f"weights: causal needs a square omega (n = s), got n={n}, s={s}")
    allowed = given_masks(mask, key_padding_mask)
    rule = M.modifications(causal=causal, window=window)
    allowed = allowed_positions(s, omega.device, rule, allowed)
    if sink is None:
        return _core.weights(omega, c, allowed)
    if isinstance(sink, float) and math.isnan(sink):  # a tensor's NaN gives NaN weights
        raise ValueError("weights: sink must be a number (−inf for no sink), got sink=nan")
    sink = torch.as_tensor(sink, dtype=omega.dtype, device=omega.device).reshape(1, 1)
    return _core.softmax_rows(_core.scaled_scores(omega, c), allowed, sink)


@checked
def context(
    a: Float[Tensor, "*batch n s"], v: Float[Tensor, "*batch s c"]
) -> Float[Tensor, "*batch n c"]:
    """Context vectors $C = A V$: row m is the attention-weighted sum of the value rows.

    $$c_{m,j} = \\sum_{p=1}^{n} a_{m,p} v_{p,j}$$

    Args:
        a: the weights A, `(*batch, n, s)`.
        v: the values V, `(*batch, s, c)`.

    Returns:
        C, `(*batch, n, c)`.

    Raises:
        ShapeError: when v's s or batch is not a's.
        DtypeError: when a or v is not a float tensor, or their dtypes differ.
        DeviceError: when they are not on one device.
    """
    return _core.context(a, v)


@checked
def output_gate(
    c: Float[Tensor, "*batch n c"], gamma: Float[Tensor, "*batch n c"]
) -> Float[Tensor, "*batch n c"]:
    """The output gate of Qwen 3.5 (and Qwen3-Next): each context feature scaled by the
    sigmoid of its gate logit, $\\tilde z_{m,j} = \\hat z_{m,j}\\,\\sigma(\\gamma_{m,j})$, with
    Γ = X W_g; a logit → +∞ lets the feature through unchanged.

    Args:
        c: the merged heads' context vectors Ẑ, `(*batch, n, c)`.
        gamma: the gate's logits Γ, `(*batch, n, c)`.

    Returns:
        Ẑ ∘ σ(Γ), `(*batch, n, c)`.

    Raises:
        ShapeError: when gamma's shape is not c's.
        DtypeError: when c or gamma is not a float tensor, or their dtypes differ.
        DeviceError: when they are not on one device.

    >>> output_gate(torch.ones(1, 2), torch.tensor([[0.0, 100.0]]))
    tensor([[0.5000, 1.0000]])
    """
    return _core.gated(c, gamma)


@checked
def causal_mask(n: int) -> Bool[Tensor, "n n"]:
    """The causal mask (n×n): True where p ≤ m, i.e. where token m may attend to token p.

    Args:
        n: the number of tokens.

    Returns:
        The mask, `(n, n)`, bool on the CPU.

    Raises:
        ValueError: when n is not a positive integer.
        TypeError: when n is not an int.
    """
    check_positive("causal_mask", n=n)
    return _masks.causal_allowed(n, torch.device("cpu"))  # the one causal mask of the package


@checked
def self_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c"],
    *,
    b_q: Float[Tensor, " c"] | None = None,
    b_k: Float[Tensor, " c"] | None = None,
    b_v: Float[Tensor, " c"] | None = None,
    causal: bool = False,
    window: int | None = None,
    mask: MaskArg = None,
    key_padding_mask: KeyPaddingArg = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    softcap: float | None = None,
    alibi: bool | Float[Tensor, " 1"] = False,
    sinks: Float[Tensor, " 1"] | None = None,
    mods: tuple = (),
) -> Float[Tensor, "*batch n c"] | tuple[Float[Tensor, "*batch n c"], Float[Tensor, "*batch n n"]]:
    """Trainable scaled dot-product self-attention,
    $C = \\operatorname{softmax}\\!\\big(X W_q (X W_k)^\\top / \\sqrt{c}\\big)\\, X W_v$.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: Wq, `(d, c)`, so that Q = X Wq.
        w_k: Wk, `(d, c)`.
        w_v: Wv, `(d, c)`.
        b_q: a bias of Q, `(c,)`; None for none.
        b_k: a bias of K, `(c,)`; None for none.
        b_v: a bias of V, `(c,)`; None for none.
        causal: token m attends to the tokens p ≤ m only.
        window: w, with causal: token m attends to its last w tokens only, 0 ≤ m − p < w
            (sliding-window attention); None for no window.
        mask: True where query m may attend key p, `(*batch, n, n)` (its batch broadcasts
            against x's); None for none.
        key_padding_mask: True where key p exists, `(*batch, n)` (True = ignore in
            torch.nn.MultiheadAttention: invert it); None for none. The masks and causal
            combine.
        dropout_p: dropout on A after the softmax (the book's order), applied whenever > 0
            (modules pass 0 in eval mode).
        return_weights: return A with C.
        softcap: κ, each scaled score ω̃ replaced by κ tanh(ω̃/κ) before the masks and the
            softmax (Gemma 2's logit softcapping, `softcapped_scores`); None for none.
        alibi: with causal, the bias −μ (m − p) added to each score (`alibi_scores`): True for
            the slope 2^−8 of one head, a float tensor of one slope `(1,)`, False for none.
        sinks: an attention sink's logit ζ, `(1,)`: exp(ζ) in each row's denominator (GPT-OSS;
            `weights(..., sink=)`); None for none.
        mods: more modifications, as objects (`attention.mods`: Llama 4's `Chunked` and
            `Temperature`, a researcher's own subclass of `Modification`), applied with those
            the keywords build (one of each kind).

    Returns:
        The context vectors C, `(*batch, n, c)`; with `return_weights=True`, the pair (C, A),
            A `(*batch, n, n)` after dropout (the weights that were used).

    Raises:
        ValueError: when dropout_p is not in [0, 1), window is not a positive integer or is
            given without causal, softcap is not a positive number, alibi is given without
            causal, or a kind of modification is given twice (in mods, or by mods and a
            keyword).
        TypeError: when an argument is not of its annotated type (a flag not a bool, mods not
            a tuple, alibi neither a bool nor a tensor), or a mod is not a `Modification`.
        ShapeError: when the weights, biases or masks do not fit x or one another, or alibi or
            sinks is not `(1,)`.
        DtypeError: when x or a weight, bias, alibi or sinks tensor is not float or not x's
            dtype, or a mask is not bool.
        DeviceError: when a tensor is not on x's device.

    >>> import torch
    >>> from attention.functional import self_attention
    >>> X, W = torch.rand(6, 3), torch.rand(3, 2)
    >>> self_attention(X, W, W, W).shape
    torch.Size([6, 2])
    """
    check_probability("self_attention", dropout_p=dropout_p)
    check_window("self_attention", "window", window, causal)
    check_cap("self_attention", "softcap", softcap)
    check_alibi("self_attention", alibi, 1, causal)
    built = M.modifications(causal=causal, window=window, softcap=softcap, alibi=alibi, sinks=sinks)
    return one_head(
        attention_layer(
            x,
            LayerWeights(w_q, w_k, w_v, b_q=b_q, b_k=b_k, b_v=b_v),
            heads=1,
            mods=_modify.joined("self_attention", built, mods, 1),
            allowed=given_masks(mask, key_padding_mask),
            dropout_p=dropout_p,
            return_weights=return_weights,
        )
    )
