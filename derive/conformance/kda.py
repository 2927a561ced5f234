r"""`derive conform` for Kimi Delta Attention: a KDA layer (transformers' KimiLinearDeltaAttention
and BailingHybridDeltaAttention, this package's `attention.kimi.KimiDeltaAttention`, or any
module with their parameter names) checked against the rule's recurrence on its own weights
(`derive`'s kda entry derives that the recurrent, chunked and parallel forms are one, the decay
per key channel).

The layer is read into `attention.kimi.KimiDeltaAttention` (`READERS`), whose rule runs as the
recurrence; its output on the same dyadic inputs is what the layer must give, in one call, and
token by token with its state where the layer keeps one. When it does not, each port mistake of
`MISTAKES` is computed on the same weights and the one the layer gives is named
(`derive.conformance.linear.judged`, shared with the other recurrent layers).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .linear import (
    Mistake,
    Reader,
    Rule,
    copied,
    dyadic,
    judged,
    steps_hugging_face,
    steps_ours,
)
from .report import Report

__all__ = ["READERS", "MISTAKES", "RULE", "run"]

_NAMES = ("q_proj", "k_proj", "v_proj", "conv1d", "forget_gate", "b_proj", "o_norm", "o_proj")
RULE = (
    "o_t = S_tᵀ q_t, S_t = diag(α_t) S_{t−1} + k_t u_tᵀ, u_t = β_t (v_t − (diag(α_t) S_{t−1})ᵀ k_t)"
)
RULE_LATEX = (
    r"o_t = S_t^\top q_t,\; S_t = \operatorname{diag}(\alpha_t) S_{t-1} + k_t u_t^\top,\; "
    r"u_t = \beta_t (v_t - (\operatorname{diag}(\alpha_t) S_{t-1})^\top k_t)"
)


def _hugging_face(obj: Any) -> bool:
    kind = type(obj)
    if not kind.__module__.startswith("transformers."):
        return False
    from attention.huggingface import KDA_FAMILIES

    return kind.__name__ in KDA_FAMILIES


def _ours(obj: Any) -> bool:
    kind = type(obj)
    return kind.__module__ == "attention.kimi" and kind.__name__ == "KimiDeltaAttention"


def _named_like(obj: Any) -> bool:
    """A module with KimiLinearDeltaAttention's parameter names (a port)."""
    return (
        isinstance(obj, torch.nn.Module)
        and not type(obj).__module__.startswith("transformers.")
        and not _ours(obj)
        and all(hasattr(obj, name) for name in _NAMES)
    )


def _read_hugging_face(layer: Any) -> Any:
    from attention.huggingface import from_kda

    return from_kda(layer).linear


def _read_named(layer: Any) -> Any:
    """A port with the layer's names: its sizes read off its weights, its weights by name."""
    from attention.kimi import KimiDeltaAttention

    heads = layer.b_proj.weight.shape[0]
    norm = layer.o_norm
    ours = KimiDeltaAttention(
        layer.q_proj.weight.shape[1],
        num_heads=heads,
        head_dim=norm.weight.shape[0],
        conv_size=layer.conv1d.kernel_size[0],
        norm_eps=float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))),
        low_rank=hasattr(layer, "g_a_proj"),
    )
    weights = layer.state_dict()
    weights["forget_gate.A_log"] = weights["forget_gate.A_log"].reshape(1, 1, heads, 1)
    ours.load_state_dict(weights, strict=False)
    return ours.to(layer.q_proj.weight.dtype)


#: The kinds of layer read, in the order they are tried.
READERS = (
    Reader("huggingface", _hugging_face, _read_hugging_face, steps_hugging_face),
    Reader("attention", _ours, copied, steps_ours),
    Reader("named", _named_like, _read_named),
)


# ---------------------------------------------------------------------------------------------
# The rule, and each port's mistake, on the parts our module computes from the layer's weights


