"""The modification protocol decides, never the class: a user's mask that states only
`bounds`, a user's score rule that states `scores` and `backward`, and a user's sink (`sink =
True`), each declared here and not in the package, run on the fast path, the explicit path,
flash and generation with a cache, alone and beside each built-in modification, with values and
gradients equal to a float64 reference written from the formulas; what a path cannot apply is
refused by name, never dropped."""

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import Tensor

from attention import _core, _modify, flash
from attention import mods as M

N, WIDTH = 9, 4


@dataclass(frozen=True)
class TwoChunks(M.Modification):
    """A user's mask: query m reads its own chunk of `size` and the one before it (with
    Causal, up to m). Only `bounds`: no `scores` written."""

    size: int
    stage: ClassVar[int] = 33
    shifts: ClassVar[bool] = False

    def bounds(self, m):
        return (m // self.size) * self.size - self.size, None


@dataclass(frozen=True)
class Clamp(M.Modification):
    """A user's score rule: each scaled score clamped into [−b, b]; the gradient passes where
    |ω̃| < b and stops elsewhere."""

    bound: float
    stage: ClassVar[int] = 22

    def scores(self, s, block, param, inplace):
        inside = s.abs() < self.bound
        return (
            s.clamp_(-self.bound, self.bound) if inplace else s.clamp(-self.bound, self.bound)
        ), inside

    def backward(self, d_s, saved, block, param):
        d_s.mul_(saved)
        return None


@dataclass(frozen=True, eq=False)
class OwnSink(M.Modification):
    """A user's sink: a logit per head in each row's denominator, declared by the protocol's
    `sink` and `parameter` alone."""

    logits: Tensor | None = None
    stage: ClassVar[int] = 41
    parameter: ClassVar[str | None] = "logits"
    sink: ClassVar[bool] = True


def _allowed(n: int, size: int | None) -> Tensor:
    m, p = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = p <= m
    if size is not None:
        allowed &= p >= (m // size) * size - size
    return allowed


def _reference(
    q, k, v, *, size=None, bound=None, cap=None, slopes=None, sink=None, tempered=None
) -> Tensor:
    """softmax of the modified scaled scores, each row with e^{ζ} in its denominator, in
    float64, from the formulas (q (B, h, n, c), k and v with as many heads)."""
    n = q.shape[-2]
    s = (q @ k.mT) / math.sqrt(q.shape[-1])
    if tempered is not None:  # τ_m = α log(1 + ⌊(m + 1)/F⌋) + 1, (F, α)
        floor, alpha = tempered
        m = torch.arange(n, dtype=torch.float64)[:, None]
        s = s * (alpha * torch.log1p(torch.floor((m + 1) / floor)) + 1)
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    if bound is not None:
        s = s.clamp(-bound, bound)
    if slopes is not None:
        m, p = torch.arange(n)[:, None], torch.arange(n)[None, :]
        s = s - slopes[:, None, None] * (m - p)
    s = s.masked_fill(~_allowed(n, size), float("-inf"))
    if sink is not None:
        z = sink[:, None, None].expand(*s.shape[:-1], 1)
        return torch.cat([s, z], dim=-1).softmax(-1)[..., :-1] @ v
    return s.softmax(-1) @ v


def _qkv(heads: int = 2, seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, heads, N, WIDTH, generator=g, dtype=torch.float64) * 2 for _ in "qkv"]


#: The built-ins beside the user's, with the reference's keyword for each.
BESIDE = {
    "none": ((), {}),
    "softcap": ((M.Softcap(3.0),), {"cap": 3.0}),
    "alibi": ("alibi", {}),
    "temperature": ((M.Temperature(2.0, 0.5),), {"tempered": (2.0, 0.5)}),
    "sinks": ("sinks", {}),
}

USERS = {
    "mask": (lambda: (TwoChunks(3),), {"size": 3}),
    "score rule": (lambda: (Clamp(1.5),), {"bound": 1.5}),
    "mask and score rule": (lambda: (TwoChunks(3), Clamp(1.5)), {"size": 3, "bound": 1.5}),
}


def _built(beside: str, tensors: dict) -> tuple[tuple, dict]:
    mods, keywords = BESIDE[beside]
    if mods == "alibi":
        return (M.ALiBi(tensors["param"]),), {"slopes": tensors["param"]}
    if mods == "sinks":
        return (M.Sinks(tensors["param"]),), {"sink": tensors["param"]}
    return mods, dict(keywords)


@pytest.mark.parametrize("beside", sorted(BESIDE))
@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("path", ["fast", "explicit"])
def test_a_users_modification_beside_each_built_in_on_both_paths(user, beside, path):
    """Values and the gradients of Q, K, V (and of the built-in's tensor per head) against the
    float64 reference from the formulas."""
    q, k, v = (t.requires_grad_() for t in _qkv())
    param = (torch.rand(2, dtype=torch.float64) * 0.5).requires_grad_()
    make, user_keywords = USERS[user]
    built, keywords = _built(beside, {"param": param})
    mods = M.ordered((M.Causal(), *make(), *built))
    out = _core.attend(
        q, k, v, scale=WIDTH**-0.5, heads=True, mods=mods, return_weights=path == "explicit"
    )
    out = out[0] if path == "explicit" else out
    expected = _reference(q, k, v, **user_keywords, **keywords)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    leaves = [q, k, v, *([param] if beside in ("alibi", "sinks") else [])]
    upstream = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, leaves, upstream)
    want = torch.autograd.grad(expected, leaves, upstream)
    for have, wanted in zip(got, want, strict=True):
        torch.testing.assert_close(have, wanted, rtol=1e-9, atol=1e-11)


