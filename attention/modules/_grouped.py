"""The book's grouped-query attention class (its Llama 3 and Qwen 3, `llms_from_scratch.llama3`
and `.qwen3`), with the RMS norm of its QK-norm, checked. The formulas: `attention.grouped`.
"""

from typing import Literal

import torch
import torch.nn as nn
from jaxtyping import Bool, Float
from torch import Tensor

from .. import _core
from .. import mods as M
from .._arguments import (
    check_alibi,
    check_cap,
    check_float_dtype,
    check_heads,
    check_positive,
    check_window,
)
from .._checks import Weights, checked_forward
from .._masks import book_mask
from .._shapes import OwnDtype
from .._weights import parameter, submodule
from ..rope import check_tables
from ._common import MultiHeadModule, check_sinks, forward_layer, set_score_options

__all__ = ["RMSNorm", "GroupedQueryAttention", "check_groups"]


def check_groups(where: str, heads: int, groups: int, names: tuple[str, str]) -> None:
    """ValueError unless the groups divide the heads (each group serves heads / groups)."""
    if heads % groups:
        raise ValueError(
            f"{where}: {names[0]}={heads} is not divisible by {names[1]}={groups}; each "
            f"key/value group serves {names[0]} / {names[1]} query heads"
        )


class RMSNorm(nn.Module):
    """The book's Qwen 3 `RMSNorm` (`qwen3.RMSNorm`): `scale` g (and `shift` with `bias`), over
    the last axis, float16/bfloat16 normalised in float32 unless `qwen3_compatible=False`; with
    `gains=False`, no g (Llama 4's `L2Norm`, despite its name an RMS norm without gains).

    $$y = x / \\sqrt{\\operatorname{mean}(x^2) + \\varepsilon} \\circ g \\;(+\\, b)$$

    Args:
        emb_dim: the width of the last axis, normalised (that of g and b).
        eps: ε, added to the mean square.
        bias: learn a shift b (the parameter `shift`, zeros at first).
        qwen3_compatible: normalise float16 and bfloat16 inputs in float32, as the book's Qwen 3
            does; False: in their own dtype.
        gains: learn gains g (the parameter `scale`, ones at first); False for none.

    Raises:
        ValueError: when emb_dim is not a positive int.
    """

    def __init__(
        self,
        emb_dim: int,
        eps: float = 1e-6,
        bias: bool = False,
        qwen3_compatible: bool = True,
        *,
        gains: bool = True,
    ):
        check_positive("RMSNorm", emb_dim=emb_dim)
        super().__init__()
        self.eps = eps
        self.qwen3_compatible = qwen3_compatible
        # without gains: Llama 4's `L2Norm` on its RoPE layers' queries and keys (an RMS norm)
        self.scale = nn.Parameter(torch.ones(emb_dim)) if gains else None
        self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

    @checked_forward(lambda m: (_NORM_NAMES, (parameter(m, "scale"), parameter(m, "shift"))))
    def forward(self, x: Float[Tensor, "*batch n c"]) -> Float[Tensor, "*batch n c"]:
        """Each row of x normalised.

        Args:
            x: the rows to normalise, `(*batch, n, c)` with c = emb_dim.

        Returns:
            The normalised rows, `(*batch, n, c)`, in x's dtype.

        Raises:
            ShapeError: when x is not `(*batch, n, c)` with c = emb_dim.
            DtypeError: when x is not a float tensor.
            DeviceError: when x is not on the gains' device.
        """
        return _core.rms_norm(x, self.scale, self.eps, self.shift, self.qwen3_compatible)


#: The gains may stay in float32 beside bfloat16 inputs (the book's Qwen 3 creates them so).
_NORM_NAMES = (
    ("scale", OwnDtype[Float[Tensor, " c"]] | None),
    ("shift", OwnDtype[Float[Tensor, " c"]] | None),
)