def _recurrence(q, k, v, g, beta, mistake: str = "") -> torch.Tensor:
    """KDA token by token, with one port mistake: "decay-on-values" (diag(α_t) applied to the
    state's columns, the value channels), "inclusive-decay" (token t's own write decayed),
    "beta-on-keys" (β on what is taken out only)."""
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    rows = []
    for t in range(q.shape[-2]):
        alpha = g[..., t, :].exp()
        state = (
            state * alpha[..., None, :]
            if mistake == "decay-on-values"
            else alpha[..., None] * state
        )
        predicted = (k[..., t, None, :] @ state).squeeze(-2)
        if mistake == "beta-on-keys":
            u = v[..., t, :] - beta[..., t, None] * predicted
        else:
            u = beta[..., t, None] * (v[..., t, :] - predicted)
        write = k[..., t, :, None] * u[..., None, :]
        state = state + (alpha[..., None] * write if mistake == "inclusive-decay" else write)
        rows.append((q[..., t, None, :] @ state).squeeze(-2))
    return torch.stack(rows, dim=-2)


def _with(mistake: str = "", *, normalise: bool = True, gate: str = "sigmoid"):
    def output(ours: Any, x: torch.Tensor) -> torch.Tensor:
        from attention.deltanet import l2_normalised

        q, k, v, g, beta, _ = ours.parts(x)
        if normalise:
            q, k = l2_normalised(q), l2_normalised(k)
        q = q / math.sqrt(ours.head_dim)
        dtype = torch.promote_types(q.dtype, torch.float32)
        q, k, v, g, beta = (t.to(dtype) for t in (q, k, v, g, beta))
        o = _recurrence(q, k, v, g, beta, mistake)
        if gate == "sigmoid":
            return ours.finished(x, o)
        gates = ours.gate_logits(x).unflatten(-1, (ours.num_heads, ours.head_dim))
        found = o.transpose(-3, -2).float()
        normed = found * torch.rsqrt(found.square().mean(-1, keepdim=True) + ours.o_norm.eps)
        gated = ours.o_norm.weight.float() * normed * torch.nn.functional.silu(gates.float())
        return ours.o_proj(gated.flatten(-2).to(x.dtype))

    return output


#: The mistakes ports of KDA make, each computed on the layer's own weights.
MISTAKES = (
    Mistake(
        "decay-on-values",
        "the decay per channel applied to the wrong side of the state (its value channels)",
        "S_t = S_{t−1} diag(α_t) + k_t u_tᵀ",
        _with("decay-on-values"),
    ),
    Mistake(
        "inclusive-decay",
        "the decay taken inclusive: token t's own write decayed by α_t",
        "S_t = diag(α_t) (S_{t−1} + k_t u_tᵀ)",
        _with("inclusive-decay"),
    ),
    Mistake(
        "beta-on-keys",
        "β applied to the state's prediction only, not to the value written",
        "u_t = v_t − β_t (diag(α_t) S_{t−1})ᵀ k_t",
        _with("beta-on-keys"),
    ),
    Mistake(
        "l2-norm-forgotten",
        "the queries and keys not normalised to unit length",
        "q_t, k_t as convolved, q_t / √c_h",
        _with(normalise=False),
    ),
    Mistake(
        "gate-silu",
        "the output gate taken through SiLU (Gated DeltaNet's) instead of a sigmoid",
        "RMSNorm(o) ∘ SiLU(x W_ga W_gb)",
        _with(gate="silu"),
    ),
)


def run(obj: Any, reader: Reader, *, n: int = 7, seed: int = 0, name: str = "") -> Report:
    """The report of one KDA layer: its output against the recurrence on its own weights, in
    one call and token by token with its state; the mistake named if it fails."""
    layer = obj
    ours = reader.read(layer).eval()
    ours.chunk_size = None  # the recurrence: the rule as the derivation states it
    d = ours.q_proj.weight.shape[1]
    return judged(
        layer,
        reader,
        ours,
        dyadic(n, d, ours.q_proj.weight.dtype, seed),
        Rule("kda", "Kimi Delta Attention", RULE, RULE_LATEX, MISTAKES),
        kind="Kimi Delta Attention",
        sizes={"n": n, "d": d, "h": ours.num_heads, "c_h": ours.head_dim},
        name=name,
    )
