r"""Attention without the softmax: linear attention, the delta rule (DeltaNet) and the gated delta
rule (Gated DeltaNet), each in its three forms — recurrent, chunked and parallel — which give the
same numbers (the bonus material ch04/08_deltanet of *Build a Large Language Model (from
Scratch)*; Katharopoulos et al., *Transformers are RNNs*, 2020; Schlag et al., *Linear
Transformers Are Secretly Fast Weight Programmers*, 2021; Yang et al., *Parallelizing Linear
Transformers with the Delta Rule over Sequence Length*, 2024, and *Gated Delta Networks*, 2025).

Per head, with q_t, k_t ∈ ℝ^{d_k} and v_t ∈ ℝ^{d_v}, a state S_t ∈ ℝ^{d_k × d_v} (S_0 = 0, or
an `initial_state`) read by each query, o_t = S_tᵀ q_t, and written by each token:

    linear attention    S_t = S_{t−1} + k_t v_tᵀ
    delta rule          S_t = S_{t−1} + k_t u_tᵀ,          u_t = β_t (v_t − S_{t−1}ᵀ k_t)
    gated delta rule    S_t = α_t S_{t−1} + k_t u_tᵀ,      u_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)

with α_t = e^{g_t} (g_t ≤ 0, the log of the decay) and β_t the write strength. The delta rule
writes into the state only what it does not already predict for k_t: v_t − S_{t−1}ᵀ k_t.

**The recurrent form** (`chunk_size=None`) is the loop above, one token at a time: what
generation runs, O(d_k d_v) a token whatever the position.

**The parallel form** (`parallel=True`) unrolls it. With G_t = g_1 + … + g_t and
γ_{t,i} = e^{G_t − G_i} the decay from token i to token t (1 for i = t, and for i < t the product
α_{i+1} ⋯ α_t: token i's own α is not in it), S_t = Σ_{i ≤ t} γ_{t,i} k_i u_iᵀ, so

    O = (Q Kᵀ ∘ Γ ∘ M) U,      Γ_{t,i} = γ_{t,i},  M the causal mask (i ≤ t)

and the u_t solve a lower unit-triangular system (the delta rule's: u_t needs every u_i, i < t),

    (I + L) U = diag(β) V,      L = strictly lower part of diag(β) (K Kᵀ ∘ Γ).

Linear attention has L = 0 and U = V: O = (Q Kᵀ ∘ M) V. With an initial state S_0, the term
e^{G_t} S_0 joins S_t: o_t gains e^{G_t} S_0ᵀ q_t, and the system's right side loses
diag(β e^{G}) K S_0. In float32 the parallel form's G, one cumulative sum over the whole
sequence, loses the small differences G_t − G_i of a long sequence (PRECISION below): it is the
form to read, not the one to run long sequences with.

**The chunked form** (`chunk_size=C`) is the parallel form within each chunk of C tokens (G
counted from the chunk's start), the state carried from chunk to chunk (what training runs). The
system is solved once for all chunks, before the loop, in the WY/UT form: U = U_V − W S_0, with
U_V = (I + L)⁻¹ diag(β) V and W = (I + L)⁻¹ diag(β e^{G}) K; then, chunk after chunk,

    O_chunk = (e^{G} ∘ Q) S_0 + (Q Kᵀ ∘ Γ ∘ M) U,     S_C = e^{G_C} S_0 + (e^{G_C − G} ∘ K)ᵀ U.

No matrix bigger than C × C is formed, in the forward pass or in autograd's backward. A last
chunk shorter than C is padded with tokens that write nothing (k = v = 0, β = 0, g = 0).

PRECISION. In float32, on unit keys, at n = 4096 (docs/benchmarks.md): with g ~ −U(0, 0.1) the
recurrence and the chunked form keep 3–4·10⁻⁷ of the largest output, as the delta rule without
decay does; with strong decays, g ~ −U(0, 8), the recurrence keeps 1.6·10⁻⁷, the chunked form
4·10⁻⁶ (e^{G} and e^{−G} across a chunk of 64 tokens) and the parallel form only 3·10⁻⁴ (its G
runs over the whole sequence).

Whatever the inputs' dtype, the forms compute in float32 at least (float64 stays float64): the
outputs are returned in v's dtype, the state in the computing dtype; g, β and the initial state
may be in another dtype than q, k, v (float32 beside bfloat16 activations, as models keep them).
Every function takes (*batch, n, ·) tensors, the heads among the batch dimensions: (*batch,
heads, n, d_k) and so on.
`attention.deltanet.GatedDeltaNet` is the module of the book's ch04/08 and of Qwen 3.5's linear
layers.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from . import _core
from ._arguments import check_positive
from ._checks import checked
from ._shapes import OwnDtype, ShapeError

__all__ = [
    "linear_attention",
    "linear_self_attention",
    "causal_weights",
    "read_written",
    "delta_rule",
    "gated_delta_rule",
    "kimi_delta_rule",
    "channel_decayed",
    "kda_read",
    "chunk_states",
    "ssd",
    "selective_scan",
    "selective_read",
    "stepped_values",
    "ssd_read",
    "FEATURE_MAPS",
]

#: The feature maps φ of linear attention by name (None: φ(x) = x). "elu+1" is Katharopoulos et
#: al.'s φ(x) = elu(x) + 1, positive, so that a normalised row's denominator never vanishes.
FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {
    "elu+1": lambda x: F.elu(x) + 1,
    "relu": F.relu,
}

Output = Float[Tensor, "*batch n d_v"]
Result = Output | tuple[Output, Float[Tensor, "*batch d_k d_v"]]


# ---------------------------------------------------------------------------------------------
# The three forms, on (*batch, n, ·) tensors already checked and in the computing dtype.
# g: the log-decays or None (no decay), one per token (*batch, n) or one per key channel
# (*batch, n, d_k: Kimi Delta Attention's); beta: the write strengths or None (no delta rule).


def _channels(g: Tensor | None, q: Tensor) -> bool:
    """Whether g holds a log-decay per key channel (*batch, n, d_k) rather than per token."""
    return g is not None and g.dim() == q.dim()


def _rows(G: Tensor, channel: bool) -> Tensor:
    """G as a factor of (*batch, n, d_k) rows: per channel as it is, per token a column."""
    return G if channel else G[..., None]


def _last(G: Tensor, channel: bool) -> Tensor:
    """G at a block's last token, kept as one row (*batch, 1) or (*batch, 1, d_k)."""
    return G[..., -1:, :] if channel else G[..., -1:]


def _state_factor(last: Tensor, channel: bool) -> Tensor:
    """e^{G_C} as a factor of the state (d_k × d_v): a number, or one per row (key channel)."""
    return last.exp().transpose(-2, -1) if channel else last.exp()[..., None]


