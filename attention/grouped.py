"""Grouped-query attention (the book's Llama 3 and Qwen 3), with RoPE and QK-norm, checked.

With X (n×d), h query heads of width c_h and g key/value groups (g divides h):

$$Q = X W_q \\;(d \\times h c_h),\\quad K = X W_k,\\; V = X W_v \\;(d \\times g c_h),\\qquad
  C = \\big[A_1 V_{\\gamma(1)} \\,|\\, \\cdots \\,|\\, A_h V_{\\gamma(h)}\\big] W_o,$$
$$A_\\ell = \\operatorname{softmax}\\!\\big(\\mathring{Q}_\\ell
  \\mathring{K}_{\\gamma(\\ell)}^\\top / \\sqrt{c_h}\\big),\\qquad
  \\gamma(\\ell) = \\lfloor (\\ell - 1)\\, g / h \\rfloor + 1,$$

head ℓ (1-based) reading key/value group γ(ℓ) (the book's `repeat_interleave`). Q̊ and K̊ are
each head's queries and keys, RMS-normalised with learnable gains (QK-norm, Qwen 3), then
rotated by their positions (RoPE, `attention.rope`). g = h is multi-head attention, g = 1
multi-query attention.

The fast path is the fused kernel's own grouped-query support (`enable_gqa=True`), which never
repeats K and V; its backward is `attention._fused`'s exact one, group by group (`_grouped`).
"""

import torch
import torch.nn as nn
from jaxtyping import Bool, Float
from torch import Tensor

from . import _core, _grouped
from ._arguments import check_flag, check_heads, check_positive
from ._checks import Weights, checked, checked_forward
from ._masks import hide_unattended, silence_isolated
from ._shapes import ShapeError, own_dtype
from ._weights import parameter, submodule
from .rope import _even_width, compute_rope_params, rotate

__all__ = [
    "rms_norm",
    "expand_groups",
    "grouped_query_attention",
    "RMSNorm",
    "GroupedQueryAttention",
]


@checked
def rms_norm(
    x: Float[Tensor, "*batch n c"], gain: own_dtype(Float[Tensor, " c"]), eps: float = 1e-6
) -> Float[Tensor, "*batch n c"]:
    """RMS norm of each row over its c features, times learnable gains g:

    $$\\operatorname{rms\\_norm}(x)_{m,j} = \\frac{x_{m,j}}
      {\\sqrt{\\tfrac{1}{c}\\sum_{i=1}^{c} x_{m,i}^2 + \\varepsilon}}\\; g_j$$

    (float16 and bfloat16 computed in float32, as the book's Qwen 3 `RMSNorm`).

    >>> rms_norm(torch.tensor([[3.0, 4.0]]), torch.ones(2), eps=0.0)  # rms of (3, 4) is √12.5
    tensor([[0.8485, 1.1314]])
    """
    if not eps >= 0:
        raise ValueError(f"rms_norm: eps must be non-negative, got eps={eps!r}")
    return _grouped.rms_norm(x, gain, eps)


@checked
def expand_groups(
    t: Float[Tensor, "*batch g n c_h"], heads: int
) -> Float[Tensor, "*batch h n c_h"]:
    """The g key (or value) groups given to h heads: head ℓ gets group ⌊(ℓ−1)·g/h⌋ + 1, i.e.
    each group repeated h/g times in place (the book's `repeat_interleave(h // g, dim=1)`).
    The reference formulation; the fast path never builds this.

    (*batch, g, n, c_h) -> (*batch, h, n, c_h)
    """
    check_positive("expand_groups", heads=heads)
    if heads % t.shape[-3]:
        raise ValueError(
            f"expand_groups: heads={heads} is not divisible by g={t.shape[-3]} (the groups of t)"
        )
    return _grouped.expand_groups(t, heads)


def _check_groups(where: str, heads: int, groups: int, names: tuple[str, str]) -> None:
    if heads % groups:
        raise ValueError(
            f"{where}: {names[0]}={heads} is not divisible by {names[1]}={groups}; each "
            f"key/value group serves {names[0]} / {names[1]} query heads"
        )


