"""A tensor that is required is required: None, or anything that is not a tensor, in its place
gets a TypeError naming the function and the argument, from every public entry point; the
arguments annotated `| None` stay optional."""

import pytest
import torch

from attention import (
    CausalAttention,
    CrossAttention,
    MultiHeadAttention,
    MultiHeadAttentionWithSWA,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
)
from attention import functional as F

N, D, C, HEADS = 5, 3, 4, 2
S, D_Y = 7, 6  # cross-attention: s keys of width d_y


def tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(N, D, generator=g),
        "w": torch.randn(D, C, generator=g),
        "q": torch.randn(N, C, generator=g),
        "omega": torch.randn(N, N, generator=g),
        "a": torch.rand(N, N, generator=g),
        "heads": torch.randn(HEADS, N, C // HEADS, generator=g),
        "y": torch.randn(S, D_Y, generator=g),
        "w_y": torch.randn(D_Y, C, generator=g),
        "k": torch.randn(S, C, generator=g),
    }


def generating(module):
    """`module(x, use_cache=True)` from an empty cache, every call."""

    def call(**arguments):
        module.reset_cache()
        return module(**arguments, use_cache=True)

    return call


def good_calls():
    """(where, callable of keyword arguments, good arguments, required tensors, optional ones)."""
    t = tensors()
    x, w, q = t["x"], t["w"], t["q"]
    qkv = {"x": x, "w_q": w, "w_k": w, "w_v": w}
    modules = [
        ("SelfAttentionV1.forward", SelfAttentionV1(D, C)),
        ("SelfAttentionV2.forward", SelfAttentionV2(D, C)),
        ("CausalAttention.forward", CausalAttention(D, C, N, 0.0)),
        ("MultiHeadAttentionWrapper.forward", MultiHeadAttentionWrapper(D, C, N, 0.0, HEADS)),
        ("MultiHeadAttention.forward", MultiHeadAttention(D, C, N, 0.0, HEADS)),
        (
            "MultiHeadAttentionWithSWA.forward",
            MultiHeadAttentionWithSWA(D, C, 0.0, HEADS, False, 2),
        ),
    ]
    cross = {"x": x, "y": t["y"], "w_q": w, "w_k": t["w_y"], "w_v": t["w_y"]}
    masks = ("mask", "key_padding_mask")
    return [
        ("projection", F.projection, {"x": x, "w": w}, ["x", "w"], ["b"]),
        ("scores", F.scores, {"q": q, "k": q}, ["q", "k"], []),
        ("scaled_scores", F.scaled_scores, {"omega": t["omega"], "c": C}, ["omega"], []),
        (
            "masked_scores",
            F.masked_scores,
            {"omega": t["omega"], "mask": t["omega"] > 0},
            ["omega", "mask"],
            [],
        ),
        (
            "softcapped_scores",
            F.softcapped_scores,
            {"omega_scaled": t["omega"], "cap": 5.0},
            ["omega_scaled"],
            [],
        ),
        (
            "alibi_scores",
            F.alibi_scores,
            {"omega_scaled": t["omega"], "slope": 0.5},
            ["omega_scaled"],
            [],
        ),
        (
            "temperature_scores",
            F.temperature_scores,
            {"omega_scaled": t["omega"], "floor": 2.0, "scale": 0.1},
            ["omega_scaled"],
            [],
        ),
        ("weights", F.weights, {"omega": t["omega"], "c": C}, ["omega"], list(masks)),
        ("context", F.context, {"a": t["a"], "v": q}, ["a", "v"], []),
        ("output_gate", F.output_gate, {"c": q, "gamma": q}, ["c", "gamma"], []),
        ("self_attention", F.self_attention, qkv, list(qkv), ["b_q", "b_k", "b_v", *masks]),
        ("split_heads", F.split_heads, {"t": q, "heads": HEADS}, ["t"], []),
        ("merge_heads", F.merge_heads, {"t": t["heads"]}, ["t"], []),
        (
            "multi_head_attention",
            F.multi_head_attention,
            {**qkv, "w_o": torch.randn(C, C), "heads": HEADS},
            [*qkv, "w_o"],
            ["b_q", "b_k", "b_v", "b_o", *masks],
        ),
        (
            "self_attention_backward",
            F.self_attention_backward,
            {**qkv, "grad_c": q},
            [*qkv, "grad_c"],
            [],
        ),
        (
            "self_attention_gradients",
            F.self_attention_gradients,
            {**qkv, "grad_c": q},
            [*qkv, "grad_c"],
            [],
        ),
        *[
            (where, module, {"x": x}, ["x"], [] if "V" in where else list(masks))
            for where, module in modules
        ],
        # the variants: n queries against s keys, a cache (a tuple: see test_decode_step.py)
        ("scores", F.scores, {"q": q, "k": t["k"]}, ["q", "k"], []),
        ("cross_attention", F.cross_attention, cross, list(cross), list(masks)),
        (
            "attention",
            F.attention,
            {"x": x, "weights": F.LayerWeights(w, w, w)},
            ["x"],  # weights is a record, not a tensor: see test_entry_point.py
            [*masks, "y", "rope"],
        ),
        (
            "CrossAttention.forward",
            CrossAttention(D, D_Y, C, num_heads=HEADS),
            {"x": x, "y": t["y"]},
            ["x", "y"],
            list(masks),
        ),
        (
            "decode_step",
            F.decode_step,
            {"x_new": x[:2], "w_q": w, "w_k": w, "w_v": w},
            ["x_new", "w_q", "w_k", "w_v"],
            ["cache"],
        ),
        (
            "MultiHeadAttention.forward",
            generating(MultiHeadAttention(D, C, N, 0.0, HEADS)),
            {"x": x},
            ["x"],
            [],
        ),
        (
            "MultiHeadAttentionWithSWA.forward",
            generating(MultiHeadAttentionWithSWA(D, C, 0.0, HEADS)),
            {"x": x},
            ["x"],
            [],
        ),
        *variant_calls(x),
    ]


