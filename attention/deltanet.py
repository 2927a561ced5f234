r"""Gated DeltaNet, the linear-attention layer of hybrid models (the book's ch04/08_deltanet; Qwen
3.5's and Qwen3-Next's `linear_attention` layers; Yang et al., *Gated Delta Networks*, 2025).

From x (*batch, n, d_in), with h heads of width c_h (keys and queries: h_k heads of width c_k,
each serving h / h_k consecutive heads of values):

    Q, K, V = X W_q, X W_k, X W_v          (then, with `conv_size`, a causal depthwise
                                           convolution of each channel and SiLU: Qwen 3.5)
    q_t ← q_t / (‖q_t‖ √c_k),  k_t ← k_t / ‖k_t‖        (the L2 norm, and the scale on q)
    β_t = σ(x_t W_β)                                    (the write strength)
    g_t = −e^{A_log} softplus(x_t W_α + dt_bias)         (the log-decay, α_t = e^{g_t} ≤ 1)
    o_t = S_tᵀ q_t,  S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ
    out = (RMSNorm(o) ∘ SiLU(X W_gate)) W_o

per head (`attention.linear.gated_delta_rule`, chunked in training, token by token when
generating). The book's class computes β per channel of the values (W_β: d_in → d_out, so each
value channel j has its own β_{t,j}: the state's columns are d_v independent delta rules);
Qwen 3.5's per head (W_β: d_in → h): `beta="channel"` or `"head"`.

`GatedDeltaNet(d_in, d_out, dropout, num_heads, qkv_bias=False)` is the book's class, with its
parameter names (W_query, W_key, W_value, W_gate, W_beta, W_alpha, dt_bias, A_log, norm,
out_proj): the book's weights load into it and it gives the book's outputs. The keywords build
Qwen 3.5's layer (`attention.huggingface.from_hf` reads one). `forward(x, use_cache=True)` keeps
the state S (and the convolution's last inputs) between calls, as the book's KV-cache classes
keep their keys: each new token then costs O(d_k d_v) a head, whatever its position.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from . import linear
from ._arguments import check_positive, check_probability
from ._checks import checked_forward
from ._convolution import convolved
from ._shapes import ShapeError
from ._weights import named_weights

__all__ = ["GatedDeltaNet", "l2_normalised"]

BETAS = ("channel", "head")

#: The weights every call checks, in the letters of the docstring: d the input's width, e the
#: queries' and keys' (h_k c_k), c the values' (h c_h), b β's (c or h), h the heads, c_out the
#: output's.
_E = Float[Tensor, " e"] | None
_C = Float[Tensor, " c"] | None
_O = Float[Tensor, " c_out"] | None
_NAMES = (
    ("W_query.weight", Float[Tensor, "e d"]),  # nn.Linear stores Wᵀ
    ("W_query.bias", _E),
    ("W_key.weight", Float[Tensor, "e d"]),
    ("W_key.bias", _E),
    ("W_value.weight", Float[Tensor, "c d"]),
    ("W_value.bias", _C),
    ("W_gate.weight", Float[Tensor, "c d"]),
    ("W_beta.weight", Float[Tensor, "b d"]),
    ("W_alpha.weight", Float[Tensor, "h d"]),
    ("dt_bias", Float[Tensor, " h"]),
    ("A_log", Float[Tensor, " h"]),
    ("out_proj.weight", Float[Tensor, "c_out c"]),
    ("out_proj.bias", _O),
)


_weights = named_weights(_NAMES)


def l2_normalised(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / √(‖x‖² + ε) over the last dimension (the book's and transformers' `l2norm`)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet (the module docstring): the book's ch04/08 class, and Qwen 3.5's layer.

    The positional parameters are the book's; the keyword options build Qwen 3.5's layer.

    Args:
        d_in: d, the width of each input row.
        d_out: h c_h, the width of the values and of the output gate (and of the output, unless
            `out_features`); a multiple of num_heads.
        dropout: the rate of dropout on the gated heads before W_o, in training mode, in [0, 1).
        num_heads: h, the heads of the values (one delta rule each).
        qkv_bias: give `W_query`, `W_key` and `W_value` biases.
        key_heads: h_k, the heads of the queries and keys, each serving h / h_k consecutive value
            heads (h must be a multiple); None: h.
        key_dim: c_k, the width of a query or key head; None: c_h = d_out / h.
        beta: "channel" for the book's β per value channel (`W_beta`: d_in → d_out), "head" for
            one per head (Qwen 3.5's, `W_beta`: d_in → h).
        conv_size: the width of the causal depthwise convolution on q, k, v (Qwen 3.5's); None:
            no convolution (the book's).
        out_features: the width of W_o's output; None: d_out.
        out_bias: give W_o (`out_proj`) a bias (the book's True).
        norm_eps: the ε of each head's RMSNorm.
        chunk_size: the chunked form's C, the tokens of a chunk; None: the recurrence, token by
            token (what a one-token call always runs).

    Raises:
        ValueError: when d_in, d_out, num_heads, key_heads, key_dim, conv_size or chunk_size is
            not a positive int, dropout is not in [0, 1), or beta is neither "channel" nor
            "head".
        ShapeError: when num_heads does not divide d_out, or is not a multiple of key_heads.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        *,
        key_heads: int | None = None,
        key_dim: int | None = None,
        beta: str = "channel",
        conv_size: int | None = None,
        out_features: int | None = None,
        out_bias: bool = True,
        norm_eps: float = 1e-6,
        chunk_size: int | None = 64,
    ) -> None:
        super().__init__()
        where = "GatedDeltaNet"
        check_positive(where, d_in=d_in, d_out=d_out, num_heads=num_heads)
        check_probability(where, dropout=dropout)
        if d_out % num_heads:
            raise ShapeError(f"{where}: d_out={d_out} is not divisible by num_heads={num_heads}")
        key_heads = num_heads if key_heads is None else key_heads
        key_dim = d_out // num_heads if key_dim is None else key_dim
        check_positive(where, key_heads=key_heads, key_dim=key_dim)
        if num_heads % key_heads:
            raise ShapeError(
                f"{where}: num_heads={num_heads} is not a multiple of key_heads={key_heads}"
            )
        if beta not in BETAS:
            raise ValueError(f"{where}: beta must be one of {BETAS}, got beta={beta!r}")
        for name, value in (("conv_size", conv_size), ("chunk_size", chunk_size)):
            if value is not None:
                check_positive(where, **{name: value})
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.key_heads, self.key_dim, self.beta, self.chunk_size = (
            key_heads,
            key_dim,
            beta,
            chunk_size,
        )
        self.W_query = nn.Linear(d_in, key_heads * key_dim, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, key_heads * key_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_gate = nn.Linear(d_in, d_out, bias=False)
        self.W_beta = nn.Linear(d_in, d_out if beta == "channel" else num_heads, bias=False)
        self.W_alpha = nn.Linear(d_in, num_heads, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(num_heads))
        self.A_log = nn.Parameter(torch.zeros(num_heads))
        channels = 2 * key_heads * key_dim + d_out
        self.conv1d = (
            None
            if conv_size is None
            else nn.Conv1d(channels, channels, conv_size, groups=channels, bias=False)
        )
        self.norm = nn.RMSNorm(self.head_dim, eps=norm_eps)
        self.out_proj = nn.Linear(d_out, d_out if out_features is None else out_features, out_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("cache_state", None, persistent=False)
        self.register_buffer("cache_conv", None, persistent=False)
        self.ptr_current_pos = 0

    def reset_cache(self) -> None:
        """Forget the state: the next `forward(x, use_cache=True)` starts a new sequence."""
        self.cache_state, self.cache_conv = None, None
        self.ptr_current_pos = 0

    @checked_forward(_weights)
    def forward(
        self, x: Float[Tensor, "*batch n d"], use_cache: bool = False
    ) -> Float[Tensor, "*batch n c_out"]:
        """The layer's output on x; with `use_cache=True`, continuing the sequence of the calls
        since `reset_cache()`.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in.
            use_cache: start from the state S (and the convolution's last inputs) that the calls
                since `reset_cache()` kept, and keep them after x (generation: each new token
                costs the same, whatever its position); False: x is a whole sequence, and the
                cache is neither read nor changed.

        Returns:
            The output, `(*batch, n, out_features)` (out_features = d_out by default).

        Raises:
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, or, with `use_cache=True`,
                its batch is not the cached state's (call `reset_cache()` first).
            DtypeError: when x is not a float tensor of the weights' dtype.
            DeviceError: when x is not on the weights' device.
        """
        if not use_cache:
            out, _, _ = self.continued(x, None, None)
            return out
        state, conv = self.cache_state, self.cache_conv
        if state is not None and state.shape[:-3] != x.shape[:-2]:
            raise ShapeError(
                f"GatedDeltaNet.forward: x has batch {tuple(x.shape[:-2])} but the cache holds "
                f"{tuple(state.shape[:-3])}; call reset_cache() to start another sequence"
            )
        out, state, conv = self.continued(x, state, conv)
        # what the next call reads, without the graph that made it: generation, not training
        self.cache_state = state.detach()
        self.cache_conv = None if conv is None else conv.detach()
        self.ptr_current_pos += x.shape[-2]
        return out

    def mixed(self, x: Tensor) -> Tensor:
        """X W_q, X W_k and X W_v side by side, the convolution's inputs (Qwen 3.5's `mixed_qkv`).

        Args:
            x: the input X, `(*batch, n, d_in)`.

        Returns:
            The projections, `(*batch, n, 2 h_k c_k + d_out)`.
        """
        return torch.cat([self.W_query(x), self.W_key(x), self.W_value(x)], dim=-1)

    def parts(
        self, x: Tensor, past: Tensor | None = None, mixed: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """What the rule reads from x, before the L2 norm and the scale.

        Args:
            x: the input X, `(*batch, n, d_in)`.
            past: the convolution's last inputs before x, `(*batch, conv_size − 1,
                2 h_k c_k + d_out)`; None for a new sequence (zeros). Unused without conv_size.
            mixed: `self.mixed(x)`, if the caller has it already; None: computed here.

        Returns:
            The tuple (q, k, v, g, β, past): q and k `(*batch, h, n, c_k)` (each key head
                repeated for the value heads it serves), v `(*batch, h, n, c_h)`, the log-decays
                g `(*batch, h, n)` in float32, β `(*batch, n, h c_h)` (beta="channel") or
                `(*batch, n, h)` (beta="head"), and the convolution's last inputs after x (None
                without conv_size).
        """
        mixed, past = self.convolved(self.mixed(x) if mixed is None else mixed, past)
        qk = self.key_heads * self.key_dim
        q, k, v = mixed[..., :qk], mixed[..., qk : 2 * qk], mixed[..., 2 * qk :]
        q, k = (self.heads(part, self.key_dim) for part in (q, k))
        if self.key_heads != self.num_heads:  # each key head serves consecutive value heads
            q, k = (t.repeat_interleave(self.num_heads // self.key_heads, dim=-3) for t in (q, k))
        beta = torch.sigmoid(self.W_beta(x))
        g = -self.A_log.float().exp() * F.softplus(self.W_alpha(x).float() + self.dt_bias)
        return q, k, self.heads(v, self.head_dim), g.transpose(-2, -1), beta, past

    def finished(self, x: Tensor, o: Tensor) -> Tensor:
        """The layer's output from the rule's o: the RMSNorm of each head, the SiLU gate, W_o.

        Args:
            x: the input X, `(*batch, n, d_in)`, which the gate reads.
            o: the rule's output, `(*batch, h, n, c_h)`.

        Returns:
            The output, `(*batch, n, out_features)`.
        """
        o = self.norm(o.transpose(-3, -2))  # (*batch, n, h, c_h)
        gate = self.W_gate(x).unflatten(-1, (self.num_heads, self.head_dim))
        return self.out_proj(self.dropout((o * F.silu(gate)).flatten(-2)))

    def continued(
        self, x: Tensor, state: Tensor | None, past: Tensor | None, mixed: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The output on x after a sequence summed up by `state` and `past`.

        Args:
            x: the new tokens, `(*batch, n, d_in)`.
            state: the state S after the tokens before x, `(*batch, h, c_k, c_h)`; None for a
                new sequence.
            past: the convolution's last inputs before x, `(*batch, conv_size − 1,
                2 h_k c_k + d_out)`; None for a new sequence, or without conv_size.
            mixed: `self.mixed(x)`, if the caller has it already; None: computed here.

        Returns:
            The tuple (output, state, past) after x: the output `(*batch, n, out_features)`, the
                state S `(*batch, h, c_k, c_h)`, and the convolution's last inputs (None without
                conv_size).
        """
        q, k, v, g, beta, past = self.parts(x, past, mixed)
        q = l2_normalised(q) / math.sqrt(self.key_dim)
        o, state = self.rule(q, l2_normalised(k), v, g, beta, state)
        return self.finished(x, o), state, past

    def heads(self, x: Tensor, width: int) -> Tensor:
        """x split into heads of `width` features, the heads before the tokens.

        Args:
            x: `(*batch, n, heads · width)`.
            width: the features of a head.

        Returns:
            `(*batch, heads, n, width)`.
        """
        return x.unflatten(-1, (-1, width)).transpose(-3, -2)

    def convolved(self, mixed: Tensor, past: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The causal depthwise convolution of each channel of q, k, v and SiLU (Qwen 3.5's),
        continuing from `past`; unchanged without `conv_size`.

        Args:
            mixed: the convolution's inputs (`self.mixed(x)`), `(*batch, n, channels)` with
                channels = 2 h_k c_k + d_out.
            past: the inputs before these, `(*batch, conv_size − 1, channels)`; None for a new
                sequence (zeros).

        Returns:
            The pair (output, past): the convolved channels `(*batch, n, channels)` and the last
                conv_size − 1 inputs `(*batch, conv_size − 1, channels)`; without conv_size,
                (mixed, None).
        """
        if self.conv1d is None:
            return mixed, None
        return convolved(self.conv1d, mixed, past)

    def rule(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The gated delta rule on the heads, β per head or per value channel (each channel its
        own rule, the columns of S): chunked by chunk_size, token by token for one token or
        without it.

        Args:
            q: the queries, `(*batch, h, n, c_k)`, L2-normalised and scaled.
            k: the keys, `(*batch, h, n, c_k)`, L2-normalised.
            v: the values, `(*batch, h, n, c_h)`.
            g: the log-decays, `(*batch, h, n)`.
            beta: the write strengths, `(*batch, n, h)` (beta="head") or `(*batch, n, h c_h)`
                (beta="channel").
            state: S before these tokens, `(*batch, h, c_k, c_h)`; None for a new sequence.

        Returns:
            The pair (o, S): the output `(*batch, h, n, c_h)` and the state after the tokens
                `(*batch, h, c_k, c_h)`.
        """
        n = q.shape[-2]
        size = None if n == 1 or self.chunk_size is None else self.chunk_size
        if self.beta == "head":
            return linear.gated_delta_rule(
                q,
                k,
                v,
                g,
                beta.transpose(-2, -1),
                chunk_size=size,
                initial_state=state,
                return_state=True,
            )  # pyright: ignore[reportReturnType]
        # one rule per value channel j: v[..., j] with β[..., j], the state's column j
        beta = self.heads(beta, self.head_dim).movedim(-1, -2)  # (*batch, h, c_h, n)
        per = lambda t: t.unsqueeze(-3).expand(*t.shape[:-2], v.shape[-1], *t.shape[-2:])  # noqa: E731
        start = None if state is None else state.movedim(-1, -2).unsqueeze(-1)
        o, state = linear.gated_delta_rule(
            per(q),
            per(k),
            v.movedim(-1, -2).unsqueeze(-1),
            g.unsqueeze(-2).expand_as(beta),
            beta,
            chunk_size=size,
            initial_state=start,
            return_state=True,
        )  # pyright: ignore[reportGeneralTypeIssues]
        return o.squeeze(-1).movedim(-2, -1), state.squeeze(-1).movedim(-2, -1)
