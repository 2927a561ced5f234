"""Every tensor argument of every public function, in every layout torch has besides the dense
one (sparse COO, nested in torch's strided layout, nested in its jagged one): refused by name,
never an error from inside torch, and never let through because a dense call of the same shape
passed before (the checks remember the signatures that passed)."""

import re
import warnings

import pytest
import torch

from attention import (
    CausalAttention,
    CrossAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    SelfAttentionV2,
    flash,
)
from attention import functional as F
from attention.grouped import expand_groups, grouped_query_attention, rms_norm
from attention.latent import latent_attention
from attention.rope import apply_rope, compute_rope_params, rotate_half

G = torch.Generator().manual_seed(0)


def _t(*shape):
    return torch.randn(*shape, generator=G)


N, D, C = 5, 3, 4
X, W, WO = _t(N, D), _t(D, C), _t(C, C)
Q, K, V = _t(2, N, C), _t(2, N, C), _t(2, N, C)
OMEGA = _t(N, N)
COS, SIN = compute_rope_params(head_dim=C, context_length=8)
LSE, DC = _t(2, N), _t(2, N, C)
BLOCKS = {"block_rows": 2, "block_keys": 3}

#: one valid call of each public function, by keyword: the table the test walks
CALLS = {
    "projection": (F.projection, {"x": X, "w": W, "b": _t(C)}),
    "scores": (F.scores, {"q": Q, "k": K}),
    "scaled_scores": (F.scaled_scores, {"omega": OMEGA, "c": C}),
    "masked_scores": (F.masked_scores, {"omega": OMEGA, "mask": F.causal_mask(N)}),
    "softcapped_scores": (F.softcapped_scores, {"omega_scaled": OMEGA, "cap": 5.0}),
    "alibi_scores": (F.alibi_scores, {"omega_scaled": OMEGA, "slope": 0.5}),
    "weights": (F.weights, {"omega": OMEGA, "c": C, "mask": F.causal_mask(N)}),
    "context": (F.context, {"a": OMEGA.softmax(-1), "v": X}),
    "output_gate": (F.output_gate, {"c": _t(N, C), "gamma": _t(N, C)}),
    "self_attention": (F.self_attention, {"x": X, "w_q": W, "w_k": W, "w_v": W, "b_q": _t(C)}),
    "split_heads": (F.split_heads, {"t": _t(2, N, C), "heads": 2}),
    "merge_heads": (F.merge_heads, {"t": _t(2, 2, N, 2)}),
    "multi_head_attention": (
        F.multi_head_attention,
        {"x": X, "w_q": W, "w_k": W, "w_v": W, "w_o": WO, "heads": 2, "sinks": _t(2)},
    ),
    "cross_attention": (F.cross_attention, {"x": X, "y": _t(3, D), "w_q": W, "w_k": W, "w_v": W}),
    "self_attention_backward": (
        F.self_attention_backward,
        {"x": X, "w_q": W, "w_k": W, "w_v": W, "grad_c": _t(N, C)},
    ),
    "self_attention_gradients": (
        F.self_attention_gradients,
        {"x": X, "w_q": W, "w_k": W, "w_v": W, "grad_c": _t(N, C)},
    ),
    "grouped_query_attention": (
        grouped_query_attention,
        {"x": X, "w_q": W, "w_k": _t(D, 2), "w_v": _t(D, 2), "heads": 2, "groups": 1},
    ),
    "expand_groups": (expand_groups, {"t": _t(1, 1, N, 2), "heads": 2}),
    "rms_norm": (rms_norm, {"x": X, "gain": _t(D)}),
    "apply_rope": (apply_rope, {"x": _t(2, N, C), "cos": COS, "sin": SIN}),
    "rotate_half": (rotate_half, {"x": _t(2, N, C)}),
    "latent_attention": (
        latent_attention,
        {"x": X, "w_q": W, "w_dkv": _t(D, 2), "w_uk": _t(2, C), "w_uv": _t(2, C), "heads": 2},
    ),
    "flash_attention": (flash.flash_attention, {"q": Q, "k": K, "v": V, **BLOCKS}),
    "online_softmax": (flash.online_softmax, {"q": Q, "k": K, "v": V, **BLOCKS}),
    "flash_gradients": (flash.flash_gradients, {"q": Q, "k": K, "v": V, "dc": DC, **BLOCKS}),
    "blocked_backward": (
        flash.blocked_backward,
        {"q": Q, "k": K, "v": V, "c": _t(2, N, C), "lse": LSE, "dc": DC, **BLOCKS},
    ),
    # the modules' forward, with their own weights checked beside the argument
    "SelfAttentionV2": (SelfAttentionV2(D, C), {"x": X}),
    "CausalAttention": (CausalAttention(D, C, 8, 0.0), {"x": _t(2, N, D)}),
    "MultiHeadAttention": (MultiHeadAttention(D, C, 8, 0.0, 2, sinks=True), {"x": _t(2, N, D)}),
    "GroupedQueryAttention": (GroupedQueryAttention(C, num_heads=2, num_kv_groups=1), {"x": Q}),
    "MultiHeadLatentAttention": (MultiHeadLatentAttention(C, C, 0.0, 2), {"x": Q}),
    "CrossAttention": (CrossAttention(D, 2, C), {"x": _t(2, N, D), "y": _t(2, 3, 2)}),
}


