"""explicit_attention: whole matrices of symbols, composed and evaluated step by step."""

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

import derive
from derive.notation import letters as N


def _rational_inputs(ea, seed=0):
    rng = np.random.default_rng(seed)
    return {
        name: [[Fraction(int(k), 8) for k in row] for row in rng.integers(-16, 17, symbols.shape)]
        for name, symbols in ea.inputs.items()
    }


def test_attributes_have_the_seeds_shapes():
    ea = derive.explicit_variant("self-attention", 5, 3, 2)
    shapes = {name: getattr(ea, name).shape for name in ("X", "W_q", "W_k", "W_v", "Q", "K", "V")}
    assert shapes == {
        "X": (5, 3),
        "W_q": (3, 2),
        "W_k": (3, 2),
        "W_v": (3, 2),
        "Q": (5, 2),
        "K": (5, 2),
        "V": (5, 2),
    }
    assert (ea.Omega.shape, ea.A.shape, ea.C.shape) == ((5, 5), (5, 5), (5, 2))
    with pytest.raises(AttributeError, match=r"ExplicitGraph has no matrix 'W_o'"):
        _ = ea.W_o


def test_composed_matrices_are_in_x_and_the_weights_only():
    ea = derive.explicit_variant("self-attention", 3, 2, 2)
    inputs = set(ea.X) | set(ea.W_q) | set(ea.W_k) | set(ea.W_v)
    for matrix in (ea.Q, ea.K, ea.V, ea.Omega, ea.A, ea.C):
        assert matrix.atoms(sp.Indexed) <= inputs
        assert not matrix.free_symbols & {N.n, N.d, N.c}  # sizes substituted: sqrt(2), not sqrt(c)


def test_composed_products_equal_sympy_matrix_algebra():
    ea = derive.explicit_variant("self-attention", 5, 3, 2)
    assert (ea.Q - ea.X * ea.W_q).expand() == sp.zeros(5, 2)
    assert (ea.Omega - (ea.X * ea.W_q) * (ea.X * ea.W_k).T).expand() == sp.zeros(5, 5)


def test_scores_are_dot_products_of_query_and_key_rows():
    ea = derive.explicit_variant("self-attention", 5, 3, 2)
    for m in range(5):
        for p in range(5):
            assert sp.expand(ea.Omega[m, p] - ea.Q.row(m).dot(ea.K.row(p))) == 0


def test_each_step_is_written_in_the_previous_steps_entries():
    ea = derive.explicit_variant("self-attention", 3, 4, 2)
    by_output = {s.output: s for s in ea.steps}
    omega = by_output["Omega"].formula
    assert {a.base.label.name for a in omega.atoms(sp.Indexed)} == {"q", "k"}
    assert {a.base.label.name for a in by_output["A"].formula.atoms(sp.Indexed)} == {"omegatilde"}
    assert {a.base.label.name for a in by_output["C"].formula.atoms(sp.Indexed)} == {"a", "v"}
    scaled = by_output["Omega_scaled"].formula
    assert not scaled.free_symbols & {N.c}  # the size is a number here: ω/√2, not ω/√c
    assert scaled[0, 1] == N.base("omega")[1, 2] / sp.sqrt(2)


def test_rows_of_explicit_weights_sum_to_one():
    for ea in (
        derive.explicit_variant("self-attention", 4, 3, 2),
        derive.explicit_variant("causal", 4, 3, 2),
    ):
        (weights,) = [s for s in ea.steps if s.name == "weights"]
        for row in range(4):
            assert sp.simplify(sum(weights.formula.row(row)) - 1) == 0


def test_causal_weights_are_lower_triangular():
    ea = derive.explicit_variant("causal", 4, 3, 2)
    assert all(ea.A[m, p] == 0 for m in range(4) for p in range(4) if p > m)
    assert all(ea.A[m, p] != 0 for m in range(4) for p in range(4) if p <= m)


def test_padding_mask_zeroes_masked_keys_and_empty_rows():
    mask = [[True, False, True], [False, False, False], [True, True, True]]
    ea = derive.explicit_variant("masked", 3, 2, 2, mask=mask)
    assert ea.A[0, 1] == 0 and ea.A[0, 0] != 0
    assert list(ea.A.row(1)) == [0, 0, 0]  # no key allowed: a zero row, never 0/0


def test_multi_head_has_per_head_weights_and_an_output_projection():
    ea = derive.explicit_variant("multi-head", 3, 2, 4, h=2)
    assert isinstance(ea.A, tuple) and len(ea.A) == 2
    assert ea.W_o.shape == (4, 4)
    assert ea.C.shape == (3, 4)
    (first,) = [s for s in ea.steps if s.output == "Omega_1"]
    # head 1 uses columns 1..2 of Q and K, scaled by sqrt(c_h)
    q, k = N.base("q"), N.base("k")
    assert first.formula[0, 1] == q[1, 1] * k[2, 1] + q[1, 2] * k[2, 2]
    (second,) = [s for s in ea.steps if s.output == "Omega_2"]
    assert second.formula[0, 1] == q[1, 3] * k[2, 3] + q[1, 4] * k[2, 4]
    (scaled,) = [s for s in ea.steps if s.output == "Omega_scaled_2"]
    assert scaled.formula[0, 1] == N.base("omega")[2, 1, 2] / sp.sqrt(2)  # √c_h, c_h = 4/2


