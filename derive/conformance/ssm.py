r"""`derive conform` for state-space layers: a Mamba-2 mixer (transformers' Mamba2Mixer and the
mixers of Bamba, Granite 4, Nemotron-H and Zamba 2, this package's `attention.ssm.Mamba2`, or any
module with their parameter names) checked against SSD's recurrence on its own weights
(`derive`'s ssd entry derives that the recurrent, quadratic and chunked forms are one).

The layer is read into `attention.ssm.Mamba2` (`READERS`), whose scan runs as the recurrence,
token by token; its output on the same dyadic inputs is what the layer must give, in one call,
and token by token with its state where the layer keeps one. When it does not, each port mistake
of `MISTAKES` is computed on the same weights, and the one whose output the layer gives is
named (`derive.conformance.linear.judged`, shared with the delta rules).
"""

from __future__ import annotations

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

__all__ = [
    "READERS",
    "MISTAKES",
    "RULE",
    "run",
    "read_families",
    "MAMBA_READERS",
    "MAMBA_MISTAKES",
    "MAMBA_RULE",
    "run_mamba",
]

_NAMES = ("in_proj", "conv1d", "dt_bias", "A_log", "D", "norm", "out_proj")
RULE = (
    "y_t = h_t C_t + D x_t, h_t = e^{Δ_t A} h_{t−1} + Δ_t x_t B_tᵀ, Δ_t = softplus(dt_t + "
    "dt_bias), A = −e^{A_log}"
)
RULE_LATEX = (
    r"y_t = h_t C_t + D x_t,\; h_t = e^{\Delta_t A} h_{t-1} + \Delta_t x_t B_t^\top,\; "
    r"\Delta_t = \operatorname{softplus}(dt_t + b),\; A = -e^{A_{\log}}"
)


def _hugging_face(obj: Any) -> bool:
    """A layer of transformers whose class `attention.huggingface.SSM_FAMILIES` reads
    (`attention` imported only for a layer of transformers: conform imports nothing the target
    does not)."""
    kind = type(obj)
    if not kind.__module__.startswith("transformers."):
        return False
    from attention.huggingface import SSM_FAMILIES

    return kind.__name__ in SSM_FAMILIES


def read_families() -> tuple[str, ...]:
    """The classes of transformers' state-space layers read (`attention.huggingface`'s
    `SSM_FAMILIES`, Mamba-2's, and `MAMBA_FAMILIES`, Mamba's)."""
    from attention.huggingface import MAMBA_FAMILIES, SSM_FAMILIES

    return (*SSM_FAMILIES, *MAMBA_FAMILIES)


def _ours(obj: Any) -> bool:
    kind = type(obj)
    return kind.__module__ == "attention.ssm" and kind.__name__ == "Mamba2"


def _named_like(obj: Any) -> bool:
    """A module with Mamba2Mixer's parameter names (a port), not one of transformers' own."""
    return (
        isinstance(obj, torch.nn.Module)
        and not type(obj).__module__.startswith("transformers.")
        and all(hasattr(obj, name) for name in _NAMES)
        and (hasattr(obj, "n_groups") or hasattr(obj, "ngroups"))  # mamba_ssm's is ngroups
    )


def _read_hugging_face(layer: Any) -> Any:
    from attention.huggingface import from_ssm

    return from_ssm(layer).ssm


def _read_named(layer: Any) -> Any:
    """A port with Mamba2Mixer's names: its sizes read off its weights (the groups from its
    `n_groups`, mamba_ssm's `ngroups`), its weights loaded by name."""
    from attention.ssm import Mamba2

    heads = layer.A_log.shape[0]
    inner = layer.norm.weight.shape[0]
    groups = int(getattr(layer, "n_groups", getattr(layer, "ngroups", 1)))
    state = (layer.conv1d.weight.shape[0] - inner) // (2 * groups)
    low, high = (float(t) for t in getattr(layer, "time_step_limit", (0.0, float("inf"))))
    ours = Mamba2(
        layer.in_proj.weight.shape[1],
        num_heads=heads,
        head_dim=inner // heads,
        state_size=state,
        n_groups=groups,
        conv_kernel=layer.conv1d.kernel_size[0],
        use_bias=layer.in_proj.bias is not None,
        use_conv_bias=layer.conv1d.bias is not None,
        norm_eps=float(getattr(layer.norm, "variance_epsilon", getattr(layer.norm, "eps", 1e-5))),
        time_step_limit=(low, high),
    )
    ours.load_state_dict(layer.state_dict(), strict=False)
    return ours.to(layer.in_proj.weight.dtype)


#: The kinds of layer read, in the order they are tried.
READERS = (
    Reader("huggingface", _hugging_face, _read_hugging_face, steps_hugging_face),
    Reader("attention", _ours, copied, steps_ours),
    Reader("named", _named_like, _read_named),
)


# ---------------------------------------------------------------------------------------------
# The rule, and each port's mistake, on the parts our module computes from the layer's weights