def _nested_strided(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that this layout is a prototype
        return torch.nested.nested_tensor([t, t])


def _nested_jagged(t):
    return torch.nested.nested_tensor([t, t], layout=torch.jagged)


LAYOUTS = {
    "sparse": (lambda t: t.to_sparse(), "sparse_coo"),
    "nested (strided)": (_nested_strided, "nested"),
    "nested (jagged)": (_nested_jagged, "nested"),
}

CASES = [
    (name, argument, layout)
    for name, (_, kwargs) in CALLS.items()
    for argument, value in kwargs.items()
    if isinstance(value, torch.Tensor) and value.ndim >= 1
    for layout in LAYOUTS
]


@pytest.mark.parametrize(("name", "argument", "layout"), CASES)
def test_a_tensor_of_another_layout_is_refused_by_name(name, argument, layout):
    fn, kwargs = CALLS[name]
    fn(**kwargs)  # the dense call passes first: the refusal must not be remembered away
    make, kind = LAYOUTS[layout]
    given = {**kwargs, argument: make(kwargs[argument])}
    with pytest.raises(TypeError, match=rf"{argument} must be a dense tensor, got a {kind} one"):
        fn(**given)


# -- a module's per-head tensors reassigned with another shape: named with both sizes --------

PER_HEAD = {
    "MultiHeadAttention sinks": (
        lambda: MultiHeadAttention(D, C, 8, 0.0, 2, sinks=True),
        "sinks",
    ),
    "MultiHeadAttention alibi": (
        lambda: MultiHeadAttention(D, C, 8, 0.0, 2, alibi=torch.tensor([0.5, 0.25])),
        "alibi_slopes",
    ),
    "GroupedQueryAttention sinks": (
        lambda: GroupedQueryAttention(C, num_heads=2, num_kv_groups=1, sinks=True),
        "sinks",
    ),
    "GroupedQueryAttention alibi": (
        lambda: GroupedQueryAttention(
            C, num_heads=2, num_kv_groups=1, alibi=torch.tensor([0.5, 0.25])
        ),
        "alibi_slopes",
    ),
}


@pytest.mark.parametrize("shape", [(3,), (), (2, 1)], ids=str)
@pytest.mark.parametrize("case", sorted(PER_HEAD))
def test_a_per_head_tensor_of_another_shape_is_named_with_both_sizes(case, shape):
    from attention import ShapeError

    build, name = PER_HEAD[case]
    module = build()
    x = _t(2, N, module.W_query.in_features)
    module(x)  # built right, it runs (and its signature passes the checks)
    tensor = getattr(module, name)
    tensor.data = torch.zeros(shape)
    told = (
        rf"^{type(module).__name__}: {name} has shape {re.escape(str(shape))} but there are heads=2"
    )
    with pytest.raises(ShapeError, match=told):
        module(x)


# -- a position offset: a non-negative int, for every function that takes one ------------------

OFFSETS = {
    "alibi_scores": lambda offset: F.alibi_scores(OMEGA, 0.5, offset=offset),
    "apply_rope": lambda offset: apply_rope(_t(2, N, C), COS, SIN, offset=offset),
}


@pytest.mark.parametrize(
    ("offset", "error"),
    [(-1, ValueError), (True, TypeError), (False, TypeError), (1.0, TypeError), ("1", TypeError)],
    ids=repr,
)
@pytest.mark.parametrize("name", sorted(OFFSETS))
def test_an_offset_that_is_no_position_is_refused_by_name(name, offset, error):
    with pytest.raises(error, match=rf"^{name}: offset must be .*int, got (offset=)?"):
        OFFSETS[name](offset)
