"""The one checked entry point, `attention.functional.attention(x, weights, *, …)`: it computes
grouped-query attention with its modifications (against a float64 reference written entry by
entry), every public function and module gives its numbers (each a thin wrapper of the same
layer), it takes few parameters, and its checks name the argument, the record's field and both
sizes."""

import inspect

import numpy as np
import pytest
import torch
from reference_variants import gqa_reference

from attention import (
    CausalAttention,
    CrossAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    SelfAttentionV1,
    ShapeError,
)
from attention import functional as F
from attention import mods as M
from attention.functional import LayerWeights, attention
from attention.grouped import grouped_query_attention, rms_norm
from attention.modules._common import layer_weights
from attention.rope import compute_rope_params


def _tensors(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes]


@pytest.mark.parametrize(
    ("heads", "groups", "causal", "rope"),
    [(1, 1, False, False), (4, 2, True, False), (4, 1, True, True), (2, 2, False, True)],
)
def test_it_computes_grouped_query_attention_entry_by_entry(heads, groups, causal, rope):
    n, d, width = 5, 6, 4
    x, w_q, w_k, w_v, w_o = _tensors(
        (n, d), (d, heads * width), (d, groups * width), (d, groups * width), (heads * width, 3)
    )
    tables = compute_rope_params(width, 100.0, n, None, torch.float64) if rope else None
    got = attention(
        x,
        LayerWeights(w_q, w_k, w_v, w_o),
        heads=heads,
        groups=groups,
        mods=(M.Causal(),) if causal else (),
        rope=tables,
    )
    expected = gqa_reference(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        heads=heads,
        groups=groups,
        causal=causal,
        theta_base=100.0 if rope else None,
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-12)


def _self_attention_pair(x, seed):
    w_q, w_k, w_v, b_q = _tensors((8, 6), (8, 6), (8, 6), (6,), seed=seed)
    mask = torch.rand(x.shape[-2], x.shape[-2], generator=torch.Generator().manual_seed(seed)) > 0.3
    wrapper = F.self_attention(x, w_q, w_k, w_v, b_q=b_q, mask=mask, softcap=5.0)
    entry = attention(x, LayerWeights(w_q, w_k, w_v, b_q=b_q), mods=(M.Softcap(5.0),), mask=mask)
    return wrapper, entry


def _multi_head_pair(x, seed):
    w_q, w_k, w_v, w_o, sinks = _tensors((8, 8), (8, 8), (8, 8), (8, 5), (4,), seed=seed)
    wrapper = F.multi_head_attention(
        x, w_q, w_k, w_v, w_o, heads=4, causal=True, window=3, alibi=True, sinks=sinks
    )
    mods = (M.Causal(), M.Window(3), M.ALiBi(F.alibi_slopes(4).double()), M.Sinks(sinks))
    return wrapper, attention(x, LayerWeights(w_q, w_k, w_v, w_o), heads=4, mods=mods)


def _grouped_pair(x, seed):
    w_q, w_k, w_v, w_o = _tensors((8, 8), (8, 4), (8, 4), (8, 8), seed=seed)
    wrapper = grouped_query_attention(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        heads=4,
        groups=2,
        causal=True,
        theta_base=50.0,
        q_gain=1.0,
        k_gain=1.0,
        mods=(M.Chunked(3),),
    )
    l2 = lambda t: rms_norm(t, None, eps=1e-6)  # noqa: E731  (Llama 4's norm without gains)
    tables = compute_rope_params(2, 50.0, x.shape[-2], None, torch.float64)
    entry = attention(
        x,
        LayerWeights(w_q, w_k, w_v, w_o, q_norm=l2, k_norm=l2),
        heads=4,
        groups=2,
        mods=(M.Causal(), M.Chunked(3)),
        rope=tables,
    )
    return wrapper, entry