def _scan(x, dt, A, B, C, D, *, inclusive: bool = False, groups: str = "consecutive"):
    """SSD's recurrence token by token (Mamba's layout), with a port's slips: `inclusive` (each
    token's own write decayed by its a_t), `groups` "tiled" (head i reads group i mod g)."""
    heads = x.shape[-2]
    shared = heads // B.shape[-2]
    if groups == "tiled":
        B, C = (t.repeat(*(1,) * (t.dim() - 2), shared, 1) for t in (B, C))
    else:
        B, C = (t.repeat_interleave(shared, dim=-2) for t in (B, C))
    h = x.new_zeros(*x.shape[:-3], heads, x.shape[-1], B.shape[-1])
    rows = []
    for t in range(x.shape[-3]):
        a = torch.exp(dt[..., t, :] * A)[..., None, None]
        write = (dt[..., t, :, None] * x[..., t, :, :])[..., None] * B[..., t, :, None, :]
        h = a * (h + write) if inclusive else a * h + write
        y = (h @ C[..., t, :, :, None]).squeeze(-1)
        rows.append(y if D is None else y + D[:, None] * x[..., t, :, :])
    return torch.stack(rows, dim=-3)


def _with(
    *,
    softplus: bool = True,
    sign: float = -1.0,
    swapped: bool = False,
    skip: bool = True,
    inclusive: bool = False,
    groups: str = "consecutive",
    norm_first: bool = False,
):
    def output(ours: Any, x: torch.Tensor) -> torch.Tensor:
        inner, dt, B, C, z, _ = ours.parts(x)
        dtype = torch.promote_types(inner.dtype, torch.float32)
        inner, B, C = inner.to(dtype), B.to(dtype), C.to(dtype)
        step = (ours.steps(dt) if softplus else dt).to(dtype)
        A = (sign * ours.A_log.to(dtype).exp()).to(dtype)
        if swapped:
            B, C = C, B
        D = ours.D.to(dtype) if skip else None
        y = _scan(inner, step, A, B, C, D, inclusive=inclusive, groups=groups)
        if norm_first:  # RMSNorm(y) ∘ SiLU(z): the norm before the gate
            parts = y.flatten(-2).float().unflatten(-1, (ours.norm.groups, -1))
            normed = parts * torch.rsqrt(parts.square().mean(-1, keepdim=True) + ours.norm.eps)
            gated = normed.flatten(-2) * torch.nn.functional.silu(z.float())
            return ours.out_proj((ours.norm.weight * gated.to(y.dtype)).to(x.dtype))
        return ours.finished(y, z, x.dtype)

    return output


#: The mistakes ports of Mamba-2 make, each computed on the layer's own weights.
MISTAKES = (
    Mistake(
        "dt-without-softplus",
        "the step Δ taken without its softplus",
        "Δ_t = dt_t + dt_bias",
        _with(softplus=False),
    ),
    Mistake(
        "a-sign",
        "A taken positive: the state grows instead of decaying",
        "A = e^{A_log}",
        _with(sign=1.0),
    ),
    Mistake(
        "mask-off-by-one",
        "the decay's product off by one: each token's own write decayed by its a_t",
        "h_t = e^{Δ_t A} (h_{t−1} + Δ_t x_t B_tᵀ)",
        _with(inclusive=True),
    ),
    Mistake(
        "b-c-swapped",
        "B and C swapped: the state written with C and read with B",
        "h_t = a_t h_{t−1} + Δ_t x_t C_tᵀ, y_t = h_t B_t",
        _with(swapped=True),
    ),
    Mistake(
        "d-skip-missing",
        "the D skip left out",
        "y_t = h_t C_t",
        _with(skip=False),
    ),
    Mistake(
        "groups-tiled",
        "the groups of B and C tiled over the heads (head i reads group i mod g)",
        "B_t of group i mod g for head i",
        _with(groups="tiled"),
    ),
    Mistake(
        "norm-before-gate",
        "the RMSNorm taken before the gate",
        "RMSNorm(y) ∘ SiLU(z)",
        _with(norm_first=True),
    ),
)


def run(obj: Any, reader: Reader, *, n: int = 7, seed: int = 0, name: str = "") -> Report:
    """The report of one state-space layer: its output against SSD's recurrence on its own
    weights, in one call and token by token with its state; the mistake named if it fails."""
    layer = obj
    ours = reader.read(layer).eval()
    ours.chunk_size = None  # the recurrence: the rule as the derivation states it
    d = ours.in_proj.weight.shape[1]
    return judged(
        layer,
        reader,
        ours,
        dyadic(n, d, ours.in_proj.weight.dtype, seed),
        Rule("ssd", "Mamba-2's SSD", RULE, RULE_LATEX, MISTAKES),
        kind="state-space",
        sizes={
            "n": n,
            "d": d,
            "h": ours.num_heads,
            "p": ours.head_dim,
            "d_state": ours.ssm_state_size,
            "g": ours.n_groups,
        },
        name=name,
    )


# ---------------------------------------------------------------------------------------------
# Mamba's (Mamba-1's) mixers: the selective scan, a decay per channel and state entry

