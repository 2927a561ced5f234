"""Each score modification computed in one place (its object in `attention.mods`): a changed
copy of one of its methods, or of a function of `attention.mods` the objects call, changes what
every path computes (the explicit path, the fast path, `attention.flash`), forward and backward.
Were any path to carry an implementation of its own, its output would stay as it was under the
change, and this test would name the path.

The key range is the rule for which keys a block reads (the fast path) and which blocks are
skipped (flash); the masks' bounds still say which keys each row may attend, so a range made
wider changes nothing visible: the test narrows it."""

import sys

import pytest
import torch

from attention import _core, _modify, _scores, flash
from attention import mods as M


def _qkv():
    g = torch.Generator().manual_seed(9)
    return [torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in "qkv"]


def _mods(
    q, causal=True, window=None, chunk=None, softcap=None, slope=None, sink=None, tau=None, heads=2
):
    per_head = lambda value: None if value is None else torch.full((heads,), value, dtype=q.dtype)  # noqa: E731
    return M.modifications(
        causal=causal,
        window=window,
        chunk=chunk,
        temperature=None if tau is None else M.Temperature(floor=2.0, scale=tau),
        softcap=softcap,
        alibi=False if slope is None else per_head(slope),
        sinks=per_head(sink),
    )


def _explicit(q, k, v, **options):
    """(C, dQ for the upstream gradient 1) of the explicit path (autograd through it)."""
    q = q.detach().requires_grad_()
    mods = _mods(q, **options)
    out = _core.attend(q, k, v, scale=0.5, heads=True, mods=mods, return_weights=True)[0]
    return out.detach(), torch.autograd.grad(out.sum(), q)[0]


def _fast(q, k, v, **options):
    """(C, dQ) of the fast path (its own backward)."""
    q = q.detach().requires_grad_()
    out = _core.attend(q, k, v, scale=0.5, heads=True, mods=_mods(q, **options))
    return out.detach(), torch.autograd.grad(out.sum(), q)[0]


def _flash(q, k, v, **options):
    """(C, dQ) of `attention.flash` (its blocked backward), one head at a time (flash computes
    one head: each head's modifications hold one number) with the same objects."""
    outs, grads = [], []
    for head in range(q.shape[1]):
        one = [t[:, head] for t in (q, k, v)]
        given = dict(block_rows=2, block_keys=2, scale=0.5, mods=_mods(q, **options, heads=1))
        out = flash.flash_attention(*one, **given)
        outs.append(out)
        grads.append(flash.flash_gradients(*one, torch.ones_like(out), **given).dQ)
    return torch.stack(outs, 1), torch.stack(grads, 1)


PATHS = {"explicit path": _explicit, "fast path": _fast, "flash": _flash}

#: (the object or module, the attribute, a changed copy of it, the options that make it act)
CHANGES = {
    "Softcap.scores": (
        M.Softcap,
        "scores",
        lambda original: (
            lambda self, s, *a: (lambda out: (out[0] / 2, out[1]))(original(self, s.clone(), *a))
        ),
        {"softcap": 2.0},
    ),
    "Softcap.backward": (
        M.Softcap,
        "backward",
        lambda original: lambda self, d_s, *a: original(self, d_s.mul_(3.0), *a),
        {"softcap": 2.0},
    ),
    "distance": (
        _scores,
        "distance",
        lambda original: lambda *a: 2 * original(*a),
        {"slope": 0.5},
    ),
    "sink_normalised": (
        _scores,
        "sink_normalised",
        lambda original: lambda scores, sink, **kw: original(scores, sink + 1.0, **kw),
        {"sink": 0.5},
    ),
    "online_start": (
        _scores,
        "online_start",
        lambda original: lambda sink: original(sink + 1.0),
        {"sink": 0.5},
    ),
    "Window.bounds": (
        M.Window,
        "bounds",
        lambda original: lambda self, m: (original(self, m)[0] + 1, None),
        {"window": 3},
    ),
    "Chunked.bounds": (
        M.Chunked,
        "bounds",
        lambda original: lambda self, m: original(M.Chunked(self.size + 1), m),
        {"chunk": 3},
    ),
    "Temperature.factors": (
        M.Temperature,
        "factors",
        lambda original: lambda self, *a: 2 * original(self, *a),
        {"tau": 0.5},
    ),
    "key_range": (
        _modify,
        "key_range",
        lambda original: (
            lambda mods, first, last, total: (lambda low, high: (max(low, high - 1), high))(
                *original(mods, first, last, total)
            )
        ),
        {"window": 3},
    ),
}


def _holders(owner, name):
    """Where the attribute lives: on the class, or in every module of the package that holds
    the function (imported by its name)."""
    if isinstance(owner, type):
        return [owner]
    original = getattr(owner, name)
    return [
        module
        for key, module in list(sys.modules.items())
        if key.split(".")[0] == "attention" and getattr(module, name, None) is original
    ]


#: the paths that do not read a change, and why: the explicit path masks its whole n × n scores
#: (no block to skip); a sink joins a whole row's softmax in the explicit and fast paths, and
#: starts flash's online softmax (its state after reading the sink as a key); the explicit
#: path's gradients are autograd's through the objects' forward
NOT_READ = {
    ("Softcap.backward", "explicit path"),
    ("key_range", "explicit path"),
    ("sink_normalised", "flash"),
    ("online_start", "explicit path"),
    ("online_start", "fast path"),
}
CASES = [
    (change, path)
    for change in sorted(CHANGES)
    for path in sorted(PATHS)
    if (change, path) not in NOT_READ
]


@pytest.mark.parametrize(("change", "path"), CASES)
def test_a_change_in_the_one_place_reaches_every_path(monkeypatch, change, path):
    owner, name, changed, options = CHANGES[change]
    q, k, v = _qkv()
    run = PATHS[path]
    before, grad_before = run(q, k, v, **options)
    original = getattr(owner, name)
    for holder in _holders(owner, name):
        monkeypatch.setattr(holder, name, changed(original))
    after, grad_after = run(q, k, v, **options)
    if name != "backward":
        assert (after - before).abs().max() > 1e-3, f"{path} did not read {change}"
    assert not torch.allclose(grad_after, grad_before), f"{path}'s backward did not read {change}"


def test_the_paths_agree_before_any_change():
    """The control: unchanged, the three paths give the same numbers for every option set."""
    q, k, v = _qkv()
    for change, (*_, options) in CHANGES.items():
        reference = _explicit(q, k, v, **options)
        for path in (_fast, _flash):
            for ours, expected in zip(path(q, k, v, **options), reference, strict=True):
                torch.testing.assert_close(ours, expected, msg=f"{change}, {path.__name__}")