def test_a_users_mask_skips_the_blocks_it_rules_out():
    """The keys the fast path reads for a block follow the user's bounds: the last queries of
    a long sequence read two chunks, not every key before them."""
    mods = (M.Causal(), TwoChunks(4))
    assert _modify.key_range(mods, 12, 16, 16) == (8, 16)
    assert _modify.masks_only(mods) and not _modify.masks_only((M.Causal(), Clamp(1.0)))


def test_a_users_sink_is_the_built_in_sink():
    q, k, v = (t.requires_grad_() for t in _qkv())
    logits = torch.tensor([0.3, -0.2], dtype=torch.float64, requires_grad=True)
    results = []
    for kind in (OwnSink, M.Sinks):
        out = _core.attend(q, k, v, scale=0.5, heads=True, mods=(M.Causal(), kind(logits)))
        results.append((out, torch.autograd.grad(out.sum(), (q, k, v, logits))))
    (own, own_grads), (built, built_grads) = results
    torch.testing.assert_close(own, built, rtol=0, atol=0)
    for have, want in zip(own_grads, built_grads, strict=True):
        torch.testing.assert_close(have, want, rtol=0, atol=0)


@pytest.mark.parametrize("user", sorted(USERS))
def test_a_users_modification_in_flash(user):
    """FlashAttention's blocked forward and backward with the user's objects in mods= (one
    head), against the reference."""
    make, keywords = USERS[user]
    q, k, v = (t[0, 0] for t in _qkv(heads=1))
    options = {"block_rows": 2, "block_keys": 3, "causal": True, "mods": make()}
    c = flash.flash_attention(q, k, v, **options)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = _reference(*(t[None, None] for t in leaves), **keywords)[0, 0]
    torch.testing.assert_close(c, expected.detach(), rtol=1e-10, atol=1e-12)
    upstream = torch.randn(c.shape, dtype=torch.float64)
    got = flash.flash_gradients(q, k, v, upstream, **options)
    want = torch.autograd.grad(expected, leaves, upstream)
    for have, wanted in zip((got.dQ, got.dK, got.dV), want, strict=True):
        torch.testing.assert_close(have, wanted, rtol=1e-9, atol=1e-11)


