"""The modification objects (`attention.mods`) as a user meets them: a researcher's own
subclass runs on every path with the exact backward, the objects refuse bad values by name,
`mods=` refuses what is not a modification, the same kind twice, tensors of the wrong length,
and a module's mask given as its modification; a cache that dropped its first keys counts
positions from its own first key (`moved`)."""

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from attention import GroupedQueryAttention, MultiHeadAttention, ShapeError, _core
from attention import functional as F
from attention import mods as M


@dataclass(frozen=True)
class Quadratic(M.Modification):
    """A researcher's own: −λ (m − p)² added to every score (a bias, so nothing to do in the
    backward pass: the default `backward` passes the gradient through)."""

    lam: float
    stage: ClassVar[int] = 26

    def scores(self, s, block, param, inplace):
        gaps = M.distance(*block, s)
        bias = gaps.square_().mul_(self.lam)
        return (s.sub_(bias) if inplace else s - bias), None


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64) for _ in "qkv"]


def _reference(q, k, v, lam):
    m, p = torch.arange(7)[:, None], torch.arange(7)[None, :]
    s = (q @ k.mT) * 0.5 - lam * (m - p).double() ** 2
    return s.masked_fill(p > m, float("-inf")).softmax(-1) @ v


def test_a_researcher_s_own_modification_runs_on_every_path_with_its_gradients():
    q, k, v = (t.requires_grad_() for t in _qkv())
    mods = M.ordered((M.Causal(), Quadratic(0.3)))
    expected = _reference(q, k, v, 0.3)
    wanted = torch.autograd.grad(expected.sum(), (q, k, v))
    for explicit in (False, True):
        out = _core.attend(q, k, v, scale=0.5, heads=True, mods=mods, return_weights=explicit)
        out = out[0] if explicit else out
        torch.testing.assert_close(out, expected)
        for got, want in zip(torch.autograd.grad(out.sum(), (q, k, v)), wanted, strict=True):
            torch.testing.assert_close(got, want)
    # the control: the modification changes the numbers
    plain = _core.attend(q, k, v, scale=0.5, heads=True, mods=(M.Causal(),))
    assert (plain - expected).abs().max() > 1e-2


def test_a_user_s_modification_reaches_the_public_functions_and_modules():
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    w_q, w_k, w_v, w_o = (torch.randn(8, 8, dtype=torch.float64) for _ in range(4))
    mine = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=2, causal=True, mods=(Quadratic(0.5),)
    )
    plain = F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=2, causal=True)
    explicit, _ = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=2, causal=True, mods=(Quadratic(0.5),), return_weights=True
    )
    torch.testing.assert_close(mine, explicit)
    assert (mine - plain).abs().max() > 1e-3
    module = MultiHeadAttention(8, 8, 16, 0.0, 2, mods=(M.Chunked(3),)).double()
    whole = module(x)
    module.reset_cache()
    pieces = torch.cat([module(x[:, a:b], use_cache=True) for a, b in ((0, 2), (2, 7))], dim=1)
    torch.testing.assert_close(pieces, whole)


BAD_OBJECTS = [
    (lambda: M.Chunked(0), ValueError, r"Chunked: size must be a positive integer, got size=0"),
    (lambda: M.Window(2.5), ValueError, r"Window: size must be a positive integer, got size=2\.5"),
    (lambda: M.Causal(-1), ValueError, r"Causal: offset must be a non-negative int"),
    (lambda: M.Chunked(4, start=-1), ValueError, r"Chunked: start must be a non-negative int"),
    (lambda: M.Temperature(8.0, 0.1, start=-2), ValueError, r"Temperature: start must be a non-"),
    (lambda: M.Temperature(8.0, 0.1, start=1.5), TypeError, r"Temperature: start must be an int"),
    (lambda: M.default_slopes(0), ValueError, r"default_slopes: heads must be a positive integer"),
    (lambda: M.Softcap(0.0), ValueError, r"Softcap: cap must be a positive number"),
    (lambda: M.Softcap(float("nan")), ValueError, r"Softcap: cap must be a finite number"),
    (lambda: M.Temperature(None, 0.1), ValueError, r"Temperature: floor must be a finite number"),
    (
        lambda: M.Temperature(8.0, float("inf")),
        ValueError,
        r"Temperature: scale must be a finite number",
    ),
    (lambda: M.ALiBi(torch.ones(2, 2)), ShapeError, r"ALiBi: slopes must be a tensor of one"),
    (lambda: M.Sinks(torch.ones(2, dtype=torch.long)), TypeError, r"Sinks: logits must be a float"),
]


@pytest.mark.parametrize(("make", "error", "message"), BAD_OBJECTS)
def test_a_modification_refuses_a_bad_value_by_name(make, error, message):
    with pytest.raises(error, match=message):
        make()


def _mha(mods):
    x = torch.randn(1, 5, 8)
    w = torch.randn(8, 8)
    return F.multi_head_attention(x, w, w, w, w, heads=2, causal=True, window=3, mods=mods)


