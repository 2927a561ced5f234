"""Forward pass: the symbolic steps of `derive` against `attention.functional`, step by step.

Inputs are dyadic rationals (k/8), which float64 holds exactly: the projections and Ω are
compared exactly, the softmax and C (evaluated to 30 digits) to 1e-12 relative. Sizes are
pairwise distinct (n=5, d=3, c=2) so that a swapped axis or a swapped K and V cannot pass.
"""

import dataclasses

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import derive
from attention import functional as F
from derive.bridge.steps import check_against_torch, compare, dyadic_inputs, torch_steps
from derive.calculus import flop_count
from derive.notation import letters as N

TOLERANCE = 1e-12


def _polynomial(output):
    return output in ("Q", "K", "V") or (output.startswith("Omega") and "scaled" not in output)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("self-attention", {}),  # the seed's single head
        ("causal", {}),  # a_{m,p} = 0 for p > m
        ("masked", {"key_padding_mask": [True, True, True, False, False]}),  # two padding tokens
        ("masked", {"mask": [[p <= m and p != 1 for p in range(5)] for m in range(5)]}),  # general
        ("masked", {"mask": [[m != 2 for _ in range(5)] for m in range(5)]}),  # a row with no key
    ],
)
def test_every_step_agrees_with_torch(name, kwargs):
    report = check_against_torch(name, 5, 3, 2, **kwargs)
    assert [item.output for item in report] == [
        "Q",
        "K",
        "V",
        "Omega",
        "Omega_scaled",
        "A",
        "C",
    ]
    for item in report:
        if _polynomial(item.output):
            assert item.exact, f"{item.output}: not exactly equal ({item.max_abs_error})"
        else:
            assert item.max_abs_error < TOLERANCE, (item.output, item.max_abs_error)


@pytest.mark.parametrize(("name", "heads"), [("multi-head", 2), ("causal+multi-head", 3)])
def test_multi_head_steps_agree_with_torch(name, heads):
    report = check_against_torch(name, 5, 3, 6, h=heads)
    assert sum(item.output.startswith("A_") for item in report) == heads
    for item in report:
        if _polynomial(item.output):
            assert item.exact, item.output
        else:
            assert item.max_abs_error < TOLERANCE, (item.output, item.max_abs_error)


def test_size_eight_agrees():
    report = check_against_torch("self-attention", 8, 8, 8, seed=3)
    assert all(item.exact for item in report if _polynomial(item.output))
    assert max(item.max_abs_error for item in report) < TOLERANCE * 10  # |omega| reaches ~50


def _relative_close(symbolic, tensor, tolerance=TOLERANCE):
    for entry, number in zip(symbolic, tensor.flatten().tolist(), strict=True):
        assert abs(float(entry) - number) <= tolerance * max(1.0, abs(number)), (entry, number)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_end_to_end(causal):
    ea = derive.explicit_variant(("causal" if causal else "self-attention"), 5, 3, 2)
    inputs = dyadic_inputs(ea, seed=7)
    values = ea.evaluate(**inputs)
    c, a = F.self_attention(
        inputs["X"],
        inputs["W_q"],
        inputs["W_k"],
        inputs["W_v"],
        causal=causal,
        return_weights=True,
    )
    _relative_close(values.C, c)
    _relative_close(values.A, a)
    fused = F.self_attention(
        inputs["X"], inputs["W_q"], inputs["W_k"], inputs["W_v"], causal=causal
    )
    _relative_close(values.C, fused, 1e-10)


def test_multi_head_attention_end_to_end():
    ea = derive.explicit_variant("multi-head", 5, 3, 4, h=2)
    inputs = dyadic_inputs(ea, seed=11)
    values = ea.evaluate(**inputs)
    c, a = F.multi_head_attention(
        inputs["X"],
        inputs["W_q"],
        inputs["W_k"],
        inputs["W_v"],
        inputs["W_o"],
        heads=2,
        return_weights=True,
    )
    _relative_close(values.C, c)
    for head in range(2):
        _relative_close(values.A[head], a[head])


