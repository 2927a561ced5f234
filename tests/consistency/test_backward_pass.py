"""Backward pass: the gradients `derive` derives, evaluated on numbers, against torch.autograd.

Inputs are dyadic rationals (k/8), exact in float64; the symbolic side evaluates each gradient
step on 30-digit Floats, the numeric side is autograd in float64. Every gradient must agree to
1e-10 (relative to the entry, or absolute below 1). Sizes are pairwise distinct.
"""

import dataclasses

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import derive
from attention import CausalAttention, MultiHeadAttention, SelfAttentionV2
from attention import functional as F
from derive.bridge.gradients import (
    check_gradients_against_torch,
    gradient_inputs,
    gradients_only,
    torch_gradient_steps,
)
from derive.bridge.steps import compare
from derive.explicit.values import evaluate_steps
from derive.notation import letters as N

TOLERANCE = 1e-10


def _close(symbolic, tensor, name=""):
    assert symbolic.shape == tuple(tensor.shape), name
    for entry, number in zip(symbolic, tensor.flatten().tolist(), strict=True):
        assert abs(float(entry) - number) <= TOLERANCE * max(1.0, abs(number)), (
            name,
            entry,
            number,
        )


def _derived(name, n, d, c, seed=0, **sizes):
    g = derive.explicit_gradients(name, n, d, c, **sizes)
    inputs = gradient_inputs(g, seed=seed)
    return g, inputs, g.evaluate(**inputs)


@pytest.mark.parametrize(
    ("name", "sizes", "heads"),
    [
        ("self-attention", (5, 3, 2), 1),  # the seed's single head
        ("causal", (4, 6, 3), 1),  # the decoder's mask
        ("multi-head", (3, 2, 6), 2),  # two heads of width 3, then W_o
        ("causal+multi-head", (5, 2, 6), 3),  # three causal heads of width 2
    ],
)
def test_every_gradient_equals_autograd_step_by_step(name, sizes, heads):
    own = {"h": heads} if heads > 1 else {}
    report = check_gradients_against_torch(name, *sizes, **own, seed=sum(sizes))
    expected = {"dA", "dOmega", "dOmega_scaled", "dV", "dK", "dQ", "dW_q", "dW_k", "dW_v", "dX"}
    if heads > 1:
        expected = {"dV", "dK", "dQ", "dW_q", "dW_k", "dW_v", "dX", "dW_o"}  # Ĉ: a copy
        for head in range(1, heads + 1):
            expected |= {f"{key}_{head}" for key in ("dA", "dOmega", "dOmega_scaled", "dC")}
    assert {item.output for item in report} == expected
    for item in report:
        assert item.max_abs_error < TOLERANCE, (item.output, item.max_abs_error)


@pytest.mark.parametrize("causal", [False, True])
def test_derived_equals_the_written_out_backward_of_attention(causal):
    g, inputs, values = _derived("causal" if causal else "self-attention", 6, 4, 3, seed=2)
    ours = F.self_attention_gradients(
        inputs["X"], inputs["W_q"], inputs["W_k"], inputs["W_v"], inputs["dC"], causal=causal
    )
    for name in ("dA", "dOmega", "dQ", "dK", "dV", "dW_q", "dW_k", "dW_v", "dX"):
        _close(values[name], getattr(ours, name), name)


def _module_gradients(module, x, dC):
    x = x.clone().requires_grad_()
    module(x).backward(dC)
    return x.grad, *(
        getattr(module, name).weight.grad.T for name in ("W_query", "W_key", "W_value")
    )


def _load(module, inputs):
    with torch.no_grad():
        for name, key in (("W_query", "W_q"), ("W_key", "W_k"), ("W_value", "W_v")):
            getattr(module, name).weight.copy_(inputs[key].T)  # (d, c) -> (c, d)
    return module


@pytest.mark.parametrize(
    ("module", "causal"),
    [
        (lambda n, d, c: SelfAttentionV2(d, c), False),
        (lambda n, d, c: CausalAttention(d, c, context_length=n, dropout=0.0), True),
    ],
)
def test_derived_equals_autograd_on_the_modules(module, causal):
    n, d, c = 5, 4, 3
    _, inputs, values = _derived("causal" if causal else "self-attention", n, d, c, seed=4)
    layer = _load(module(n, d, c).double(), inputs)
    got = _module_gradients(layer, inputs["X"], inputs["dC"])
    for name, tensor in zip(("dX", "dW_q", "dW_k", "dW_v"), got, strict=True):
        _close(values[name], tensor, name)


