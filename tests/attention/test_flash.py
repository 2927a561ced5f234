"""attention.flash: FlashAttention's algorithm block by block, against the softmax written out
(every block's state, the context, the log-sum-exp, the gradients and each block's share of
them), and its bad input."""

import math

import pytest
import torch

from attention import _modify
from attention import flash as F
from attention import mods as M
from attention._shapes import ShapeError


def _drawn(*shape, scale=3.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale


def _qkv(batch=(2,), n=7, s=7, c=4, seed=0):
    return (
        _drawn(*batch, n, c, seed=seed),
        _drawn(*batch, s, c, seed=seed + 1),
        _drawn(*batch, s, 3, seed=seed + 2),
    )


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


@pytest.mark.parametrize(("block_rows", "block_keys"), [(1, 1), (3, 2), (2, 3), (7, 7), (4, 9)])
def test_every_block_state_is_the_softmax_of_the_keys_seen(block_rows, block_keys):
    q, k, v = _qkv()
    state = F.online_softmax(q, k, v, block_rows=block_rows, block_keys=block_keys)
    omega = _scores(q, k)
    blocks = math.ceil(7 / block_keys)
    assert state.mu.shape == (blocks, 2, 7) and state.o.shape == (blocks, 2, 7, 3)
    for t in range(blocks):
        seen = omega[..., : min((t + 1) * block_keys, 7)]
        mu = seen.amax(dim=-1)
        weights = torch.exp(seen - mu[..., None])
        torch.testing.assert_close(state.mu[t], mu, rtol=0, atol=1e-13)
        torch.testing.assert_close(state.ell[t], weights.sum(-1), rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(
            state.o[t], weights @ v[..., : seen.shape[-1], :], rtol=1e-13, atol=1e-13
        )
    torch.testing.assert_close(state.c, torch.softmax(omega, -1) @ v, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(state.lse, torch.logsumexp(omega, -1), rtol=1e-13, atol=1e-13)


def test_without_the_rescaling_the_context_is_wrong():
    q, k, v = _qkv(batch=(), n=2, s=4)
    k[2:] *= 10  # the second block of keys raises every row's maximum
    right = F.flash_attention(q, k, v, block_rows=2, block_keys=2)
    wrong = F.flash_attention(q, k, v, block_rows=2, block_keys=2, rescale=False)
    torch.testing.assert_close(right, torch.softmax(_scores(q, k), -1) @ v)
    assert (wrong - right).abs().max() > 1e-3
    # with one block there is nothing to rescale
    one = F.flash_attention(q, k, v, block_rows=2, block_keys=4, rescale=False)
    torch.testing.assert_close(one, right, rtol=1e-13, atol=1e-13)


def test_a_scale_of_its_own():
    q, k, v = _qkv(batch=())
    got = F.flash_attention(q, k, v, block_rows=2, block_keys=3, scale=0.25)
    want = torch.softmax(0.25 * q @ k.T, -1) @ v
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("block_rows", "block_keys"), [(1, 1), (3, 2), (5, 3)])
def test_the_gradients_and_each_block_share(block_rows, block_keys):
    q, k, v = _qkv(n=5, s=6)
    dc = _drawn(2, 5, 3, seed=9)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    (torch.softmax(_scores(*leaves[:2]), -1) @ leaves[2]).backward(dc)
    got = F.flash_gradients(q, k, v, dc, block_rows=block_rows, block_keys=block_keys)
    for ours, theirs in zip(got[:3], leaves, strict=True):
        torch.testing.assert_close(ours, theirs.grad, rtol=1e-12, atol=1e-12)
    # a block of queries' share of dK and dV: the gradient of its own rows of C alone
    for i, start in enumerate(range(0, 5, block_rows)):
        rows = slice(start, start + block_rows)
        part = [t.clone().requires_grad_() for t in (q, k, v)]
        c = torch.softmax(_scores(*part[:2]), -1) @ part[2]
        (c[..., rows, :] * dc[..., rows, :]).sum().backward()
        torch.testing.assert_close(got.dK_blocks[i], part[1].grad, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.dV_blocks[i], part[2].grad, rtol=1e-12, atol=1e-12)
    # a block of keys' share of dQ: the gradient with the other keys' scores held fixed
    omega = _scores(q, k).detach()
    for t, start in enumerate(range(0, 6, block_keys)):
        keys = slice(start, start + block_keys)
        held = q.clone().requires_grad_()
        live = held @ k[..., keys, :].transpose(-2, -1) / 2  # c = 4
        whole = torch.cat([omega[..., :start], live, omega[..., start + live.shape[-1] :]], -1)
        ((torch.softmax(whole, -1) @ v) * dc).sum().backward()
        torch.testing.assert_close(got.dQ_blocks[t], held.grad, rtol=1e-12, atol=1e-12)


def test_the_backward_pass_from_a_wrong_log_sum_exp_is_wrong():
    q, k, v = _qkv(n=4, s=4)
    dc = _drawn(2, 4, 3, seed=5)
    state = F.online_softmax(q, k, v, block_rows=2, block_keys=2)
    right = F.blocked_backward(q, k, v, state.c, state.lse, dc, block_rows=2, block_keys=2)
    at_maximum = F.blocked_backward(q, k, v, state.c, state.mu[-1], dc, block_rows=2, block_keys=2)
    assert (right.dQ - at_maximum.dQ).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        (
            {"block_rows": 0},
            r"online_softmax: block_rows must be a positive integer, got "
            r"block_rows=0",
        ),
        ({"block_keys": True}, r"block_keys must be a positive integer, got block_keys=True"),
        ({"scale": -1.0}, r"scale must be a positive finite number, got scale=-1.0"),
        ({"scale": math.inf}, r"scale must be a positive finite number, got scale=inf"),
    ],
)
def test_bad_options_are_named(keywords, message):
    q, k, v = _qkv()
    with pytest.raises((ValueError, TypeError), match=message):
        F.online_softmax(q, k, v, **({"block_rows": 2, "block_keys": 2} | keywords))
    for function, more in ((F.flash_attention, ()), (F.flash_gradients, (v,))):
        name = function.__name__  # the function called is the one named, not the one inside
        with pytest.raises((ValueError, TypeError), match=rf"^{name}: .*{message.split(': ')[-1]}"):
            function(q, k, v, *more, **({"block_rows": 2, "block_keys": 2} | keywords))


