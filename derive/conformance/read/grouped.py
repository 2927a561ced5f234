"""The book's later attention classes, as this package writes them: `GroupedQueryAttention` and
`MultiHeadLatentAttention` (at the end: W_query, W_DKV, W_UK, W_UV, out_proj; the mla variant,
K and V from the latent X W_dkv).

The book's Llama 3 and Qwen 3 (`llms_from_scratch.llama3`, `.qwen3`) and this package's
`attention.modules.GroupedQueryAttention` keep W_query (d × c), W_key and W_value (d × g c_h,
shared by h / g heads each), out_proj and num_heads, num_kv_groups; this package's class may
add QK-norm (``q_norm``, ``k_norm``: gains ``scale``, ``eps``; of one head's features, or of
the whole row's: whole-qk-norm, OLMo's), a window
(``sliding_window``), a softcap (``softcap``), ALiBi (``alibi``, slopes ``alibi_slopes`` or
Press et al.'s), sinks (the parameter ``sinks``) and an output gate (``gate``: each head's
columns of W_query its queries, then its gate's). The adapter reads each into the variant it
declares (`Weights.variant`); RoPE is not the module's (the book passes cos and sin to
``forward``), so ``--variant rope`` says it, and the call then passes the tables of β (of
width c_r with ``--variant rope+partial-rope --value c_r=…``: the module rotates as many
features as its tables are wide).

Its forward takes ``blocked`` (True = may not attend), the book's mask convention. The book's
KV-cache layers (``forward(x, mask, cos, sin, start_pos=0, cache=None)``) are checked after a
cache too (`derive.conformance.checks.cached`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..checks.cached import rope_tables, with_start_pos, with_use_cache
from .adapters import Adapter, Weights, forward_takes, norm_gains, norm_width, per_head_parts
from .ours import read_modifications
from .target import ConformError

__all__ = ["GROUPED", "LATENT"]


def _grouped_layout(module: Any) -> bool:
    names = ("W_query", "W_key", "W_value", "out_proj", "num_heads", "num_kv_groups")
    return all(hasattr(module, name) for name in names)


def _takes_mask(module: Any) -> bool:
    """Whether its forward takes a mask (the book's ``mask``, this package's ``blocked``; an
    unreadable signature is taken to)."""
    return forward_takes(module, "mask", "blocked") is not False


def _is_grouped(module: Any) -> bool:
    return _grouped_layout(module) and _takes_mask(module)


def _is_grouped_causal(module: Any) -> bool:
    """The book's fast layers (``GroupedQueryAttentionFast``: ``forward(x, cos, sin)``, causal
    by torch's kernel's own flag): the same weights, no mask to give."""
    return _grouped_layout(module) and not _takes_mask(module)


def _queries_and_gate(module: Any) -> tuple[Any, Any]:
    """W_q, and the gate's W_g where each head's columns are its queries then its gate's."""
    w = module.W_query.weight.mT  # (d, c) or (d, 2c)
    if not getattr(module, "gate", False):
        return w, None
    w_q, w_g = per_head_parts(w, module.num_heads, 2)
    return w_q, w_g


def _read_attributes(module: Any) -> tuple[list[str], dict, dict]:
    """A port's softcap (``softcap``), ALiBi (``alibi``, slopes ``alibi_slopes`` or Press et
    al.'s) and sinks (the parameter ``sinks``), read by name."""
    parts, values, inputs = [], {}, {}
    if getattr(module, "softcap", None) is not None:
        parts.append("softcap")
        values["kappa"] = module.softcap
    if getattr(module, "alibi", False):
        parts.append("alibi")
        slopes = module._buffers.get("alibi_slopes")
        if slopes is None:
            from attention.functional import alibi_slopes

            slopes = alibi_slopes(module.num_heads).to(module.W_query.weight)
        inputs["Mu"] = slopes[None]  # (h,) -> (1, h)
    if module._parameters.get("sinks") is not None:
        parts.append("sinks")
        inputs["Zeta"] = module.sinks[None]
    if getattr(module, "query_pre_attn_scalar", None) not in (None, module.head_dim):
        parts.append("query-scale")  # scores over √query_pre_attn_scalar, not √c_h
        values["c_q"] = module.query_pre_attn_scalar
    return parts, values, inputs


