"""Grouped-query attention (the book's Llama 3 and Qwen 3), with RoPE and QK-norm, checked.

With X (n×d), h query heads of width c_h and g key/value groups (g divides h):

$$Q = X W_q \\;(d \\times h c_h),\\quad K = X W_k,\\; V = X W_v \\;(d \\times g c_h),\\qquad
  C = \\big[A_1 V_{\\gamma(1)} \\,|\\, \\cdots \\,|\\, A_h V_{\\gamma(h)}\\big] W_o,$$

$$A_\\ell = \\operatorname{softmax}\\!\\big(\\mathring{Q}_\\ell
  \\mathring{K}_{\\gamma(\\ell)}^\\top / \\sqrt{c_h}\\big),\\qquad
  \\gamma(\\ell) = \\lfloor (\\ell - 1)\\, g / h \\rfloor + 1,$$

head ℓ (1-based) reading key/value group γ(ℓ) (the book's `repeat_interleave`). Q̊ and K̊ are
each head's queries and keys, RMS-normalised with learnable gains (QK-norm, Qwen 3), then
rotated by their positions (RoPE, `attention.rope`). g = h is multi-head attention, g = 1
multi-query attention.

The fast path is the one of every variant (`attention._fused`): the fused kernel's own
grouped-query support forward (`enable_gqa=True`), which never repeats K and V, and the exact
blockwise backward, the h/g heads of a group going through each product together. The classes
(`GroupedQueryAttention`, `RMSNorm`) live in `attention.modules`, and are importable from here.
"""

import typing

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from . import _core, _modify
from . import mods as M
from ._arguments import check_alibi, check_cap, check_per_head, check_positive, check_window
from ._checks import checked
from ._layer import (
    LayerWeights,
    attention_layer,
    finish,
    normalise_and_rotate,
    project_heads,
    scaling_width,
)
from ._shapes import DtypeError, OwnDtype, ShapeError
from .modules._grouped import GroupedQueryAttention, RMSNorm, check_groups
from .rope import FreqConfig, check_rotated, compute_rope_params, interleaved_order

__all__ = [
    "rms_norm",
    "expand_groups",
    "grouped_query_attention",
    "grouped_decode_step",
    "grouped_cross_attention",
    "DecodeCache",
    "RMSNorm",
    "GroupedQueryAttention",
]


@checked
def rms_norm(
    x: Float[Tensor, "*batch n c"],
    gain: OwnDtype[Float[Tensor, " c"]] | None = None,
    eps: float = 1e-6,
) -> Float[Tensor, "*batch n c"]:
    """RMS norm of each row over its c features, times learnable gains g (None: none, Llama 4's
    `L2Norm`):

    $$\\operatorname{rms\\_norm}(x)_{m,j} = \\frac{x_{m,j}}
      {\\sqrt{\\tfrac{1}{c}\\sum_{i=1}^{c} x_{m,i}^2 + \\varepsilon}}\\; g_j$$

    (float16 and bfloat16 computed in float32, as the book's Qwen 3 `RMSNorm`).

    Args:
        x: the rows, `(*batch, n, c)`.
        gain: the gains g, `(c,)`, in any float dtype (float32 gains with bfloat16 x); None for
            none.
        eps: ε, added to the mean square; at least 0.

    Returns:
        The normalised rows, `(*batch, n, c)`, in x's dtype.

    Raises:
        ValueError: when eps is negative or NaN.
        ShapeError: when gain is not `(c,)`.
        DtypeError: when x or gain is not a float tensor.
        DeviceError: when x and gain are not on one device.

    >>> rms_norm(torch.tensor([[3.0, 4.0]]), torch.ones(2), eps=0.0)  # rms of (3, 4) is √12.5
    tensor([[0.8485, 1.1314]])
    """
    if not eps >= 0:
        raise ValueError(f"rms_norm: eps must be non-negative, got eps={eps!r}")
    return _core.rms_norm(x, gain, eps)


