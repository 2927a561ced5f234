"""The score modifications from one table: each row a modification (its keyword options of
`multi_head_attention`, what it does to a head's scores in plain torch, its derive variant), and
generic tests over the rows, alone and in every pair: values and gradients on both paths against
a float64 reference written in plain torch, at unit and large scores; a row with no key;
the KV cache; the state_dict. A new modification adds a row here, not a test file (issue 33)."""

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from attention import MultiHeadAttention
from attention import functional as F
from attention import mods as M
from derive.graph.registry import variants

HEADS, N, D, C = 2, 6, 5, 4
WIDTH = C // HEADS


@dataclass(frozen=True)
class Row:
    """A modification: its keywords (tensors made per test, in the test's dtype), what it does
    to head ℓ's scaled scores s (n × n) in plain torch, the sink logit it adds to each row's
    denominator, and the derive variant that derives it."""

    options: dict[str, Any]
    scores: Any = None  # (s, head, options) -> s
    sink: Any = None  # (head, options) -> ζ, or None
    variant: str = ""
    scale: Any = None  # options -> the factor of q·k, if not 1/√c_h
    masks: Any = None  # (m, p, options) -> allowed
    needs_causal: bool = False
    tensors: dict[str, Any] = field(default_factory=dict)


def _slopes(dtype):
    return torch.tensor([0.5, 0.125], dtype=dtype)


def _sinks(dtype):
    return torch.tensor([0.3, -1.2], dtype=dtype)


#: in the order the modifications act on a row of scores (`attention.mods`: the temperature on
#: q·k first, as Hugging Face multiplies the queries)
TABLE = {
    "temperature": Row(
        {"mods": (M.Temperature(floor=2.0, scale=0.75),)},
        scores=lambda s, head, o: s * _tau(s.shape[-2], floor=2.0, scale=0.75),
        variant="temperature-tuning",
    ),
    "softcap": Row(
        {"softcap": 2.5},
        scores=lambda s, head, o: o["softcap"] * torch.tanh(s / o["softcap"]),
        variant="softcap",
    ),
    # the hard cap, given as an object: the example of a modification added end to end
    "clamp": Row(
        {"mods": (M.Clamp(0.8),)},
        scores=lambda s, head, o: s.clamp(-0.8, 0.8),
        variant="clamp",
    ),
    "alibi": Row(
        {},
        tensors={"alibi": _slopes},
        scores=lambda s, head, o: s - o["alibi"][head] * _gaps(s),
        variant="alibi",
        needs_causal=True,
    ),
    "sinks": Row(
        {}, tensors={"sinks": _sinks}, sink=lambda head, o: o["sinks"][head], variant="sinks"
    ),
    "window": Row(
        {"window": 3},
        masks=lambda m, p, o: m - p < o["window"],
        variant="sliding-window",
        needs_causal=True,
    ),
    "query scale": Row(
        {"query_pre_attn_scalar": 9.0},
        scale=lambda o: o["query_pre_attn_scalar"] ** -0.5,
    ),
    # Llama 4's chunked attention, given as an object (`mods=`) like the temperature
    "chunked": Row(
        {"mods": (M.Chunked(4),)},
        masks=lambda m, p, o: m // 4 == p // 4,
        variant="chunked",
    ),
}


def _tau(n, *, floor, scale):
    """τ_m = α log(1 + ⌊(m + 1)/F⌋) + 1 at the positions m = 0 … n − 1, a column (n, 1)."""
    m = torch.arange(n, dtype=torch.float64)
    return (scale * torch.log(1 + torch.floor((m + 1) / floor)) + 1)[:, None]


def _gaps(s):
    n = s.shape[-1]
    return (torch.arange(n)[:, None] - torch.arange(n)[None, :]).to(s.dtype)


def _options(rows, dtype):
    options = {}
    for row in rows:
        mods = options.get("mods", ()) + row.options.get("mods", ())
        options |= row.options | ({"mods": mods} if mods else {})
        options |= {name: make(dtype) for name, make in row.tensors.items()}
    return options