MAMBA_RULE = (
    "y_t = h_t C_t + D ∘ x_t, h_t = e^{Δ_t ∘ A} ∘ h_{t−1} + (Δ_t ∘ x_t) B_tᵀ, Δ_t = softplus(δ_t "
    "W_dt + b_dt), A = −e^{A_log}"
)
MAMBA_RULE_LATEX = (
    r"y_t = h_t C_t + D \circ x_t,\; h_t = e^{\Delta_t \circ A} \circ h_{t-1} + "
    r"(\Delta_t \circ x_t) B_t^\top,\; A = -e^{A_{\log}}"
)


def _mamba_hugging_face(obj: Any) -> bool:
    kind = type(obj)
    if not kind.__module__.startswith("transformers."):
        return False
    from attention.huggingface import MAMBA_FAMILIES

    return kind.__name__ in MAMBA_FAMILIES


def _mamba_ours(obj: Any) -> bool:
    kind = type(obj)
    return kind.__module__ == "attention.ssm" and kind.__name__ == "Mamba"


def _read_mamba(layer: Any) -> Any:
    from attention.huggingface import from_mamba

    return from_mamba(layer).ssm


_MAMBA_NAMES = ("in_proj", "conv1d", "x_proj", "dt_proj", "A_log", "D", "out_proj")


def _mamba_named_like(obj: Any) -> bool:
    """A module with MambaMixer's parameter names (a port), not one of transformers' own."""
    return (
        isinstance(obj, torch.nn.Module)
        and not type(obj).__module__.startswith("transformers.")
        and not _mamba_ours(obj)
        and all(hasattr(obj, name) for name in _MAMBA_NAMES)
    )


def _read_mamba_named(layer: Any) -> Any:
    """A port with MambaMixer's names: its sizes read off its weights, its weights by name."""
    from attention.ssm import Mamba

    inner, state = layer.A_log.shape
    ours = Mamba(
        layer.in_proj.weight.shape[1],
        inner=inner,
        state_size=state,
        time_step_rank=layer.dt_proj.weight.shape[1],
        conv_kernel=layer.conv1d.kernel_size[0],
        use_bias=layer.in_proj.bias is not None,
        use_conv_bias=layer.conv1d.bias is not None,
    )
    ours.load_state_dict(layer.state_dict(), strict=False)
    return ours.to(layer.in_proj.weight.dtype)


#: Mamba's mixers, in the order they are tried.
MAMBA_READERS = (
    Reader("huggingface", _mamba_hugging_face, _read_mamba, steps_hugging_face),
    Reader("attention", _mamba_ours, copied, steps_ours),
    Reader("named", _mamba_named_like, _read_mamba_named),
)


def _mamba_with(*, softplus: bool = True, sign: float = -1.0, skip: bool = True, gate: bool = True):
    def output(ours: Any, x: torch.Tensor) -> torch.Tensor:
        from attention.linear import selective_scan

        inner, dt, B, C, z, _ = ours.parts(x)
        dtype = dt.dtype
        step = torch.nn.functional.softplus(dt) if softplus else dt
        A = sign * ours.A_log.to(dtype).exp()
        y = selective_scan(inner.to(dtype), step, A, B, C, D=ours.D.to(dtype) if skip else None)
        assert isinstance(y, torch.Tensor)
        if not gate:  # the SiLU(z) gate left out
            return ours.out_proj(y.to(x.dtype))
        return ours.finished(y, z, x.dtype)

    return output


#: The mistakes ports of Mamba make, each computed on the layer's own weights.
MAMBA_MISTAKES = (
    Mistake(
        "dt-without-softplus",
        "the step Δ taken without its softplus",
        "Δ_t = δ_t W_dt + b_dt",
        _mamba_with(softplus=False),
    ),
    Mistake(
        "a-sign",
        "A taken positive: the state grows instead of decaying",
        "A = e^{A_log}",
        _mamba_with(sign=1.0),
    ),
    Mistake(
        "d-skip-missing",
        "the D skip left out",
        "y_t = h_t C_t",
        _mamba_with(skip=False),
    ),
    Mistake(
        "gate-missing",
        "the output not gated by SiLU(z)",
        "out = y W_out",
        _mamba_with(gate=False),
    ),
)


def run_mamba(obj: Any, reader: Reader, *, n: int = 7, seed: int = 0, name: str = "") -> Report:
    """The report of one Mamba mixer: its output against the selective scan's recurrence on its
    own weights, in one call and token by token with its state; the mistake named if it
    fails."""
    layer = obj
    ours = reader.read(layer).eval()
    ours.chunk_size = None
    d = ours.in_proj.weight.shape[1]
    return judged(
        layer,
        reader,
        ours,
        dyadic(n, d, ours.in_proj.weight.dtype, seed),
        Rule(
            "selective-scan",
            "Mamba's selective scan",
            MAMBA_RULE,
            MAMBA_RULE_LATEX,
            MAMBA_MISTAKES,
        ),
        kind="state-space",
        sizes={"n": n, "d": d, "e": ours.inner, "d_state": ours.ssm_state_size},
        name=name,
    )