@checked
def grouped_query_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c_kv"],
    w_v: Float[Tensor, "d c_kv"],
    w_o: Float[Tensor, "c c_out"] | None = None,
    *,
    heads: int = 1,
    groups: int | None = None,
    causal: bool = False,
    theta_base: float | None = None,
    q_gain: own_dtype(Float[Tensor, " c_h"]) | None = None,
    k_gain: own_dtype(Float[Tensor, " c_h"]) | None = None,
    eps: float = 1e-6,
    mask: Bool[Tensor, "*batch n n"] | None = None,
) -> Float[Tensor, "*batch n c_out"]:
    """Grouped-query attention, every composition of the module docstring in one function.

    x: X (n, d) or (*batch, n, d). w_q: W_q (d, h·c_h); w_k, w_v: (d, g·c_h); w_o: W_o
    (h·c_h, c_out), or None for no output projection (then c_out = h·c_h: with heads=1, plain
    single-head attention). heads: h; groups: g (None: g = h). theta_base: β of RoPE, applied to
    each head's queries and keys at positions 0 … n−1 (None: no RoPE). q_gain, k_gain: (c_h,)
    gains of QK-norm, RMS norm of each head's queries and keys with `eps`, before RoPE (Qwen 3's
    order; None: no QK-norm). causal: query m attends keys p ≤ m; mask (*batch, n, n): True where
    query m may attend key p. Scale 1/√c_h. Returns C (*batch, n, c_out).

    >>> X = torch.rand(5, 8)
    >>> W_q, W_kv, W_o = torch.rand(8, 16), torch.rand(8, 8), torch.rand(16, 8)
    >>> grouped_query_attention(X, W_q, W_kv, W_kv, W_o, heads=4, groups=2, theta_base=1e4).shape
    torch.Size([5, 8])
    """
    where = "grouped_query_attention"
    groups = heads if groups is None else groups
    check_positive(where, heads=heads, groups=groups)
    _check_groups(where, heads, groups, ("heads", "groups"))
    c, c_kv = w_q.shape[-1], w_k.shape[-1]
    if c % heads:
        raise ShapeError(f"{where}: c={c} (the width of w_q) is not divisible by heads={heads}")
    width = c // heads
    if c_kv != groups * width:
        raise ShapeError(
            f"{where}: w_k has c_kv={c_kv} but groups · c_h = {groups} · {width} = "
            f"{groups * width} (c_h = c / heads = {c} / {heads})"
        )
    for name, gain in (("q_gain", q_gain), ("k_gain", k_gain)):
        if gain is not None and gain.shape[-1] != width:
            raise ShapeError(f"{where}: {name} has c_h={gain.shape[-1]} but c / heads = {width}")
    if theta_base is not None:
        _even_width(where, "c_h", width)
    if not eps >= 0:
        raise ValueError(f"{where}: eps must be non-negative, got eps={eps!r}")
    x = silence_isolated(x, causal, mask)
    q = _core.split_heads(_core.projection(x, w_q, None), heads)  # -> (*b, h, n, c_h)
    k = _core.split_heads(_core.projection(x, w_k, None), groups)  # -> (*b, g, n, c_h)
    v = _core.split_heads(_core.projection(x, w_v, None), groups)
    if q_gain is not None:
        q = _grouped.rms_norm(q, q_gain, eps)
    if k_gain is not None:
        k = _grouped.rms_norm(k, k_gain, eps)
    if theta_base is not None:
        exact = torch.float64 if x.dtype == torch.float64 else torch.float32  # as the books
        cos, sin = compute_rope_params(width, theta_base, x.shape[-2], dtype=exact)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    k, v = hide_unattended(k, v, causal, mask, heads=True)
    out = _core.merge_heads(_grouped.attend_heads(q, k, v, causal, mask))  # -> (*batch, n, h·c_h)
    return out if w_o is None else _core.projection(out, w_o, None)


class RMSNorm(nn.Module):
    """The book's Qwen 3 `RMSNorm` (`qwen3.RMSNorm`): `scale` g (and `shift` with `bias`), over
    the last axis, float16/bfloat16 normalised in float32 unless `qwen3_compatible=False`.

    $$y = x / \\sqrt{\\operatorname{mean}(x^2) + \\varepsilon} \\circ g \\;(+\\, b)$$
    """

    def __init__(self, emb_dim: int, eps: float = 1e-6, bias: bool = False,
                 qwen3_compatible: bool = True):  # fmt: skip
        check_positive("RMSNorm", emb_dim=emb_dim)
        super().__init__()
        self.eps = eps
        self.qwen3_compatible = qwen3_compatible
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

    @checked_forward(lambda m: (_NORM_NAMES, (parameter(m, "scale"), parameter(m, "shift"))))
    def forward(self, x: Float[Tensor, "*batch n c"]) -> Float[Tensor, "*batch n c"]:
        """(*batch, n, c) -> (*batch, n, c): each row normalised."""
        return _grouped.rms_norm(x, self.scale, self.eps, self.shift, self.qwen3_compatible)


#: The gains may stay in float32 beside bfloat16 inputs (the book's Qwen 3 creates them so).
_NORM_NAMES = (
    ("scale", own_dtype(Float[Tensor, " c"])),
    ("shift", own_dtype(Float[Tensor, " c"]) | None),
)