@checked
def expand_groups(
    t: Float[Tensor, "*batch g n c_h"], heads: int
) -> Float[Tensor, "*batch h n c_h"]:
    """The g key (or value) groups given to h heads: head ℓ gets group ⌊(ℓ−1)·g/h⌋ + 1, i.e.
    each group repeated h/g times in place (the book's `repeat_interleave(h // g, dim=1)`).
    The reference formulation; the fast path never builds this.

    Args:
        t: the g groups' keys or values, `(*batch, g, n, c_h)`.
        heads: h, a multiple of g.

    Returns:
        Each head's keys or values, `(*batch, h, n, c_h)`.

    Raises:
        ValueError: when heads is not a positive int or g does not divide it.
        ShapeError: when t has fewer than 3 dimensions.
        DtypeError: when t is not a float tensor.
    """
    check_positive("expand_groups", heads=heads)
    if heads % t.shape[-3]:
        raise ValueError(
            f"expand_groups: heads={heads} is not divisible by g={t.shape[-3]} (the groups of t)"
        )
    return _core.expand_groups(t, heads)


def _check_gains(
    where: str, q_gain: object, k_gain: object, width: int, wholes: tuple[int, int]
) -> None:
    """QK-norm's gains: each of one head's c_h = `width` features or of the whole row (`wholes`:
    c = h·c_h for q_gain, c_kv = g·c_h for k_gain), and both the same kind where it matters."""
    kinds = set()
    for name, gain, whole in (("q_gain", q_gain, wholes[0]), ("k_gain", k_gain, wholes[1])):
        if gain is None:
            continue
        if not isinstance(gain, Tensor):  # a number: every gain that number (1: none at all)
            if isinstance(gain, bool) or not (isinstance(gain, int | float) and gain == gain):
                raise TypeError(f"{where}: {name} must be a tensor of gains or a number")
            continue
        if gain.shape[-1] not in (width, whole):
            raise ShapeError(
                f"{where}: {name} has {gain.shape[-1]} gains, but QK-norm takes one head's "
                f"c_h = c / heads = {width} (per head) or the whole row's {whole} (over all heads)"
            )
        if whole != width:  # with one head (or one group), per head and whole are one thing
            kinds.add("per head" if gain.shape[-1] == width else "over all heads")
    if len(kinds) > 1:  # both tensors: a number has no kind
        q_gain, k_gain = typing.cast(Tensor, q_gain), typing.cast(Tensor, k_gain)
        raise ShapeError(
            f"{where}: q_gain has {q_gain.shape[-1]} gains and k_gain {k_gain.shape[-1]}: one "
            f"normalises per head (c_h = {width}), the other over all heads (c = {wholes[0]}, "
            f"c_kv = {wholes[1]}); QK-norm normalises queries and keys alike"
        )


