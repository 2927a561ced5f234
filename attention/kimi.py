r"""Kimi Delta Attention (KDA), the linear layer of Kimi Linear (Kimi Team, *Kimi Linear*, 2025):
the gated delta rule with a decay per key channel (`attention.linear.kimi_delta_rule`).

From x (*batch, n, d), with h heads of width c_h (queries, keys and values alike):

    Q, K, V = SiLU(causal depthwise conv(X W_q, X W_k, X W_v))
    q_t ← q_t / (‖q_t‖ √c_h),  k_t ← k_t / ‖k_t‖         (the L2 norm, and the scale on q)
    g_t = −e^{A_log} softplus(x_t W_fa W_fb + dt_bias)     (a log-decay per head and channel)
    β_t = σ(x_t W_b)                                       (the write strength, per head)
    S_t = diag(α_t) S_{t−1} + β_t k_t (v_t − (diag(α_t) S_{t−1})ᵀ k_t)ᵀ,  o_t = S_tᵀ q_t
    out = (RMSNorm(o) ∘ σ(X W_ga W_gb)) W_o                 (a sigmoid gate, per head's norm)

`KimiDeltaAttention` keeps transformers' parameter names (q_proj, k_proj, v_proj, conv1d,
forget_gate.f_a_proj, forget_gate.f_b_proj, forget_gate.dt_bias, forget_gate.A_log, b_proj,
g_a_proj, g_b_proj, o_norm.weight, o_proj), so a `KimiLinearDeltaAttention`'s state dict loads
into it as it is (`attention.huggingface.from_hf` reads one); with `low_rank=False` and
`decay_bound`, Bailing's hybrid layers (`BailingHybridDeltaAttention`: whole gate projections
`forget_gate.f_proj` and `g_proj`, the bounded forget gate). `forward(x, use_cache=True)` keeps
the state and the convolution's last inputs between calls.
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
from ._weights import named_weights
from .deltanet import l2_normalised

__all__ = ["KimiDeltaAttention"]

#: The weights every call checks: d the input's width, e = h c_h, c the head width, h the heads,
#: k the convolution's channels (3e), w its width.
_NAMES = (
    ("q_proj.weight", Float[Tensor, "e d"]),
    ("k_proj.weight", Float[Tensor, "e d"]),
    ("v_proj.weight", Float[Tensor, "e d"]),
    ("conv1d.weight", Float[Tensor, "k 1 w"]),
    ("b_proj.weight", Float[Tensor, "h d"]),
    ("o_norm.weight", Float[Tensor, " c"]),
    ("o_proj.weight", Float[Tensor, "d e"]),
)


_weights = named_weights(_NAMES)


class ForgetGate(nn.Module):
    """The log-decays per head and key channel from x: −e^{A_log} softplus(x W_f + dt_bias)
    (Kimi Linear's), or with `bound` b the bounded gate b σ(e^{A_log} (x W_f + dt_bias)), in
    (b, 0) (Bailing's "safe" gate); W_f low-rank (d → c_h → h c_h: `f_a_proj`, `f_b_proj`,
    Kimi's) or whole (`f_proj`, Bailing's)."""

    def __init__(
        self, d_model: int, num_heads: int, head_dim: int, *, low_rank: bool, bound: float | None
    ) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.bound = num_heads, head_dim, bound
        inner = num_heads * head_dim
        if low_rank:
            self.f_a_proj = nn.Linear(d_model, head_dim, bias=False)
            self.f_b_proj = nn.Linear(head_dim, inner, bias=False)
        else:
            self.f_proj = nn.Linear(d_model, inner, bias=False)
        self.dt_bias = nn.Parameter(torch.zeros(inner))
        self.A_log = nn.Parameter(torch.zeros(1, 1, num_heads, 1))

    def forward(self, x: Tensor) -> Tensor:
        """(*batch, n, d) -> the log-decays (*batch, n, h, c_h), float32 at least."""
        if hasattr(self, "f_proj"):
            projected = self.f_proj(x)
        else:
            projected = self.f_b_proj(self.f_a_proj(x))
        dtype = torch.promote_types(x.dtype, torch.float32)  # float32 at least, float64 kept
        raw = (projected.to(dtype) + self.dt_bias.to(dtype)).unflatten(-1, (self.num_heads, -1))
        rate = self.A_log.to(dtype).exp().reshape(self.num_heads, 1)  # e^{A_log}, one per head
        if self.bound is not None:
            return self.bound * torch.sigmoid(rate * raw)
        return -rate * F.softplus(raw)


class GatedNorm(nn.Module):
    """RMSNorm of each head's output (its gains `weight`, c_h of them), times σ(gate): in
    float32 at least (float64 kept), returned in the input's dtype."""

    def __init__(self, head_dim: int, *, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))
        self.eps = eps

    def forward(self, o: Tensor, gate: Tensor) -> Tensor:
        dtype = torch.promote_types(o.dtype, torch.float32)  # float32 at least, float64 kept
        found = o.to(dtype)
        normed = found * torch.rsqrt(found.square().mean(-1, keepdim=True) + self.eps)
        return (self.weight.to(dtype) * normed * torch.sigmoid(gate.to(dtype))).to(o.dtype)


