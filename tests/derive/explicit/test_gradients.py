"""derive.explicit_gradients: the backward pass derived by the chain rule, proved equal to its matrix forms.

Sizes are pairwise distinct (n=5, d=3, c=2 …, never n = d = c), so a transposed or swapped
matrix changes a shape or an index and cannot pass.
"""

import dataclasses
import random

import pytest
import sympy as sp

import derive
from derive.explicit.agreement import residual
from derive.notation import letters as N


def _bases(expr) -> set[str]:
    return {entry.base.label.name for entry in expr.atoms(sp.Indexed)}


def test_shapes_of_every_gradient():
    g = derive.explicit_gradients("self-attention", 5, 3, 2)
    shapes = {
        name: getattr(g, name).shape
        for name in ("dC", "dX", "dW_q", "dW_k", "dW_v", "dQ", "dK", "dV", "dA", "dOmega")
    }
    assert shapes == {
        "dC": (5, 2),
        "dX": (5, 3),
        "dW_q": (3, 2),
        "dW_k": (3, 2),
        "dW_v": (3, 2),
        "dQ": (5, 2),
        "dK": (5, 2),
        "dV": (5, 2),
        "dA": (5, 5),
        "dOmega": (5, 5),
    }


def test_same_symbols_as_the_forward_derivation():
    g = derive.explicit_gradients("self-attention", 3, 1, 2)
    ea = derive.explicit_variant("self-attention", 3, 1, 2)
    assert (g.forward.X, g.forward.W_q, g.forward.W_k, g.forward.W_v) == (
        ea.X,
        ea.W_q,
        ea.W_k,
        ea.W_v,
    )
    inputs = set(ea.X) | set(ea.W_q) | set(ea.W_k) | set(ea.W_v) | set(g.dC)
    for name in ("dX", "dW_q", "dW_k", "dW_v", "dQ", "dK", "dV", "dA", "dOmega"):
        matrix = getattr(g, name)
        assert matrix.atoms(sp.Indexed) <= inputs, name
        assert not matrix.free_symbols & {N.n, N.d, N.c}, name  # sizes substituted
    assert set(g.dC).isdisjoint(inputs - set(g.dC))  # dC: fresh symbols
    assert _bases(g.dC) == {"dctx"}


@pytest.mark.parametrize(
    ("output", "bases"),
    [
        ("dV", {"a", "dctx"}),  # dv_{p,j} = Σ_m dc_{m,j} a_{m,p}
        ("dA", {"dctx", "v"}),  # da_{m,p} = Σ_j dc_{m,j} v_{p,j}
        ("dOmega_scaled", {"da", "omegatilde"}),  # the softmax's derivative, in ω̃
        ("dOmega", {"domegatilde"}),  # dω = dω̃ / √c
        ("dQ", {"domega", "k"}),
        ("dK", {"domega", "q"}),
        ("dW_q", {"x", "dq"}),
        ("dX", {"dq", "dk", "dv", "wq", "wk", "wv"}),
    ],
)
def test_each_gradient_is_written_in_the_named_entries_before_it(output, bases):
    g = derive.explicit_gradients("self-attention", 4, 3, 2)
    assert _bases(g.step(output).formula) == bases


def test_element_wise_chain_rule_gives_the_transpose_of_a():
    g = derive.explicit_gradients("self-attention", 3, 2, 4)
    a, dc = N.entries("a", 3, 3), N.entries("dctx", 3, 4)
    # dv_{2,3} = Σ_m dc_{m,3} a_{m,2}: column 2 of A, not row 2
    assert g.step("dV").formula[1, 2] == sum(dc[m, 2] * a[m, 1] for m in range(3))


@pytest.mark.parametrize(
    ("name", "sizes", "own"),
    [
        ("self-attention", (5, 3, 2), {}),  # the seed's single head
        ("causal", (4, 2, 3), {}),  # masked weights contribute nothing
        ("multi-head", (3, 2, 4), {"h": 2}),  # two heads of width 2, then W_o
        ("causal+multi-head", (3, 4, 6), {"h": 3}),
    ],
)
def test_derived_gradients_equal_their_matrix_forms(name, sizes, own):
    g = derive.explicit_gradients(name, *sizes, **own)
    residuals = g.residuals()
    assert set(residuals) == {step.output for step in g.steps}
    for output, matrix in residuals.items():
        assert matrix.is_zero_matrix, (output, matrix)
    assert g.proven()