def test_evaluate_exact_on_rationals():
    ea = derive.explicit_variant("self-attention", 5, 3, 2)
    inputs = _rational_inputs(ea)
    values = ea.evaluate(**inputs, digits=None)
    X, W_q, W_k = (sp.Matrix(inputs[name]) for name in ("X", "W_q", "W_k"))
    assert values.Q == X * W_q
    assert values.Omega == (X * W_q) * (X * W_k).T
    assert all(isinstance(e, sp.Rational) for e in values.Omega)
    # the weights stay exact: exponentials of algebraic numbers; each row sums to exactly 1
    assert sp.simplify(sum(values.A.row(0)) - 1) == 0


def test_evaluate_high_precision_matches_exact_to_thirty_digits():
    ea = derive.explicit_variant("self-attention", 4, 3, 2)
    inputs = _rational_inputs(ea, seed=1)
    exact = ea.evaluate(**inputs, digits=None)
    fast = ea.evaluate(**inputs, digits=30)
    for name in ("A", "C"):
        for e, f in zip(exact[name], fast[name], strict=True):
            assert abs(sp.N(e, 40) - f) < sp.Float("1e-27")


def test_evaluate_accepts_arrays_lists_and_floats_exactly():
    ea = derive.explicit_variant("self-attention", 2, 3, 2)
    X = np.array([[0.1, 0.5, -1.0], [2.0, 0.25, 3.0]])
    W = [[1, 0], [0, 1], [1, 1]]
    values = ea.evaluate(X, W, W, W)
    assert values.Q[0, 0] == sp.Rational(0.1) + sp.Rational(-1.0)  # 0.1 as stored, not 1/10
    assert values.Q[0, 0] != sp.Rational(-9, 10)


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ({"X": [[1, 2], [3, 4]]}, ValueError, r"X must have shape \(2, 3\), got shape \(2, 2\)"),
        ({"W_q": [[1, 2], [3]]}, ValueError, r"W_q must have shape \(3, 2\), got ragged rows"),
        ({"W_k": [[1, "a"]] * 3}, TypeError, r"W_k must hold real numbers, got str 'a'"),
        ({"W_v": [[True, 1]] * 3}, TypeError, r"W_v must hold numbers, got the bool True"),
        ({"X": [[1, float("nan"), 2]] * 2}, ValueError, r"X must hold finite numbers, got nan"),
        ({"X": 3}, TypeError, r"X must be a matrix"),
        ({"W_o": [[1, 0], [0, 1]]}, TypeError, r"missing \[\], unknown \['W_o'\]"),
    ],
)
def test_evaluate_refuses_bad_inputs(override, error, match):
    ea = derive.explicit_variant("self-attention", 2, 3, 2)
    inputs = {"X": [[1, 2, 3]] * 2, "W_q": [[1, 2]] * 3, "W_k": [[1, 2]] * 3, "W_v": [[1, 2]] * 3}
    with pytest.raises(error, match=match):
        ea.evaluate(**(inputs | override))


def test_evaluate_requires_w_o_for_heads_and_checks_digits():
    ea = derive.explicit_variant("multi-head", 2, 3, 4, h=2)
    inputs = {
        "X": [[1, 2, 3]] * 2,
        "W_q": [[1] * 4] * 3,
        "W_k": [[1] * 4] * 3,
        "W_v": [[1] * 4] * 3,
    }
    with pytest.raises(TypeError, match=r"evaluate needs exactly .*missing \['W_o'\]"):
        ea.evaluate(**inputs)
    with pytest.raises(ValueError, match=r"digits must be a positive int or None, got digits=0"):
        ea.evaluate(**inputs, W_o=[[1] * 4] * 4, digits=0)


def test_evaluate_batch_matches_one_by_one():
    ea = derive.explicit_variant("self-attention", 3, 2, 2)
    inputs = _rational_inputs(ea)
    other = _rational_inputs(ea, seed=5)["X"]
    batch = ea.evaluate_batch([inputs["X"], other], inputs["W_q"], inputs["W_k"], inputs["W_v"])
    assert len(batch) == 2
    single = ea.evaluate(other, inputs["W_q"], inputs["W_k"], inputs["W_v"])
    assert batch[1].C == single.C
    assert batch[0].C != batch[1].C
    with pytest.raises(ValueError, match=r"X must have shape \(batch, 3, 2\)"):
        ea.evaluate_batch(inputs["X"], inputs["W_q"], inputs["W_k"], inputs["W_v"])


def test_values_access_by_name_attribute_and_per_head():
    ea = derive.explicit_variant("multi-head", 3, 2, 4, h=2)
    inputs = _rational_inputs(ea)
    values = ea.evaluate(**inputs)
    assert list(values)[:3] == ["Q", "K", "V"]
    assert values.A == (values["A_1"], values["A_2"])
    assert len(values.floats("C")) == 3 and isinstance(values.floats("C")[0][0], float)
    with pytest.raises(KeyError, match=r"no step produces 'Z'"):
        values["Z"]
    with pytest.raises(AttributeError):
        _ = values.Z


def test_repr_names_the_variant():
    assert repr(derive.explicit_variant("causal", 5, 3, 2)) == (
        "ExplicitGraph('causal self-attention', n=5, d=3, c=2)"
    )
