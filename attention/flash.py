r"""FlashAttention's algorithm, block by block, as a reference that keeps its state: what
`derive check --variant flash` compares with the derivation, block after block (Dao et al.,
*FlashAttention*, 2022; Dao, *FlashAttention-2*, 2023; the derivation is `derive.proofs.
online_softmax` and `derive.proofs.blocked_backward`).

Not a fast path (`attention.functional.self_attention` is that): loops over blocks in Python, it
is written to be read beside the derivation, one line per formula, and to return every block's
state. Block t of keys holds the keys (t − 1) B_c + 1 … t B_c (the last block may be shorter),
block i of queries the rows (i − 1) B_r + 1 … i B_r.

The forward pass (`online_softmax`), for each block of query rows and each block t of keys:

    ω̃ = scale · q kᵀ                                     (the block's scores)
    μ^{(t)} = max(μ^{(t−1)}, max_p ω̃_{m,p})               (the running maximum, μ^{(0)} = −∞)
    ℓ^{(t)} = e^{μ^{(t−1)} − μ^{(t)}} ℓ^{(t−1)} + Σ_p e^{ω̃_{m,p} − μ^{(t)}}
    O^{(t)} = e^{μ^{(t−1)} − μ^{(t)}} O^{(t−1)} + Σ_p e^{ω̃_{m,p} − μ^{(t)}} v_p

then C = O^{(T)} / ℓ^{(T)} and the log-sum-exp L = μ^{(T)} + log ℓ^{(T)}, the one number per
row the backward pass keeps. `rescale=False` leaves out the factor e^{μ^{(t−1)} − μ^{(t)}}: the
mistake the derivation's tests and `derive check`'s catch.

The backward pass (`blocked_backward`), with D = rowsum(dC ∘ C) computed once, for each block of
query rows and each block of keys:

    A = e^{ω̃ − L}                  (the weights recomputed from the log-sum-exp)
    dV += Aᵀ dC,  dA = dC Vᵀ,  dΩ̃ = A ∘ (dA − D)
    dQ += scale · dΩ̃ K,  dK += scale · dΩ̃ᵀ Q

each block's contribution kept (`BlockedGradients`). This is how every FlashAttention backward
computes; `attention._fused` explains why our fast path does not (in float32, at large scores,
e^{ω̃ − L} and dA − D lose what an exact softmax keeps; `derive.proofs.rounding` derives it).

Score modifications are the objects of `attention.mods` (`mods=`, as every path takes them;
`flash_attention` and `flash_gradients` also take `causal`, a `window` and a `softcap` by
keyword, turned into the same objects by `attention.mods.modifications`), in the fast path's
order: a rule on the scores (softcapping ω̆ = κ tanh(ω̃ / κ), ALiBi's bias −μ (m − p), Llama
4's temperature, a rule of one's own) changes each block's scores before the running maximum
sees them; a mask (`Causal`, `Window`, `Chunked`, one's own by its `bounds`) sets the scores of
keys a query may not read to −∞, and a block of keys that every query of the block may not read
is skipped (`skipped`: the rule `derive.proofs.online_softmax.skipped_blocks` derives from the
mask; a skipped block leaves the state as it was, which the derivation proves and the tests
check); a sink (`Sinks`, or one's own with `sink = True`) ζ starts every row at μ^{(0)} = ζ,
ℓ^{(0)} = 1, one more term of the sum with no value. The backward pass recomputes the weights
from L (the sink is in it) and takes each rule's `backward` (1 − tanh²(ω̃ / κ) under a softcap);
a mask needs nothing more. Flash computes one head: a modification's number per head (ALiBi's
slope, the sink's logit) is one number here, a constant (no gradient is returned for it; the
fast path `attention._fused` learns both).
"""

import math
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from . import _modify
from . import mods as M
from ._arguments import check_cap, check_positive, check_window
from ._checks import checked
from ._scores import online_start