#: The module's tensors for the checks of its forward, named as in its state_dict.
_GQA_NAMES = (
    ("W_query.weight", Float[Tensor, "c d"]),  # nn.Linear stores W_qᵀ: (h·c_h, d)
    ("W_key.weight", Float[Tensor, "c_kv d"]),  # (g·c_h, d)
    ("W_value.weight", Float[Tensor, "c_kv d"]),
    ("out_proj.weight", Float[Tensor, "c_out c"]),
    ("q_norm.scale", OwnDtype[Float[Tensor, " q_width"]] | None),  # c_h, or h·c_h (whole)
    ("k_norm.scale", OwnDtype[Float[Tensor, " k_width"]] | None),  # c_h, or g·c_h
)


_GATED_GQA_NAMES = (("W_query.weight", Float[Tensor, "c2 d"]), *_GQA_NAMES[1:])  # (2h·c_h, d)


def _gqa_weights(module: nn.Module) -> Weights:
    linears = [submodule(module, name) for name in ("W_query", "W_key", "W_value", "out_proj")]
    norms = [getattr(module, name) for name in ("q_norm", "k_norm")]
    tensors = [parameter(linear, "weight") for linear in linears]
    tensors += [None if norm is None else parameter(norm, "scale") for norm in norms]
    return (_GATED_GQA_NAMES if module.gate else _GQA_NAMES), tuple(tensors)