class KimiDeltaAttention(nn.Module):
    """Kimi Linear's KDA layer (the module docstring).

    Args:
        d_model: d, the input's and the output's width.
        num_heads: h, the heads (of the queries, keys and values alike).
        head_dim: c_h, the width of each head.
        conv_size: the width of the causal depthwise convolution on q, k, v.
        norm_eps: the ε of the gated RMSNorm.
        chunk_size: the chunked form's C, the tokens of a chunk; None: the recurrence, token by
            token (what a one-token call always runs).
        low_rank: the forget and output gates' projections through c_h (Kimi Linear's
            `f_a_proj`/`f_b_proj`, `g_a_proj`/`g_b_proj`); False: whole (`f_proj`, `g_proj`:
            Bailing's hybrid layers).
        decay_bound: the bounded forget gate's lower bound b < 0, its log-decays
            b σ(e^{A_log} (x W_f + dt_bias)) in (b, 0) (Bailing's `kda_lower_bound` with
            `kda_safe_gate`); None: Kimi's −e^{A_log} softplus(x W_f + dt_bias).

    Raises:
        ValueError: when d_model, num_heads, head_dim, conv_size or chunk_size is not a positive
            int, or decay_bound is not negative.
    """

    def __init__(
        self,
        d_model: int,
        *,
        num_heads: int,
        head_dim: int,
        conv_size: int = 4,
        norm_eps: float = 1e-6,
        chunk_size: int | None = 64,
        low_rank: bool = True,
        decay_bound: float | None = None,
    ) -> None:
        super().__init__()
        where = "KimiDeltaAttention"
        check_positive(
            where, d_model=d_model, num_heads=num_heads, head_dim=head_dim, conv_size=conv_size
        )
        if chunk_size is not None:
            check_positive(where, chunk_size=chunk_size)
        self.num_heads, self.head_dim, self.chunk_size = num_heads, head_dim, chunk_size
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        self.conv1d = nn.Conv1d(3 * inner, 3 * inner, conv_size, groups=3 * inner, bias=False)
        if decay_bound is not None and not decay_bound < 0:
            raise ValueError(f"{where}: decay_bound must be negative, got {decay_bound}")
        self.forget_gate = ForgetGate(
            d_model, num_heads, head_dim, low_rank=low_rank, bound=decay_bound
        )
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        if low_rank:
            self.g_a_proj = nn.Linear(d_model, head_dim, bias=False)
            self.g_b_proj = nn.Linear(head_dim, inner, bias=False)
        else:
            self.g_proj = nn.Linear(d_model, inner, bias=False)
        self.o_norm = GatedNorm(head_dim, eps=norm_eps)
        self.o_proj = nn.Linear(inner, d_model, bias=False)
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
        return continued_from_cache(self, x, "KimiDeltaAttention.forward", 3)

    def mixed(self, x: Tensor) -> Tensor:
        """X W_q, X W_k and X W_v side by side: the convolution's inputs.

        Args:
            x: the input X, `(*batch, n, d)`.

        Returns:
            The projections, `(*batch, n, 3 h c_h)`.
        """
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)

    def heads(self, t: Tensor) -> Tensor:
        """t split into the h heads, the heads before the tokens.

        Args:
            t: `(*batch, n, h c_h)`.

        Returns:
            `(*batch, h, n, c_h)`.
        """
        return t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(-3, -2)

    def parts(
        self, x: Tensor, past: Tensor | None = None, mixed: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """What the rule reads from x, before the L2 norm and the scale.

        Args:
            x: the input X, `(*batch, n, d)`.
            past: the convolution's last inputs before x, `(*batch, conv_size − 1, 3 h c_h)`;
                None for a new sequence (zeros).
            mixed: `self.mixed(x)`, if the caller has it already; None: computed here.

        Returns:
            The tuple (q, k, v, g, β, past): q, k, v `(*batch, h, n, c_h)`, the log-decays g
                `(*batch, h, n, c_h)` (float32 at least), β `(*batch, h, n)`, and the
                convolution's last inputs after x, `(*batch, conv_size − 1, 3 h c_h)`.
        """
        mixed, past = convolved(self.conv1d, self.mixed(x) if mixed is None else mixed, past)
        q, k, v = (self.heads(t) for t in mixed.chunk(3, dim=-1))
        g = self.forget_gate(x).transpose(-3, -2)
        beta = torch.sigmoid(self.b_proj(x)).transpose(-2, -1)
        return q, k, v, g, beta, past

    def finished(self, x: Tensor, o: Tensor) -> Tensor:
        """The layer's output from the rule's o: each head's RMSNorm times σ(X W_ga W_gb), then
        W_o.

        Args:
            x: the input X, `(*batch, n, d)`, which the gate reads.
            o: the rule's output, `(*batch, h, n, c_h)`.

        Returns:
            The output, `(*batch, n, d)`, in x's dtype.
        """
        gates = self.gate_logits(x).unflatten(-1, (self.num_heads, self.head_dim))
        return self.o_proj(self.o_norm(o.transpose(-3, -2), gates).flatten(-2).to(x.dtype))

    def gate_logits(self, x: Tensor) -> Tensor:
        """x W_g: the output gate's logits, through c_h (`low_rank`) or whole.

        Args:
            x: the input X, `(*batch, n, d)`.

        Returns:
            The logits, `(*batch, n, h c_h)`.
        """
        if hasattr(self, "g_proj"):
            return self.g_proj(x)
        return self.g_b_proj(self.g_a_proj(x))

    def continued(
        self, x: Tensor, state: Tensor | None, past: Tensor | None, mixed: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The output on x after a sequence summed up by `state` and `past`.

        Args:
            x: the new tokens, `(*batch, n, d)`.
            state: the state S after the tokens before x, `(*batch, h, c_h, c_h)`; None for a
                new sequence.
            past: the convolution's last inputs before x, `(*batch, conv_size − 1, 3 h c_h)`;
                None for a new sequence.
            mixed: `self.mixed(x)`, if the caller has it already; None: computed here.

        Returns:
            The tuple (output, state, past) after x: the output `(*batch, n, d)`, the state S
                `(*batch, h, c_h, c_h)`, and the convolution's last inputs
                `(*batch, conv_size − 1, 3 h c_h)`.
        """
        q, k, v, g, beta, past = self.parts(x, past, mixed)
        q = l2_normalised(q) / math.sqrt(self.head_dim)
        n = x.shape[-2]
        o, state = linear.kimi_delta_rule(
            q,
            l2_normalised(k),
            v,
            g,
            beta,
            chunk_size=None if n == 1 or self.chunk_size is None else self.chunk_size,
            initial_state=state,
            return_state=True,
        )  # pyright: ignore[reportGeneralTypeIssues]
        return self.finished(x, o), state, past