def _cross_pair(x, seed):
    (y,) = _tensors((*x.shape[:-2], 3, 5), seed=seed + 1)
    w_q, w_k, w_v = _tensors((8, 4), (5, 4), (5, 4), seed=seed)
    wrapper = F.cross_attention(x, y, w_q, w_k, w_v, return_weights=True)
    entry = attention(x, LayerWeights(w_q, w_k, w_v), y=y, return_weights=True)
    return wrapper, (entry[0], entry[1].squeeze(-3))


def _module_pair(module, call=(), **entry_options):
    def pair(x, seed):
        torch.manual_seed(seed)
        built = module().double().eval()
        extra = [t(x) for t in call]
        wrapper = built(x, *extra)
        kv = {"y": extra[0]} if extra else {}
        weights = (
            layer_weights(built)
            if not isinstance(built, SelfAttentionV1 | CausalAttention)
            else (LayerWeights(built.w_q, built.w_k, built.w_v))
        )
        heads = getattr(built, "num_heads", 1)
        groups = getattr(built, "num_kv_groups", None)
        entry = attention(x, weights, heads=heads, groups=groups, **kv, **entry_options)
        return wrapper, entry

    return pair


#: One row per public function and module: the call as the wrapper takes it, and the same layer
#: through the entry point. The numbers must be the same to the last bit.
WRAPPERS = {
    "self_attention": _self_attention_pair,
    "multi_head_attention": _multi_head_pair,
    "grouped_query_attention": _grouped_pair,
    "cross_attention": _cross_pair,
    "SelfAttentionV1": _module_pair(lambda: SelfAttentionV1(8, 4)),
    "CausalAttention": _module_pair(lambda: CausalAttention(8, 4, 7, 0.0), mods=(M.Causal(),)),
    "MultiHeadAttention": _module_pair(
        lambda: MultiHeadAttention(8, 8, 7, 0.0, 2, softcap=3.0),
        mods=(M.Causal(), M.Softcap(3.0)),
    ),
    "GroupedQueryAttention": _module_pair(
        lambda: GroupedQueryAttention(8, num_heads=4, num_kv_groups=2)
    ),  # no `blocked`: not causal
    "CrossAttention": _module_pair(
        lambda: CrossAttention(8, 5, 8, 0.0, 2),
        call=(lambda x: torch.randn(*x.shape[:-2], 3, 5, dtype=x.dtype),),
    ),
}