class GroupedQueryAttention(MultiHeadModule):
    """The book's `GroupedQueryAttention` of llama3 and qwen3 in one class, checked, on the fused
    kernel's grouped-query path (K and V never repeated). Formulas: the module docstring.

    Constructed with either book's keywords (after d_in, all keyword-only: the two books order
    them differently):

    - the book's `llama3.GroupedQueryAttention(d_in, d_out, num_heads, num_kv_groups, dtype)`:
      head_dim = d_out / num_heads, `out_proj` d_out -> d_out, parameters created in its order
      (W_key, W_value, W_query, out_proj);
    - the book's `qwen3.GroupedQueryAttention(d_in, num_heads, num_kv_groups, head_dim=None,
      qk_norm=False, dtype=None)`: head_dim (default d_in / num_heads), `out_proj`
      num_heads·head_dim -> d_in, and with `qk_norm` the `RMSNorm`s `q_norm`, `k_norm` (eps 1e-6)
      over each head's queries and keys, before RoPE; `qk_norm="whole"`, the book's OLMo 3:
      `q_norm` over all num_heads·head_dim features of a row of Q, `k_norm` over the
      num_kv_groups·head_dim of K, before the heads are split (its `RMSNorm` names the gains
      `weight` where this one names them `scale`).

    The same `torch.manual_seed` gives the same parameters as the book's class, and its
    state_dicts load unchanged. `forward(x, blocked, cos, sin)` is the books' `forward(x, mask,
    cos, sin)`: `blocked` (n, n) is their mask, True where query m may NOT attend key p (named
    apart from this package's `mask`, where True = may attend); a row with nothing to attend
    gets zeros (the book's gets NaN). cos and sin are the tables of `compute_rope_params` (None,
    both: no RoPE). The weights and x share one dtype; cos, sin and the norms' gains may keep
    their own (the book's bfloat16 configurations keep them in float32, and rotate and
    normalise in float32).

    Beyond the books, keyword-only, as Hugging Face's configurations name them:
    `sliding_window`, `softcap`, `alibi`, `sinks`, `gate`, `query_pre_attn_scalar`,
    `qk_norm="l2"` and `mods`.

    Args:
        d_in: d, the width of each input row (and, in the qwen3 layout, of the output).
        num_heads: h, the query heads.
        num_kv_groups: g, the key/value groups, each serving h / g query heads; divides
            num_heads.
        d_out: the llama3 layout: the width h·c_h of Q and of the output; None for the qwen3
            layout. Not with head_dim.
        head_dim: c_h, the qwen3 layout's; None: d_out / num_heads, or d_in / num_heads without
            d_out.
        qk_norm: True for `RMSNorm`s `q_norm`, `k_norm` (eps 1e-6) over each head's queries and
            keys, before RoPE; ``"whole"`` (OLMo 3) for norms over all the features of a row of
            Q and of K, before the heads are split; ``"l2"`` (Llama 4's RoPE layers) for
            per-head norms without gains; False for none.
        dtype: the dtype of the linear layers' weights; None for torch's default.
        sliding_window: w: each query attends its last w tokens, causal whatever `blocked`
            says (Gemma's and GPT-OSS's local layers); None for none.
        softcap: κ, Gemma 2's logit softcapping: each scaled score ω̃ replaced by κ tanh(ω̃/κ);
            None for none.
        alibi: linear biases −μ_ℓ (m − p) added to head ℓ's scores, causal whatever `blocked`
            says: True for Press et al.'s slopes, a float tensor of h slopes `(h,)`, False for
            none.
        sinks: GPT-OSS's attention sinks, a learned logit per head in each row's softmax (the
            parameter `sinks`): True to draw them from N(0, 0.02²), a float tensor `(h,)` of
            initial logits, False for none.
        gate: Qwen 3.5's sigmoid output gate: `W_query` twice as wide, each head's queries then
            its gate's logits, the merged heads multiplied by their sigmoid before `out_proj`.
        query_pre_attn_scalar: Gemma 2's and 3's query scale 1/√query_pre_attn_scalar in place
            of 1/√c_h; None for 1/√c_h.
        mods: more modifications of the scores as objects (`attention.mods`: Llama 4's
            `Chunked` attention, causal whatever `blocked` says, `Temperature` tuning, a
            researcher's own), without tensors: the module's own tensors are its parameters.

    Raises:
        ValueError: when a size is not a positive int, num_kv_groups does not divide
            num_heads, num_heads does not divide d_out (or d_in, without d_out and head_dim),
            both d_out and head_dim are given, sliding_window is neither a positive int nor
            None, softcap or query_pre_attn_scalar is not a positive number, or a mod is a mask
            (`Causal`, `Window`) or carries a tensor.
        TypeError: when dtype is not a floating-point torch.dtype, qk_norm is not a bool,
            ``"whole"`` or ``"l2"``, gate is not a bool, alibi or sinks is neither a bool nor a
            float tensor, or a mod is not a `Modification`.
        ShapeError: when the tensor of alibi or sinks is not `(h,)`.
    """

    def __init__(
        self,
        d_in: int,
        *,
        num_heads: int,
        num_kv_groups: int,
        d_out: int | None = None,
        head_dim: int | None = None,
        qk_norm: bool | Literal["whole", "l2"] = False,
        dtype: torch.dtype | None = None,
        sliding_window: int | None = None,
        softcap: float | None = None,
        alibi: bool | Tensor = False,
        sinks: bool | Tensor = False,
        gate: bool = False,
        query_pre_attn_scalar: float | None = None,
        mods: tuple = (),
    ):
        where = "GroupedQueryAttention"
        check_positive(where, d_in=d_in, num_heads=num_heads, num_kv_groups=num_kv_groups)
        check_float_dtype(where, dtype)
        if not (isinstance(qk_norm, bool) or qk_norm in ("whole", "l2")):
            raise TypeError(
                f"{where}: qk_norm must be a bool, 'whole' or 'l2', got qk_norm={qk_norm!r}"
            )
        check_window(where, "sliding_window", sliding_window)
        check_cap(where, "softcap", softcap)
        check_alibi(where, alibi, num_heads)
        check_sinks(where, sinks, num_heads)
        check_groups(where, num_heads, num_kv_groups, ("num_heads", "num_kv_groups"))
        if d_out is not None and head_dim is not None:
            raise ValueError(
                f"{where}: give d_out (the book's llama3) or head_dim (its qwen3), not both; "
                f"got d_out={d_out}, head_dim={head_dim}"
            )
        if head_dim is None:  # from d_out (llama3) or d_in (qwen3)
            name, total = ("d_out", d_out) if d_out is not None else ("d_in", d_in)
            check_positive(where, **{name: total})
            check_heads(where, num_heads, name, **{name: total})
            head_dim = total // num_heads
        check_positive(where, head_dim=head_dim)
        width = head_dim
        super().__init__()
        self.num_heads, self.num_kv_groups = num_heads, num_kv_groups
        self.group_size = num_heads // num_kv_groups
        self.head_dim, self.d_out = width, num_heads * width
        kv = num_kv_groups * width
        if d_out is not None:  # the book's llama3, in its order
            self.W_key = nn.Linear(d_in, kv, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, kv, bias=False, dtype=dtype)
            self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
            self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)
        else:  # the book's qwen3
            self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
            self.W_key = nn.Linear(d_in, kv, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, kv, bias=False, dtype=dtype)
            self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)
        if qk_norm:
            whole = qk_norm == "whole"  # OLMo 3: the whole rows of Q and K
            gains = qk_norm != "l2"  # Llama 4's RoPE layers: no gains
            self.q_norm: RMSNorm | None = RMSNorm(
                self.d_out if whole else width, eps=1e-6, gains=gains
            )
            self.k_norm: RMSNorm | None = RMSNorm(kv if whole else width, eps=1e-6, gains=gains)
        else:
            self.q_norm = self.k_norm = None
        self.sliding_window = sliding_window
        set_score_options(
            self,
            where,
            softcap=softcap,
            alibi=alibi,
            sinks=sinks,
            gate=gate,
            query_pre_attn_scalar=query_pre_attn_scalar,
            mods=mods,
        )

    @checked_forward(_gqa_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        blocked: Bool[Tensor, "n n"] | None = None,
        cos: OwnDtype[Float[Tensor, "n_ctx c_r"]] | None = None,
        sin: OwnDtype[Float[Tensor, "n_ctx c_r"]] | None = None,
    ) -> Float[Tensor, "*batch n c_out"]:
        """The context vectors C of X, the books' `forward(x, mask, cos, sin)`.

        Args:
            x: the input X, `(*batch, n, d)` with d = d_in.
            blocked: the books' mask, `(n, n)`: True where query m may NOT attend key p; None
                for none. A query left with no key gets a row of zeros.
            cos: RoPE's cosines, from `compute_rope_params`, `(n_ctx, c_r)` with n_ctx ≥ n and
                c_r = head_dim, or fewer (even) to rotate only each head's first c_r features
                (partial RoPE: GPT-NeoX, Qwen 3.5); None, with sin, for no RoPE.
            sin: RoPE's sines, as cos.

        Returns:
            C, `(*batch, n, c_out)`, c_out the book's output width (llama3's d_out, qwen3's
                d_in).

        Raises:
            ValueError: when only one of cos and sin is given.
            ShapeError: when x is not `(*batch, n, d)` with d = d_in, blocked is not `(n, n)`,
                or the tables have fewer than n rows, more columns than head_dim, or an odd
                number of them.
            DtypeError: when x is not a float tensor of the weights' dtype, or blocked is not
                bool.
            DeviceError: when x, blocked, cos or sin is not on the weights' device.
        """
        where = "GroupedQueryAttention.forward"
        n = x.shape[-2]
        if (cos is None) != (sin is None):
            raise ValueError(f"{where}: give cos and sin together (or neither, for no RoPE)")
        if cos is not None:
            width = ("head_dim", self.head_dim)
            check_tables(where, "cos and sin", cos.shape[-1], cos.shape[0], width, n)
        causal, window, allowed = book_mask(blocked, n)
        if any(mod.needs_causal for mod in self.score_mods):
            causal = True  # ALiBi's bias is the causal one; Llama 4's chunks are causal
        if self.sliding_window is not None:  # a window is causal, and the narrower one holds
            causal = True
            window = self.sliding_window if window is None else min(window, self.sliding_window)
        rope = None if cos is None or sin is None else (cos, sin)  # both or neither, above
        masks = M.modifications(causal=causal, window=window)
        return forward_layer(self, x, masks=masks, mask=allowed, rope=rope)