def reference(x, w_q, w_k, w_v, w_o, rows, options, key_padding=None):
    """C in plain torch: per head, the scaled scores, each row's modification of them in the
    table's order, the causal mask (and each row's), the softmax with the sinks' logits in its
    denominator, A V; the heads concatenated, times W_o."""
    q, k, v = (x @ w for w in (w_q, w_k, w_v))
    scale = next((r.scale(options) for r in rows if r.scale), WIDTH**-0.5)
    m, p = torch.arange(N)[:, None], torch.arange(N)[None, :]
    parts = []
    for head in range(HEADS):
        cols = slice(head * WIDTH, (head + 1) * WIDTH)
        s = (q[..., cols] * scale) @ k[..., cols].mT
        allowed = p <= m
        for row in rows:
            if row.scores:
                s = row.scores(s, head, options)
            if row.masks:
                allowed = allowed & row.masks(m, p, options)
        if key_padding is not None:
            allowed = allowed & key_padding[:, None, :]
        s = s.masked_fill(~allowed, -math.inf)
        sinks = [r.sink(head, options) for r in rows if r.sink]
        if sinks:
            column = sinks[0].expand(*s.shape[:-1], 1)
            a = torch.cat([s, column], dim=-1).softmax(-1)[..., :-1]
        else:
            a = s.softmax(-1)
        a = torch.nan_to_num(a)  # a row with no key and no sink: zero weights
        parts.append(a @ v[..., cols])
    return torch.cat(parts, dim=-1) @ w_o


def _inputs(scale, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, N, D, generator=g, dtype=dtype) * scale
    weights = [torch.randn(D, C, generator=g, dtype=dtype) for _ in range(3)]
    return x, weights, torch.randn(C, C, generator=g, dtype=dtype)


def _ours(x, weights, w_o, options, explicit, key_padding=None):
    out = F.multi_head_attention(
        x,
        *weights,
        w_o,
        heads=HEADS,
        causal=True,
        key_padding_mask=key_padding,
        return_weights=explicit,
        **options,
    )
    return out[0] if explicit else out


COMBINATIONS = [(name,) for name in TABLE] + list(itertools.combinations(TABLE, 2))


def test_every_row_names_a_derive_variant_or_says_none():
    known = set(variants())
    for name, row in TABLE.items():
        assert row.variant in known or (row.variant == "" and name == "query scale"), name


@pytest.mark.parametrize("scale", [1.0, 30.0], ids=["unit scores", "large scores"])
@pytest.mark.parametrize("explicit", [False, True], ids=["fast path", "explicit path"])
@pytest.mark.parametrize("names", COMBINATIONS, ids="+".join)
def test_values_and_gradients_against_float64(names, explicit, scale):
    rows = [TABLE[name] for name in names]
    options = _options(rows, torch.float64)
    learned = {k: v.requires_grad_() for k, v in options.items() if isinstance(v, torch.Tensor)}
    x, weights, w_o = _inputs(scale)
    leaves = [x, *weights, w_o, *learned.values()]
    for t in leaves:
        t.requires_grad_()
    got = _ours(x, weights, w_o, options, explicit)
    expected = reference(x, *weights, w_o, rows, options)
    top = max(1.0, expected.abs().max().item())
    assert (got - expected).abs().max().item() <= 1e-10 * top
    upstream = torch.linspace(-1, 1, got.numel(), dtype=got.dtype).view(got.shape)
    mine = torch.autograd.grad(got, leaves, upstream, allow_unused=True)
    theirs = torch.autograd.grad(expected, leaves, upstream, allow_unused=True)
    for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if b is None:
            assert a is None or not a.any(), index
            continue
        assert a is not None, f"no gradient for input {index}"
        assert (a - b).abs().max().item() <= 1e-9 * max(1.0, b.abs().max().item()), index