def recurrent(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, beta: Tensor | None, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The recurrence, token by token: (outputs, final state)."""
    n = q.shape[-2]
    if g is None:
        alphas = [None] * n
    else:  # α_t a number (…, 1, 1), or one per row of the state (…, d_k, 1)
        alphas = (g.exp()[..., None] if _channels(g, q) else g.exp()[..., None, None]).unbind(-3)
    betas = [None] * n if beta is None else beta[..., None].unbind(-2)
    tokens = zip(q.unbind(-2), k.unbind(-2), v.unbind(-2), alphas, betas, strict=True)
    outputs = []
    for q_t, k_t, v_t, alpha_t, beta_t in tokens:  # unbound once: see `chunked`
        if alpha_t is not None:
            state = alpha_t * state  # α_t S_{t−1}, or diag(α_t) S_{t−1}
        u = v_t
        if beta_t is not None:  # u_t = β_t (v_t − (α_t S_{t−1})ᵀ k_t)
            predicted = (k_t[..., None, :] @ state).squeeze(-2)
            u = beta_t * (u - predicted)
        state = state + k_t[..., :, None] * u[..., None, :]
        outputs.append((q_t[..., None, :] @ state).squeeze(-2))  # o_t = S_tᵀ q_t
    return torch.stack(outputs, dim=-2), state


def decays(g: Tensor | None, n: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """(G, Γ ∘ M): the cumulative log-decays G_t = g_1 + … + g_t (over the tokens) and the causal
    decays γ_{t,i} = e^{G_t − G_i} for i ≤ t, 0 above the diagonal (masked before the
    exponential, which would overflow there): an n × n matrix, or with a decay per key channel
    (g of `like`'s rank) n × n × d_k, γ_{t,i,j} = e^{G_{t,j} − G_{i,j}}. Without g: G = 0 and
    Γ ∘ M = M."""
    causal = torch.ones(n, n, dtype=torch.bool, device=like.device).tril()
    if g is None:
        return like.new_zeros(()), causal.to(like.dtype)
    if _channels(g, like):
        G = g.cumsum(-2)
        gaps = G[..., :, None, :] - G[..., None, :, :]
        return G, gaps.masked_fill(~causal[..., None], -torch.inf).exp()
    G = g.cumsum(-1)
    gaps = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, -torch.inf)
    return G, gaps.exp()


def mixed(a: Tensor, b: Tensor, gamma: Tensor) -> Tensor:
    """(A Bᵀ) ∘ Γ: Σ_j a_{t,j} b_{i,j} γ_{t,i}, or with a decay per channel Σ_j a_{t,j} b_{i,j}
    γ_{t,i,j} (without forming e^{−G}, which overflows where decays are strong)."""
    if gamma.dim() == a.dim() + 1:
        return torch.einsum("...tj,...ij,...tij->...ti", a, b, gamma)
    return (a @ b.transpose(-2, -1)) * gamma


def written(
    k: Tensor, v: Tensor, G: Tensor, gamma: Tensor, beta: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """(U_V, W): the values written when the state before the block is 0, and the part of the
    block's initial state each write removes (U = U_V − W S_0), from the delta rule's unit
    lower-triangular system (I + L) U = diag(β) (V − (e^G ∘ K) S_0). Without the delta rule
    every v_t is written as it is: (V, None)."""
    if beta is None:
        return v, None
    # I + L, of which the solver reads the strictly lower part only (unitriangular: the
    # diagonal is taken as 1s; Γ ∘ M is 0 above it), and to which it returns gradients only
    system = mixed(k, k, gamma) * beta[..., :, None]
    solve = lambda right: torch.linalg.solve_triangular(  # noqa: E731
        system, right, upper=False, unitriangular=True
    )
    channel = gamma.dim() == k.dim() + 1
    return solve(beta[..., None] * v), solve(beta[..., None] * _rows(G, channel).exp() * k)


def parallel(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, beta: Tensor | None, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The parallel form, one n × n matrix: (outputs, final state)."""
    channel = _channels(g, q)
    G, gamma = decays(g, q.shape[-2], q)
    u_v, w = written(k, v, G, gamma, beta)
    u = u_v if w is None else u_v - w @ state
    outputs = mixed(q, k, gamma) @ u
    if g is None:
        return outputs + q @ state, state + k.transpose(-2, -1) @ u
    last = _last(G, channel)
    outputs = outputs + (_rows(G, channel).exp() * q) @ state
    kept = _rows(last - G, channel).exp() * k
    return outputs, _state_factor(last, channel) * state + kept.transpose(-2, -1) @ u


def chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None,
    beta: Tensor | None,
    state: Tensor,
    size: int,
    states: list[Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunked form, chunks of `size` tokens: (outputs, final state); the state after each
    chunk appended to `states` when given."""
    n, channel = q.shape[-2], _channels(g, q)
    pad = -n % size
    if pad:  # tokens that write nothing: k = v = 0, β = 0, g = 0
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        if g is not None:
            g = F.pad(g, (0, 0, 0, pad) if channel else (0, pad))
        beta = None if beta is None else F.pad(beta, (0, pad))
    chunks = (n + pad) // size
    q, k, v = (x.unflatten(-2, (chunks, size)) for x in (q, k, v))
    if g is not None:
        g = g.unflatten(-2 if channel else -1, (chunks, size))
    beta = None if beta is None else beta.unflatten(-1, (chunks, size))
    G, gamma = decays(g, size, q)
    u_v, w = written(k, v, G, gamma, beta)
    within = mixed(q, k, gamma)  # Q Kᵀ ∘ Γ ∘ M, each chunk's own
    carried = None
    if g is not None:
        last = _last(G, channel)
        q, k = _rows(G, channel).exp() * q, _rows(last - G, channel).exp() * k
        carried = _state_factor(last, channel)  # e^{G_C}, the decay of the whole chunk
    # each chunk's parts taken apart once: a part read by indexing would give autograd's
    # backward a gradient of the whole tensor for each chunk (a cost quadratic in n)
    parts = [
        x.unbind(-3) if x is not None else [None] * chunks
        for x in (u_v, w, q, k.transpose(-2, -1), within, carried)
    ]
    outputs = []
    for u_c, w_c, q_c, k_c, within_c, carried_c in zip(*parts, strict=True):
        u = u_c if w_c is None else u_c - w_c @ state
        outputs.append(q_c @ state + within_c @ u)
        if carried_c is not None:
            state = carried_c * state
        state = state + k_c @ u
        if states is not None:
            states.append(state)
    return torch.cat(outputs, dim=-2)[..., :n, :], state


# ---------------------------------------------------------------------------------------------
# The public functions: checked, then one of the three forms.


def _cast(dtype: torch.dtype, q: Tensor, k: Tensor, v: Tensor, g, beta):
    """q, k, v, g, β in the computing dtype (g and β may be None)."""
    g, beta = (None if x is None else x.to(dtype) for x in (g, beta))
    return q.to(dtype), k.to(dtype), v.to(dtype), g, beta


def _computing(q: Tensor) -> torch.dtype:
    """float32 for half precisions, else the inputs' own (float64 stays float64)."""
    return torch.promote_types(q.dtype, torch.float32)


def _run(
    where: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None,
    beta: Tensor | None,
    *,
    chunk_size: int | None,
    parallel_form: bool,
    initial_state: Tensor | None,
    return_state: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    if chunk_size is not None:
        check_positive(where, chunk_size=chunk_size)
        if parallel_form:
            raise ValueError(
                f"{where}: parallel=True and chunk_size={chunk_size} are two different forms; "
                "give one (chunk_size=None with parallel=True)"
            )
    if q.shape[-2] == 0:
        raise ShapeError(f"{where}: q has n=0 tokens; give at least one")
    dtype, given = _computing(q), v.dtype
    q, k, v, g, beta = _cast(dtype, q, k, v, g, beta)
    state = (
        q.new_zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]))
        if initial_state is None
        else initial_state.to(dtype)
    )
    if chunk_size is not None:  # a chunk longer than the sequence: the sequence
        out, state = chunked(q, k, v, g, beta, state, min(chunk_size, q.shape[-2]))
    elif parallel_form:
        out, state = parallel(q, k, v, g, beta, state)
    else:
        out, state = recurrent(q, k, v, g, beta, state)
    out = out.to(given)
    return (out, state) if return_state else out


@checked
def linear_attention(
    q: Float[Tensor, "*batch n d_k"],
    k: Float[Tensor, "*batch n d_k"],
    v: Float[Tensor, "*batch n d_v"],
    *,
    feature_map: str | Callable[[Tensor], Tensor] | None = None,
    normalize: bool = False,
    chunk_size: int | None = None,
    parallel: bool = False,
    initial_state: OwnDtype[Float[Tensor, "*batch d_k d_v"]] | None = None,
    return_state: bool = False,
) -> Result:
    """Causal linear attention: S_t = S_{t−1} + φ(k_t) v_tᵀ, o_t = S_tᵀ φ(q_t) (the module
    docstring's forms: `chunk_size=None` the recurrence, `chunk_size=C` chunks of C tokens,
    `parallel=True` the n × n matrix (φ(Q) φ(K)ᵀ ∘ M) V).

    The normalised form's sum Σ_{i ≤ t} φ(k_i) is carried as one more column of the state, so
    it takes no `initial_state` and returns none: to generate with it, append a column of ones
    to v, carry that state, and divide by the last column of the outputs (what
    `normalize=True` does).

    Args:
        q: the queries, `(*batch, n, d_k)`, the heads among the batch dimensions.
        k: the keys, `(*batch, n, d_k)`.
        v: the values, `(*batch, n, d_v)`.
        feature_map: φ, a name of `FEATURE_MAPS` ("elu+1", "relu"), a function of a tensor that
            keeps every dimension but the last, or None (φ(x) = x). A function that changes the
            width works only without `initial_state` and `return_state`.
        normalize: divide each o_t by φ(q_t) · Σ_{i ≤ t} φ(k_i) (Katharopoulos et al.'s
            normalised form).
        chunk_size: C, the tokens of a chunk of the chunked form (a C beyond n: one chunk);
            None: the recurrence, or the parallel form with `parallel=True`.
        parallel: the parallel form, one n × n matrix (with chunk_size None).
        initial_state: S_0, `(*batch, d_k, d_v)`, in any float dtype; None: zeros.
        return_state: also return the final state, to give as `initial_state` to the next call.

    Returns:
        The outputs o, `(*batch, n, d_v)`, in v's dtype; with `return_state=True`, the pair
            (o, S), S the final state `(*batch, d_k, d_v)` in float32 at least.

    Raises:
        ValueError: when chunk_size is not a positive int or is given with `parallel=True`,
            feature_map is a name not in `FEATURE_MAPS`, or `normalize=True` comes with
            initial_state or `return_state=True`.
        TypeError: when feature_map is neither a str, a function nor None.
        ShapeError: when q, k, v and initial_state disagree in their batch dimensions, n, d_k
            or d_v, a dimension is 0, feature_map changes a dimension but the last, or it
            changes the width and initial_state or `return_state=True` is given.
        DtypeError: when q, k and v are not float tensors of one dtype, or initial_state is
            not a float tensor.
        DeviceError: when the tensors are not on one device.

    >>> import torch
    >>> q, k, v = torch.rand(2, 5, 4), torch.rand(2, 5, 4), torch.rand(2, 5, 3)
    >>> o = linear_attention(q, k, v, chunk_size=2)
    >>> bool(torch.allclose(o, linear_attention(q, k, v, parallel=True), atol=1e-5))
    True
    """
    where = "linear_attention"
    phi = _feature_map(where, feature_map)
    given, dtype, d_k = v.dtype, _computing(q), q.shape[-1]
    q, k, v = phi(q.to(dtype)), phi(k.to(dtype)), v.to(dtype)
    for name, mapped in (("q", q), ("k", k)):
        if mapped.shape[:-1] != v.shape[:-1]:
            raise ShapeError(
                f"{where}: feature_map changed the shape of {name} to {tuple(mapped.shape)}; "
                "it must keep every dimension but the last"
            )
    if q.shape[-1] != d_k and (initial_state is not None or return_state):
        raise ShapeError(  # the state S is d_k × d_v by its annotation: φ's width is no d_k
            f"{where}: feature_map maps q's d_k={d_k} to {q.shape[-1]} features, so the state "
            f"would be {q.shape[-1]} × d_v, not d_k × d_v: a width-changing feature_map takes "
            "no initial_state and returns no state"
        )
    if not normalize:
        result = _run(
            where,
            q,
            k,
            v,
            None,
            None,
            chunk_size=chunk_size,
            parallel_form=parallel,
            initial_state=initial_state,
            return_state=return_state,
        )
        if isinstance(result, tuple):
            return result[0].to(given), result[1]
        return result.to(given)
    if initial_state is not None or return_state:
        raise ValueError(
            f"{where}: normalize=True takes no initial_state and returns no state (its state "
            "has one more column, the sum of φ(k)); append a column of ones to v with "
            "normalize=False and divide by the last column of the outputs"
        )
    ones = v.new_ones((*v.shape[:-1], 1))
    result = _run(
        where,
        q,
        k,
        torch.cat([v, ones], dim=-1),
        None,
        None,
        chunk_size=chunk_size,
        parallel_form=parallel,
        initial_state=None,
        return_state=False,
    )
    assert isinstance(result, Tensor)
    return (result[..., :-1] / result[..., -1:]).to(given)  # divided before any cast back


@checked
def causal_weights(
    omega_scaled: Float[Tensor, "*batch n n"],
    *,
    decays: Float[Tensor, "*#batch n n"] | None = None,
) -> Float[Tensor, "*batch n n"]:
    """A = Ω̃ ∘ M, or Ω̃ ∘ Γ ∘ M with `decays` Γ: the weights of causal linear attention (of the
    delta rule's parallel form, with Γ the gated rule's decays e^{G_m − G_p}), each scaled score
    kept where p ≤ m and 0 after (a product with the causal mask, where softmax attention adds
    −∞ and takes the softmax). The step `derive`'s linear-attention entries declare.

    Args:
        omega_scaled: Ω̃, the scaled scores, `(*batch, n, n)`.
        decays: Γ, the decays γ_{m,p}, `(*batch, n, n)` (its leading dimensions broadcast
            against omega_scaled's); None: no decay.

    Returns:
        The weights A, `(*batch, n, n)`, 0 where p > m.

    Raises:
        ShapeError: when omega_scaled is not square in its last two dimensions, decays is not
            `(n, n)` with leading dimensions that broadcast to omega_scaled's, or a dimension
            is 0.
        DtypeError: when omega_scaled and decays are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    n = omega_scaled.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=omega_scaled.device).tril()
    kept = omega_scaled if decays is None else omega_scaled * decays
    return kept * causal


@checked
def linear_self_attention(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c_k"],
    w_v: Float[Tensor, "d c_v"],
    w_o: Float[Tensor, "c_o c_out"] | None = None,
    *,
    heads: int = 1,
    groups: int | None = None,
    chunk_size: int | None = None,
    parallel: bool = False,
) -> Float[Tensor, "*batch n c_out"]:
    """Causal linear attention of X with the book's weights: Q, K, V = X W_q, X W_k, X W_v, the
    queries scaled by 1/√c (Gated DeltaNet's scale), then `linear_attention` in the form asked
    for: C = (Q Kᵀ/√c ∘ M) V, the recurrence by default. With `heads` h, as multi-head
    attention (the book's section 3.6) splits the softmax's: head ℓ takes its block of c_h =
    c / h columns of Q, K and V, scaled by 1/√c_h, and the heads' contexts are put side by
    side, then projected by `w_o` where it is given (Katharopoulos et al.'s linear
    transformer, and the linear layers of Qwen 3.5, run heads so). With `groups` g, as
    grouped-query attention: K and V have g heads, each read by h / g consecutive query heads.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: W_q, `(d, c)`.
        w_k: W_k, `(d, c_k)`, c_k = g · c_h (c without groups).
        w_v: W_v, `(d, c_v)`, c_v a multiple of g (of h without groups).
        w_o: W_o, `(c_o, c_out)`, c_o = h · c_v / g, the output projection of the heads'
            contexts side by side; None: none (c_out = c_o).
        heads: h, the number of heads; c a multiple of it.
        groups: g, the heads of K and V, h a multiple of it; None: h (no grouping).
        chunk_size: C, the tokens of a chunk of the chunked form; None: the recurrence, or the
            parallel form with `parallel=True`.
        parallel: the parallel form, one n × n matrix per head (with chunk_size None).

    Returns:
        The context vectors C, `(*batch, n, c_out)`.

    Raises:
        ValueError: when chunk_size, heads or groups is not a positive int, or chunk_size is
            given with `parallel=True`.
        ShapeError: when the weights do not fit x or each other (c_k, c_o), heads does not
            divide c, groups does not divide heads or c_v, or a dimension is 0.
        DtypeError: when x and the weights are not float tensors of one dtype.
        DeviceError: when they are not on one device.

    >>> import torch
    >>> x, w = torch.rand(5, 4), torch.rand(4, 4)
    >>> linear_self_attention(x, w, w, w).shape
    torch.Size([5, 4])
    >>> linear_self_attention(x, w, w, w, torch.rand(4, 3), heads=2).shape
    torch.Size([5, 3])
    >>> w_kv = torch.rand(4, 2)  # one group of K and V for two query heads of width 2
    >>> linear_self_attention(x, w, w_kv, w_kv, torch.rand(4, 3), heads=2, groups=1).shape
    torch.Size([5, 3])
    """
    where = "linear_self_attention"
    g = heads if groups is None else groups
    check_positive(where, heads=heads, groups=g)
    by = f"heads={heads}" if groups is None else f"groups={g}"
    c, c_k, c_v = w_q.shape[-1], w_k.shape[-1], w_v.shape[-1]
    if c % heads:
        raise ShapeError(f"{where}: c (the width of w_q)={c} is not divisible by heads={heads}")
    if heads % g:
        raise ShapeError(f"{where}: heads={heads} is not divisible by groups={g}")
    if c_k != g * (c // heads):
        raise ShapeError(
            f"{where}: w_k has c_k={c_k} columns, expected {g * (c // heads)} ({by} of c_h="
            f"{c // heads}, the width of a query head)"
        )
    if c_v % g:
        raise ShapeError(f"{where}: c_v (the width of w_v)={c_v} is not divisible by {by}")
    if w_o is not None and w_o.shape[-2] != heads * (c_v // g):
        raise ShapeError(
            f"{where}: w_o has c_o={w_o.shape[-2]} rows, expected {heads * (c_v // g)} (the "
            f"{heads} heads' contexts side by side, each c_v/{g} wide)"
        )
    q = _core.split_heads(x @ w_q, heads)
    k, v = (_core.expand_groups(_core.split_heads(x @ w, g), heads) for w in (w_k, w_v))
    result = linear_attention(
        q / q.shape[-1] ** 0.5, k, v, chunk_size=chunk_size, parallel=parallel
    )
    assert isinstance(result, Tensor)
    context = _core.merge_heads(result)  # the heads side by side: (*batch, n, c_o)
    return context if w_o is None else context @ w_o


@checked
def read_written(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    u: Float[Tensor, "*batch n c_v"],
    decays: Float[Tensor, "*#batch n n"] | None = None,
) -> Float[Tensor, "*batch n c_v"]:
    """What the delta rule's tokens read, given the values they wrote, U (and for the gated
    rule the decays Γ, γ_{m,p} = e^{G_m − G_p}): C = (Q Kᵀ/√c ∘ Γ ∘ M) U, with Q = X W_q and
    K = X W_k (the parallel form's read, what `derive`'s deltanet and gated-deltanet entries
    declare). Without `decays` it runs linear attention's recurrence on (Q/√c, K, U): the
    state written with U is the delta rule's.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: W_q, `(d, c)`.
        w_k: W_k, `(d, c)`.
        u: the values the tokens wrote, U, `(*batch, n, c_v)`.
        decays: Γ, the gated rule's decays, `(*batch, n, n)` (its leading dimensions broadcast
            against x's); None: no decay (the delta rule).

    Returns:
        The context vectors C, `(*batch, n, c_v)`.

    Raises:
        ShapeError: when the weights, u or decays do not fit x or each other, or a dimension
            is 0.
        DtypeError: when the tensors are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    q, k = x @ w_q, x @ w_k
    q = q / q.shape[-1] ** 0.5
    if decays is None:
        result = linear_attention(q, k, u)
        assert isinstance(result, Tensor)
        return result
    return causal_weights(q @ k.transpose(-2, -1), decays=decays) @ u


def _feature_map(where: str, feature_map: object) -> Callable[[Tensor], Tensor]:
    if feature_map is None:
        return lambda x: x
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"{where}: feature_map must be one of {sorted(FEATURE_MAPS)}, a function or "
                f"None, got feature_map={feature_map!r}"
            )
        return FEATURE_MAPS[feature_map]
    if not callable(feature_map):
        raise TypeError(f"{where}: feature_map must be callable, got {feature_map!r}")
    return feature_map  # type: ignore[return-value]


@checked
def delta_rule(
    q: Float[Tensor, "*batch n d_k"],
    k: Float[Tensor, "*batch n d_k"],
    v: Float[Tensor, "*batch n d_v"],
    beta: OwnDtype[Float[Tensor, "*batch n"]],
    *,
    chunk_size: int | None = None,
    parallel: bool = False,
    initial_state: OwnDtype[Float[Tensor, "*batch d_k d_v"]] | None = None,
    return_state: bool = False,
) -> Result:
    """DeltaNet's delta rule: S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ, o_t = S_tᵀ q_t
    (the module docstring's three forms).

    Args:
        q: the queries, `(*batch, n, d_k)`, the heads among the batch dimensions.
        k: the keys, `(*batch, n, d_k)`.
        v: the values, `(*batch, n, d_v)`.
        beta: β_t, the write strength, `(*batch, n)` (in (0, 1) in DeltaNet: a sigmoid), in any
            float dtype.
        chunk_size: C, the tokens of a chunk of the chunked form (a C beyond n: one chunk);
            None: the recurrence, or the parallel form with `parallel=True`.
        parallel: the parallel form, one n × n matrix (with chunk_size None).
        initial_state: S_0, `(*batch, d_k, d_v)`, in any float dtype; None: zeros.
        return_state: also return the final state, to give as `initial_state` to the next call.

    Returns:
        The outputs o, `(*batch, n, d_v)`, in v's dtype; with `return_state=True`, the pair
            (o, S), S the final state `(*batch, d_k, d_v)` in float32 at least.

    Raises:
        ValueError: when chunk_size is not a positive int or is given with `parallel=True`.
        ShapeError: when q, k, v, beta and initial_state disagree in their batch dimensions,
            n, d_k or d_v, or a dimension is 0.
        DtypeError: when q, k and v are not float tensors of one dtype, or beta or
            initial_state is not a float tensor.
        DeviceError: when the tensors are not on one device.
    """
    return _run(
        "delta_rule",
        q,
        k,
        v,
        None,
        beta,
        chunk_size=chunk_size,
        parallel_form=parallel,
        initial_state=initial_state,
        return_state=return_state,
    )


@checked
def gated_delta_rule(
    q: Float[Tensor, "*batch n d_k"],
    k: Float[Tensor, "*batch n d_k"],
    v: Float[Tensor, "*batch n d_v"],
    g: OwnDtype[Float[Tensor, "*batch n"]],
    beta: OwnDtype[Float[Tensor, "*batch n"]],
    *,
    chunk_size: int | None = None,
    parallel: bool = False,
    initial_state: OwnDtype[Float[Tensor, "*batch d_k d_v"]] | None = None,
    return_state: bool = False,
) -> Result:
    """Gated DeltaNet's rule (Qwen 3.5's and Qwen3-Next's linear layers): the state decays by
    α_t = e^{g_t} before the delta rule's write, S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ
    k_t)ᵀ, o_t = S_tᵀ q_t (the module docstring's three forms). q and k are used as given: the
    L2 norm and the 1/√d_k of Qwen 3.5 are the caller's (`attention.deltanet`).

    Args:
        q: the queries, `(*batch, n, d_k)`, the heads among the batch dimensions.
        k: the keys, `(*batch, n, d_k)`.
        v: the values, `(*batch, n, d_v)`.
        g: the log-decays g_t ≤ 0, finite, `(*batch, n)`, in any float dtype (a positive g_t
            grows the state, and the chunked and parallel forms' e^{G} may overflow; g_t = −∞,
            a decay of exactly 0, is the recurrence's alone: the other forms take differences
            of G, −∞ − (−∞); give a large negative number).
        beta: β_t, the write strength, `(*batch, n)`, in any float dtype.
        chunk_size: C, the tokens of a chunk of the chunked form (64 in transformers and
            flash-linear-attention; a C beyond n: one chunk); None: the recurrence, or the
            parallel form with `parallel=True`.
        parallel: the parallel form, one n × n matrix (with chunk_size None).
        initial_state: S_0, `(*batch, d_k, d_v)`, in any float dtype; None: zeros.
        return_state: also return the final state, to give as `initial_state` to the next call
            (generation: one token at a time, O(d_k d_v) each).

    Returns:
        The outputs o, `(*batch, n, d_v)`, in v's dtype; with `return_state=True`, the pair
            (o, S), S the final state `(*batch, d_k, d_v)` in float32 at least.

    Raises:
        ValueError: when chunk_size is not a positive int or is given with `parallel=True`.
        ShapeError: when q, k, v, g, beta and initial_state disagree in their batch
            dimensions, n, d_k or d_v, or a dimension is 0.
        DtypeError: when q, k and v are not float tensors of one dtype, or g, beta or
            initial_state is not a float tensor.
        DeviceError: when the tensors are not on one device.

    >>> import torch
    >>> q, k, v = torch.rand(2, 7, 4), torch.rand(2, 7, 4), torch.rand(2, 7, 3)
    >>> g, beta = -torch.rand(2, 7), torch.rand(2, 7)
    >>> o = gated_delta_rule(q, k, v, g, beta)
    >>> bool(torch.allclose(o, gated_delta_rule(q, k, v, g, beta, chunk_size=3), atol=1e-5))
    True
    """
    return _run(
        "gated_delta_rule",
        q,
        k,
        v,
        g,
        beta,
        chunk_size=chunk_size,
        parallel_form=parallel,
        initial_state=initial_state,
        return_state=return_state,
    )


@checked
def kimi_delta_rule(
    q: Float[Tensor, "*batch n d_k"],
    k: Float[Tensor, "*batch n d_k"],
    v: Float[Tensor, "*batch n d_v"],
    g: OwnDtype[Float[Tensor, "*batch n d_k"]],
    beta: OwnDtype[Float[Tensor, "*batch n"]],
    *,
    chunk_size: int | None = None,
    parallel: bool = False,
    initial_state: OwnDtype[Float[Tensor, "*batch d_k d_v"]] | None = None,
    return_state: bool = False,
) -> Result:
    """Kimi Delta Attention (KDA; Kimi Linear's linear layers, 2025): the gated delta rule with a
    decay per key channel, S_t = diag(α_t) S_{t−1} + β_t k_t (v_t − (diag(α_t) S_{t−1})ᵀ k_t)ᵀ,
    o_t = S_tᵀ q_t, α_t = e^{g_t} (the module docstring's three forms; within a chunk, and in
    the parallel form, the decays γ_{t,i,j} = e^{G_{t,j} − G_{i,j}} of each channel j are formed
    as an n × n × d_k tensor, never as e^{−G}, which overflows).

    With every channel's g equal it is `gated_delta_rule`. q and k are used as given (Kimi
    Linear normalises them and scales q by 1/√d_k first).

    Args:
        q: the queries, `(*batch, n, d_k)`, the heads among the batch dimensions.
        k: the keys, `(*batch, n, d_k)`.
        v: the values, `(*batch, n, d_v)`.
        g: the log-decays, ≤ 0 and finite, one per token and key channel, `(*batch, n, d_k)`,
            in any float dtype.
        beta: β_t, the write strength, `(*batch, n)`, in any float dtype.
        chunk_size: C, the tokens of a chunk of the chunked form (a C beyond n: one chunk);
            None: the recurrence, or the parallel form with `parallel=True`.
        parallel: the parallel form, one n × n (× d_k) tensor (with chunk_size None).
        initial_state: S_0, `(*batch, d_k, d_v)`, in any float dtype; None: zeros.
        return_state: also return the final state, to give as `initial_state` to the next call.

    Returns:
        The outputs o, `(*batch, n, d_v)`, in v's dtype; with `return_state=True`, the pair
            (o, S), S the final state `(*batch, d_k, d_v)` in float32 at least.

    Raises:
        ValueError: when chunk_size is not a positive int or is given with `parallel=True`.
        ShapeError: when q, k, v, g, beta and initial_state disagree in their batch
            dimensions, n, d_k or d_v, or a dimension is 0.
        DtypeError: when q, k and v are not float tensors of one dtype, or g, beta or
            initial_state is not a float tensor.
        DeviceError: when the tensors are not on one device.

    >>> import torch
    >>> q, k, v = torch.rand(2, 7, 4), torch.rand(2, 7, 4), torch.rand(2, 7, 3)
    >>> g, beta = -torch.rand(2, 7, 4), torch.rand(2, 7)
    >>> o = kimi_delta_rule(q, k, v, g, beta)
    >>> bool(torch.allclose(o, kimi_delta_rule(q, k, v, g, beta, chunk_size=3), atol=1e-5))
    True
    """
    return _run(
        "kimi_delta_rule",
        q,
        k,
        v,
        g,
        beta,
        chunk_size=chunk_size,
        parallel_form=parallel,
        initial_state=initial_state,
        return_state=return_state,
    )


@checked
def channel_decayed(
    x: Float[Tensor, "*batch n c"], log_decays: Float[Tensor, "*#batch n c"], *, sign: int
) -> Float[Tensor, "*batch n c"]:
    """x ∘ e^{±G}: each channel j of row m scaled by e^{G_{m,j}} (`sign=1`, the queries) or
    e^{−G_{m,j}} (`sign=-1`, the keys), G the cumulative log-decays of each channel: the step
    `derive`'s kda entry declares (the parallel read; `kimi_delta_rule` never forms e^{−G}).

    Args:
        x: the queries or the keys, `(*batch, n, c)`.
        log_decays: G, the cumulative log-decays of each channel, `(*batch, n, c)` (its leading
            dimensions broadcast against x's).
        sign: 1 for e^{G} (the queries), -1 for e^{−G} (the keys).

    Returns:
        The scaled x, `(*batch, n, c)`.

    Raises:
        ValueError: when sign is neither 1 nor -1.
        TypeError: when sign is not an int.
        ShapeError: when log_decays does not fit x, or a dimension is 0.
        DtypeError: when x and log_decays are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    if sign not in (1, -1):
        raise ValueError(f"channel_decayed: sign must be 1 or -1, got sign={sign!r}")
    return x * (sign * log_decays).exp()


@checked
def kda_read(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    u: Float[Tensor, "*batch n c_v"],
    log_decays: Float[Tensor, "*#batch n c"],
) -> Float[Tensor, "*batch n c_v"]:
    """What Kimi Delta Attention's tokens read, given the values they wrote, U, and the
    cumulative log-decays of each key channel, G: C = ((Q ∘ e^{G}) (K ∘ e^{−G})ᵀ/√c ∘ M) U, with
    Q = X W_q and K = X W_k (the parallel form's read, what `derive`'s kda entry declares).

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: W_q, `(d, c)`.
        w_k: W_k, `(d, c)`.
        u: the values the tokens wrote, U, `(*batch, n, c_v)`.
        log_decays: G, the cumulative log-decays of each key channel, `(*batch, n, c)` (its
            leading dimensions broadcast against x's).

    Returns:
        The context vectors C, `(*batch, n, c_v)`.

    Raises:
        ShapeError: when the weights, u or log_decays do not fit x or each other, or a
            dimension is 0.
        DtypeError: when the tensors are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    q, k = x @ w_q, x @ w_k
    q = channel_decayed(q, log_decays, sign=1) / q.shape[-1] ** 0.5
    scores = q @ channel_decayed(k, log_decays, sign=-1).transpose(-2, -1)
    return causal_weights(scores) @ u


@checked
def chunk_states(
    q: Float[Tensor, "*batch n d_k"],
    k: Float[Tensor, "*batch n d_k"],
    v: Float[Tensor, "*batch n d_v"],
    g: OwnDtype[Float[Tensor, "*batch n"]] | OwnDtype[Float[Tensor, "*batch n d_k"]] | None,
    beta: OwnDtype[Float[Tensor, "*batch n"]] | None,
    *,
    chunk_size: int,
) -> Float[Tensor, "chunks *batch d_k d_v"]:
    """The state after each chunk of the chunked form (from S_0 = 0): what the derivation's
    carried state is checked against, chunk after chunk.

    Args:
        q: the queries, `(*batch, n, d_k)`.
        k: the keys, `(*batch, n, d_k)`.
        v: the values, `(*batch, n, d_v)`.
        g: the log-decays, one per token `(*batch, n)` or one per token and key channel
            `(*batch, n, d_k)` (KDA's), in any float dtype; None: no decay.
        beta: the write strengths β, `(*batch, n)`, in any float dtype; None: no delta rule
            (linear attention).
        chunk_size: C, the tokens of a chunk (a C beyond n: one chunk).

    Returns:
        The state after each chunk, `(chunks, *batch, d_k, d_v)` with chunks = ⌈n / C⌉, in
            float32 at least.

    Raises:
        ValueError: when chunk_size is not a positive int.
        ShapeError: when q, k, v, g and beta disagree in their batch dimensions, n or d_k, or
            a dimension is 0.
        DtypeError: when q, k and v are not float tensors of one dtype, or g or beta is not a
            float tensor.
        DeviceError: when the tensors are not on one device.
    """
    check_positive("chunk_states", chunk_size=chunk_size)
    dtype = _computing(q)
    q, k, v, g, beta = _cast(dtype, q, k, v, g, beta)
    states: list[Tensor] = []
    zero = q.new_zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]))
    chunked(q, k, v, g, beta, zero, chunk_size, states)
    return torch.stack(states)