@pytest.mark.parametrize("name", WRAPPERS)
def test_every_function_and_module_is_the_entry_point_s_layer(name):
    (x,) = _tensors((2, 7, 8), seed=3)
    wrapper, entry = WRAPPERS[name](x, 3)
    if isinstance(wrapper, tuple):
        for got, want in zip(wrapper, entry, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        torch.testing.assert_close(wrapper, entry, rtol=0, atol=0)
    # the control: without the row's modifications, or with other weights, the numbers change
    (other,) = _tensors((2, 7, 8), seed=4)
    moved, _ = WRAPPERS[name](other, 3)
    first = wrapper[0] if isinstance(wrapper, tuple) else wrapper
    second = moved[0] if isinstance(moved, tuple) else moved
    assert (first - second).abs().max() > 1e-3


def test_it_takes_few_parameters_every_option_keyword_only():
    parameters = inspect.signature(attention).parameters
    assert len(parameters) <= 12
    positional = [p for p in parameters.values() if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert [p.name for p in positional] == ["x", "weights"]


def _layer(heads=4, groups=2, d=8, width=2, **fields):
    w_q, w_k, w_v, w_o = _tensors(
        (d, heads * width), (d, groups * width), (d, groups * width), (heads * width, d)
    )
    return LayerWeights(**{"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o} | fields)


#: Each bad call, and the words its error must hold: the argument (or the record's field), and
#: both sizes where there are two.
BAD = [
    (
        "weights not a record",
        dict(weights={"w_q": 1}),
        TypeError,
        ["weights", "LayerWeights", "dict"],
    ),
    ("weights None", dict(weights=None), TypeError, ["weights must be a LayerWeights", "NoneType"]),
    (
        "w_k's rows",
        dict(
            weights=_layer(
                w_k=torch.zeros(5, 4, dtype=torch.float64),
                w_v=torch.zeros(5, 4, dtype=torch.float64),
            )
        ),
        ShapeError,
        ["weights.w_k", "d_y=5", "d=8"],
    ),
    (
        "w_v's width",
        dict(weights=_layer(w_v=torch.zeros(8, 3, dtype=torch.float64))),
        ShapeError,
        ["weights.w_v", "3"],
    ),
    (
        "w_v's dtype",
        dict(weights=_layer(w_v=torch.zeros(8, 4))),
        Exception,
        ["weights.w_v", "float32"],
    ),
    ("groups", dict(heads=4, groups=3), ShapeError, ["heads=4", "groups=3"]),
    ("c_kv", dict(weights=_layer(groups=1), groups=2), ShapeError, ["weights.w_k", "c_kv=2", "4"]),
    ("w_q's columns", dict(heads=3, groups=1), ShapeError, ["weights.w_q", "heads=3"]),
    (
        "w_o's rows",
        dict(weights=_layer(w_o=torch.zeros(6, 8, dtype=torch.float64))),
        ShapeError,
        ["weights.w_o", "6", "c = heads · c_h = 8"],
    ),
    (
        "mask's keys",
        dict(mask=torch.ones(5, 4, dtype=torch.bool)),
        ShapeError,
        ["mask", "s=4", "n=5"],
    ),
    (
        "rope too wide",
        dict(rope=compute_rope_params(4, 10.0, 5, None, torch.float64)),
        ShapeError,
        ["rope", "c_r=4", "c_h=2"],
    ),
    (
        "rope too short",
        dict(rope=compute_rope_params(2, 10.0, 3, None, torch.float64)),
        ShapeError,
        ["rope", "n_ctx=3", "n=5"],
    ),
    ("mods not a tuple", dict(mods=M.Causal()), TypeError, ["mods", "tuple"]),
    (
        "sinks per head",
        dict(mods=(M.Sinks(torch.zeros(3, dtype=torch.float64)),)),
        ShapeError,
        ["mods[0]", "heads=4"],
    ),
    (
        "b_g without w_g",
        dict(weights=_layer(b_g=torch.zeros(8, dtype=torch.float64))),
        ValueError,
        ["weights.b_g", "w_g is None"],
    ),
    ("heads", dict(heads=0), ValueError, ["heads", "0"]),
    ("dropout_p", dict(dropout_p=1.5), ValueError, ["dropout_p", "1.5"]),
]


@pytest.mark.parametrize(("case", "change", "error", "words"), BAD, ids=[row[0] for row in BAD])
def test_a_bad_call_is_refused_by_name(case, change, error, words):
    (x,) = _tensors((5, 8))
    call = {"weights": _layer(), "heads": 4, "groups": 2} | change
    with pytest.raises(error) as raised:
        attention(x, call.pop("weights"), **call)
    for word in words:
        assert word in str(raised.value), (case, str(raised.value))


def test_a_record_s_field_gets_no_hint_that_it_fits_another_argument():
    # b_o's length is the keys' count s = n: it fits key_padding_mask's shape, but a bias
    # (float, a field of the weights) is no mask left out, so no such hint
    (x,) = _tensors((5, 8))
    (b_o,) = _tensors((5,))
    with pytest.raises(ShapeError) as raised:
        attention(x, _layer(b_o=b_o), heads=4, groups=2)
    assert "weights.b_o" in str(raised.value) and "fits" not in str(raised.value)


def test_a_record_s_shapes_are_part_of_the_remembered_signature():
    # the checks run once per signature: a record that passed must not let through another of
    # the same type whose tensors have other shapes
    (x,) = _tensors((5, 8))
    attention(x, _layer(), heads=4, groups=2)
    with pytest.raises(ShapeError, match="weights.w_v"):
        attention(x, _layer(w_v=torch.zeros(8, 3, dtype=torch.float64)), heads=4, groups=2)
