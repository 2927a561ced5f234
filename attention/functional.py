"""Scaled dot-product self-attention, one checked function per step of the seed's derivation.

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

Masks: True = may attend. `mask` (*batch, n, n) is a full mask, entry (m, p) for query m and key p;
`key_padding_mask` (*batch, n) is True where the key exists (the opposite of
`torch.nn.MultiheadAttention`'s `key_padding_mask`, where True = ignore); `causal` keeps p ≤ m.
All three combine. A query with no allowed key gets zero weights and a zero context row (never
NaN), and finite gradients. Keys no query may attend have no influence on any output, NaN and ±inf
included; a position that neither attends nor is attended has none on the gradients either.
"""

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from . import _core
from ._backward import Gradients, self_attention_backward, self_attention_gradients
from ._checks import checked
from ._masks import allowed_positions, causal_allowed, given_masks, silence_isolated
from ._shapes import ShapeError, check_positive, check_probability

__all__ = [
    "projection",
    "scores",
    "scaled_scores",
    "weights",
    "context",
    "causal_mask",
    "self_attention",
    "split_heads",
    "merge_heads",
    "multi_head_attention",
    "self_attention_backward",
    "self_attention_gradients",
    "Gradients",
]

#: A full mask: entry (m, p) True where query m may attend key p.
MaskArg = Bool[Tensor, "*batch n n"] | None
#: Key padding: True where key p exists (torch.nn.MultiheadAttention's True means the opposite).
KeyPaddingArg = Bool[Tensor, "*batch n"] | None


@checked
def projection(
    x: Float[Tensor, "*batch n d"],
    w: Float[Tensor, "d c"],
    b: Float[Tensor, " c"] | None = None,
) -> Float[Tensor, "*batch n c"]:
    """Project the inputs into query, key or value space: $Q = X W_q$ (+ b).

    $$q_{m,j} = \\sum_{i=1}^{d} x_{m,i} (W_q)_{i,j}$$

    x: X (*batch, n, d); w: W (d, c) in the seed's orientation (`nn.Linear` stores Wᵀ);
    b: optional bias (c).

    >>> import torch
    >>> from attention.functional import projection
    >>> projection(torch.ones(5, 3), torch.ones(3, 2)).shape
    torch.Size([5, 2])
    """
    return _core.projection(x, w, b)


@checked
def scores(
    q: Float[Tensor, "*batch n c"], k: Float[Tensor, "*batch n c"]
) -> Float[Tensor, "*batch n n"]:
    """Attention scores $\\Omega = Q K^\\top$ (one transpose, one matrix product).

    $$\\omega_{m,p} = q_m \\cdot k_p = \\sum_{j=1}^{c} q_{m,j} k_{p,j}$$
    """
    return _core.scores(q, k)


@checked
def scaled_scores(omega: Float[Tensor, "*batch n n"], c: int) -> Float[Tensor, "*batch n n"]:
    """Scores over the square root of the context width, $\\Omega / \\sqrt{c}$.

    If the c components of q and k are independent with mean 0 and variance 1, q·k has variance
    c; dividing by √c brings it back to 1 and keeps the softmax away from a step function.
    """
    check_positive("scaled_scores", c=c)
    return _core.scaled_scores(omega, c)


@checked
def weights(
    omega: Float[Tensor, "*batch n n"],
    c: int,
    *,
    causal: bool = False,
    mask: MaskArg = None,
    key_padding_mask: KeyPaddingArg = None,
) -> Float[Tensor, "*batch n n"]:
    """Attention weights $A = \\operatorname{softmax}(\\Omega / \\sqrt{c})$, row by row.

    $$a_{m,p} = \\frac{\\exp(\\omega_{m,p}/\\sqrt{c})}
                     {\\sum_{r=1}^{n} \\exp(\\omega_{m,r}/\\sqrt{c})}$$

    With `causal`, a_{m,p} = 0 for p > m; with `mask` (*batch, n, n), a_{m,p} = 0 where it is
    False; with `key_padding_mask` (*batch, n), a_{m,p} = 0 where key p is False (True = the
    key exists; the opposite of torch.nn.MultiheadAttention's). The sum over r runs over allowed
    keys only. Each row sums to 1, or is all zeros when no key is allowed.
    """
    check_positive("weights", c=c)
    allowed = given_masks(mask, key_padding_mask)
    allowed = allowed_positions(omega.shape[-1], omega.device, causal, allowed)
    return _core.weights(omega, c, allowed)