def test_derived_equals_autograd_on_multi_head_attention():
    n, d, c, heads = 4, 3, 6, 2
    _, inputs, values = _derived("causal+multi-head", n, d, c, seed=6, h=heads)
    layer = _load(MultiHeadAttention(d, c, n, 0.0, heads).double(), inputs)
    with torch.no_grad():
        layer.out_proj.weight.copy_(inputs["W_o"].T)  # C = Ĉ W_o: nn.Linear stores W_oᵀ
        layer.out_proj.bias.zero_()
    dx, *weights = _module_gradients(layer, inputs["X"], inputs["dC"])
    for name, tensor in zip(("dX", "dW_q", "dW_k", "dW_v"), (dx, *weights), strict=True):
        _close(values[name], tensor, name)
    _close(values["dW_o"], layer.out_proj.weight.grad.T, "dW_o")


def test_derived_equals_autograd_on_functional_multi_head_without_mask():
    n, d, c, heads = 3, 5, 4, 2
    _, inputs, values = _derived("multi-head", n, d, c, seed=8, h=heads)
    leaves = [inputs[k].clone().requires_grad_() for k in ("X", "W_q", "W_k", "W_v", "W_o")]
    out = F.multi_head_attention(*leaves, heads=heads)
    grads = torch.autograd.grad(out, leaves, inputs["dC"])
    for name, tensor in zip(("dX", "dW_q", "dW_k", "dW_v", "dW_o"), grads, strict=True):
        _close(values[name], tensor, name)


@settings(deadline=None)
@given(
    n=st.integers(1, 4),
    d=st.integers(1, 3),
    c=st.integers(1, 3),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_derived_equals_autograd_on_any_small_shape(n, d, c, causal, seed):
    name = "causal" if causal else "self-attention"
    report = check_gradients_against_torch(name, n, d, c, seed=seed)
    assert max(item.max_abs_error for item in report) < TOLERANCE


# -- a changed formula is caught -------------------------------------------------------------------


def _mutated(g, output, formula):
    return tuple(
        dataclasses.replace(step, formula=sp.ImmutableMatrix(formula))
        if step.output == output
        else step
        for step in g.steps
    )


@pytest.mark.parametrize(
    ("output", "wrong"),
    [
        ("dOmega", lambda n, c: N.entries("domegatilde", n, n)),  # dΩ without the 1/√c
        ("dV", lambda n, c: N.entries("a", n, n) * N.entries("dctx", n, c)),  # A, not Aᵀ
        ("dK", lambda n, c: N.entries("domega", n, n) * N.entries("q", n, c)),  # dΩ, not dΩᵀ
    ],
)
def test_a_changed_gradient_formula_disagrees_with_autograd(output, wrong):
    n, d, c = 4, 3, 2
    g, inputs, _ = _derived("self-attention", n, d, c, seed=1)
    torch_values = torch_gradient_steps(g, **inputs)
    steps = g.forward.steps + _mutated(g, output, wrong(n, c))
    exact = {s: sp.Integer(v) for s, v in g.forward.sizes.items()}
    for name, symbols in g.inputs.items():
        exact.update(
            zip(symbols, [sp.Rational(v) for v in inputs[name].flatten().tolist()], strict=True)
        )
    values = gradients_only(evaluate_steps(steps, exact, 30, 1))
    report = {item.output: item.max_abs_error for item in compare(values, torch_values)}
    assert report[output] > 1e-3
    assert report["dX"] > 1e-3  # the error reaches the inputs' gradient


# -- the size of the speed budget (timed in tests/benchmarks/bench_gradients.py) ---------


def test_symbolic_gradient_check_at_size_four_agrees():
    report = check_gradients_against_torch("self-attention", 4, 4, 4)
    assert len(report) >= 10
    assert max(item.max_abs_error for item in report) < TOLERANCE