BAD_MODS = [
    ((3,), TypeError, r"multi_head_attention: mods\[0\] must be a modification"),
    (M.Chunked(3), TypeError, r"multi_head_attention: mods must be tuple, got Chunked\(size=3"),
    ((M.Window(2),), ValueError, r"multi_head_attention: modifications: Window given twice"),
    ((M.Sinks(torch.ones(3)),), ShapeError, r"mods\[0\] \(Sinks\) has logits of shape \(3,\)"),
]


@pytest.mark.parametrize(("mods", "error", "message"), BAD_MODS)
def test_mods_refuses_what_is_not_one_modification_of_each_kind(mods, error, message):
    with pytest.raises(error, match=message):
        _mha(mods)


def test_two_of_a_kind_in_mods_alone_blame_mods_not_the_keywords():
    x, w = torch.randn(5, 8), torch.randn(8, 8)
    weights = F.LayerWeights(w, w, w)
    with pytest.raises(ValueError, match=r"^attention: .*Causal given twice \(one of each kind\)$"):
        F.attention(x, weights, heads=2, mods=(M.Causal(), M.Causal()))


@pytest.mark.parametrize(
    ("mods", "message"),
    [
        ((M.Window(3),), r"mods\[0\] \(Window\) is the call's mask"),
        ((M.Sinks(torch.ones(2)),), r"mods\[0\] \(Sinks\) carries a tensor"),
    ],
)
def test_a_module_refuses_a_mask_or_a_tensor_in_its_mods(mods, message):
    with pytest.raises(ValueError, match=message):
        GroupedQueryAttention(8, num_heads=2, num_kv_groups=1, head_dim=4, mods=mods)


def test_a_moved_chunk_and_temperature_count_from_the_cache_s_first_key():
    """Positions 5 … 9 counted from a cache whose first key sits at 5: chunk 4's borders at 8
    (so at 3 from the cache's start), the temperature's factors those of positions 5 … 9."""
    chunk = M.Chunked(4).moved(5)
    assert chunk.bounds(0) == (-1, 3) and chunk.bounds(3) == (3, 7)
    tau = M.Temperature(2.0, 1.0)
    like = torch.zeros((), dtype=torch.float64)
    torch.testing.assert_close(tau.moved(5).factors(0, 5, like), tau.factors(5, 10, like))


def test_the_module_users_extend_holds_the_protocol_and_the_objects_alone():
    """At most 15 names, each a user's: the protocol, the built-in objects, the keywords' builder,
    ALiBi's default slopes and the distances m − p a rule of one's own reads; the paths'
    helpers are private. The module is checked by pyright in strict mode."""
    from pathlib import Path

    assert len(M.__all__) <= 15
    for name in M.__all__:
        value = getattr(M, name)
        objects = isinstance(value, type) and issubclass(value, M.Modification | M.Block)
        assert objects or name in {"modifications", "default_slopes", "distance"}, name
    for helper in ("key_range", "forward", "backward", "check", "learned", "cut"):
        assert not hasattr(M, helper), helper
    first = Path(M.__file__).read_text(encoding="utf-8").splitlines()[0]
    assert first == "# pyright: strict"


def test_every_signature_over_twelve_parameters_is_the_documented_table():
    """docs/guides/modifications.md lists the public signatures of `attention` with more than
    twelve parameters and why; this finds them all (each object under the first module that
    exports it) and checks that the table is exactly them, with the counts it says."""
    import inspect
    import re
    from pathlib import Path

    import attention
    from attention import functional, grouped, linear

    def parameters(function) -> int:
        return len([p for p in inspect.signature(function).parameters if p != "self"])

    found, seen = {}, set()
    for module in (attention, functional, grouped, linear):
        for name in module.__all__:
            value = getattr(module, name)
            if id(value) in seen or not callable(value) or inspect.ismodule(value):
                continue
            seen.add(id(value))
            if inspect.isclass(value):
                methods = [getattr(value, m, None) for m in ("__init__", "forward")]
                counts = [parameters(m) for m in methods if inspect.isfunction(m)]
                count = max(counts, default=0)
            elif inspect.isfunction(value):
                count = parameters(value)
            else:
                continue
            if count > 12:
                found[f"{module.__name__}.{name}"] = count
    page = Path(__file__).parents[2] / "docs" / "guides" / "modifications.md"
    rows = re.findall(r"^\| `([\w.]+)` \| (\d+) \|", page.read_text(encoding="utf-8"), re.M)
    assert found == {name: int(count) for name, count in rows}


@pytest.mark.parametrize(
    ("floor", "scale", "message"),
    [(-1.0, 0.1, r"floor must be a positive number"), (2.0, math.nan, r"scale must be a finite")],
)
def test_temperature_scores_names_itself_for_a_bad_floor_or_scale(floor, scale, message):
    with pytest.raises(ValueError, match=rf"^temperature_scores: {message}"):
        F.temperature_scores(torch.ones(3, 3), floor=floor, scale=scale)