@checked
def grouped_query_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c_kv"],
    w_v: Float[Tensor, "d c_kv"],
    w_o: Float[Tensor, "c c_out"] | None = None,
    *,
    heads: int = 1,
    groups: int | None = None,
    causal: bool = False,
    theta_base: float | None = None,
    rope_width: int | None = None,
    rope_interleaved: bool = False,
    freq_config: FreqConfig | None = None,
    q_gain: OwnDtype[Float[Tensor, " q_width"]] | float | None = None,
    k_gain: OwnDtype[Float[Tensor, " k_width"]] | float | None = None,
    eps: float = 1e-6,
    mask: Bool[Tensor, "*#batch n n"] | None = None,
    window: int | None = None,
    softcap: float | None = None,
    alibi: bool | Float[Tensor, " h"] = False,
    sinks: Float[Tensor, " h"] | None = None,
    w_g: Float[Tensor, "d c"] | None = None,
    query_pre_attn_scalar: float | None = None,
    mods: tuple = (),
) -> Float[Tensor, "*batch n c_out"]:
    """Grouped-query attention, every composition of the module docstring in one function.

    Args:
        x: the input X, `(n, d)` or `(*batch, n, d)`.
        w_q: W_q, `(d, h·c_h)`.
        w_k: W_k, `(d, g·c_h)`.
        w_v: W_v, `(d, g·c_h)`.
        w_o: W_o, `(h·c_h, c_out)`; None for no output projection (then c_out = h·c_h: with
            heads=1, plain single-head attention).
        heads: h, the query heads; it divides the width of w_q.
        groups: g, the key/value groups, dividing h; None: g = h.
        causal: query m attends the keys p ≤ m.
        theta_base: β of RoPE, applied to each head's queries and keys at positions 0 … n − 1;
            None for no RoPE.
        rope_width: rotate only each head's first rope_width features (partial RoPE; even, at
            most c_h); None: all c_h.
        rope_interleaved: pair feature 2i with 2i + 1 (the RoPE paper's, GPT-J's and GLM's
            layout), computed as the book's rotation of each head's features reordered alike in
            W_q, W_k and the QK-norm gains (the scores are the same sums).
        freq_config: Llama 3.1's or YaRN's frequencies (`compute_rope_params`); None: the plain
            ones.
        q_gain: QK-norm's gains of the queries, RMS norm with `eps` before RoPE (Qwen 3's
            order): `(c_h,)` for each head's queries, or `(h·c_h,)` for each row of Q over all
            heads at once, before the heads are split (OLMo 2 and 3; with one head the two are
            the same); a number for every gain alike (1.0: Llama 4's L2 norm, which has none);
            None for no QK-norm.
        k_gain: the same for the keys: `(c_h,)`, or `(g·c_h,)` over all groups (as q_gain);
            a number; None for none.
        eps: ε of QK-norm, added to the mean square; at least 0.
        mask: True where query m may attend key p, `(*batch, n, n)` (its batch broadcasts
            against x's); with causal or a window, a key must pass both. None for none. A query
            left with no key gets a row of zeros.
        window: w, with causal: query m attends the keys m − w < p ≤ m; None for none.
        softcap: κ, Gemma 2's softcapping: each scaled score ω̃ replaced by κ tanh(ω̃/κ); None
            for none.
        alibi: with causal, −μ_ℓ (m − p) added to head ℓ's scores: True for Press et al.'s
            slopes, a float tensor of h slopes `(h,)`, False for none.
        sinks: GPT-OSS's sinks, h logits `(h,)`, e^{ζ_ℓ} in the denominator of each row of
            head ℓ; None for none.
        w_g: the output gate's W_g, `(d, h·c_h)`: the merged heads multiplied by σ(X W_g)
            before W_o (Qwen 3.5); None for none.
        query_pre_attn_scalar: the scale 1/√query_pre_attn_scalar in place of 1/√c_h (Gemma 2
            and 3); None for 1/√c_h.
        mods: more modifications as objects (`attention.mods`: `Chunked`, `Temperature`, a
            researcher's own subclass of `Modification`, …), applied with those the keywords
            build (one of each kind).

    Returns:
        The context C, `(*batch, n, c_out)`.

    Raises:
        ValueError: when heads or groups is not a positive int, groups does not divide heads,
            window is not a positive int or comes without causal, alibi comes without causal,
            softcap or query_pre_attn_scalar is not a positive number, eps is negative,
            theta_base is not positive, rope_width, rope_interleaved or freq_config comes
            without theta_base, freq_config lacks a key, or a keyword and a mod say the same
            thing.
        ShapeError: when x and the weights do not fit together, heads does not divide the
            width c of w_q, w_k's width is not g·c_h, a gain has neither c_h nor the whole
            width (or the two gains differ in kind), rope_width is odd or not in 1 … c_h, c_h
            is odd with RoPE, the tensor of alibi or sinks is not `(h,)`, or mask is not
            `(*batch, n, n)`.
        DtypeError: when x and the weights are not float tensors of one dtype, or mask is not
            bool.
        DeviceError: when the tensors are not on one device.
        TypeError: when a gain is neither a tensor nor a number, alibi is neither a bool nor a
            tensor, or a mod is not a `Modification`.

    >>> X = torch.rand(5, 8)
    >>> W_q, W_kv, W_o = torch.rand(8, 16), torch.rand(8, 8), torch.rand(16, 8)
    >>> grouped_query_attention(X, W_q, W_kv, W_kv, W_o, heads=4, groups=2, theta_base=1e4).shape
    torch.Size([5, 8])
    """
    where = "grouped_query_attention"
    layer = _layer(
        where,
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        length=x.shape[-2],
        heads=heads,
        groups=groups,
        causal=causal,
        theta_base=theta_base,
        rope_width=rope_width,
        rope_interleaved=rope_interleaved,
        freq_config=freq_config,
        q_gain=q_gain,
        k_gain=k_gain,
        eps=eps,
        window=window,
        softcap=softcap,
        alibi=alibi,
        sinks=sinks,
        w_g=w_g,
        query_pre_attn_scalar=query_pre_attn_scalar,
        mods=mods,
    )
    return attention_layer(
        x,
        layer.weights,
        heads=heads,
        groups=layer.groups,
        mods=layer.mods,
        allowed=mask,
        rope=layer.rope,
    )


