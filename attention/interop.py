"""Weights and masks between `attention.MultiHeadAttention` and `torch.nn.MultiheadAttention`.

`torch.nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)` computes the same function as
`MultiHeadAttention(d_in=embed_dim, d_out=embed_dim, ...)`, with this correspondence:

| ours                                      | torch.nn.MultiheadAttention                    |
|-------------------------------------------|------------------------------------------------|
| `W_query.weight`, `W_key.weight`,         | `in_proj_weight` (3c×d): q, k, v stacked       |
| `W_value.weight` (c×d each)               |                                                |
| `W_query.bias`, … (zeros if no qkv_bias)  | `in_proj_bias` (3c): q, k, v stacked (bias=True)|
| `out_proj.weight`, `out_proj.bias`        | `out_proj.weight`, `out_proj.bias` (or zeros)  |
| causal (always on)                        | `attn_mask=~causal_mask(n)` (True = blocked)   |
| `mask` (*batch, n, n), True = may attend  | `attn_mask` (B·h, n, n), True = blocked        |
| `key_padding_mask` (*batch, n), True =    | `key_padding_mask` (B, n), True = ignore: the  |
| the key exists                            | opposite meaning, so it is inverted            |
| `dropout` (on the weights)                | `dropout` (on the weights)                     |

`torch_masks` builds torch's two mask arguments from ours. torch's module needs d_in = d_out (its
query width is its output width). A query that may attend no key gets zeros from ours and NaN
from torch's module.
"""

import torch
import torch.nn as nn
from jaxtyping import Bool
from torch import Tensor

from . import mods as M
from ._arguments import check_positive
from ._checks import checked
from ._masks import allowed_positions
from ._shapes import ShapeError
from .modules import MultiHeadAttention

__all__ = ["to_torch_multihead", "from_torch_multihead", "torch_masks"]


def _check_type(where: str, name: str, value: object, expected: type, described: str) -> None:
    if not isinstance(value, expected):
        raise TypeError(f"{where}: {name} must be {described}, got {type(value).__name__}")


