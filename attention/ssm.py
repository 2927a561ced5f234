r"""State-space layers: Mamba-2's mixer (Dao and Gu, *Transformers are SSMs*, 2024; the layers of
Mamba 2, and of the hybrids Bamba, Granite 4, Nemotron-H and Zamba 2), on `attention.linear.ssd`.

From x (*batch, n, d), with h heads of width p (the inner width e = h p), g groups of B and C and
a state of d_state numbers per channel:

    z, xBC, dt = x W_in                    (split: e, e + 2 g d_state, h)
    xBC ← SiLU(causal depthwise conv(xBC) + bias)
    x', B, C = xBC                         (split: e, g d_state, g d_state)
    Δ = softplus(dt + dt_bias), held within time_step_limit;   A = −e^{A_log}
    y = SSD(x', Δ, A, B, C) + D x'         (per head: h_t = e^{Δ_t A} h_{t−1} + Δ_t x'_t B_tᵀ,
                                            y_t = h_t C_t)
    out = RMSNorm_g(y ∘ SiLU(z)) W_out     (the norm over each of the g groups of channels)

`Mamba2` keeps transformers' parameter names (in_proj, conv1d, dt_bias, A_log, D, norm.weight,
out_proj), so the state dict of a `Mamba2Mixer` loads into it as it is
(`attention.huggingface.from_hf` reads one). `forward(x, use_cache=True)` keeps the state (h p
d_state numbers a head) and the convolution's last inputs between calls: each new token then
costs the same whatever its position. transformers computes the scan and the norm in float32
whatever the model's dtype; so does this module (`attention.linear`'s computing dtype: float32
at least, float64 kept).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from . import linear
from ._arguments import check_positive
from ._checks import checked_forward
from ._convolution import continued_from_cache, convolved
from ._shapes import ShapeError
from ._weights import named_weights

__all__ = ["Mamba2", "Mamba", "GatedRMSNorm", "gated_group_norm", "NORMS"]

#: The weights every call checks: d the input's width, r the in-projection's rows (2e + 2 g
#: d_state + h), k the convolution's channels (e + 2 g d_state), w its width, e the inner width,
#: h the heads.
_R = Float[Tensor, " r"] | None
_K = Float[Tensor, " k"] | None
_D = Float[Tensor, " d"] | None
_NAMES = (
    ("in_proj.weight", Float[Tensor, "r d"]),
    ("in_proj.bias", _R),
    ("conv1d.weight", Float[Tensor, "k 1 w"]),
    ("conv1d.bias", _K),
    ("dt_bias", Float[Tensor, " h"]),
    ("A_log", Float[Tensor, " h"]),
    ("D", Float[Tensor, " h"]),
    ("norm.weight", Float[Tensor, " e"]),
    ("out_proj.weight", Float[Tensor, "d e"]),
    ("out_proj.bias", _D),
)


_weights = named_weights(_NAMES)


def gated_group_norm(y: Tensor, z: Tensor, weight: Tensor, *, groups: int, eps: float) -> Tensor:
    """RMSNorm_g(y ∘ SiLU(z)) · weight: y gated by SiLU(z), then each of `groups` equal groups of
    its last dimension divided by its root mean square (+ ε under the root), in float32, and the
    gains applied in y's dtype (Mamba-2's `RMSNormGated`, the norm after the gate)."""
    dtype = torch.promote_types(y.dtype, torch.float32)  # float32 at least, float64 kept
    gated = y.to(dtype) * F.silu(z.to(dtype))
    parts = gated.unflatten(-1, (groups, -1))
    normed = parts * torch.rsqrt(parts.square().mean(-1, keepdim=True) + eps)
    return weight * normed.flatten(-2).to(y.dtype)


class GatedRMSNorm(nn.Module):
    """`gated_group_norm` with its gains (`weight`, of the inner width), over `groups` groups."""

    def __init__(self, width: int, *, groups: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.groups, self.eps = groups, eps

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        return gated_group_norm(y, z, self.weight, groups=self.groups, eps=self.eps)


class Mamba2(nn.Module):
    """Mamba-2's mixer (the module docstring).

    Args:
        d_model: d, the input's and the output's width.
        num_heads: h, the SSD's heads; a multiple of n_groups.
        head_dim: p, the width of a head (e = h p, the inner width).
        state_size: d_state, the state's numbers per channel.
        n_groups: g, the groups of B and C (and of the gated RMSNorm's channels).
        conv_kernel: the width of the causal depthwise convolution on x', B, C.
        use_bias: give `in_proj` and `out_proj` biases.
        use_conv_bias: give the convolution a bias.
        norm_eps: the ε of the gated RMSNorm.
        chunk_size: the chunked form's C, the tokens of a chunk; None: the recurrence, token by
            token (what a one-token call always runs).
        time_step_limit: (low, high), the range Δ is held within after its softplus.

    Raises:
        ValueError: when d_model, num_heads, head_dim, state_size, n_groups, conv_kernel or
            chunk_size is not a positive int, or time_step_limit is not (low, high) with
            0 ≤ low ≤ high.
        ShapeError: when num_heads is not a multiple of n_groups.
    """

    def __init__(
        self,
        d_model: int,
        *,
        num_heads: int,
        head_dim: int,
        state_size: int = 128,
        n_groups: int = 1,
        conv_kernel: int = 4,
        use_bias: bool = False,
        use_conv_bias: bool = True,
        norm_eps: float = 1e-5,
        chunk_size: int | None = 256,
        time_step_limit: tuple[float, float] = (0.0, math.inf),
    ) -> None:
        super().__init__()
        where = "Mamba2"
        check_positive(
            where,
            d_model=d_model,
            num_heads=num_heads,
            head_dim=head_dim,
            state_size=state_size,
            n_groups=n_groups,
            conv_kernel=conv_kernel,
        )
        if chunk_size is not None:
            check_positive(where, chunk_size=chunk_size)
        if num_heads % n_groups:
            raise ShapeError(
                f"{where}: num_heads={num_heads} is not a multiple of n_groups={n_groups}"
            )
        low, high = time_step_limit
        if not 0 <= low <= high:
            raise ValueError(
                f"{where}: time_step_limit must be (low, high) with 0 <= low <= high, got "
                f"time_step_limit={time_step_limit!r}"
            )
        self.num_heads, self.head_dim, self.ssm_state_size = num_heads, head_dim, state_size
        self.n_groups, self.chunk_size, self.time_step_limit = n_groups, chunk_size, (low, high)
        self.intermediate_size = inner = num_heads * head_dim
        self.conv_dim = channels = inner + 2 * n_groups * state_size
        self.in_proj = nn.Linear(d_model, inner + channels + num_heads, bias=use_bias)
        self.conv1d = nn.Conv1d(
            channels, channels, conv_kernel, groups=channels, bias=use_conv_bias
        )
        self.dt_bias = nn.Parameter(torch.ones(num_heads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, num_heads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(num_heads))
        self.norm = GatedRMSNorm(inner, groups=n_groups, eps=norm_eps)
        self.out_proj = nn.Linear(inner, d_model, bias=use_bias)
        self.register_buffer("cache_state", None, persistent=False)
        self.register_buffer("cache_conv", None, persistent=False)

    def reset_cache(self) -> None:
        """Forget the state: the next `forward(x, use_cache=True)` starts a new sequence."""
        self.cache_state, self.cache_conv = None, None

    @checked_forward(_weights)
    def forward(
        self, x: Float[Tensor, "*batch n d"], use_cache: bool = False
    ) -> Float[Tensor, "*batch n d"]:
        """The layer's output on x; with `use_cache=True`, continuing the sequence of the calls
        since `reset_cache()`.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_model.
            use_cache: start from the state and the convolution's last inputs that the calls
                since `reset_cache()` kept, and keep them after x (generation); False: x is a
                whole sequence, and the cache is neither read nor changed.

        Returns:
            The output, `(*batch, n, d)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_model, or, with
                `use_cache=True`, its batch is not the cached state's (call `reset_cache()`
                first).
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
        if not use_cache:
            return self.continued(x, None, None)[0]
        return continued_from_cache(self, x, "Mamba2.forward", 3)

    def continued(
        self,
        x: Tensor,
        state: Tensor | None,
        past: Tensor | None,
        keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The output on x after a sequence summed up by `state` and `past`.

        Args:
            x: the new tokens, `(*batch, n, d)`.
            state: the state after the tokens before x, `(*batch, h, p, d_state)`; None for a
                new sequence.
            past: the convolution's last inputs before x, `(*batch, conv_kernel − 1, channels)`
                with channels = e + 2 g d_state; None for a new sequence.
            keep: 1 for a token, 0 for padding, `(*batch, n)`: a padding token's input and its
                convolved channels are zeroed, so that it writes nothing into the state (as
                transformers' layers do with `attention_mask`); None: every token counts.

        Returns:
            The tuple (output, state, past) after x: the output `(*batch, n, d)`, the state
                `(*batch, h, p, d_state)`, and the convolution's last inputs
                `(*batch, conv_kernel − 1, channels)`.
        """
        inner, dt, B, C, z, past = self.parts(x, past, keep)
        n, computing = x.shape[-2], dt.dtype
        y, state = linear.ssd(  # y kept in the computing dtype up to the norm, as transformers
            inner.to(computing),
            self.steps(dt),
            -self.A_log.to(computing).exp(),
            B.to(computing),
            C.to(computing),
            D=self.D,
            chunk_size=None if n == 1 or self.chunk_size is None else self.chunk_size,
            initial_state=state,
            return_state=True,
        )  # pyright: ignore[reportGeneralTypeIssues]
        return self.finished(y, z, x.dtype), state, past

    def parts(
        self, x: Tensor, past: Tensor | None = None, keep: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """What the scan reads from x.

        Args:
            x: the input X, `(*batch, n, d)`.
            past: the convolution's last inputs before x, `(*batch, conv_kernel − 1, channels)`
                with channels = e + 2 g d_state; None for a new sequence (zeros).
            keep: 1 for a token, 0 for padding, `(*batch, n)` (as in `continued`); None: every
                token counts.

        Returns:
            The tuple (x', dt, B, C, z, past): the heads' inputs x' `(*batch, n, h, p)`,
                dt + dt_bias `(*batch, n, h)` (float32 at least, before the softplus), B and C
                `(*batch, n, g, d_state)`, the gate z `(*batch, n, e)`, and the convolution's
                last inputs after x, `(*batch, conv_kernel − 1, channels)`.
        """
        if keep is not None:
            x = x * keep[..., None].to(x.dtype)
        z, xbc, dt = self.in_proj(x).split(
            [self.intermediate_size, self.conv_dim, self.num_heads], dim=-1
        )
        xbc, past = convolved(self.conv1d, xbc, past)
        if keep is not None:
            xbc = xbc * keep[..., None].to(xbc.dtype)
        groups = self.n_groups * self.ssm_state_size
        inner, B, C = xbc.split([self.intermediate_size, groups, groups], dim=-1)
        state = (self.n_groups, self.ssm_state_size)
        computing = torch.promote_types(x.dtype, torch.float32)  # float32 at least
        return (
            inner.unflatten(-1, (self.num_heads, self.head_dim)),
            dt.to(computing) + self.dt_bias.to(computing),
            B.unflatten(-1, state),
            C.unflatten(-1, state),
            z,
            past,
        )

    def steps(self, dt: Tensor) -> Tensor:
        """Δ = softplus(dt + dt_bias), held within `time_step_limit` (in every call: transformers'
        one-token decoding path leaves Δ unclamped, which differs only for a limit other than
        the default (0, ∞)).

        Args:
            dt: the time steps before the softplus, dt + dt_bias, `(*batch, n, h)`, as `parts`
                gives them.

        Returns:
            Δ, `(*batch, n, h)`.
        """
        low, high = self.time_step_limit
        return F.softplus(dt).clamp(low, high)

    def finished(self, y: Tensor, z: Tensor, dtype: torch.dtype) -> Tensor:
        """The layer's output from the scan's y: the gated RMSNorm, W_out.

        Args:
            y: the scan's output, `(*batch, n, h, p)`.
            z: the gate, `(*batch, n, e)`.
            dtype: the output's dtype (the input's).

        Returns:
            The output, `(*batch, n, d)`.
        """
        return self.out_proj(self.norm(y.flatten(-2), z).to(dtype))


# ---------------------------------------------------------------------------------------------
# Mamba's mixer (Mamba-1): the selective scan, a decay per channel and state entry

#: The norms some families put on Δ's low-rank input, B and C before the scan.
NORMS = (None, "weightless", "weighted")

_MAMBA_NAMES = (
    ("in_proj.weight", Float[Tensor, "r d"]),
    ("in_proj.bias", _R),
    ("conv1d.weight", Float[Tensor, "e 1 w"]),
    ("x_proj.weight", Float[Tensor, "x_rows e"]),
    ("dt_proj.weight", Float[Tensor, "e rank"]),
    ("dt_proj.bias", Float[Tensor, " e"]),
    ("A_log", Float[Tensor, "e d_state"]),
    ("D", Float[Tensor, " e"]),
    ("out_proj.weight", Float[Tensor, "d e"]),
    ("out_proj.bias", _D),
)


_mamba_weights = named_weights(_MAMBA_NAMES)


class _RMSNorm(nn.Module):
    """x / √(mean(x²) + ε), times gains where it has them, in float32 at least."""

    def __init__(self, width: int, *, eps: float, weighted: bool) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width)) if weighted else None

    def forward(self, x: Tensor) -> Tensor:
        found = x.to(torch.promote_types(x.dtype, torch.float32))
        normed = found * torch.rsqrt(found.square().mean(-1, keepdim=True) + self.eps)
        normed = normed.to(x.dtype)
        return normed if self.weight is None else self.weight * normed


class Mamba(nn.Module):
    """Mamba's mixer (Gu and Dao, *Mamba*, 2023; transformers' MambaMixer, and with `norms` Falcon
    Mamba's and Jamba's), with transformers' parameter names so that their state dicts load:

        x', z = x W_in;   x' ← SiLU(causal depthwise conv(x') + bias)
        δ, B, C = x' W_x   (split: time_step_rank, d_state, d_state; each normalised with `norms`)
        Δ = softplus(δ W_dt + b_dt);   A = −e^{A_log}   (e × d_state)
        y = selective scan(x', Δ, A, B, C) + D x';   out = (y ∘ SiLU(z)) W_out

    `forward(x, use_cache=True)` keeps the state and the convolution's inputs.

    Args:
        d_model: d, the input's and the output's width.
        inner: e, the channels of the scan.
        state_size: d_state, the state's numbers per channel.
        time_step_rank: the width of δ, Δ's low-rank input; None: ⌈d_model / 16⌉.
        conv_kernel: the width of the causal depthwise convolution on x'.
        use_bias: give `in_proj` and `out_proj` biases.
        use_conv_bias: give the convolution a bias.
        norms: the RMS norms on δ, B and C: None for none, "weightless" (Falcon Mamba's, without
            gains) or "weighted" (Jamba's).
        norm_eps: the ε of those norms.
        chunk_size: the chunked form's C, the tokens of a chunk (it forms n × n × d_state decays
            per channel); None: the recurrence, what generation and long sequences run.

    Raises:
        ValueError: when d_model, inner, state_size, time_step_rank, conv_kernel or chunk_size
            is not a positive int, or norms is not one of None, "weightless", "weighted".
    """

    def __init__(
        self,
        d_model: int,
        *,
        inner: int,
        state_size: int = 16,
        time_step_rank: int | None = None,
        conv_kernel: int = 4,
        use_bias: bool = False,
        use_conv_bias: bool = True,
        norms: str | None = None,
        norm_eps: float = 1e-6,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        where = "Mamba"
        rank = math.ceil(d_model / 16) if time_step_rank is None else time_step_rank
        check_positive(
            where,
            d_model=d_model,
            inner=inner,
            state_size=state_size,
            time_step_rank=rank,
            conv_kernel=conv_kernel,
        )
        if chunk_size is not None:
            check_positive(where, chunk_size=chunk_size)
        if norms not in NORMS:
            raise ValueError(f"{where}: norms must be one of {NORMS}, got norms={norms!r}")
        self.inner, self.ssm_state_size, self.time_step_rank = inner, state_size, rank
        self.chunk_size = chunk_size
        self.in_proj = nn.Linear(d_model, 2 * inner, bias=use_bias)
        self.conv1d = nn.Conv1d(inner, inner, conv_kernel, groups=inner, bias=use_conv_bias)
        self.x_proj = nn.Linear(inner, rank + 2 * state_size, bias=False)
        self.dt_proj = nn.Linear(rank, inner, bias=True)
        self.A_log = nn.Parameter(
            torch.log(torch.arange(1, state_size + 1, dtype=torch.float32)).repeat(inner, 1)
        )
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, d_model, bias=use_bias)
        if norms is not None:
            weighted = norms == "weighted"
            self.dt_layernorm = _RMSNorm(rank, eps=norm_eps, weighted=weighted)
            self.b_layernorm = _RMSNorm(state_size, eps=norm_eps, weighted=weighted)
            self.c_layernorm = _RMSNorm(state_size, eps=norm_eps, weighted=weighted)
        self.norms = norms
        self.register_buffer("cache_state", None, persistent=False)
        self.register_buffer("cache_conv", None, persistent=False)

    def reset_cache(self) -> None:
        """Forget the state: the next `forward(x, use_cache=True)` starts a new sequence."""
        self.cache_state, self.cache_conv = None, None

    @checked_forward(_mamba_weights)
    def forward(
        self, x: Float[Tensor, "*batch n d"], use_cache: bool = False
    ) -> Float[Tensor, "*batch n d"]:
        """The layer's output on x; with `use_cache=True`, continuing the sequence of the calls
        since `reset_cache()`.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_model.
            use_cache: start from the state and the convolution's last inputs that the calls
                since `reset_cache()` kept, and keep them after x (generation); False: x is a
                whole sequence, and the cache is neither read nor changed.

        Returns:
            The output, `(*batch, n, d)`.

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_model, or, with
                `use_cache=True`, its batch is not the cached state's (call `reset_cache()`
                first).
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
        if not use_cache:
            return self.continued(x, None, None)[0]
        return continued_from_cache(self, x, "Mamba.forward", 2)

    def parts(
        self, x: Tensor, past: Tensor | None = None, keep: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """What the scan reads from x.

        Args:
            x: the input X, `(*batch, n, d)`.
            past: the convolution's last inputs before x, `(*batch, conv_kernel − 1, e)`; None
                for a new sequence (zeros).
            keep: 1 for a token, 0 for padding, `(*batch, n)` (as in `continued`); None: every
                token counts.

        Returns:
            The tuple (x', dt, B, C, z, past): the channels x' `(*batch, n, e)`, δ W_dt + b_dt
                `(*batch, n, e)` (before the softplus), B and C `(*batch, n, d_state)` (dt, B
                and C float32 at least), the gate z `(*batch, n, e)`, and the convolution's last
                inputs after x, `(*batch, conv_kernel − 1, e)`.
        """
        if keep is not None:
            x = x * keep[..., None].to(x.dtype)
        inner, z = self.in_proj(x).chunk(2, dim=-1)
        inner, past = convolved(self.conv1d, inner, past)
        if keep is not None:
            inner = inner * keep[..., None].to(inner.dtype)
        rank, state = self.time_step_rank, self.ssm_state_size
        step, B, C = self.x_proj(inner).split([rank, state, state], dim=-1)
        if self.norms is not None:
            step, B, C = self.dt_layernorm(step), self.b_layernorm(B), self.c_layernorm(C)
        computing = torch.promote_types(x.dtype, torch.float32)
        dt = step.to(computing) @ self.dt_proj.weight.to(computing).T
        dt = dt + self.dt_proj.bias.to(computing)
        return inner, dt, B.to(computing), C.to(computing), z, past

    def continued(
        self,
        x: Tensor,
        state: Tensor | None,
        past: Tensor | None,
        keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The output on x after a sequence summed up by `state` and `past`.

        Args:
            x: the new tokens, `(*batch, n, d)`.
            state: the state after the tokens before x, `(*batch, e, d_state)`; None for a new
                sequence.
            past: the convolution's last inputs before x, `(*batch, conv_kernel − 1, e)`; None
                for a new sequence.
            keep: 1 for a token, 0 for padding, `(*batch, n)` (a padding token is zeroed before
                and after the convolution, as transformers' layers do); None: every token counts.

        Returns:
            The tuple (output, state, past) after x: the output `(*batch, n, d)`, the state
                `(*batch, e, d_state)`, and the convolution's last inputs
                `(*batch, conv_kernel − 1, e)`.
        """
        inner, dt, B, C, z, past = self.parts(x, past, keep)
        computing, n = dt.dtype, x.shape[-2]
        y, state = linear.selective_scan(
            inner.to(computing),
            F.softplus(dt),
            -self.A_log.to(computing).exp(),
            B,
            C,
            D=self.D.to(computing),
            chunk_size=None if n == 1 or self.chunk_size is None else self.chunk_size,
            initial_state=state,
            return_state=True,
        )  # pyright: ignore[reportGeneralTypeIssues]
        return self.finished(y, z, x.dtype), state, past

    def finished(self, y: Tensor, z: Tensor, dtype: torch.dtype) -> Tensor:
        """(y ∘ SiLU(z)) W_out.

        Args:
            y: the scan's output, `(*batch, n, e)`.
            z: the gate, `(*batch, n, e)`.
            dtype: the output's dtype (the input's).

        Returns:
            The output, `(*batch, n, d)`.
        """
        return self.out_proj((y * F.silu(z.to(y.dtype))).to(dtype))