def test_batches_agree_sequence_by_sequence():
    ea = derive.explicit_variant("self-attention", 5, 3, 2)
    inputs = dyadic_inputs(ea, seed=2)
    batch = torch.stack([inputs["X"], inputs["X"].flip(0)])  # (2, 5, 3)
    values = ea.evaluate_batch(batch, inputs["W_q"], inputs["W_k"], inputs["W_v"])
    c = F.self_attention(batch, inputs["W_q"], inputs["W_k"], inputs["W_v"], return_weights=True)[0]
    for index in range(2):
        _relative_close(values[index].C, c[index])


def test_float32_inputs_are_read_exactly():
    ea = derive.explicit_variant("self-attention", 5, 3, 2)
    inputs = dyadic_inputs(ea, seed=4, dtype=torch.float32)
    values = ea.evaluate(**inputs)
    report = compare(values, torch_steps(ea, **inputs))
    assert all(item.exact for item in report if _polynomial(item.output))
    assert max(item.max_abs_error for item in report) < 1e-5


# --- the comparison can fail: mutants of the formulas are caught -------------------------------


def _mutate(ea, output, formula):
    ea.steps = tuple(
        dataclasses.replace(step, formula=formula(step)) if step.output == output else step
        for step in ea.steps
    )
    return ea


MUTANTS = {
    # drop the 1/sqrt(c): softmax(Omega) instead of softmax(Omega / sqrt(c)), here c = 2
    "no_sqrt_c": ("Omega_scaled", lambda s: s.formula * sp.sqrt(2)),
    # softmax over the wrong axis: normalise the columns of A instead of the rows
    "wrong_axis": ("A", lambda s: s.formula.T),
    # K and V swapped in the context: C = A K
    "swapped_k_v": (
        "C",
        lambda s: s.formula.xreplace(
            dict(zip(N.entries("v", 5, 2), N.entries("k", 5, 2), strict=True))
        ),
    ),
    # Omega = K Q^T instead of Q K^T
    "transposed_scores": ("Omega", lambda s: s.formula.T),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_changed_formula_is_caught(mutant):
    output, formula = MUTANTS[mutant]
    ea = _mutate(derive.explicit_variant("self-attention", 5, 3, 2), output, formula)
    inputs = dyadic_inputs(ea, seed=0)
    report = {
        item.output: item for item in compare(ea.evaluate(**inputs), torch_steps(ea, **inputs))
    }
    worst = max(item.max_abs_error for item in report.values())
    assert worst > 1e-3, f"{mutant} went unnoticed"
    assert sp.Matrix(ea.steps[-1].formula).shape == (5, 2)


# --- FLOPs: the formula SymPy counted equals torch's counter -----------------------------------


@pytest.mark.parametrize(("n", "d", "c"), [(5, 3, 2), (7, 11, 4), (2, 13, 9)])
def test_flop_formula_equals_flop_counter(n, d, c):
    from torch.utils.flop_counter import FlopCounterMode

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=generator, dtype=torch.float64)
    w = [torch.randn(d, c, generator=generator, dtype=torch.float64) for _ in range(3)]
    with FlopCounterMode(display=False) as counter:
        F.self_attention(x, *w, return_weights=True)
    formula = flop_count(derive.variant("self-attention").graph).xreplace({N.n: n, N.d: d, N.c: c})
    assert counter.get_total_flops() == int(formula)


def test_multi_head_flop_formula_equals_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    n, d, c, h = 5, 3, 6, 3
    x = torch.randn(n, d, dtype=torch.float64)
    w = [torch.randn(d, c, dtype=torch.float64) for _ in range(3)]
    w_o = torch.randn(c, c, dtype=torch.float64)
    with FlopCounterMode(display=False) as counter:
        F.multi_head_attention(x, *w, w_o, heads=h, return_weights=True)
    formula = flop_count(derive.variant("multi-head").graph).xreplace(
        {N.n: n, N.d: d, N.c: c, N.h: h}
    )
    assert counter.get_total_flops() == int(formula)


# --- a property over sizes ----------------------------------------------------------------------


@settings(deadline=None)  # examples: the Hypothesis profile (tests/conftest.py)
@given(
    n=st.integers(1, 4),
    d=st.integers(1, 4),
    c=st.integers(1, 4),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_agreement_over_sizes(n, d, c, causal, seed):
    report = check_against_torch("causal" if causal else "self-attention", n, d, c, seed=seed)
    for item in report:
        if _polynomial(item.output):
            assert item.exact, (item.output, n, d, c)
        else:
            assert item.max_abs_error < TOLERANCE, (item.output, item.max_abs_error)