# ---------------------------------------------------------------------------------------------
# Mamba-2's state-space dual (SSD): gated linear attention in the layout of state-space layers


def _ssd_layout(
    where: str, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(q, k, v, g) of the gated rule, heads among the batch dimensions (*batch, h, n, ·): q the
    C_t of each head's group, k its B_t, v = Δ_t x_t (`stepped_values`), g_t = Δ_t A."""
    heads, groups = x.shape[-2], B.shape[-2]
    if heads % groups:
        raise ShapeError(
            f"{where}: B and C have g={groups} groups, which must divide the h={heads} heads "
            "of x (each group's B and C are shared by h/g consecutive heads)"
        )
    shared = heads // groups
    k, q = (t.repeat_interleave(shared, dim=-2).transpose(-3, -2) for t in (B, C))
    dt = dt.transpose(-2, -1)  # (*batch, h, n)
    v = stepped_values(x.transpose(-3, -2), dt[..., None])
    return q, k, v, dt * A[:, None]


@checked
def ssd(
    x: Float[Tensor, "*batch n h p"],
    dt: OwnDtype[Float[Tensor, "*batch n h"]],
    A: OwnDtype[Float[Tensor, " h"]],
    B: Float[Tensor, "*batch n g d_state"],
    C: Float[Tensor, "*batch n g d_state"],
    *,
    D: OwnDtype[Float[Tensor, " h"]] | OwnDtype[Float[Tensor, "h p"]] | None = None,
    chunk_size: int | None = None,
    parallel: bool = False,
    initial_state: OwnDtype[Float[Tensor, "*batch h p d_state"]] | None = None,
    return_state: bool = False,
) -> (
    Float[Tensor, "*batch n h p"]
    | tuple[Float[Tensor, "*batch n h p"], Float[Tensor, "*batch h p d_state"]]
):
    """Mamba-2's state-space dual layer (SSD; Dao and Gu, *Transformers are SSMs*, 2024), per
    head: h_t = a_t h_{t−1} + Δ_t x_t B_tᵀ (p × d_state), y_t = h_t C_t + D x_t, with the scalar
    decay a_t = e^{Δ_t A}. It is the gated rule of this module without the delta rule's
    correction: queries C_t, keys B_t, written values Δ_t x_t and log-decays g_t = Δ_t A, so that
    the quadratic (dual) form is

        Y = (L ∘ C Bᵀ) (diag(Δ) X) + D X,    L_{t,i} = a_{i+1} ⋯ a_t for i ≤ t, 0 after

    (L is 1-semiseparable: `derive`'s ssd entry proves the three forms one, and that with
    a ≡ 1 and Δ ≡ 1 it is causal linear attention without a feature map).

    Args:
        x: the heads' inputs, `(*batch, n, h, p)`.
        dt: Δ, `(*batch, n, h)`, in any float dtype, used as given: the softplus and its bias
            are the layer's (`transformers`' Mamba2Mixer applies both before the scan).
        A: `(h,)`, in any float dtype, negative for a decay (Mamba-2 keeps A = −e^{A_log}).
        B: the keys B_t, `(*batch, n, g, d_state)`, g groups each shared by h/g consecutive
            heads.
        C: the queries C_t, `(*batch, n, g, d_state)`, grouped as B.
        D: the skip, `(h,)` or `(h, p)`, in any float dtype; None: no skip.
        chunk_size: the tokens of a chunk (Mamba-2's algorithm: the quadratic form within a
            chunk, the states passed between chunks; 256 in Mamba-2); None: the recurrence, or
            the parallel form with `parallel=True`.
        parallel: the n × n form (with chunk_size None).
        initial_state: the state before x, in Mamba's ssm_state layout
            `(*batch, h, p, d_state)`, in any float dtype; None: zeros.
        return_state: also return the final state, to give as `initial_state` to the next call.

    Returns:
        The outputs y, `(*batch, n, h, p)`, in x's dtype; with `return_state=True`, the pair
            (y, state), the final state `(*batch, h, p, d_state)` (Mamba's ssm_state layout)
            in float32 at least.

    Raises:
        ValueError: when chunk_size is not a positive int or is given with `parallel=True`.
        ShapeError: when the groups g do not divide the heads h, the tensors disagree in their
            batch dimensions, n, h, p, g or d_state, or a dimension is 0.
        DtypeError: when x, B and C are not float tensors of one dtype, or dt, A, D or
            initial_state is not a float tensor.
        DeviceError: when the tensors are not on one device.

    >>> import torch
    >>> x, dt, A = torch.randn(1, 6, 4, 3), torch.rand(1, 6, 4), -torch.rand(4)
    >>> B, C = torch.randn(1, 6, 2, 5), torch.randn(1, 6, 2, 5)
    >>> y = ssd(x, dt, A, B, C, D=torch.ones(4))
    >>> bool(torch.allclose(y, ssd(x, dt, A, B, C, D=torch.ones(4), chunk_size=4), atol=1e-5))
    True
    """
    where = "ssd"
    dtype = _computing(x)
    q, k, v, g = _ssd_layout(where, *(t.to(dtype) for t in (x, dt, A, B, C)))
    state = None if initial_state is None else initial_state.transpose(-2, -1)
    out, final = _run(
        where,
        q,
        k,
        v,
        g,
        None,
        chunk_size=chunk_size,
        parallel_form=parallel,
        initial_state=state,
        return_state=True,
    )
    y = out.to(dtype).transpose(-3, -2)
    if D is not None:
        skip = D.to(dtype)
        y = y + (skip[:, None] if skip.dim() == 1 else skip) * x.to(dtype)
    y = y.to(x.dtype)
    return (y, final.transpose(-2, -1)) if return_state else y


@checked
def selective_scan(
    x: Float[Tensor, "*batch n e"],
    dt: OwnDtype[Float[Tensor, "*batch n e"]],
    A: OwnDtype[Float[Tensor, "e d_state"]],
    B: Float[Tensor, "*batch n d_state"],
    C: Float[Tensor, "*batch n d_state"],
    *,
    D: OwnDtype[Float[Tensor, " e"]] | None = None,
    chunk_size: int | None = None,
    parallel: bool = False,
    initial_state: OwnDtype[Float[Tensor, "*batch e d_state"]] | None = None,
    return_state: bool = False,
) -> (
    Float[Tensor, "*batch n e"]
    | tuple[Float[Tensor, "*batch n e"], Float[Tensor, "*batch e d_state"]]
):
    """Mamba's selective scan (Gu and Dao, *Mamba*, 2023; the mixers of Mamba, Falcon Mamba and
    Jamba), per channel c of the e inner channels: h_t = e^{Δ_{t,c} A_c} ∘ h_{t−1} + Δ_{t,c}
    x_{t,c} B_t (d_state numbers, A_c a decay rate per state entry), y_{t,c} = C_t · h_t +
    D_c x_{t,c}. Each channel is a head of one value of this module's rule with a decay per
    key channel and without the delta rule's correction: queries C_t, keys B_t, the written value
    Δ_{t,c} x_{t,c}, the log-decays g_{t,j} = Δ_{t,c} A_{c,j} (`kimi_delta_rule`'s forms, so
    `chunk_size=` and `parallel=True` give the recurrence's numbers; their n × n × d_state decays
    per channel make them the forms to check with, the recurrence the one to run).

    Args:
        x: the inputs of the e channels, `(*batch, n, e)`.
        dt: Δ, `(*batch, n, e)`, in any float dtype, used as given (the softplus and the bias
            are the layer's).
        A: `(e, d_state)`, in any float dtype, negative for a decay (Mamba keeps
            A = −e^{A_log}).
        B: the keys B_t, `(*batch, n, d_state)`, shared by the channels.
        C: the queries C_t, `(*batch, n, d_state)`, shared by the channels.
        D: the skip, `(e,)`, in any float dtype; None: no skip.
        chunk_size: the tokens of a chunk of the chunked form; None: the recurrence, or the
            parallel form with `parallel=True`.
        parallel: the n × n form (with chunk_size None).
        initial_state: the state before x, Mamba's ssm_state `(*batch, e, d_state)`, in any
            float dtype; None: zeros.
        return_state: also return the final state, to give as `initial_state` to the next call.

    Returns:
        The outputs y, `(*batch, n, e)`, in x's dtype; with `return_state=True`, the pair
            (y, state), the final state `(*batch, e, d_state)` (Mamba's ssm_state) in float32
            at least.

    Raises:
        ValueError: when chunk_size is not a positive int or is given with `parallel=True`.
        ShapeError: when the tensors disagree in their batch dimensions, n, e or d_state, or
            a dimension is 0.
        DtypeError: when x, B and C are not float tensors of one dtype, or dt, A, D or
            initial_state is not a float tensor.
        DeviceError: when the tensors are not on one device.

    >>> import torch
    >>> x, dt, A = torch.randn(1, 6, 3), torch.rand(1, 6, 3), -torch.rand(3, 4)
    >>> B, C = torch.randn(1, 6, 4), torch.randn(1, 6, 4)
    >>> y = selective_scan(x, dt, A, B, C)
    >>> bool(torch.allclose(y, selective_scan(x, dt, A, B, C, chunk_size=4), atol=1e-5))
    True
    """
    dtype = _computing(x)
    x_, dt_, A_, B_, C_ = (t.to(dtype) for t in (x, dt, A, B, C))
    heads = lambda t: t[..., None, :, :].expand(*t.shape[:-2], x.shape[-1], *t.shape[-2:])  # noqa: E731
    steps = dt_.transpose(-2, -1)  # (*batch, e, n)
    state = None if initial_state is None else initial_state[..., None]
    out, final = _run(
        "selective_scan",
        heads(C_),
        heads(B_),
        (steps * x_.transpose(-2, -1))[..., None],  # Δ x, one value a channel
        steps[..., None] * A_[:, None, :],  # g_{t,j} = Δ_t A_j, (*batch, e, n, d_state)
        None,
        chunk_size=chunk_size,
        parallel_form=parallel,
        initial_state=state,
        return_state=True,
    )
    y = out.to(dtype)[..., 0].transpose(-2, -1)
    if D is not None:
        y = y + D.to(dtype) * x_
    y = y.to(x.dtype)
    return (y, final[..., 0]) if return_state else y


@checked
def selective_read(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c_v"],
    delta: Float[Tensor, "*#batch n 1"],
    log_decays: Float[Tensor, "*#batch n c"],
) -> Float[Tensor, "*batch n c_v"]:
    """The selective scan's quadratic form with the book's weights, given the steps Δ and the
    cumulative log-decays of each state entry G: C = ((Q ∘ e^{G}) (K ∘ e^{−G})ᵀ ∘ M) diag(Δ) V,
    Q = X W_q (Mamba's C), K = X W_k (its B), V = X W_v (its x), unscaled. What `derive`'s
    selective-scan entry declares; `selective_scan` computes the same numbers in its forms.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: W_q, `(d, c)`.
        w_k: W_k, `(d, c)`.
        w_v: W_v, `(d, c_v)`.
        delta: the steps Δ, `(*batch, n, 1)` (its leading dimensions broadcast against x's).
        log_decays: G, the cumulative log-decays of each state entry, `(*batch, n, c)` (its
            leading dimensions broadcast against x's).

    Returns:
        The context vectors C, `(*batch, n, c_v)`.

    Raises:
        ShapeError: when the weights, delta or log_decays do not fit x or each other, or a
            dimension is 0.
        DtypeError: when the tensors are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = channel_decayed(q, log_decays, sign=1) @ channel_decayed(
        k, log_decays, sign=-1
    ).transpose(-2, -1)
    return causal_weights(scores) @ stepped_values(v, delta)


@checked
def stepped_values(
    v: Float[Tensor, "*batch n c_v"], delta: Float[Tensor, "*#batch n 1"]
) -> Float[Tensor, "*batch n c_v"]:
    """U = diag(Δ) V, u_{p,j} = Δ_p v_{p,j}: what SSD writes into its state, each token's
    input scaled by its step Δ_p (the discretisation of Mamba's B̄_p x_p). The step `derive`'s
    ssd entry declares.

    Args:
        v: the values V, `(*batch, n, c_v)`.
        delta: the steps Δ, `(*batch, n, 1)` (its leading dimensions broadcast against v's).

    Returns:
        The written values U = diag(Δ) V, `(*batch, n, c_v)`.

    Raises:
        ShapeError: when delta's last dimension is not 1, or delta does not fit v, or a
            dimension is 0.
        DtypeError: when v and delta are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    return delta * v


@checked
def ssd_read(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c_v"],
    delta: Float[Tensor, "*#batch n 1"],
    decays: Float[Tensor, "*#batch n n"],
) -> Float[Tensor, "*batch n c_v"]:
    """SSD's quadratic form with the book's weights, given the steps Δ and the decays Γ
    (γ_{m,p} = a_{p+1} ⋯ a_m, Mamba-2's semiseparable mask): C = (Q Kᵀ ∘ Γ ∘ M) diag(Δ) V, with
    Q = X W_q (Mamba's C), K = X W_k (its B) and V = X W_v (its x), unscaled. What `derive`'s
    ssd entry declares; `ssd` computes the same numbers in its three forms.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: W_q, `(d, c)`.
        w_k: W_k, `(d, c)`.
        w_v: W_v, `(d, c_v)`.
        delta: the steps Δ, `(*batch, n, 1)` (its leading dimensions broadcast against x's).
        decays: Γ, `(*batch, n, n)` (its leading dimensions broadcast against x's).

    Returns:
        The context vectors C, `(*batch, n, c_v)`.

    Raises:
        ShapeError: when the weights, delta or decays do not fit x or each other, or a
            dimension is 0.
        DtypeError: when the tensors are not float tensors of one dtype.
        DeviceError: when they are not on one device.
    """
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return causal_weights(q @ k.transpose(-2, -1), decays=decays) @ stepped_values(v, delta)
