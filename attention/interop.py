"""Moving weights between `attention.MultiHeadAttention` and `torch.nn.MultiheadAttention`.

`torch.nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)` computes the same function as
`MultiHeadAttention(d_in=embed_dim, d_out=embed_dim, ...)`, with this correspondence:

| ours                                      | torch.nn.MultiheadAttention                  |
|-------------------------------------------|----------------------------------------------|
| `W_query.weight`, `W_key.weight`,         | `in_proj_weight` (3c×d): q, k, v stacked     |
| `W_value.weight` (c×d each)               |                                              |
| `W_query.bias`, … (zeros if no qkv_bias)  | `in_proj_bias` (3c): q, k, v stacked         |
| `out_proj.weight`, `out_proj.bias`        | `out_proj.weight`, `out_proj.bias`           |
| causal (always on)                        | `attn_mask=~causal_mask(n)` (True = blocked) |
| `mask` (True = may attend)                | `attn_mask=~mask`, `key_padding_mask=~mask`  |
| `dropout` (on the weights)                | `dropout` (on the weights)                   |

torch's module needs d_in = d_out (its query width is its output width), and its boolean masks
mean the opposite of ours: True there marks a position that may *not* be attended.
"""

import torch
import torch.nn as nn

from .modules import MultiHeadAttention

__all__ = ["to_torch_multihead", "from_torch_multihead"]


@torch.no_grad()
def to_torch_multihead(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """A `torch.nn.MultiheadAttention(batch_first=True)` holding the same weights as `module`.

    Call it with the causal mask inverted: `torch_mha(x, x, x, attn_mask=~causal_mask(n))`.
    """
    d_in, d_out = module.W_query.in_features, module.d_out
    if d_in != d_out:
        raise ValueError(
            f"to_torch_multihead: torch.nn.MultiheadAttention needs d_in = d_out, "
            f"got d_in={d_in}, d_out={d_out}"
        )
    reference = module.W_query.weight
    twin = nn.MultiheadAttention(
        d_out, module.num_heads, dropout=module.dropout.p, bias=True, batch_first=True,
        device=reference.device, dtype=reference.dtype,
    )  # fmt: skip
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

    `twin` must use one packed input projection (`kdim = vdim = embed_dim`) and have biases.
    """
    if twin.in_proj_weight is None or twin.in_proj_bias is None:
        raise ValueError(
            "from_torch_multihead: twin must have a packed in_proj_weight and biases "
            "(kdim = vdim = embed_dim, bias=True)"
        )
    c = twin.embed_dim
    module = MultiHeadAttention(c, c, context_length, twin.dropout, twin.num_heads, qkv_bias=True)
    module = module.to(device=twin.in_proj_weight.device, dtype=twin.in_proj_weight.dtype)
    for index, linear in enumerate((module.W_query, module.W_key, module.W_value)):
        linear.weight.copy_(twin.in_proj_weight[index * c : (index + 1) * c])  # (3c, d) -> (c, d)
        linear.bias.copy_(twin.in_proj_bias[index * c : (index + 1) * c])
    module.out_proj.weight.copy_(twin.out_proj.weight)
    module.out_proj.bias.copy_(twin.out_proj.bias)
    return module.train(twin.training)