def test_multi_head_has_the_output_projection_and_per_head_gradients():
    g = derive.explicit_gradients("multi-head", 3, 2, 4, h=2)
    outputs = [step.output for step in g.steps]
    assert outputs[:2] == ["dC_2", "dC_1"]  # the heads' contexts first (Ĉ is a copy of them)
    assert {"dA_1", "dA_2", "dOmega_1", "dOmega_scaled_2", "dW_o"} <= set(outputs)
    assert g.dW_o.shape == (4, 4)
    assert len(g.dA) == 2 and g.dA[0].shape == (3, 3)
    with pytest.raises(AttributeError, match=r"self-attention has no gradient 'dW_o'; its "):
        _ = derive.explicit_gradients("self-attention", 3, 2, 4).dW_o


@pytest.mark.parametrize(
    ("output", "wrong"),
    [
        ("dV", lambda a, dc, v, dom: a * dc),  # A instead of Aᵀ
        ("dA", lambda a, dc, v, dom: dc * v.T * 2),  # a factor too many
        ("dOmega", lambda a, dc, v, dom: dom),  # dΩ̃ without the 1/√c
    ],
)
def test_a_wrong_matrix_form_is_not_proved(output, wrong):
    g = derive.explicit_gradients("self-attention", 2, 3, 2)
    a, dc, v = N.entries("a", 2, 2), N.entries("dctx", 2, 2), N.entries("v", 2, 2)
    dom = N.entries("domegatilde", 2, 2)
    step = dataclasses.replace(g.step(output), compact=sp.ImmutableMatrix(wrong(a, dc, v, dom)))
    assert not residual(g, step).is_zero_matrix


def test_a_wrong_softmax_jacobian_is_not_proved():
    g = derive.explicit_gradients("self-attention", 3, 2, 4)
    a, da = N.entries("a", 3, 3), N.entries("da", 3, 3)
    diagonal_only = sp.ImmutableMatrix(3, 3, lambda m, p: a[m, p] * da[m, p])  # no row sum
    step = dataclasses.replace(g.step("dOmega_scaled"), compact=diagonal_only)
    assert not residual(g, step).is_zero_matrix


@pytest.mark.parametrize(
    ("name", "own"), [("self-attention", {}), ("causal", {}), ("multi-head", {"h": 2})]
)
def test_rowsum_identity_at_explicit_sizes(name, own):
    g = derive.explicit_gradients(name, 3, 5, 4, **own)
    assert g.rowsum_residual().shape == (3, g.heads)
    assert g.rowsum_residual().is_zero_matrix


def test_causal_gradients_vanish_above_the_diagonal():
    g = derive.explicit_gradients("causal", 4, 3, 2)
    formula = g.step("dOmega_scaled").formula
    assert all(formula[m, p] == 0 for m in range(4) for p in range(m + 1, 4))
    assert all(formula[m, p] != 0 for m in range(1, 4) for p in range(m + 1))
    assert all(g.dOmega[m, p] == 0 for m in range(4) for p in range(m + 1, 4))


def test_composed_dx_is_the_derivative_of_the_loss():
    # Independent of the step-by-step chain rule: differentiate L = Σ dc_{m,j} c_{m,j} once, at a
    # size small enough for it, and compare at a random rational point.
    g = derive.explicit_gradients("self-attention", 3, 1, 2)
    ea = g.forward
    loss = sum(dc * c for dc, c in zip(g.dC, ea.C, strict=True))
    rng = random.Random(5)
    symbols = [*ea.X, *ea.W_q, *ea.W_k, *ea.W_v, *g.dC]
    point = {s: sp.Rational(rng.randint(-8, 8), 4) for s in symbols}
    for name, wrt in (("dX", ea.X), ("dW_q", ea.W_q), ("dW_v", ea.W_v)):
        composed = getattr(g, name)
        for entry, symbol in zip(composed, wrt, strict=True):
            expected = sp.diff(loss, symbol).xreplace(point).evalf(30)
            assert abs(entry.xreplace(point).evalf(30) - expected) < 1e-25, (name, symbol)