#: The module's tensors for the checks of its forward, named as in its state_dict.
_GQA_NAMES = (
    ("W_query.weight", Float[Tensor, "c d"]),  # nn.Linear stores W_qᵀ: (h·c_h, d)
    ("W_key.weight", Float[Tensor, "c_kv d"]),  # (g·c_h, d)
    ("W_value.weight", Float[Tensor, "c_kv d"]),
    ("out_proj.weight", Float[Tensor, "c_out c"]),
    ("q_norm.scale", own_dtype(Float[Tensor, " c_h"]) | None),
    ("k_norm.scale", own_dtype(Float[Tensor, " c_h"]) | None),
)


def _gqa_weights(module: nn.Module) -> Weights:
    linears = [submodule(module, name) for name in ("W_query", "W_key", "W_value", "out_proj")]
    norms = [getattr(module, name) for name in ("q_norm", "k_norm")]
    tensors = [parameter(linear, "weight") for linear in linears]
    tensors += [None if norm is None else parameter(norm, "scale") for norm in norms]
    return _GQA_NAMES, tuple(tensors)


class GroupedQueryAttention(nn.Module):
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
      over each head's queries and keys, before RoPE.

    The same `torch.manual_seed` gives the same parameters as the book's class, and its
    state_dicts load unchanged. `forward(x, blocked, cos, sin)` is the books' `forward(x, mask,
    cos, sin)`: `blocked` (n, n) is their mask, True where query m may NOT attend key p (named
    apart from this package's `mask`, where True = may attend); a row with nothing to attend
    gets zeros (the book's gets NaN). cos and sin are the tables of `compute_rope_params` (None,
    both: no RoPE). The weights and x share one dtype; cos, sin and the norms' gains may keep
    their own (the book's bfloat16 configurations keep them in float32, and rotate and
    normalise in float32).
    """

    def __init__(self, d_in: int, *, num_heads: int, num_kv_groups: int, d_out: int | None = None,
                 head_dim: int | None = None, qk_norm: bool = False,
                 dtype: torch.dtype | None = None):  # fmt: skip
        where = "GroupedQueryAttention"
        check_positive(where, d_in=d_in, num_heads=num_heads, num_kv_groups=num_kv_groups)
        check_flag(where, qk_norm=qk_norm)
        _check_groups(where, num_heads, num_kv_groups, ("num_heads", "num_kv_groups"))
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
            self.q_norm: RMSNorm | None = RMSNorm(width, eps=1e-6)
            self.k_norm: RMSNorm | None = RMSNorm(width, eps=1e-6)
        else:
            self.q_norm = self.k_norm = None

    @checked_forward(_gqa_weights)
    def forward(
        self,
        x: Float[Tensor, "*batch n d"],
        blocked: Bool[Tensor, "n n"] | None = None,
        cos: own_dtype(Float[Tensor, "n_ctx c_h"]) | None = None,
        sin: own_dtype(Float[Tensor, "n_ctx c_h"]) | None = None,
    ) -> Float[Tensor, "*batch n c_out"]:
        """(*batch, n, d_in) -> (*batch, n, c_out), c_out the book's output width (llama3's
        d_out, qwen3's d_in); `blocked` (n, n), True = may not attend; cos, sin (n_ctx, head_dim),
        n_ctx ≥ n."""
        where = "GroupedQueryAttention.forward"
        n = x.shape[-2]
        if (cos is None) != (sin is None):
            raise ValueError(f"{where}: give cos and sin together (or neither, for no RoPE)")
        if cos is not None:
            if cos.shape[-1] != self.head_dim:
                raise ShapeError(
                    f"{where}: cos and sin have c_h={cos.shape[-1]} columns but "
                    f"head_dim={self.head_dim}"
                )
            _even_width(where, "head_dim", self.head_dim)
            if cos.shape[0] < n:
                raise ShapeError(
                    f"{where}: cos and sin have n_ctx={cos.shape[0]} positions but x has n={n} "
                    f"tokens; compute them with a larger context_length"
                )
        causal, allowed = _grouped.book_mask(blocked, n)
        x = silence_isolated(x, causal, allowed)
        q = _core.split_heads(self.W_query(x), self.num_heads)  # -> (*batch, h, n, c_h)
        k = _core.split_heads(self.W_key(x), self.num_kv_groups)  # -> (*batch, g, n, c_h)
        v = _core.split_heads(self.W_value(x), self.num_kv_groups)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.k_norm is not None:
            k = self.k_norm(k)
        if cos is not None:
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = hide_unattended(k, v, causal, allowed, heads=True)
        out = _grouped.attend_heads(q, k, v, causal, allowed)  # (*batch, h, n, c_h)
        return self.out_proj(_core.merge_heads(out))  # (*batch, n, h·c_h) -> (*batch, n, d_out)