@torch.no_grad()
def to_torch_multihead(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """A `torch.nn.MultiheadAttention(batch_first=True)` holding the same weights as `module`.

    Call it with the causal mask inverted: `torch_mha(x, x, x, attn_mask=~causal_mask(n))`, or
    with `**torch_masks(n, num_heads, ...)`.

    Args:
        module: the module to copy, with d_in = d_out.

    Returns:
        A new `torch.nn.MultiheadAttention` with `batch_first=True`, `bias=True` (zeros where
            `module` has no qkv biases), and `module`'s dropout rate, dtype, device and
            training mode.

    Raises:
        TypeError: when module is not an `attention.MultiHeadAttention`.
        ValueError: when its d_in and d_out differ.
    """
    where = "to_torch_multihead"
    _check_type(where, "module", module, MultiHeadAttention, "an attention.MultiHeadAttention")
    d_in, d_out = module.W_query.in_features, module.d_out
    if d_in != d_out:
        raise ValueError(
            f"{where}: torch.nn.MultiheadAttention needs d_in = d_out, "
            f"got d_in={d_in}, d_out={d_out}"
        )
    reference = module.W_query.weight
    twin = nn.MultiheadAttention(
        d_out,
        module.num_heads,
        dropout=module.dropout.p,
        bias=True,
        batch_first=True,
        device=reference.device,
        dtype=reference.dtype,
    )
    linears = (module.W_query, module.W_key, module.W_value)
    twin.in_proj_weight.copy_(torch.cat([linear.weight for linear in linears]))  # -> (3c, d)
    biases = [
        linear.bias if linear.bias is not None else torch.zeros_like(linear.weight[:, 0])
        for linear in linears
    ]
    twin.in_proj_bias.copy_(torch.cat(biases))  # -> (3c,)
    twin.out_proj.weight.copy_(module.out_proj.weight)
    twin.out_proj.bias.copy_(module.out_proj.bias)
    return twin.train(module.training)


@torch.no_grad()
def from_torch_multihead(twin: nn.MultiheadAttention, context_length: int) -> MultiHeadAttention:
    """A `MultiHeadAttention` (causal, up to `context_length` tokens) with `twin`'s weights.

    Args:
        twin: the torch module to copy: one packed input projection (`kdim = vdim = embed_dim`),
            without `add_bias_kv` or `add_zero_attn` (extra keys that ours does not have).
        context_length: the most tokens the new module takes (its causal mask's side).

    Returns:
        A new `MultiHeadAttention` with d_in = d_out = embed_dim, and twin's heads, dropout
            rate, dtype, device and training mode; from a twin built with `bias=False`, one
            without qkv biases and with a zero `out_proj.bias`.

    Raises:
        TypeError: when twin is not a `torch.nn.MultiheadAttention`.
        ValueError: when context_length is not a positive int, or twin has no packed
            `in_proj_weight`, or has `add_bias_kv` or `add_zero_attn`.
    """
    where = "from_torch_multihead"
    _check_type(where, "twin", twin, nn.MultiheadAttention, "a torch.nn.MultiheadAttention")
    check_positive(where, context_length=context_length)
    if twin.in_proj_weight is None:
        raise ValueError(
            f"{where}: twin must have a packed in_proj_weight (kdim = vdim = embed_dim), "
            f"got kdim={twin.kdim}, vdim={twin.vdim}, embed_dim={twin.embed_dim}"
        )
    if twin.bias_k is not None or twin.add_zero_attn:
        raise ValueError(
            f"{where}: twin has add_bias_kv={twin.bias_k is not None}, "
            f"add_zero_attn={twin.add_zero_attn}; MultiHeadAttention has no extra keys"
        )
    c, bias = twin.embed_dim, twin.in_proj_bias is not None
    module = MultiHeadAttention(c, c, context_length, twin.dropout, twin.num_heads, qkv_bias=bias)
    module = module.to(device=twin.in_proj_weight.device, dtype=twin.in_proj_weight.dtype)
    for index, linear in enumerate((module.W_query, module.W_key, module.W_value)):
        rows = slice(index * c, (index + 1) * c)  # (3c, d) -> (c, d): q, k, v in turn
        linear.weight.copy_(twin.in_proj_weight[rows])
        if bias:
            linear.bias.copy_(twin.in_proj_bias[rows])
    module.out_proj.weight.copy_(twin.out_proj.weight)
    out_bias = twin.out_proj.bias
    module.out_proj.bias.copy_(out_bias if out_bias is not None else torch.zeros(c))
    return module.train(twin.training)


@checked
def torch_masks(
    n: int,
    num_heads: int,
    *,
    causal: bool = True,
    mask: Bool[Tensor, "*#batch n n"] | None = None,
    key_padding_mask: Bool[Tensor, "*#batch n"] | None = None,
) -> dict[str, Tensor]:
    """`torch.nn.MultiheadAttention`'s `attn_mask` and `key_padding_mask` for our masks over n
    tokens (causal by default, as `MultiHeadAttention` is).

    Ours: True = may attend (`mask`), True = the key exists (`key_padding_mask`); torch's: True
    = may not. `attn_mask` is `(n, n)` for an unbatched `mask` or none, and `(B·h, n, n)` for
    a batched one (one copy per head, batch-major, as torch wants).

    Args:
        n: the tokens, n.
        num_heads: h, the heads of the torch module (a batched `attn_mask` has one copy each).
        causal: add the causal mask (query m reads the keys p ≤ m).
        mask: True where query m may attend key p, `(*batch, n, n)`; None for none.
        key_padding_mask: True where key p exists, `(*batch, n)`; None for none.

    Returns:
        The keyword arguments for the torch module's call: `attn_mask` (True = may not
            attend) unless neither `causal` nor `mask` restricts anything, and
            `key_padding_mask` (True = ignore the key) where one is given.

    Raises:
        ValueError: when n or num_heads is not a positive int.
        ShapeError: when mask is not `(*batch, n, n)` or key_padding_mask not `(*batch, n)` for
            this n, or their batches do not broadcast.
        DtypeError: when mask or key_padding_mask is not a bool tensor.

    >>> import torch
    >>> from attention import torch_masks
    >>> masks = torch_masks(3, 2, key_padding_mask=torch.tensor([[True, True, False]]))
    >>> masks["attn_mask"].tolist()[0], masks["key_padding_mask"].tolist()
    ([False, True, True], [[False, False, True]])
    """
    check_positive("torch_masks", n=n, num_heads=num_heads)
    for name, given in (("mask", mask), ("key_padding_mask", key_padding_mask)):
        if given is not None and given.shape[-1] != n:
            raise ShapeError(f"torch_masks: {name} has n={given.shape[-1]} but n={n}")
    device = mask.device if mask is not None else None
    rule = M.modifications(causal=causal)
    allowed = allowed_positions(n, device or torch.device("cpu"), rule, mask)
    out = {}
    if allowed is not None:
        if allowed.dim() > 2:
            lead = allowed.shape[:-2]
            allowed = allowed.unsqueeze(-3).expand(*lead, num_heads, n, n)  # (*b, h, n, n)
            allowed = allowed.reshape(-1, n, n)  # (*batch, h, n, n) -> (B·h, n, n)
        out["attn_mask"] = ~allowed
    if key_padding_mask is not None:
        out["key_padding_mask"] = ~key_padding_mask
    return out