def test_shapes_that_do_not_fit_are_named():
    q, k, v = _qkv()
    with pytest.raises(Exception, match=r"k has c=3 but q has c=4"):
        F.online_softmax(q, k[..., :3], v, block_rows=2, block_keys=2)
    with pytest.raises(Exception, match=r"\bs\b"):
        F.online_softmax(q, k, v[..., :5, :], block_rows=2, block_keys=2)
    with pytest.raises(Exception, match=r"lse"):
        F.blocked_backward(q, k, v, v, v[..., :5, 0], v, block_rows=2, block_keys=2)


def _modified_reference(q, k, v, *, causal=False, window=None, softcap=None, slope=None, sink=None):
    """The context with the modifications written out whole: scores, cap, bias, mask, softmax
    with the sink's column, C = A V."""
    n, s = q.shape[-2], k.shape[-2]
    omega = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if softcap is not None:
        omega = softcap * torch.tanh(omega / softcap)
    m, p = torch.arange(n)[:, None], torch.arange(s)[None, :]
    if slope is not None:
        omega = omega - slope * (m - p)
    if causal:
        allowed = (p <= m) & ((p > m - window) if window is not None else True)
        omega = omega.masked_fill(~allowed, -math.inf)
    if sink is not None:
        column = omega.new_full((*omega.shape[:-1], 1), sink)
        return torch.softmax(torch.cat([omega, column], dim=-1), dim=-1)[..., :-1] @ v
    return torch.softmax(omega, dim=-1) @ v


def _flash(options):
    """The options as flash takes them: `causal`, `window` and `softcap` by keyword, ALiBi's
    slope and the sink's logit as `attention.mods` objects of one number (one head)."""
    options = dict(options)
    slope, sink = options.pop("slope", None), options.pop("sink", None)
    number = lambda value: torch.tensor([value], dtype=torch.float64)  # noqa: E731
    mods = (() if slope is None else (M.ALiBi(number(slope)),)) + (
        () if sink is None else (M.Sinks(number(sink)),)
    )
    return options | {"mods": mods}


MODIFIED = [
    dict(causal=True),
    dict(causal=True, window=3),
    dict(softcap=2.0),
    dict(causal=True, slope=0.5),
    dict(causal=True, sink=1.5),
    dict(causal=True, window=2, softcap=3.0, slope=0.25, sink=-0.5),
]