def _grouped_weights(module: Any) -> Weights:
    w_q, w_g = _queries_and_gate(module)
    parts, values, inputs = [], {}, {}
    q_norm = getattr(module, "q_norm", None)
    if q_norm is not None and getattr(q_norm, "scale", True) is None:  # no gains: Llama 4's
        parts.append("l2-qk-norm")
        values["epsilon"] = q_norm.eps
    elif q_norm is not None:  # of one head's features, or of all
        widths = [norm_width(norm) for norm in (module.q_norm, module.k_norm)]
        parts.append("whole-qk-norm" if widths[0] != module.head_dim else "qk-norm")
        inputs["G_q"], values["epsilon"] = norm_gains(module.q_norm, widths[0])
        inputs["G_k"], _ = norm_gains(module.k_norm, widths[1])
    if getattr(module, "sliding_window", None) is not None:
        parts.append("sliding-window")
        values["w"] = module.sliding_window
    if hasattr(module, "score_mods"):  # this package's: from the objects its forward uses
        found = read_modifications(module)
    else:  # a port's, by the attributes the package's classes name them with
        found = _read_attributes(module)
    parts += found[0]
    values |= found[1]
    inputs |= found[2]
    if w_g is not None:
        parts.append("gate")
        inputs["W_g"] = w_g
    return Weights(
        w_q,
        module.W_key.weight.mT,
        module.W_value.weight.mT,
        W_o=module.out_proj.weight.mT,
        heads=module.num_heads,
        variant="+".join(parts),
        values=values,
        inputs=inputs,
    )


def _grouped_call(module: Any, x: Any, allowed: Any, variant: str = "", values: Any = None) -> Any:
    """``module(x, blocked, cos, sin)``; with no mask to give, one that blocks nothing (the
    book's layers fill with their mask whatever it is)."""
    n = x.shape[-2]
    blocked = torch.zeros(n, n, dtype=torch.bool, device=x.device) if allowed is None else ~allowed
    return module(x, blocked, *rope_tables(module, x, variant, values))


GROUPED = Adapter(
    "grouped",
    _is_grouped,
    _grouped_weights,
    call=_grouped_call,
    mask="blocked",
    looks_for="W_query, W_key, W_value, out_proj, num_heads, num_kv_groups",
    decode=with_start_pos,
)


def _grouped_causal_call(
    module: Any, x: Any, allowed: Any, variant: str = "", values: Any = None
) -> Any:
    """``module(x, cos, sin)``: no mask (the module is causal by itself)."""
    return module(x, *rope_tables(module, x, variant, values))


GROUPED_CAUSAL = Adapter(
    "grouped-causal",
    _is_grouped_causal,
    _grouped_weights,
    call=_grouped_causal_call,
    looks_for="the same with a forward that takes no mask",
)


def _is_latent(module: Any) -> bool:
    names = ("W_query", "W_DKV", "W_UK", "W_UV", "out_proj", "num_heads")
    return all(hasattr(module, name) for name in names)


def _latent_weights(module: Any) -> Weights:
    """The book's multi-head latent attention (ch04/05_mla): K = (X W_dkv) W_uk, V likewise."""
    layers = {"W_dkv": module.W_DKV, "W_uk": module.W_UK, "W_uv": module.W_UV}
    if any(layer.bias is not None for layer in layers.values()):
        raise ConformError(
            f"{type(module).__name__} with qkv_bias: the biases of W_DKV, W_UK, "
            "W_UV are not in the mla variant's declarations"
        )
    if module.W_query.bias is not None:
        raise ConformError(
            f"{type(module).__name__} with qkv_bias: W_query's bias is not in "
            "the mla variant's declarations"
        )
    return Weights(
        module.W_query.weight.mT,
        None,
        None,
        W_o=module.out_proj.weight.mT,
        b_o=module.out_proj.bias,
        heads=module.num_heads,
        variant="mla",
        values={"d_u": module.W_DKV.weight.shape[0]},
        inputs={k: layer.weight.mT for k, layer in layers.items()},
    )


LATENT = Adapter(
    "latent",
    _is_latent,
    _latent_weights,
    dropout="dropout",
    looks_for="W_query, W_DKV, W_UK, W_UV, out_proj, num_heads",
    decode=with_use_cache,
)
