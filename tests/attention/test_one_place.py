"""Each score modification computed in one place (`attention._modifications`): a changed copy
of that one function changes what every path computes (the explicit path, the fast path,
`attention.flash`), forward and backward. Were any path to carry an implementation of its own,
its output would stay as it was under the change, and this test would name the path.

The key range is the rule for which keys a block reads (the fast path) and which blocks are
skipped (flash); the masks (`_masks.band`) still say which keys each row may attend, so a range
made wider changes nothing visible: the test narrows it."""

import sys

import pytest
import torch

from attention import _modifications, flash
from attention import functional as F


def _qkv():
    g = torch.Generator().manual_seed(9)
    return [torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in "qkv"]


def _explicit(q, k, v, **mods):
    return _paths_multi_head(q, k, v, explicit=True, **mods)


def _fast(q, k, v, **mods):
    return _paths_multi_head(q, k, v, explicit=False, **mods)


def _paths_multi_head(q, k, v, *, explicit, softcap=None, slope=None, window=None, sink=None):
    """multi_head_attention on exactly q, k, v (two heads, X = [q|k|v], projections picking
    each): the fast path, or with return_weights the explicit one."""
    x = torch.cat([q, k, v], dim=-1)[0].transpose(0, 1).reshape(6, 24)[None]
    eye = torch.eye(24, dtype=q.dtype)
    pick = [eye[:, [*range(o, o + 4), *range(o + 12, o + 16)]] for o in (0, 4, 8)]
    alibi = None if slope is None else torch.full((2,), slope, dtype=q.dtype)
    sinks = None if sink is None else torch.full((2,), sink, dtype=q.dtype)
    out = F.multi_head_attention(
        x,
        *pick,
        torch.eye(8, dtype=q.dtype),
        heads=2,
        causal=True,
        window=window,
        softcap=softcap,
        alibi=False if alibi is None else alibi,
        sinks=sinks,
        return_weights=explicit,
    )
    return out[0] if explicit else out


def _flash(q, k, v, **mods):
    return flash.flash_attention(q, k, v, block_rows=2, block_keys=2, causal=True, **mods)


PATHS = {"explicit path": _explicit, "fast path": _fast, "flash": _flash}

#: (the function, a changed copy, the modification that reads it)
CHANGES = {
    "softcap_parts": (
        lambda scaled, cap, *, overwrite=False: _halved(scaled, cap),
        {"softcap": 2.0},
    ),
    "distance": (
        lambda first, last, low, high, like: 2 * _distance(first, last, low, high, like),
        {"slope": 0.5},
    ),
    "sink_normalised": (
        lambda scores, sink, *, overwrite=False: _sink(scores, sink + 1.0, overwrite=overwrite),
        {"sink": 0.5},
    ),
    "online_start": (lambda sink: _start(sink + 1.0), {"sink": 0.5}),
    "key_range": (
        lambda causal, window, first, last, total: _narrower(causal, window, first, last, total),
        {"window": 3},
    ),
}

_softcap, _distance, _key_range, _sink, _start = (
    _modifications.softcap_parts,
    _modifications.distance,
    _modifications.key_range,
    _modifications.sink_normalised,
    _modifications.online_start,
)


def _halved(scaled, cap):
    capped, squashed = _softcap(scaled.clone(), cap)
    return capped / 2, squashed


def _narrower(causal, window, first, last, total):
    low, high = _key_range(causal, window, first, last, total)
    return max(low, high - 1), high  # only the last key: every block before it skipped


def _modules_reading(name):
    """Every module of the package that holds the function (imported by its name)."""
    original = getattr(_modifications, name)
    return [
        module
        for key, module in list(sys.modules.items())
        if key.split(".")[0] == "attention" and getattr(module, name, None) is original
    ]


#: the paths that do not read a function, and why: the explicit path masks its whole n × n
#: scores (no block to skip); a sink joins a whole row's softmax in the explicit and fast paths,
#: and starts flash's online softmax (its state after reading the sink as a key)
NOT_READ = {
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
    changed, mods = CHANGES[change]
    q, k, v = (t.requires_grad_() for t in _qkv())
    run = PATHS[path]
    before = run(q, k, v, **mods)
    (grad_before,) = torch.autograd.grad(before.sum(), q)
    for module in _modules_reading(change):
        monkeypatch.setattr(module, change, changed)
    after = run(q, k, v, **mods)
    (grad_after,) = torch.autograd.grad(after.sum(), q)
    assert (after - before).abs().max() > 1e-3, f"{path} did not read {change}"
    assert not torch.allclose(grad_after, grad_before), f"{path}'s backward did not read {change}"