__all__ = [
    "OnlineState",
    "BlockedGradients",
    "online_softmax",
    "blocked_backward",
    "flash_attention",
    "flash_gradients",
    "skipped",
]


class OnlineState(NamedTuple):
    """The state of the online softmax after each block of keys (T_c of them), and its end.

    Args:
        mu: μ^{(t)}, the running maximum of each row after block t, `(T_c, *batch, n)`.
        ell: ℓ^{(t)}, the running sum of exponentials, `(T_c, *batch, n)`.
        o: O^{(t)}, the running output, not yet divided by ℓ^{(t)}, `(T_c, *batch, n, c_v)`.
        c: the context C = O^{(T)} / ℓ^{(T)}, `(*batch, n, c_v)`.
        lse: the log-sum-exp L = μ^{(T)} + log ℓ^{(T)}, `(*batch, n)`.
    """

    mu: Tensor
    ell: Tensor
    o: Tensor
    c: Tensor
    lse: Tensor


class BlockedGradients(NamedTuple):
    """The gradients of Q, K, V, and what each block added to them.

    Args:
        dQ: the gradient of Q, `(*batch, n, c)`.
        dK: the gradient of K, `(*batch, s, c)`.
        dV: the gradient of V, `(*batch, s, c_v)`.
        dQ_blocks: what each of the T_c blocks of keys added to dQ, `(T_c, *batch, n, c)`.
        dK_blocks: what each of the T_r blocks of queries added to dK, `(T_r, *batch, s, c)`.
        dV_blocks: what each of the T_r blocks of queries added to dV, `(T_r, *batch, s, c_v)`.
    """

    dQ: Tensor
    dK: Tensor
    dV: Tensor
    dQ_blocks: Tensor
    dK_blocks: Tensor
    dV_blocks: Tensor


def skipped(rows: slice, keys: slice, mods: tuple) -> bool:
    """Whether the block of keys `keys` is masked for every query of `rows` (query m reading
    key p ≤ m under `Causal`, and p > m − w with a window, in its own chunk with chunks): it
    lies wholly outside the keys those queries may attend (`key_range`, the fast path's rule
    too).

    Args:
        rows: the queries' positions among the keys, a 0-based slice (a cache's offset
            included).
        keys: the block of keys, a 0-based slice.
        mods: the modifications, `attention.mods` objects, as the paths pass them (checked and
            resolved, not checked here); only the masks among them matter.

    Returns:
        True when no query of `rows` may read a key of `keys`; False without a mask.
    """
    total = max(keys.stop, rows.stop)  # at least the keys read, and the rows' own positions
    low, high = _modify.key_range(mods, rows.start, rows.stop, total)
    return keys.start >= high or keys.stop <= low


def _block_scores(
    q: Tensor, k: Tensor, rows: slice, keys: slice, factor: float, mods: tuple, offset: int
) -> tuple[Tensor, list]:
    """A block's scores through the modifications (`attention._modify.forward`: capped, biased,
    masked), and what their backward needs (`attention._modify.backward`); the rows' positions
    after `offset` tokens."""
    omega = factor * q[..., rows, :] @ k[..., keys, :].transpose(-2, -1)
    block = M.Block(rows.start + offset, rows.stop + offset, keys.start, keys.stop)
    return _modify.forward(omega, mods, block, _modify.learned(mods), inplace=True)


def _blocks(size: int, block: int) -> list[slice]:
    """The consecutive blocks of `block` indices covering 0 … size − 1 (the last shorter)."""
    return [slice(start, min(start + block, size)) for start in range(0, size, block)]


def _scale(where: str, scale: float | None, mods: tuple, c: int) -> float:
    """The factor of q·k: `scale`, or 1/√c with c a modification's own (`QueryScale`) or the
    width; both given is the scale said twice (ValueError)."""
    width = _modify.scaled_width(mods, c)
    if scale is not None and width != c:
        raise ValueError(
            f"{where}: scale={scale} and a query scale in mods= (1/√{width}) say the scale "
            "twice; give one"
        )
    return 1 / math.sqrt(width) if scale is None else scale


