"""Multi-head latent attention (DeepSeek's MLA, the book's ch04/05_mla), checked.

Keys and values come from one low-rank latent C_kv (n × r, r = `latent_dim` ≪ c), the only
thing a decoding cache needs to keep:

$$C_{kv} = X W_{dkv},\\quad K = C_{kv} W_{uk},\\quad V = C_{kv} W_{uv},\\quad Q = X W_q,\\qquad
  C = \\big[A_1 V_1 \\,|\\, \\cdots \\,|\\, A_h V_h\\big] W_o,\\quad
  A_i = \\operatorname{softmax}\\!\\big(Q_i K_i^\\top / \\sqrt{c_h}\\big)$$

with W_dkv (d × r), W_uk, W_uv (r × c), h heads of width c_h = c/h as in multi-head attention,
causal. A KV cache of multi-head attention keeps 2c numbers per token and layer; this one keeps r.
The class (`MultiHeadLatentAttention`) lives in `attention.modules`, and is importable from here.
"""

from jaxtyping import Float
from torch import Tensor

from . import _core
from . import mods as M
from ._arguments import check_positive
from ._checks import checked
from ._shapes import ShapeError
from .modules._latent import MultiHeadLatentAttention

__all__ = ["latent_attention", "MultiHeadLatentAttention"]


@checked
def latent_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_dkv: Float[Tensor, "d r"],
    w_uk: Float[Tensor, "r c"],
    w_uv: Float[Tensor, "r c"],
    w_o: Float[Tensor, "c c_out"] | None = None,
    *,
    heads: int = 1,
    causal: bool = True,
) -> Float[Tensor, "*batch n c_out"]:
    """Multi-head latent attention (the module docstring's formulas): C_kv = X W_dkv (n × r),
    K = C_kv W_uk, V = C_kv W_uv, Q = X W_q, then h heads of width c_h = c/h, concatenated and
    projected by w_o.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: W_q, `(d, c)`.
        w_dkv: W_dkv, `(d, r)`, the down-projection to the latent C_kv.
        w_uk: W_uk, `(r, c)`, the keys' up-projection.
        w_uv: W_uv, `(r, c)`, the values' up-projection.
        w_o: W_o, `(c, c_out)`; None: no projection (c_out = c).
        heads: h, the heads, of width c_h = c/h each.
        causal: each query reads only the keys up to its own position; False: every key.

    Returns:
        The context vectors, `(*batch, n, c_out)`.

    Raises:
        ValueError: when heads is not a positive int.
        ShapeError: when heads does not divide c, the weights do not fit x or each other, or a
            dimension is 0.
        DtypeError: when x and the weights are not float tensors of one dtype.
        DeviceError: when they are not on one device.

    >>> import torch
    >>> X, W_q, W_dkv, W_u = torch.rand(5, 8), torch.rand(8, 6), torch.rand(8, 2), torch.rand(2, 6)
    >>> latent_attention(X, W_q, W_dkv, W_u, W_u, heads=3).shape
    torch.Size([5, 6])
    """
    check_positive("latent_attention", heads=heads)
    c = w_q.shape[-1]
    if c % heads:
        raise ShapeError(
            f"latent_attention: c={c} (the width of w_q) is not divisible by heads={heads}"
        )
    latent = _core.projection(x, w_dkv, None)  # C_kv: (*batch, n, r)
    q = _core.split_heads(_core.projection(x, w_q, None), heads)  # -> (*batch, h, n, c_h)
    k = _core.split_heads(_core.projection(latent, w_uk, None), heads)
    v = _core.split_heads(_core.projection(latent, w_uv, None), heads)
    mods = M.modifications(causal=causal)
    out = _core.attend(q, k, v, scale=_core.scale(c // heads), heads=True, mods=mods)
    out = _core.merge_heads(out)  # (*batch, h, n, c_h) -> (*batch, n, c)
    return out if w_o is None else _core.projection(out, w_o, None)