@checked
def context(
    a: Float[Tensor, "*batch n n"], v: Float[Tensor, "*batch n c"]
) -> Float[Tensor, "*batch n c"]:
    """Context vectors $C = A V$: row m is the attention-weighted sum of the value rows.

    $$c_{m,j} = \\sum_{p=1}^{n} a_{m,p} v_{p,j}$$
    """
    return _core.context(a, v)


@checked
def causal_mask(n: int) -> Bool[Tensor, "n n"]:
    """The causal mask (n×n): True where p ≤ m, i.e. where token m may attend to token p."""
    check_positive("causal_mask", n=n)
    return causal_allowed(n, torch.device("cpu"))


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
    mask: MaskArg = None,
    key_padding_mask: KeyPaddingArg = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> Float[Tensor, "*batch n c"] | tuple[Float[Tensor, "*batch n c"], Float[Tensor, "*batch n n"]]:
    """Trainable scaled dot-product self-attention,
    $C = \\operatorname{softmax}\\!\\big(X W_q (X W_k)^\\top / \\sqrt{c}\\big)\\, X W_v$.

    x: X (*batch, n, d). w_q, w_k, w_v: Wq, Wk, Wv (d, c), so that Q = X Wq. b_q, b_k, b_v:
    optional biases (c). causal: token m attends to p ≤ m only. mask (*batch, n, n): True where
    query m may attend key p. key_padding_mask (*batch, n): True where key p exists (True =
    ignore in torch.nn.MultiheadAttention: invert it). The three combine. dropout_p: dropout on
    A after the softmax (the book's order), applied whenever > 0 (modules pass 0 in eval mode).

    Returns C (*batch, n, c), or (C, A) with `return_weights` (A after dropout, the weights that
    were used).

    >>> import torch
    >>> from attention.functional import self_attention
    >>> X, W = torch.rand(6, 3), torch.rand(3, 2)
    >>> self_attention(X, W, W, W).shape
    torch.Size([6, 2])
    """
    check_probability("self_attention", dropout_p=dropout_p)
    allowed = given_masks(mask, key_padding_mask)
    x = silence_isolated(x, causal, allowed)
    q = _core.projection(x, w_q, b_q)
    k = _core.projection(x, w_k, b_k)
    v = _core.projection(x, w_v, b_v)
    return _core.attend(
        q, k, v, width=_scaling_width(w_q), causal=causal, allowed=allowed,
        dropout_p=dropout_p, return_weights=return_weights, heads=False,
    )  # fmt: skip


def _scaling_width(w_q: Tensor, heads: int = 1) -> int:
    """The c of the 1/√c scaling: the width of one head's queries and keys (c_h = c / h)."""
    return w_q.shape[-1] // heads


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
    mask: MaskArg = None,
    key_padding_mask: KeyPaddingArg = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
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
    heads. Returns C (*batch, n, c_out), or (C, A) with A (*batch, h, n, n).
    """
    check_positive("multi_head_attention", heads=heads)
    check_probability("multi_head_attention", dropout_p=dropout_p)
    c = w_q.shape[-1]
    if c % heads:
        raise ShapeError(
            f"multi_head_attention: c={c} (the width of w_q) is not divisible by heads={heads}"
        )
    return _multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads, b_q, b_k, b_v, b_o,
        causal, given_masks(mask, key_padding_mask), dropout_p, return_weights,
    )  # fmt: skip


def _multi_head_attention(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    heads: int,
    b_q: Tensor | None,
    b_k: Tensor | None,
    b_v: Tensor | None,
    b_o: Tensor | None,
    causal: bool,
    allowed: Tensor | None,
    dropout_p: float,
    return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """Unchecked multi-head attention (`MultiHeadAttention.forward` calls it after its checks);
    `allowed` from `_masks.given_masks`."""
    x = silence_isolated(x, causal, allowed)
    q = _core.split_heads(_core.projection(x, w_q, b_q), heads)  # -> (*batch, h, n, c_h)
    k = _core.split_heads(_core.projection(x, w_k, b_k), heads)
    v = _core.split_heads(_core.projection(x, w_v, b_v), heads)
    result = _core.attend(
        q, k, v, width=_scaling_width(w_q, heads), causal=causal, allowed=allowed,
        dropout_p=dropout_p, return_weights=return_weights, heads=True,
    )  # fmt: skip
    per_head, a = result if return_weights else (result, None)
    out = _core.projection(_core.merge_heads(per_head), w_o, b_o)  # (*batch, n, c) -> c_out
    return (out, a) if return_weights else out