def _sizes(where: str, block_rows: int, block_keys: int, scale: float | None) -> None:
    check_positive(where, block_rows=block_rows, block_keys=block_keys)
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{where}: scale must be a positive finite number, got scale={scale!r}")


def _checked_call(
    where: str, q: Tensor, k: Tensor, mods: object, block_rows: int, block_keys: int, scale: object
) -> tuple[tuple, Any, float]:
    """The checks of a call of the forward pass, its errors named after `where` (the function
    the user called): the resolved modifications, the sink, the scores' factor."""
    resolved, sink = _modifications(where, q, k, mods)
    _sizes(where, block_rows, block_keys, scale)  # type: ignore[arg-type]
    return resolved, sink, _scale(where, scale, resolved, q.shape[-1])  # type: ignore[arg-type]


@checked
def online_softmax(
    q: Float[Tensor, "*batch n c"],
    k: Float[Tensor, "*batch s c"],
    v: Float[Tensor, "*batch s c_v"],
    *,
    block_rows: int,
    block_keys: int,
    scale: float | None = None,
    rescale: bool = True,
    mods: tuple = (),
) -> OnlineState:
    """The forward pass of FlashAttention, every block's state kept (see the module docstring).

    Args:
        q: the n queries Q, `(*batch, n, c)`.
        k: the s keys K, `(*batch, s, c)`.
        v: the s values V, `(*batch, s, c_v)`.
        block_rows: B_r, the query rows of a block (the last block may be shorter).
        block_keys: B_c, the keys of a block (the last block may be shorter).
        scale: the scores' factor, positive; None for 1/√c (or 1/√c' with a `QueryScale`'s c'
            in mods).
        rescale: multiply the running ℓ and O by e^{μ^{(t−1)} − μ^{(t)}} when the maximum
            grows; False leaves the factor out (the mistake the tests catch).
        mods: the score modifications, objects of `attention.mods`. A per-head number (ALiBi's
            slope, the sink's logit) is one number here, a constant; a mask places query m at
            position m + offset among the keys, so with one s = n + offset.

    Returns:
        An `OnlineState`: μ^{(t)}, ℓ^{(t)} and O^{(t)} after each of the T_c blocks of keys,
            C `(*batch, n, c_v)` and L `(*batch, n)`; a skipped block's state is the one before
            it.

    Raises:
        ShapeError: when q, k and v differ in `*batch`, q and k in c, k and v in s, a dimension is
            0, or a mod's tensor holds more than one number.
        DtypeError: when q, k and v are not float tensors of one dtype.
        DeviceError: when q, k and v are not on one device.
        ValueError: when block_rows or block_keys is not a positive int, scale is not a
            positive finite number or is given with a `QueryScale`, a mask comes with
            s ≠ n + offset, two mods are of one kind, or the sink's logit is not finite.
        TypeError: when rescale is not a bool, or mods is not a tuple of `Modification`s.
    """
    mods, sink, factor = _checked_call("online_softmax", q, k, mods, block_rows, block_keys, scale)
    keys = _blocks(k.shape[-2], block_keys)
    rows = q.shape[:-1]
    mu = q.new_full((len(keys), *rows), -math.inf)
    ell = q.new_zeros((len(keys), *rows))
    o = q.new_zeros((len(keys), *rows, v.shape[-1]))
    start, ell_start = online_start(sink)  # μ^{(0)}, ℓ^{(0)}: (ζ, 1) with a sink
    offset = _modify.offset_of(mods)
    for i in _blocks(q.shape[-2], block_rows):
        mu_i = q.new_full(q[..., i, 0].shape, start)
        ell_i = torch.full_like(mu_i, ell_start)
        o_i = q.new_zeros((*mu_i.shape, v.shape[-1]))
        for t, block in enumerate(keys):
            if not skipped(_moved(i, offset), block, mods):
                omega, _ = _block_scores(q, k, i, block, factor, mods, offset)
                mu_next = torch.maximum(mu_i, omega.amax(dim=-1))
                shift = torch.where(mu_next > -math.inf, mu_next, 0.0)  # a row masked so far
                rescaled = torch.exp(mu_i - shift) if rescale else torch.ones_like(mu_i)
                p = torch.exp(omega - shift[..., None])
                ell_i = rescaled * ell_i + p.sum(dim=-1)
                o_i = rescaled[..., None] * o_i + p @ v[..., block, :]
                mu_i = mu_next
            mu[t, ..., i], ell[t, ..., i], o[t, ..., i, :] = mu_i, ell_i, o_i
    return OnlineState(mu, ell, o, o[-1] / ell[-1, ..., None], mu[-1] + torch.log(ell[-1]))