def variant_calls(x):
    """The classes of Llama 3, Qwen 3 and latent attention (`attention.grouped`, `.latent`), and
    attention without the softmax (`attention.linear`, `.deltanet`)."""
    from attention import (
        GatedDeltaNet,
        GroupedQueryAttention,
        KimiDeltaAttention,
        Mamba,
        Mamba2,
        MultiHeadLatentAttention,
        RMSNorm,
    )
    from attention import linear as L

    q, v = torch.randn(HEADS, N, C), torch.randn(HEADS, N, D)
    omega, u = torch.randn(N, N), torch.randn(N, C)
    w = torch.randn(D, C)
    g, beta = -torch.rand(HEADS, N), torch.rand(HEADS, N)
    qkv = {"q": q, "k": q, "v": v}

    gqa = GroupedQueryAttention(D, num_heads=HEADS, num_kv_groups=1, head_dim=C // HEADS)
    return [
        ("GroupedQueryAttention.forward", gqa, {"x": x}, ["x"], ["blocked", "cos", "sin"]),
        ("RMSNorm.forward", RMSNorm(D), {"x": x}, ["x"], []),
        (
            "MultiHeadLatentAttention.forward",
            MultiHeadLatentAttention(D, C, 0.0, HEADS),
            {"x": x},
            ["x"],
            [],
        ),
        ("GatedDeltaNet.forward", GatedDeltaNet(D, C, 0.0, HEADS), {"x": x}, ["x"], []),
        ("linear_attention", L.linear_attention, qkv, list(qkv), ["initial_state"]),
        (
            "delta_rule",
            L.delta_rule,
            {**qkv, "beta": beta},
            [*qkv, "beta"],
            ["initial_state"],
        ),
        (
            "gated_delta_rule",
            L.gated_delta_rule,
            {**qkv, "g": g, "beta": beta},
            [*qkv, "g", "beta"],
            ["initial_state"],
        ),
        ("causal_weights", L.causal_weights, {"omega_scaled": omega}, ["omega_scaled"], ["decays"]),
        (
            "linear_self_attention",
            L.linear_self_attention,
            {"x": x, "w_q": w, "w_k": w, "w_v": w},
            ["x", "w_q", "w_k", "w_v"],
            [],
        ),
        (
            "read_written",
            L.read_written,
            {"x": x, "w_q": w, "w_k": w, "u": u},
            ["x", "w_q", "w_k", "u"],
            ["decays"],
        ),
        (
            "kimi_delta_rule",
            L.kimi_delta_rule,
            {**qkv, "g": -torch.rand(HEADS, N, C), "beta": beta},
            [*qkv, "g", "beta"],
            ["initial_state"],
        ),
        (
            "channel_decayed",
            L.channel_decayed,
            {"x": u, "log_decays": -torch.rand(N, C), "sign": 1},
            ["x", "log_decays"],
            [],
        ),
        (
            "kda_read",
            L.kda_read,
            {"x": x, "w_q": w, "w_k": w, "u": u, "log_decays": -torch.rand(N, C)},
            ["x", "w_q", "w_k", "u", "log_decays"],
            [],
        ),
        (
            "ssd",
            L.ssd,
            {
                "x": torch.randn(1, N, HEADS, C),
                "dt": torch.rand(1, N, HEADS),
                "A": -torch.rand(HEADS),
                "B": torch.randn(1, N, 1, D),
                "C": torch.randn(1, N, 1, D),
            },
            ["x", "dt", "A", "B", "C"],
            ["D", "initial_state"],
        ),
        (
            "stepped_values",
            L.stepped_values,
            {"v": u, "delta": torch.rand(N, 1)},
            ["v", "delta"],
            [],
        ),
        (
            "selective_read",
            L.selective_read,
            {
                "x": x,
                "w_q": w,
                "w_k": w,
                "w_v": w,
                "delta": torch.rand(N, 1),
                "log_decays": -torch.rand(N, C),
            },
            ["x", "w_q", "w_k", "w_v", "delta", "log_decays"],
            [],
        ),
        (
            "ssd_read",
            L.ssd_read,
            {"x": x, "w_q": w, "w_k": w, "w_v": w, "delta": torch.rand(N, 1), "decays": omega},
            ["x", "w_q", "w_k", "w_v", "delta", "decays"],
            [],
        ),
        (
            "KimiDeltaAttention.forward",
            KimiDeltaAttention(D, num_heads=HEADS, head_dim=2, conv_size=2),
            {"x": x},
            ["x"],
            [],
        ),
        (
            "Mamba.forward",
            Mamba(D, inner=4, state_size=3, time_step_rank=2, conv_kernel=2),
            {"x": x},
            ["x"],
            [],
        ),
        (
            "selective_scan",
            L.selective_scan,
            {
                "x": torch.randn(1, N, C),
                "dt": torch.rand(1, N, C),
                "A": -torch.rand(C, D),
                "B": torch.randn(1, N, D),
                "C": torch.randn(1, N, D),
            },
            ["x", "dt", "A", "B", "C"],
            ["D", "initial_state"],
        ),
        (
            "Mamba2.forward",
            Mamba2(D, num_heads=HEADS, head_dim=2, state_size=3),
            {"x": x},
            ["x"],
            [],
        ),
        (  # g and beta may be None there: no decay, no delta rule (another rule, not optional)
            "chunk_states",
            L.chunk_states,
            {**qkv, "g": g, "beta": beta, "chunk_size": 2},
            list(qkv),
            [],
        ),
    ]


CASES = [
    (where, fn, arguments, name, bad)
    for where, fn, arguments, required, _ in good_calls()
    for name in required
    for bad in (None, 2.0)
]


@pytest.mark.parametrize(
    ("where", "fn", "arguments", "name", "bad"),
    CASES,
    ids=[f"{where}-{name}-{type(bad).__name__}" for where, _, _, name, bad in CASES],
)
def test_a_missing_tensor_is_named(where, fn, arguments, name, bad):
    fn(**arguments)  # the good call passes (and its signature is remembered)
    got = "None" if bad is None else "float"
    message = rf"^{where}: {name} must be a torch.Tensor of shape \(.*\), got {got}$"
    with pytest.raises(TypeError, match=message):
        fn(**{**arguments, name: bad})


@pytest.mark.parametrize(
    ("where", "fn", "arguments", "optional"),
    [(where, fn, arguments, optional) for where, fn, arguments, _, optional in good_calls()],
    ids=[where for where, *_ in good_calls()],
)
def test_optional_tensors_may_be_none(where, fn, arguments, optional):
    expected = fn(**arguments)
    got = fn(**arguments, **dict.fromkeys(optional))
    flat = torch.utils._pytree.tree_leaves  # decode_step returns (rows, (K, V))
    pairs = zip(flat(got), flat(expected), strict=True)
    assert all(torch.equal(g, e) for g, e in pairs), where


def test_the_table_covers_every_public_function_and_module():
    import attention

    functions = {
        name
        for name in F.__all__
        if callable(getattr(F, name)) and name not in ("Gradients", "LayerWeights")
    }
    covered = {where.split(".")[0] for where, *_ in good_calls()}
    no_tensor = {"causal_mask", "sliding_window_mask", "chunked_mask", "alibi_slopes"}  # no tensor
    assert functions - no_tensor <= covered
    classes = {name for name in attention.__all__ if name[0].isupper() and "Error" not in name}
    assert classes <= covered
    linear = {
        name for name in attention.linear.__all__ if callable(getattr(attention.linear, name))
    }
    assert linear <= covered
