"""The variants' entry points of `attention.functional`: cross-attention, the sliding-window
mask, and one step of generation with a key-value cache. Each is the numeric twin of a variant
registered in `derive` (`derive check --variant NAME` calls it), with the letters of its
declarations: s keys read from a sequence Y of width d_y; t new tokens against m cached ones.
"""

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from . import _core, _modify
from . import mods as M
from ._arguments import check_positive, check_probability, check_window
from ._checks import checked
from ._layer import LayerWeights, attention_layer, one_head
from ._masks import given_masks, window_allowed

__all__ = ["cross_attention", "sliding_window_mask", "decode_step"]

#: Cross-attention's masks: (m, p) for query m of X and key p of Y; True where key p exists.
CrossMaskArg = Bool[Tensor, "*#batch n s"] | None
CrossKeyPaddingArg = Bool[Tensor, "*#batch s"] | None
#: The cache of `decode_step`: the keys and values of the m tokens before the new ones.
Cache = tuple[Float[Tensor, "*batch m c"], Float[Tensor, "*batch m c"]]
#: The cache it returns: m + t rows (the last w with a window).
NextCache = tuple[Float[Tensor, "*batch m_next c"], Float[Tensor, "*batch m_next c"]]


@checked
def cross_attention(
    x: Float[Tensor, "*batch n d"],
    y: Float[Tensor, "*batch s d_y"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d_y c"],
    w_v: Float[Tensor, "d_y c"],
    *,
    mask: CrossMaskArg = None,
    key_padding_mask: CrossKeyPaddingArg = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> Float[Tensor, "*batch n c"] | tuple[Float[Tensor, "*batch n c"], Float[Tensor, "*batch n s"]]:
    """Cross-attention: queries from X, keys and values from another sequence Y.

    $$Q = X W_q,\\quad K = Y W_k,\\quad V = Y W_v,\\quad
      C = \\operatorname{softmax}\\!\\big(Q K^\\top / \\sqrt{c}\\big)\\, V$$

    Ω = QKᵀ and A are n × s, the softmax taken over the s keys of each row; never causal (the
    keys are another sequence). With Y = X it is `self_attention`.

    Args:
        x: the queries' sequence X, `(*batch, n, d)`.
        y: the keys' and values' sequence Y, `(*batch, s, d_y)`: s entries of width d_y (an
            encoder's output, an image's patches).
        w_q: Wq, `(d, c)`.
        w_k: Wk, `(d_y, c)`.
        w_v: Wv, `(d_y, c)`.
        mask: True where query m may attend key p, `(*batch, n, s)` (its batch broadcasts
            against x's); None for none.
        key_padding_mask: True where key p exists, `(*batch, s)`; None for none.
        dropout_p: dropout on A after the softmax, applied whenever > 0.
        return_weights: return A with C.

    Returns:
        The context vectors C, `(*batch, n, c)`; with `return_weights=True`, the pair (C, A),
            A `(*batch, n, s)` after dropout.

    Raises:
        ValueError: when dropout_p is not in [0, 1).
        TypeError: when return_weights is not a bool.
        ShapeError: when y's batch is not x's, or the weights or masks do not fit x, y or one
            another.
        DtypeError: when x, y or a weight is not float or not x's dtype, or a mask is not bool.
        DeviceError: when a tensor is not on x's device.

    >>> import torch
    >>> from attention.functional import cross_attention
    >>> X, Y = torch.rand(5, 3), torch.rand(4, 6)
    >>> cross_attention(X, Y, torch.rand(3, 2), torch.rand(6, 2), torch.rand(6, 2)).shape
    torch.Size([5, 2])
    """
    check_probability("cross_attention", dropout_p=dropout_p)
    return one_head(
        attention_layer(
            x,
            LayerWeights(w_q, w_k, w_v),
            heads=1,
            y=y,
            allowed=given_masks(mask, key_padding_mask),
            dropout_p=dropout_p,
            return_weights=return_weights,
        )
    )


@checked
def sliding_window_mask(n: int, w: int) -> Bool[Tensor, "n n"]:
    """The sliding-window mask (n×n): True where 0 ≤ m − p < w, i.e. where token m may attend
    token p, one of its last w tokens (itself included). With w ≥ n it is `causal_mask(n)`.

    Args:
        n: the number of tokens.
        w: the window's width, in tokens.

    Returns:
        The mask, `(n, n)`, bool on the CPU.

    Raises:
        ValueError: when n or w is not a positive integer.
        TypeError: when n or w is not an int.

    >>> from attention.functional import sliding_window_mask
    >>> sliding_window_mask(4, 2).int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    check_positive("sliding_window_mask", n=n, w=w)
    return window_allowed(n, w, torch.device("cpu"))


@checked
def chunked_mask(n: int, size: int) -> Bool[Tensor, "n n"]:
    """The mask of chunked attention (n×n; Llama 4's `attention_chunk_size`): True where
    p ≤ m and both lie in the same chunk of `size` positions, ⌊p / size⌋ = ⌊m / size⌋ (0-based),
    i.e. where token m may attend token p. With size ≥ n it is `causal_mask(n)`.

    Args:
        n: the number of tokens.
        size: the chunk's length, in tokens.

    Returns:
        The mask, `(n, n)`, bool on the CPU.

    Raises:
        ValueError: when n or size is not a positive integer.
        TypeError: when n or size is not an int.

    >>> from attention.functional import chunked_mask
    >>> chunked_mask(4, 2).int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    """
    check_positive("chunked_mask", n=n, size=size)
    rule = (M.Causal(), M.Chunked(size))
    return _modify.allowed(rule, M.Block(0, n, 0, n), torch.device("cpu"))  # pyright: ignore[reportReturnType]  # masks given


@checked
def decode_step(
    x_new: Float[Tensor, "*batch t d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c"],
    cache: Cache | None = None,
    *,
    window: int | None = None,
) -> tuple[Float[Tensor, "*batch t c"], NextCache]:
    """One step of generation with a key-value cache: the context rows of t new tokens.

    The new tokens' own keys and values join the cache, and new token i (at position m + i)
    attends every key p ≤ m + i (with `window` w, only m + i − w < p):

    $$z_{m+i} = \\sum_{p} \\operatorname{softmax}_p\\!\\big(q_{m+i} \\cdot k_p / \\sqrt{c}\\big)
      \\, v_p,\\qquad q_{m+i} = x_{m+i} W_q$$

    exactly the rows m … m + t − 1 of `self_attention(X, ..., causal=True, window=window)`, at
    the cost of t rows of scores instead of (m + t)².

    Args:
        x_new: the new rows of X, `(*batch, t, d)`, t ≥ 1.
        w_q: Wq, `(d, c)`.
        w_k: Wk, `(d, c)`.
        w_v: Wv, `(d, c)`.
        cache: the pair (K, V) that the last call returned, `(*batch, m, c)` each: the keys
            and values of the m tokens before the new ones; None for none (the prompt, m = 0).
        window: w: each token attends its last w tokens only, and the cache keeps the last w
            rows; None for no window.

    Returns:
        The pair (the new tokens' context rows `(*batch, t, c)`, the grown cache (K, V),
            `(*batch, m + t, c)` each, or its last w rows with a window).

    Raises:
        ValueError: when window is not a positive integer.
        TypeError: when cache is neither None nor a pair of tensors, or window neither an int
            nor None.
        ShapeError: when the weights or the cache do not fit x_new or one another (the cache's
            c, m or batch).
        DtypeError: when x_new, a weight or the cache is not float or not x_new's dtype.
        DeviceError: when a tensor is not on x_new's device.

    >>> import torch
    >>> from attention.functional import decode_step
    >>> X, W = torch.rand(6, 3), torch.rand(3, 2)
    >>> rows, cache = decode_step(X[:4], W, W, W)  # the prompt
    >>> row, cache = decode_step(X[4:5], W, W, W, cache)  # then one token at a time
    >>> row.shape, cache[0].shape
    (torch.Size([1, 2]), torch.Size([5, 2]))
    """
    check_window("decode_step", "window", window)
    q = _core.projection(x_new, w_q, None)
    k = _core.projection(x_new, w_k, None)
    v = _core.projection(x_new, w_v, None)
    if cache is not None:
        k = torch.cat([cache[0], k], dim=-2)  # (*batch, m, c) + (*batch, t, c) -> m + t rows
        v = torch.cat([cache[1], v], dim=-2)
    rows = _core.attend_new_rows(
        q,
        k,
        v,
        scale=_core.scale(w_q.shape[-1]),
        mods=M.modifications(window=window),
        dropout_p=0.0,
        heads=False,
    )
    return rows, (_core.kept_rows(k, window), _core.kept_rows(v, window))