def _modifications(
    where: str, q: Tensor, k: Tensor, given: object
) -> tuple[tuple[M.Modification, ...], float | None]:
    """(the call's modifications, checked and in order; the sink's logit ζ, a number, or None).
    Flash computes one head: a number per head is one number. A mask places query m at
    position m + offset among the keys, so with one the keys are s = n + offset."""
    mods = _modify.resolved(_modify.check(where, given, 1), 1, q)  # ALiBi() gets its slope
    offset = _modify.offset_of(mods)
    n, s = q.shape[-2], k.shape[-2]
    if any(mod.is_mask for mod in mods) and s != n + offset:
        raise ValueError(
            f"{where}: the masks place query m at position m + offset among the keys, so they "
            f"need s = n + offset keys, got n={n}, s={s}, offset={offset}"
        )
    logits = _modify.sinks_of(mods)
    if logits is None:
        return mods, None
    sink = float(logits.reshape(-1)[0])
    if not math.isfinite(sink):
        raise ValueError(f"{where}: the sink's logit must be a finite number, got {sink}")
    return mods, sink


def _keywords(
    where: str, causal: bool, window: int | None, softcap: float | None, given: object
) -> tuple:
    """The keywords `causal`, `window` and `softcap` as objects (`attention.mods.modifications`),
    checked, before those `given` by `mods=`."""
    check_window(where, "window", window, causal)
    check_cap(where, "softcap", softcap)
    return _modify.joined(
        where, M.modifications(causal=causal, window=window, softcap=softcap), given, 1
    )


def _moved(rows: slice, offset: int) -> slice:
    """The rows' positions among the keys: after `offset` tokens."""
    return slice(rows.start + offset, rows.stop + offset)