def test_evaluate_returns_the_forward_and_every_gradient():
    # One token: its only weight is 1 whatever the score, so dΩ = 0 and dW_q = dW_k = 0.
    g = derive.explicit_gradients("self-attention", 1, 2, 3)
    w = [[1, 2, 3], [-1, 0, 1]]
    values = g.evaluate([[1, 2]], w, w, w, [[1, -1, 2]])
    assert list(values)[:7] == ["Q", "K", "V", "Omega", "Omega_scaled", "A", "C"]
    assert values.dW_q.shape == (2, 3) and values.dX.shape == (1, 2)
    for name in ("dOmega", "dW_q", "dW_k"):
        assert all(abs(entry) < 1e-25 for entry in values[name]), name
    # dW_v = Xᵀ A dC with A = (1): the outer product of x and dc
    assert values.floats("dW_v") == [[1.0, -1.0, 2.0], [2.0, -2.0, 4.0]]


def test_repr_and_latex_show_the_derived_formulas():
    g = derive.explicit_gradients("causal", 2, 3, 2)
    assert repr(g) == "ExplicitGradients('causal self-attention', n=2, d=3, c=2)"
    tex = g._repr_latex_()
    assert tex.startswith("$$\\begin{aligned}\\bar{C} &= ")
    assert r"\bar{v}_{2,1} &= a_{1,2} \bar{z}_{1,1} + a_{2,2} \bar{z}_{2,1}" in tex  # column 2 of A
    assert r"\bar{\tilde{\omega}}_{1,2} &= 0" in tex  # masked: the weight is the constant 0
    assert r"\bar{\omega}_{1,1} &= \frac{\bar{\tilde{\omega}}_{1,1}}{\sqrt{2}}" in tex


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (
            ("self-attention", 9, 3, 2),
            {},
            ValueError,
            r"n=9 is over the limit of 8 .*derive\.explicit\.MAX_GRADIENT_SIZE.*"
            r"derive\.backward_steps\(\)",
        ),
        (("self-attention", 5, 3, 12), {}, ValueError, r"c=12 is over the limit of 8"),
        (("self-attention", 0, 3, 2), {}, ValueError, r"n must be a positive int, got n=0"),
        (("self-attention", 5, 3.0, 2), {}, TypeError, r"d must be a positive int, got 3\.0 "),
        (("self-attention", 5, 3, True), {}, TypeError, r"c must be a positive int, got True "),
        (("multi-head", 5, 3, 4), {"h": 3}, ValueError, r"h=3 does not divide c=4"),
        (("causal", 5, 3, 2), {"w": 2}, ValueError, r"causal has no size 'w' \(w is a size of"),
    ],
)
def test_bad_sizes_are_refused(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        derive.explicit_gradients(*args, **kwargs)


def test_bad_evaluate_inputs_name_the_argument():
    g = derive.explicit_gradients("self-attention", 3, 2, 4)
    x, w = [[1, 0], [0, 1], [1, 1]], [[1] * 4] * 2
    with pytest.raises(ValueError, match=r"dC must have shape \(3, 4\), got shape \(4, 3\)"):
        g.evaluate(x, w, w, w, [[0] * 3] * 4)
    with pytest.raises(TypeError, match=r"missing \[\], unknown \['W_o'\]"):
        g.evaluate(x, w, w, w, [[0] * 4] * 3, W_o=[[1] * 4] * 4)
    with pytest.raises(TypeError, match=r"missing \['dC'\], unknown \[\]"):
        derive.explicit_gradients("multi-head", 3, 2, 4, h=2).evaluate(x, w, w, w, [[0] * 4] * 3)
    with pytest.raises(KeyError, match=r"no gradient step 'dZ'"):
        g.step("dZ")