def test_a_users_sink_in_flash_is_the_built_in_sink():
    """Flash starts each row's state at the logit of whatever object says `sink = True`."""
    q, k, v = (t[0, 0] for t in _qkv(heads=1))
    logit = torch.tensor([0.7], dtype=torch.float64)
    sizes = {"block_rows": 2, "block_keys": 2, "causal": True}
    own = flash.flash_attention(q, k, v, **sizes, mods=(OwnSink(logit),))
    built = flash.flash_attention(q, k, v, **sizes, mods=(M.Sinks(logit),))
    torch.testing.assert_close(own, built, rtol=0, atol=0)
    assert (own - flash.flash_attention(q, k, v, **sizes)).abs().max() > 1e-3


@pytest.mark.parametrize("user", sorted(USERS))
def test_a_users_modification_with_a_cache(user):
    """The last t tokens' rows computed against the keys of every token so far (generation
    with a cache: causal at an offset) equal the last rows of the whole sequence's."""
    make, keywords = USERS[user]
    q, k, v = _qkv()
    whole = _reference(q, k, v, **keywords)
    for t in (1, 4):
        rows = _core.attend_new_rows(
            q[..., -t:, :], k, v, scale=WIDTH**-0.5, mods=make(), dropout_p=0.0, heads=True
        )
        torch.testing.assert_close(rows, whole[..., -t:, :], rtol=1e-10, atol=1e-12)


@dataclass(frozen=True)
class OwnChunks(M.Modification):
    """A user's chunks made for causal attention (as Llama 4's are): query m reads the keys of
    its own chunk of `size`; `needs_causal` says a module built with it masks causally."""

    size: int
    stage: ClassVar[int] = 33
    shifts: ClassVar[bool] = False
    needs_causal: ClassVar[bool] = True

    def bounds(self, m):
        first = (m // self.size) * self.size
        return first, first + self.size


class LooseChunks(OwnChunks):
    """The same chunks, not said to be made for causal attention."""

    needs_causal: ClassVar[bool] = False


@dataclass(frozen=True)
class OwnWindow(M.Modification):
    """A user's window that belongs to the call, as the built-in `Window` does: a module takes
    it from its forward's mask, so `of_the_call` makes a module built with it refuse it."""

    size: int
    stage: ClassVar[int] = 34
    of_the_call: ClassVar[bool] = True

    def bounds(self, m):
        return m - self.size + 1, None


def _grouped(mods: tuple) -> torch.nn.Module:
    from attention import GroupedQueryAttention

    torch.manual_seed(3)
    return GroupedQueryAttention(8, num_heads=2, num_kv_groups=1, mods=mods).double()


@pytest.mark.parametrize(
    ("mod", "needs"),
    [(OwnChunks(3), True), (LooseChunks(3), False), (M.ALiBi(), True)],
    ids=["chunks made for causal attention", "chunks not said so", "ALiBi in mods="],
)
def test_a_mask_made_for_causal_attention_makes_the_module_causal(mod, needs):
    """`needs_causal` (Chunked's, ALiBi's) read from the protocol: the book's grouped module
    built with such a modification, called without a mask, gives what it gives with the causal
    mask; without the flag, a query also reads the later keys of its chunk."""
    module = _grouped((mod,))
    x = torch.randn(2, N, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    causal = module(x, torch.ones(N, N, dtype=torch.bool).triu(1))
    assert torch.allclose(module(x), causal, rtol=1e-10, atol=1e-12) == needs


def test_a_users_mask_of_the_call_is_refused_by_a_module_and_named():
    with pytest.raises(ValueError, match=r"mods\[0\] \(OwnWindow\) is the call's mask"):
        _grouped((OwnWindow(4),))
    assert _grouped((TwoChunks(3),)).score_mods  # a mask that is not the call's is taken