@checked
def blocked_backward(
    q: Float[Tensor, "*batch n c"],
    k: Float[Tensor, "*batch s c"],
    v: Float[Tensor, "*batch s c_v"],
    c: Float[Tensor, "*batch n c_v"],
    lse: Float[Tensor, "*batch n"],
    dc: Float[Tensor, "*batch n c_v"],
    *,
    block_rows: int,
    block_keys: int,
    scale: float | None = None,
    mods: tuple = (),
) -> BlockedGradients:
    """The backward pass of FlashAttention from C and its log-sum-exp L (see the module
    docstring): the weights recomputed block by block as e^{ω̃ − L}, D = rowsum(dC ∘ C) in place
    of rowsum(A ∘ dA); the same modifications as the forward pass, skipped blocks skipped.

    Args:
        q: the n queries Q, `(*batch, n, c)`.
        k: the s keys K, `(*batch, s, c)`.
        v: the s values V, `(*batch, s, c_v)`.
        c: the context C of the forward pass (`OnlineState.c`), `(*batch, n, c_v)`.
        lse: its log-sum-exp L (`OnlineState.lse`), `(*batch, n)`.
        dc: the upstream gradient dC, `(*batch, n, c_v)`.
        block_rows: B_r, the query rows of a block.
        block_keys: B_c, the keys of a block.
        scale: the scores' factor, as the forward pass had it; None for 1/√c (or a
            `QueryScale`'s).
        mods: the forward pass's modifications, objects of `attention.mods` (as
            `online_softmax` takes them).

    Returns:
        A `BlockedGradients`: dQ, dK, dV and what each block added to them.

    Raises:
        ShapeError: when the tensors differ in `*batch`, n, s, c or c_v, a dimension is 0, or a
            mod's tensor holds more than one number.
        DtypeError: when the tensors are not float tensors of one dtype.
        DeviceError: when the tensors are not on one device.
        ValueError: when block_rows or block_keys is not a positive int, scale is not a
            positive finite number or is given with a `QueryScale`, a mask comes with
            s ≠ n + offset, two mods are of one kind, or the sink's logit is not finite.
        TypeError: when mods is not a tuple of `Modification`s.
    """
    mods, _ = _modifications("blocked_backward", q, k, mods)
    offset = _modify.offset_of(mods)
    _sizes("blocked_backward", block_rows, block_keys, scale)
    factor = _scale("blocked_backward", scale, mods, q.shape[-1])
    queries, keys = _blocks(q.shape[-2], block_rows), _blocks(k.shape[-2], block_keys)
    d = (dc * c).sum(dim=-1)  # D_m = Σ_j dc_{m,j} c_{m,j}, the rowsum identity
    dq_blocks = q.new_zeros((len(keys), *q.shape))
    dk_blocks = k.new_zeros((len(queries), *k.shape))
    dv_blocks = v.new_zeros((len(queries), *v.shape))
    for i, rows in enumerate(queries):
        for t, block in enumerate(keys):
            if skipped(_moved(rows, offset), block, mods):
                continue
            omega, saved = _block_scores(q, k, rows, block, factor, mods, offset)
            a = torch.exp(omega - lse[..., rows, None])
            dv_blocks[i, ..., block, :] += a.transpose(-2, -1) @ dc[..., rows, :]
            da = dc[..., rows, :] @ v[..., block, :].transpose(-2, -1)
            domega = a * (da - d[..., rows, None])
            where = M.Block(rows.start + offset, rows.stop + offset, block.start, block.stop)
            _modify.backward(domega, mods, saved, where, {})  # e.g. the softcap's 1 − tanh²(ω̃ / κ)
            dq_blocks[t, ..., rows, :] += factor * domega @ k[..., block, :]
            dk_blocks[i, ..., block, :] += factor * domega.transpose(-2, -1) @ q[..., rows, :]
    return BlockedGradients(
        dq_blocks.sum(0), dk_blocks.sum(0), dv_blocks.sum(0), dq_blocks, dk_blocks, dv_blocks
    )