@pytest.mark.parametrize("options", MODIFIED, ids=lambda o: "+".join(o))
@pytest.mark.parametrize(("block_rows", "block_keys"), [(2, 3), (3, 2), (1, 1)])
def test_the_modifications_stream_as_the_whole_softmax(options, block_rows, block_keys):
    g = torch.Generator().manual_seed(block_rows * 7 + block_keys)
    q, k, v, dc = (torch.randn(2, 7, 3, generator=g, dtype=torch.float64) for _ in range(4))
    sizes = dict(block_rows=block_rows, block_keys=block_keys)
    got = F.flash_attention(q, k, v, **sizes, **_flash(options))
    torch.testing.assert_close(got, _modified_reference(q, k, v, **options), rtol=1e-12, atol=1e-12)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad(_modified_reference(*leaves, **options), leaves, dc)
    found = F.flash_gradients(q, k, v, dc, **sizes, **_flash(options))
    for mine, theirs in zip((found.dQ, found.dK, found.dV), expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("window", [None, 2, 4])
def test_skipped_blocks_are_the_derived_ones(window):
    import sympy as sp

    import derive
    from derive.notation import letters as L
    from derive.proofs import streamed

    name = "causal" if window is None else "sliding-window"
    rule = streamed.skipped_blocks(derive.variant(name).graph).claim.rhs
    i, j = sp.symbols("i j", integer=True, positive=True)
    modified = M.modifications(causal=True, window=window)
    n = 9
    for rows in range(1, n + 1):
        for keys in range(1, n + 1):
            for a, first_row in enumerate(range(0, n, rows), 1):
                for b, first_key in enumerate(range(0, n, keys), 1):
                    at = {i: a, j: b, L.B_r: rows, L.B_c: keys, L.w: window or n}
                    mine = F.skipped(
                        slice(first_row, min(first_row + rows, n)),
                        slice(first_key, min(first_key + keys, n)),
                        modified,
                    )
                    assert mine == bool(rule.xreplace(at)), (rows, keys, a, b)


@pytest.mark.parametrize("options", MODIFIED, ids=lambda o: "+".join(o))
def test_skipping_the_masked_blocks_changes_no_state(options, monkeypatch):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(9, 2, generator=g, dtype=torch.float64) for _ in range(3))
    sizes = dict(block_rows=2, block_keys=3)
    keywords = _flash(options)
    mods = F._keywords(
        "test", *(keywords.get(o) for o in ("causal", "window", "softcap")), keywords["mods"]
    )
    skipping = F.online_softmax(q, k, v, **sizes, mods=mods)
    count = [F.skipped(r, b, mods) for r in F._blocks(9, 2) for b in F._blocks(9, 3)]
    monkeypatch.setattr(F, "skipped", lambda rows, keys, modified: False)
    every = F.online_softmax(q, k, v, **sizes, mods=mods)
    assert any(count) == options.get("causal", False)  # a mask skips blocks; no mask, none
    for mine, full in zip(skipping, every, strict=True):
        torch.testing.assert_close(mine, full, rtol=0, atol=0)


def test_bad_modifications_are_named():
    q = torch.randn(4, 2)
    with pytest.raises(ValueError, match="window=2 needs causal=True"):
        F.flash_attention(q, q, q, block_rows=2, block_keys=2, window=2)
    with pytest.raises(ValueError, match="softcap must be a positive number"):
        F.flash_attention(q, q, q, block_rows=2, block_keys=2, softcap=-1.0)
    with pytest.raises(ValueError, match="the sink's logit must be a finite number, got inf"):
        F.flash_attention(
            q, q, q, block_rows=2, block_keys=2, mods=(M.Sinks(torch.tensor([math.inf])),)
        )
    with pytest.raises(ValueError, match=r"need s = n \+ offset keys, got n=4, s=3, offset=0"):
        F.flash_attention(q, q[:3], q[:3], block_rows=2, block_keys=2, causal=True)
    with pytest.raises(ShapeError, match=r"mods\[0\] \(ALiBi\) has slopes of shape \(2,\)"):
        F.flash_attention(
            q, q, q, block_rows=2, block_keys=2, causal=True, mods=(M.ALiBi(torch.ones(2)),)
        )
    with pytest.raises(TypeError, match=r"mods\[0\] must be a modification"):
        F.online_softmax(q, q, q, block_rows=2, block_keys=2, mods=("causal",))


