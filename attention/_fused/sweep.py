"""The blocks of the fast path when torch's kernel cannot compute the scores (a modification
that changes their values, or a sink), and the exact backward pass of every case: each block of
query rows against the keys its masks reach, its scores computed, modified by each modification
of the tuple (`attention._modify.forward`) and normalised in full; with the upstream gradient, the
block's gradients (the package docstring's formulas), through each modification in reverse
(`attention._modify.backward`)."""

import typing

import torch
from torch import Tensor

from .. import _modify, _scores
from .. import mods as M
from .blocks import each, packs, plan

__all__ = ["sweep"]


def sweep(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    mods: tuple,
    allowed: Tensor | None,
    grad_out: Tensor | None = None,
    wanted: frozenset[str] = frozenset(),
) -> tuple:
    """(C,) without `grad_out`; with it, (dQ, dK, dV, {kind: the gradient of its parameter
    (h,)}) for the learned parameters whose kinds are in `wanted`."""
    batch, heads, n, width = q.shape
    groups, total = k.shape[1], k.shape[2]
    r = heads // groups
    pack, rows = plan(batch * groups, n, total, _modify.reach(mods), r)
    tensors, where = packs(q, k, v, grad_out, pack)
    q_all, k_all, v_all = tensors[:3]
    offset = _modify.offset_of(mods)
    params = {  # each learned tensor (h,) as (g, h/g, 1, 1): a pack picks its groups
        kind: t.to(q.dtype).view(groups, r)[..., None, None]
        for kind, t in _modify.learned(mods).items()
    }
    sink_kind = _modify.sink_kind(mods)
    backward = grad_out is not None
    if backward:
        g_all = tensors[3]
        dq = torch.empty_like(q).view(q_all.shape)  # q's memory layout, its packs' view
        dk, dv = torch.zeros_like(k).view(k_all.shape), torch.zeros_like(v).view(v_all.shape)
        grads = {kind: q.new_zeros((batch, groups, r)) for kind in params if kind in wanted}
    else:
        out = torch.empty_like(q).view(q_all.shape)

    def one_pack(item: tuple) -> None:
        index, entries, group_of = item
        own = {kind: t[group_of] for kind, t in params.items()}  # (G, r, 1, 1)
        learning = {kind: t for kind, t in own.items() if backward and kind in grads}  # pyright: ignore[reportPossiblyUnboundVariable]
        sink = own.get(sink_kind) if sink_kind else None
        given = None
        if allowed is not None:  # (B or 1, 1, R, s) -> (G, 1, R, s): each slice's batch entry
            given = allowed[entries if allowed.shape[0] > 1 else torch.zeros_like(entries)]
        q_s, k_s, v_s = q_all[index], k_all[index], v_all[index]  # (G, r, n, c_h), (G, s, c_h)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            first, last = r0 + offset, r1 + offset
            block = M.Block(first, last, *_modify.key_range(mods, first, last, total))
            low, high = block.low, block.high
            target = (dq if backward else out)[index]  # pyright: ignore[reportPossiblyUnboundVariable]
            if high <= low:  # no key for any of these queries: zero rows, no gradient
                target[:, :, r0:r1] = 0.0
                continue
            shape = (q_s.shape[0], r, r1 - r0, high - low)  # (G, h/g, b, K)
            q_b = q_s[:, :, r0:r1].reshape(shape[0], -1, width) * scale  # (G, r·b, c_h)
            k_b, v_b = k_s[:, low:high], v_s[:, low:high]
            s = torch.bmm(q_b, k_b.transpose(1, 2)).view(shape)  # (G, r·b, c_h) @ (G, c_h, K)
            s, saved = _modify.forward(s, mods, block, own, inplace=True)
            if given is not None:
                rows_of = slice(r0, r1) if given.shape[-2] > 1 else slice(None)
                s = s.masked_fill_(~given[..., rows_of, low:high], float("-inf"))
            sink_weight = None
            if sink is None:
                a = torch.softmax(s, dim=-1)  # (G, r, b, K)
                if given is not None:  # a row with no key: 0/0 above, zero weights by convention
                    a.masked_fill_(torch.isneginf(s.amax(dim=-1, keepdim=True)), 0.0)
            else:
                a, sink_weight = _scores.sink_normalised(s, sink, overwrite=True)
            a_b = a.view(shape[0], -1, shape[3])  # (G, h/g, b, K) -> (G, r·b, K)
            if not backward:
                target[:, :, r0:r1] = torch.bmm(a_b, v_b).view(*shape[:3], width)
                continue
            g_b = g_all[index][:, :, r0:r1].reshape(shape[0], -1, width)  # pyright: ignore[reportPossiblyUnboundVariable]
            dv[index][:, low:high].baddbmm_(a_b.transpose(1, 2), g_b)  # += Aᵀ dC  # pyright: ignore[reportPossiblyUnboundVariable]
            d_a = torch.bmm(g_b, v_b.transpose(1, 2))  # dA = dC Vᵀ: (G, r·b, K)
            d_s = torch._softmax_backward_data(d_a, a_b, -1, a_b.dtype)  # A ∘ (dA − rowsum)  # pyright: ignore[reportPrivateImportUsage]  # no public name
            if sink_kind in learning:  # the sink's: a key with no value, read by every row
                along = (a_b * d_a).sum(dim=-1).view(shape[:3])  # (G, r, b)
                weight = typing.cast(Tensor, sink_weight).squeeze(-1)  # with a sink: a tensor
                grads[sink_kind][entries, group_of] += _scores.sink_gradient(weight, along)  # pyright: ignore[reportPossiblyUnboundVariable]
            found = _modify.backward(d_s.view(shape), mods, saved, block, learning)
            for kind, grad in found.items():
                grads[kind][entries, group_of] += grad  # pyright: ignore[reportPossiblyUnboundVariable]
            target[:, :, r0:r1] = torch.bmm(d_s, k_b).view(*shape[:3], width)
            dk[index][:, low:high].baddbmm_(d_s.transpose(1, 2), q_b)  # += dΩ̃ᵀ (scale Q)  # pyright: ignore[reportPossiblyUnboundVariable]

    each(one_pack, where, q.device)
    if not backward:
        return (out.view(q.shape),)  # pyright: ignore[reportPossiblyUnboundVariable]
    dq = dq.view(q.shape).mul_(scale)  # dQ = scale · dΩ̃ K  # pyright: ignore[reportPossiblyUnboundVariable]
    learned = _modify.learned(mods)
    summed = {
        kind: grad.sum(dim=0).view(heads).to(learned[kind].dtype)  # (B, g, r) -> (h,)
        for kind, grad in grads.items()  # pyright: ignore[reportPossiblyUnboundVariable]
    }
    return dq, dk.view(k.shape), dv.view(v.shape), summed  # pyright: ignore[reportPossiblyUnboundVariable]