@checked
def flash_attention(
    q: Float[Tensor, "*batch n c"],
    k: Float[Tensor, "*batch s c"],
    v: Float[Tensor, "*batch s c_v"],
    *,
    block_rows: int,
    block_keys: int,
    scale: float | None = None,
    rescale: bool = True,
    causal: bool = False,
    window: int | None = None,
    softcap: float | None = None,
    mods: tuple = (),
) -> Float[Tensor, "*batch n c_v"]:
    """The context C = softmax(scale · Q Kᵀ) V by the online softmax (`online_softmax`), with
    its score modifications: `mods`, and `causal`, a `window` and a `softcap` by keyword, turned
    into the same objects.

    Args:
        q: the n queries Q, `(*batch, n, c)`.
        k: the s keys K, `(*batch, s, c)`; s = n with causal.
        v: the s values V, `(*batch, s, c_v)`.
        block_rows: B_r, the query rows of a block.
        block_keys: B_c, the keys of a block.
        scale: the scores' factor, positive; None for 1/√c (or a `QueryScale`'s).
        rescale: the online softmax's rescaling; False leaves it out (`online_softmax`).
        causal: query m attends the keys p ≤ m.
        window: w, with causal: query m attends the keys m − w < p ≤ m; None for none.
        softcap: κ, each scaled score ω̃ replaced by κ tanh(ω̃/κ); None for none.
        mods: more modifications, objects of `attention.mods` (as `online_softmax` takes
            them), one of each kind with those of the keywords.

    Returns:
        The context C, `(*batch, n, c_v)`.

    Raises:
        ShapeError: when q, k and v differ in `*batch`, q and k in c, k and v in s, a dimension is
            0, or a mod's tensor holds more than one number.
        DtypeError: when q, k and v are not float tensors of one dtype.
        DeviceError: when q, k and v are not on one device.
        ValueError: when block_rows or block_keys is not a positive int, scale is not a
            positive finite number or is given with a `QueryScale`, window is not a positive
            int or comes without causal, softcap is not a positive number, a mask comes with
            s ≠ n + offset, a keyword and a mod say the same thing, or the sink's logit is not
            finite.
        TypeError: when rescale or causal is not a bool, or mods is not a tuple of
            `Modification`s.
    """
    mods = _keywords("flash_attention", causal, window, softcap, mods)
    _checked_call("flash_attention", q, k, mods, block_rows, block_keys, scale)  # named so
    return online_softmax(
        q,
        k,
        v,
        block_rows=block_rows,
        block_keys=block_keys,
        scale=scale,
        rescale=rescale,
        mods=mods,
    ).c


@checked
def flash_gradients(
    q: Float[Tensor, "*batch n c"],
    k: Float[Tensor, "*batch s c"],
    v: Float[Tensor, "*batch s c_v"],
    dc: Float[Tensor, "*batch n c_v"],
    *,
    block_rows: int,
    block_keys: int,
    scale: float | None = None,
    causal: bool = False,
    window: int | None = None,
    softcap: float | None = None,
    mods: tuple = (),
) -> BlockedGradients:
    """dQ, dK, dV for the upstream gradient dC: the forward pass, then the backward pass from
    its C and log-sum-exp, with the same modifications (as `flash_attention` takes them).

    Args:
        q: the n queries Q, `(*batch, n, c)`.
        k: the s keys K, `(*batch, s, c)`; s = n with causal.
        v: the s values V, `(*batch, s, c_v)`.
        dc: the upstream gradient dC, `(*batch, n, c_v)`.
        block_rows: B_r, the query rows of a block.
        block_keys: B_c, the keys of a block.
        scale: the scores' factor, positive; None for 1/√c (or a `QueryScale`'s).
        causal: query m attends the keys p ≤ m.
        window: w, with causal: query m attends the keys m − w < p ≤ m; None for none.
        softcap: κ, each scaled score ω̃ replaced by κ tanh(ω̃/κ); None for none.
        mods: more modifications, objects of `attention.mods`, one of each kind with those of
            the keywords.

    Returns:
        A `BlockedGradients`: dQ, dK, dV and what each block added to them.

    Raises:
        ShapeError: when the tensors differ in `*batch`, n, s, c or c_v, a dimension is 0, or a
            mod's tensor holds more than one number.
        DtypeError: when the tensors are not float tensors of one dtype.
        DeviceError: when the tensors are not on one device.
        ValueError: when block_rows or block_keys is not a positive int, scale is not a
            positive finite number or is given with a `QueryScale`, window is not a positive
            int or comes without causal, softcap is not a positive number, a mask comes with
            s ≠ n + offset, a keyword and a mod say the same thing, or the sink's logit is not
            finite.
        TypeError: when causal is not a bool, or mods is not a tuple of `Modification`s.
    """
    mods = _keywords("flash_gradients", causal, window, softcap, mods)
    _checked_call("flash_gradients", q, k, mods, block_rows, block_keys, scale)  # named so
    sizes: dict[str, Any] = dict(block_rows=block_rows, block_keys=block_keys, scale=scale)
    state = online_softmax(q, k, v, **sizes, mods=mods)
    return blocked_backward(q, k, v, state.c, state.lse, dc, **sizes, mods=mods)