@checked
def grouped_cross_attention(
    x: Float[Tensor, "*batch n d"],
    y: Float[Tensor, "*batch s d_y"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d_y c_kv"],
    w_v: Float[Tensor, "d_y c_kv"],
    w_o: Float[Tensor, "c c_out"] | None = None,
    *,
    heads: int = 1,
    groups: int | None = None,
    q_gain: OwnDtype[Float[Tensor, " q_width"]] | float | None = None,
    k_gain: OwnDtype[Float[Tensor, " k_width"]] | float | None = None,
    eps: float = 1e-6,
    mask: Bool[Tensor, "*#batch n s"] | None = None,
    softcap: float | None = None,
    sinks: Float[Tensor, " h"] | None = None,
    w_g: Float[Tensor, "d c"] | None = None,
    query_pre_attn_scalar: float | None = None,
    mods: tuple = (),
) -> Float[Tensor, "*batch n c_out"]:
    """Grouped-query cross-attention: the queries from X, the keys and values from another
    sequence Y (an encoder's output, an image's patches), h query heads sharing g groups of
    keys and values (Whisper's and BART's cross layers with g = h; Llama 3.2 Vision's with
    grouped keys and QK-norm).

    The options are `grouped_query_attention`'s that do not read positions (the keys are
    another sequence: no causal mask, window, ALiBi or RoPE).

    Args:
        x: the input X of the queries, `(*batch, n, d)`.
        y: the sequence Y of the keys and values, `(*batch, s, d_y)`, with x's batch.
        w_q: W_q, `(d, h·c_h)`.
        w_k: W_k, `(d_y, g·c_h)`.
        w_v: W_v, `(d_y, g·c_h)`.
        w_o: W_o, `(h·c_h, c_out)`; None for no output projection (c_out = h·c_h).
        heads: h, the query heads; it divides the width of w_q.
        groups: g, the key/value groups, dividing h; None: g = h.
        q_gain: QK-norm's gains of the queries: `(c_h,)` per head, `(h·c_h,)` over all heads,
            a number for every gain alike, or None for no QK-norm (`grouped_query_attention`).
        k_gain: the same for the keys: `(c_h,)`, `(g·c_h,)`, a number, or None.
        eps: ε of QK-norm, added to the mean square; at least 0.
        mask: True where query m may attend key p of Y, `(*batch, n, s)` (its batch broadcasts
            against x's); None for none.
        softcap: κ, each scaled score ω̃ replaced by κ tanh(ω̃/κ); None for none.
        sinks: h logits `(h,)`, e^{ζ_ℓ} in the denominator of each row of head ℓ; None for
            none.
        w_g: the output gate's W_g, `(d, h·c_h)`: the merged heads multiplied by σ(X W_g)
            before W_o; None for none.
        query_pre_attn_scalar: the scale 1/√query_pre_attn_scalar in place of 1/√c_h; None for
            1/√c_h.
        mods: more modifications as objects (`attention.mods`), one of each kind with those of
            the keywords.

    Returns:
        The context C, `(*batch, n, c_out)`.

    Raises:
        ValueError: when heads or groups is not a positive int, groups does not divide heads,
            softcap or query_pre_attn_scalar is not a positive number, eps is negative, or a
            keyword and a mod say the same thing.
        ShapeError: when x, y and the weights do not fit together (y's batch must be x's),
            heads does not divide the width c of w_q, w_k's width is not g·c_h, a gain has
            neither c_h nor the whole width (or the two gains differ in kind), the tensor of
            sinks is not `(h,)`, or mask is not `(*batch, n, s)`.
        DtypeError: when x, y and the weights are not float tensors of one dtype, or mask is
            not bool.
        DeviceError: when the tensors are not on one device.
        TypeError: when a gain is neither a tensor nor a number, or a mod is not a
            `Modification`.

    >>> X, Y = torch.rand(5, 8), torch.rand(3, 6)
    >>> W_q, W_kv = torch.rand(8, 8), torch.rand(6, 4)
    >>> grouped_cross_attention(X, Y, W_q, W_kv, W_kv, heads=4, groups=2).shape
    torch.Size([5, 8])
    """
    layer = _layer(
        "grouped_cross_attention",
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        length=x.shape[-2],
        heads=heads,
        groups=groups,
        causal=False,
        theta_base=None,
        rope_width=None,
        rope_interleaved=False,
        freq_config=None,
        q_gain=q_gain,
        k_gain=k_gain,
        eps=eps,
        window=None,
        softcap=softcap,
        alibi=False,
        sinks=sinks,
        w_g=w_g,
        query_pre_attn_scalar=query_pre_attn_scalar,
        mods=mods,
    )
    return attention_layer(
        x,
        layer.weights,
        heads=heads,
        groups=layer.groups,
        y=y,
        mods=layer.mods,
        allowed=mask,
    )


class DecodeCache(typing.NamedTuple):
    """What `grouped_decode_step` keeps between calls.

    Args:
        keys: each group's keys, QK-normalised and rotated at their positions,
            `(*batch, g, m, c_h)` (the last w with a window).
        values: each group's values, `(*batch, g, m, c_h)`.
        position: how many tokens came before: the next token's position.
    """

    keys: Float[Tensor, "*batch g m c_h"]
    values: Float[Tensor, "*batch g m c_h"]
    position: int


@checked
def grouped_decode_step(
    x_new: Float[Tensor, "*batch t d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c_kv"],
    w_v: Float[Tensor, "d c_kv"],
    w_o: Float[Tensor, "c c_out"] | None = None,
    cache: DecodeCache | None = None,
    *,
    heads: int = 1,
    groups: int | None = None,
    theta_base: float | None = None,
    rope_width: int | None = None,
    rope_interleaved: bool = False,
    freq_config: FreqConfig | None = None,
    q_gain: OwnDtype[Float[Tensor, " q_width"]] | float | None = None,
    k_gain: OwnDtype[Float[Tensor, " k_width"]] | float | None = None,
    eps: float = 1e-6,
    window: int | None = None,
    softcap: float | None = None,
    alibi: bool | Float[Tensor, " h"] = False,
    sinks: Float[Tensor, " h"] | None = None,
    w_g: Float[Tensor, "d c"] | None = None,
    query_pre_attn_scalar: float | None = None,
    mods: tuple = (),
) -> tuple[Float[Tensor, "*batch t c_out"], DecodeCache]:
    """One step of generation with a key-value cache, for every composition that
    `grouped_query_attention` computes causally: the rows of t new tokens against the cache.

    The options are `grouped_query_attention`'s (it is causal, and takes no mask). The new
    tokens sit at positions m … m + t − 1 (m = cache.position): RoPE rotates their queries and
    keys there, ALiBi, chunks and temperature tuning read those positions, and new token i
    attends the cached keys and the new ones up to its own (the last w with a window). The
    result is rows m … m + t − 1 of ``grouped_query_attention(X, ..., causal=True)``, at the
    cost of t rows of scores. The cache holds g groups, not h heads: grouped-query attention's
    saving.

    Args:
        x_new: the new rows of X, `(*batch, t, d)`.
        w_q: W_q, `(d, h·c_h)`.
        w_k: W_k, `(d, g·c_h)`.
        w_v: W_v, `(d, g·c_h)`.
        w_o: W_o, `(h·c_h, c_out)`; None for no output projection (c_out = h·c_h).
        cache: the `DecodeCache` the last call returned, made with the same weights and
            options; None for the prompt.
        heads: h, the query heads; it divides the width of w_q.
        groups: g, the key/value groups, dividing h; None: g = h.
        theta_base: β of RoPE; None for no RoPE.
        rope_width: rotate only each head's first rope_width features; None: all c_h.
        rope_interleaved: pair feature 2i with 2i + 1 (`grouped_query_attention`).
        freq_config: Llama 3.1's or YaRN's frequencies; None: the plain ones.
        q_gain: QK-norm's gains of the queries: `(c_h,)` per head, `(h·c_h,)` over all heads,
            a number for every gain alike, or None for no QK-norm.
        k_gain: the same for the keys: `(c_h,)`, `(g·c_h,)`, a number, or None.
        eps: ε of QK-norm, added to the mean square; at least 0.
        window: w: query m attends the keys m − w < p ≤ m; None for none.
        softcap: κ, each scaled score ω̃ replaced by κ tanh(ω̃/κ); None for none.
        alibi: −μ_ℓ (m − p) added to head ℓ's scores: True for Press et al.'s slopes, a float
            tensor of h slopes `(h,)`, False for none.
        sinks: h logits `(h,)`, e^{ζ_ℓ} in the denominator of each row of head ℓ; None for
            none.
        w_g: the output gate's W_g, `(d, h·c_h)`; None for none.
        query_pre_attn_scalar: the scale 1/√query_pre_attn_scalar in place of 1/√c_h; None for
            1/√c_h.
        mods: more modifications as objects (`attention.mods`), one of each kind with those of
            the keywords (the causal mask among them).

    Returns:
        The pair (the context rows `(*batch, t, c_out)`, the cache grown by the new keys and
            values, at position m + t).

    Raises:
        ValueError: as `grouped_query_attention`; and when cache.position is less than the
            keys the cache holds.
        ShapeError: as `grouped_query_attention`; and when the cache's batch is not x_new's, or
            its groups or head width are not this call's.
        DtypeError: as `grouped_query_attention`; and when the cache's dtype is not x_new's.
        DeviceError: when the tensors are not on one device.
        TypeError: as `grouped_query_attention`; and when cache is not a `DecodeCache` or its
            position is not an int.

    >>> X, W_q, W_kv = torch.rand(6, 8), torch.rand(8, 8), torch.rand(8, 4)
    >>> rows, cache = grouped_decode_step(X[:4], W_q, W_kv, W_kv, heads=4, groups=2, theta_base=1e4)
    >>> row, cache = grouped_decode_step(X[4:5], W_q, W_kv, W_kv, None, cache, heads=4, groups=2,
    ...                                  theta_base=1e4)
    >>> row.shape, cache.keys.shape, cache.position
    (torch.Size([1, 8]), torch.Size([2, 5, 2]), 5)
    """
    where = "grouped_decode_step"
    position = 0
    if cache is not None:
        _check_cache(where, x_new, cache)
        position = cache.position
    t = x_new.shape[-2]
    layer = _layer(
        where,
        x_new,
        w_q,
        w_k,
        w_v,
        w_o,
        length=position + t,
        heads=heads,
        groups=groups,
        causal=True,
        theta_base=theta_base,
        rope_width=rope_width,
        rope_interleaved=rope_interleaved,
        freq_config=freq_config,
        q_gain=q_gain,
        k_gain=k_gain,
        eps=eps,
        window=window,
        softcap=softcap,
        alibi=alibi,
        sinks=sinks,
        w_g=w_g,
        query_pre_attn_scalar=query_pre_attn_scalar,
        mods=mods,
    )
    q, k, v, gate = project_heads(x_new, layer.weights, heads=heads, groups=layer.groups)
    q, k = normalise_and_rotate(q, k, layer.weights, layer.rope, position)
    if cache is not None:
        _check_cache_heads(where, cache, k, v)
        k = torch.cat([cache.keys, k], dim=-2)  # (*batch, g, m, c_h) + t rows
        v = torch.cat([cache.values, v], dim=-2)
    start = position + t - k.shape[-2]  # the position of the first key kept
    mods_now = _modify.moved(layer.mods, start)
    per_head = _core.attend_new_rows(
        q,
        k,
        v,
        scale=_core.scale(_modify.scaled_width(mods_now, scaling_width(layer.weights, heads))),
        mods=mods_now,
        dropout_p=0.0,
        heads=True,
    )
    kept = DecodeCache(_core.kept_rows(k, window), _core.kept_rows(v, window), position + t)
    return finish(per_head, gate, layer.weights), kept


def _check_cache(where: str, x_new: Tensor, cache: DecodeCache) -> None:
    """The cache must be one `grouped_decode_step` returned for sequences like x_new's."""
    if cache.keys.shape[:-3] != x_new.shape[:-2]:
        raise ShapeError(
            f"{where}: x_new has batch={tuple(x_new.shape[:-2])} but the cache has "
            f"batch={tuple(cache.keys.shape[:-3])}"
        )
    if cache.keys.dtype != x_new.dtype:
        raise DtypeError(
            f"{where}: x_new has dtype {x_new.dtype} but the cache holds {cache.keys.dtype}"
        )
    if isinstance(cache.position, bool) or not isinstance(cache.position, int):
        raise TypeError(f"{where}: cache.position must be an int, got {cache.position!r}")
    if cache.position < cache.keys.shape[-2]:
        raise ValueError(
            f"{where}: cache.position={cache.position} is less than the {cache.keys.shape[-2]} "
            "keys the cache holds"
        )


def _check_cache_heads(where: str, cache: DecodeCache, k: Tensor, v: Tensor) -> None:
    """The cache's keys and values must have this call's groups g and head width c_h (a cache
    of another layer, or of a call with other groups, is named, not met in torch.cat)."""
    for name, held, new in (("keys", cache.keys, k), ("values", cache.values, v)):
        if held.shape[-3] != new.shape[-3] or held.shape[-1] != new.shape[-1]:
            raise ShapeError(
                f"{where}: cache.{name} has g={held.shape[-3]}, c_h={held.shape[-1]} but this "
                f"call's groups and head width are g={new.shape[-3]}, c_h={new.shape[-1]} "
                f"(cache.{name}: shape {tuple(held.shape)}, expected (*batch, g, m, c_h))"
            )


class _Layer(typing.NamedTuple):
    """What a call of grouped-query attention computes with: its weights (the gains and the
    interleaved order applied), its modifications, RoPE's tables and its groups."""

    weights: LayerWeights
    mods: tuple
    rope: tuple[Tensor, Tensor] | None
    groups: int


def _layer(
    where: str,
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor | None,
    *,
    length: int,
    heads: int,
    groups: int | None,
    causal: bool,
    theta_base: float | None,
    rope_width: int | None,
    rope_interleaved: bool,
    freq_config: FreqConfig | None,
    q_gain: Tensor | float | None,
    k_gain: Tensor | float | None,
    eps: float,
    window: int | None,
    softcap: float | None,
    alibi: bool | Tensor,
    sinks: Tensor | None,
    w_g: Tensor | None,
    query_pre_attn_scalar: float | None,
    mods: tuple,
) -> _Layer:
    """The options of `grouped_query_attention` checked and turned into a `_Layer`, RoPE's
    tables for positions 0 … length − 1 (on x's device)."""
    groups = heads if groups is None else groups
    check_positive(where, heads=heads, groups=groups)
    check_window(where, "window", window, causal)
    check_cap(where, "softcap", softcap)
    check_alibi(where, alibi, heads, causal)
    check_per_head(where, "sinks", sinks, heads, "sink")
    check_cap(where, "query_pre_attn_scalar", query_pre_attn_scalar)
    check_groups(where, heads, groups, ("heads", "groups"))
    c, c_kv = w_q.shape[-1], w_k.shape[-1]
    if c % heads:
        raise ShapeError(f"{where}: c={c} (the width of w_q) is not divisible by heads={heads}")
    width = c // heads
    if c_kv != groups * width:
        raise ShapeError(
            f"{where}: w_k has c_kv={c_kv} but groups · c_h = {groups} · {width} = "
            f"{groups * width} (c_h = c / heads = {c} / {heads})"
        )
    _check_gains(where, q_gain, k_gain, width, (c, c_kv))
    rotated = width
    if theta_base is not None:
        rotated = check_rotated(where, width, rope_width, "rope_width", "c_h")
    elif rope_width is not None or rope_interleaved or freq_config is not None:
        given = (
            "rope_width=" + str(rope_width)
            if rope_width is not None
            else "rope_interleaved=True"
            if rope_interleaved
            else "freq_config"
        )
        raise ValueError(f"{where}: {given} without theta_base: no RoPE to change")
    if rope_interleaved:
        order = interleaved_order(width, rotated)

        def reordered(t: Tensor) -> Tensor:  # each head's columns in `order`
            return t.unflatten(-1, (-1, width))[..., order].flatten(-2)

        w_q, w_k = reordered(w_q), reordered(w_k)
        q_gain = reordered(q_gain) if isinstance(q_gain, Tensor) else q_gain
        k_gain = reordered(k_gain) if isinstance(k_gain, Tensor) else k_gain
    if not eps >= 0:
        raise ValueError(f"{where}: eps must be non-negative, got eps={eps!r}")
    rope = None
    if theta_base is not None:
        exact = torch.float64 if x.dtype == torch.float64 else torch.float32  # as the books
        cos, sin = compute_rope_params(rotated, theta_base, length, freq_config, exact)
        rope = (cos.to(x.device), sin.to(x.device))  # on x's device (the tables start on the CPU)

    def norm(gain: Tensor | float | None):  # applied to (*batch, heads, n, c_h)
        if gain is None:
            return None
        if not isinstance(gain, Tensor):  # one number for every feature (Llama 4's L2 norm: 1)
            return lambda t: _core.rms_norm(t, None, eps) * gain
        if gain.shape[-1] == width:
            return lambda t: _core.rms_norm(t, gain, eps)
        return lambda t: _core.split_heads(
            _core.rms_norm(_core.merge_heads(t), gain, eps), t.shape[-3]
        )  # over all heads at once

    weights = LayerWeights(w_q, w_k, w_v, w_o, w_g=w_g, q_norm=norm(q_gain), k_norm=norm(k_gain))
    built = M.modifications(
        causal=causal,
        window=window,
        softcap=softcap,
        alibi=alibi,
        sinks=sinks,
        query_pre_attn_scalar=query_pre_attn_scalar,
    )
    mods = _modify.joined(where, built, mods, heads)
    return _Layer(weights, mods, rope, groups)