def test_llama_4_s_chunks_and_temperature_given_as_objects():
    """`mods=(Chunked(χ), Temperature(F, α))`: the blocked forward and backward give the fast
    path's context and gradients with the same objects (and not plain causal attention's), and
    a block of keys outside every query's chunk is skipped."""
    from attention import _core

    gen = torch.Generator().manual_seed(3)
    q, k, v, dc = (torch.randn(2, 11, 4, generator=gen, dtype=torch.float64) for _ in range(4))
    extra = (M.Chunked(4), M.Temperature(3.0, 0.5))
    mods = _modify.joined("test", M.modifications(causal=True), extra, 1)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = _core.attend(*leaves, scale=0.5, heads=True, mods=mods)
    (expected * dc).sum().backward()
    options = dict(block_rows=3, block_keys=2, causal=True, mods=extra)
    got = F.flash_attention(q, k, v, **options)
    torch.testing.assert_close(got, expected.detach())
    plain = F.flash_attention(q, k, v, block_rows=3, block_keys=2, causal=True)
    assert float((got - plain).abs().max()) > 1e-2
    found = F.flash_gradients(q, k, v, dc, **options)
    for mine, leaf in zip((found.dQ, found.dK, found.dV), leaves, strict=True):
        torch.testing.assert_close(mine, leaf.grad)
    assert F.skipped(slice(8, 11), slice(4, 6), mods)  # keys 4, 5: the chunk before
    assert not F.skipped(slice(8, 11), slice(4, 6), M.modifications(causal=True))


def test_every_modification_is_an_object_in_mods_the_keywords_the_same_objects():
    """Causal, a window, a softcap, ALiBi and a sink given as objects (`mods=`) compute what the
    keywords and the objects do together, and the queries placed after a cache (`Causal(t)`,
    s = n + t keys) give the last rows of the whole."""
    q, k, v, dc = (_drawn(2, 7, 3, seed=s) for s in range(4))
    number = lambda value: torch.tensor([value], dtype=torch.float64)  # noqa: E731
    objects = (
        M.Causal(),
        M.Window(3),
        M.Softcap(2.0),
        M.ALiBi(number(0.25)),
        M.Sinks(number(-0.5)),
    )
    sizes = dict(block_rows=2, block_keys=3)
    options = dict(causal=True, window=3, softcap=2.0, slope=0.25, sink=-0.5)
    whole = F.flash_attention(q, k, v, **sizes, mods=objects)
    torch.testing.assert_close(
        whole, _modified_reference(q, k, v, **options), rtol=1e-12, atol=1e-12
    )
    mixed = F.flash_attention(q, k, v, **sizes, **_flash(options))
    torch.testing.assert_close(mixed, whole, rtol=0, atol=0)
    late = (M.Causal(4), *objects[1:])
    last = F.flash_attention(q[..., 4:, :], k, v, **sizes, mods=late)
    torch.testing.assert_close(last, whole[..., 4:, :], rtol=1e-12, atol=1e-12)
    grads = F.flash_gradients(q[..., 4:, :], k, v, dc[..., 4:, :], **sizes, mods=late)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = _modified_reference(*leaves, **options)[..., 4:, :]
    wanted = torch.autograd.grad(expected, leaves, dc[..., 4:, :])
    for mine, theirs in zip(
        (grads.dQ, grads.dK, grads.dV), (wanted[0][..., 4:, :], *wanted[1:]), strict=True
    ):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-12)


def test_the_keywords_and_objects_are_one_of_each_kind():
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match=r"Causal given twice .*say the same thing twice"):
        F.flash_attention(q, q, q, block_rows=2, block_keys=2, causal=True, mods=(M.Causal(),))


def test_a_query_scale_and_alibi_s_default_slope_in_mods_are_applied():
    """A query scale in mods= sets flash's factor 1/√c_q (it was left at 1/√c), and ALiBi()
    with no slopes takes Press et al.'s for one head, as on the fast path (it failed); a scale
    given twice is refused."""
    from attention import _core

    q, k, v, dc = (_drawn(2, 7, 4, seed=s, scale=1.0) for s in range(4))
    mods = (M.Causal(), M.QueryScale(7.0), M.ALiBi())
    sizes = dict(block_rows=2, block_keys=3)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    resolved = (M.Causal(), M.ALiBi(M.default_slopes(1, dtype=torch.float64)))
    one_head = [t[:, None] for t in leaves]  # (batch, 1 head, n, c): flash computes one head
    expected = _core.attend(*one_head, scale=7.0**-0.5, heads=True, mods=resolved)[:, 0]
    (expected * dc).sum().backward()
    got = F.flash_attention(q, k, v, **sizes, mods=mods)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-12, atol=1e-12)
    found = F.flash_gradients(q, k, v, dc, **sizes, mods=mods)
    for mine, leaf in zip((found.dQ, found.dK, found.dV), leaves, strict=True):
        torch.testing.assert_close(mine, leaf.grad, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"scale=0.5 and a query scale in mods= .* say the scale"):
        F.flash_attention(q, k, v, **sizes, scale=0.5, mods=mods)