@pytest.mark.parametrize("explicit", [False, True], ids=["fast path", "explicit path"])
@pytest.mark.parametrize("name", sorted(TABLE))
def test_a_query_with_no_key_gets_a_zero_row_or_its_sink(name, explicit):
    """Every key of the first sequence padded: its rows are zero (all the weight on the sink
    where there is one), finite, and so are the gradients."""
    rows = [TABLE[name]]
    options = _options(rows, torch.float64)
    x, weights, w_o = _inputs(1.0)
    x.requires_grad_()
    padding = torch.ones(2, N, dtype=torch.bool)
    padding[0] = False
    got = _ours(x, weights, w_o, options, explicit, key_padding=padding)
    expected = reference(x, *weights, w_o, rows, options, key_padding=padding)
    assert torch.equal(got[0], torch.zeros_like(got[0]))
    assert (got - expected).abs().max().item() <= 1e-10 * max(1.0, expected.abs().max().item())
    (grad,) = torch.autograd.grad(got.sum(), x)
    assert grad.isfinite().all()


def _module(names, seed=1):
    """The book's module with the rows' options (MultiHeadAttentionWithSWA where one is a
    window), float64; the sinks learned from their initial values."""
    from attention import MultiHeadAttentionWithSWA

    options = _options([TABLE[n] for n in names], torch.float64)
    window = options.pop("window", None)
    torch.manual_seed(seed)
    if window is None:
        module = MultiHeadAttention(D, C, 16, 0.0, HEADS, **options)
    else:
        module = MultiHeadAttentionWithSWA(D, C, 0.0, HEADS, sliding_window_size=window, **options)
    return module.double()


@pytest.mark.parametrize("names", COMBINATIONS, ids="+".join)
def test_the_cache_fed_in_pieces_gives_the_whole_sequence_s_rows(names):
    module = _module(names)
    x, _, _ = _inputs(1.0)
    whole = module(x)
    module.reset_cache()
    cuts = ((0, 2), (2, 5), (5, N))  # across a window's, a chunk's and the temperature's steps
    pieces = [module(x[:, a:b], use_cache=True) for a, b in cuts]
    error = (torch.cat(pieces, dim=1) - whole).abs().max().item()
    assert error <= 1e-12 * whole.abs().max().item()


@pytest.mark.parametrize("names", COMBINATIONS, ids="+".join)
def test_a_module_s_state_dict_carries_its_modification(names):
    """A module built with the rows' options, its state loaded into one built the same way from
    other random weights, computes the same: the state carries every weight and the learned
    sinks (GPT-OSS's name); the other modifications are the constructor's options."""
    module = _module(names)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1)
    state = module.state_dict()
    assert ("sinks" in state) == ("sinks" in names)
    fresh = _module(names, seed=2)  # other weights, other sinks
    x, _, _ = _inputs(1.0)
    assert not torch.equal(fresh(x), module(x))
    fresh.load_state_dict(state)
    assert torch.equal(fresh(x), module(x))


@pytest.mark.parametrize("name", sorted(TABLE))
def test_torch_compile_traces_each_row_to_the_same_numbers(name):
    """The fast path under torch.compile (dynamo and AOT autograd, `aot_eager`: no C++ compiler
    needed): the modifications travel into the autograd Function as constants, their tensors
    as its arguments, and the compiled call gives eager's values and gradients."""
    torch._dynamo.reset()
    rows = [TABLE[name]]
    options = _options(rows, torch.float64)
    x, weights, w_o = _inputs(1.0)
    learned = [t for t in options.values() if isinstance(t, torch.Tensor)]

    def loss(x, w_q, w_k, w_v, w_o, *tensors):
        given = dict(options)
        names = [k for k, v in options.items() if isinstance(v, torch.Tensor)]
        for key, t in zip(names, tensors, strict=True):
            given[key] = t
        return _ours(x, [w_q, w_k, w_v], w_o, given, explicit=False).square().sum()

    def run(fn):
        leaves = [t.detach().clone().requires_grad_() for t in (x, *weights, w_o, *learned)]
        value = fn(*leaves)
        return value.detach(), torch.autograd.grad(value, leaves)

    eager = run(loss)
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = run(torch.compile(loss, backend="aot_eager"))
    assert counters["stats"]["unique_graphs"] >= 1  # dynamo traced, not only fell back
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-12, atol=0)
    for got, expected in zip(compiled[1], eager[1], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
