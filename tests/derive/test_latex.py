"""Golden tests: the LaTeX of each step, as the printer writes it in the seed's notation."""

import pytest
import sympy as sp

import derive
from derive import _notation as N
from derive._latex import latex, split_sum, step_latex, visible_width

GOLDEN = {
    # output: (matrix-level, element-wise)
    "Q": (r"Q = X W_q", r"q_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_q)_{i,j}"),
    "K": (r"K = X W_k", r"k_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_k)_{i,j}"),
    "V": (r"V = X W_v", r"v_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_v)_{i,j}"),
    "Omega": (r"\Omega = Q K^\top", r"\omega_{m,p} = \sum_{j=1}^{c} q_{m,j} k_{p,j}"),
    "Omega_scaled": (
        r"\tilde{\Omega} = \frac{\Omega}{\sqrt{c}}",
        r"\tilde{\omega}_{m,p} = \frac{\omega_{m,p}}{\sqrt{c}}",
    ),
    "A": (
        r"A = \operatorname{softmax}\left(\frac{\Omega}{\sqrt{c}}\right)",
        r"a_{m,p} = \frac{\exp\left(\omega_{m,p} / \sqrt{c}\right)}"
        r"{\sum_{r=1}^{n} \exp\left(\omega_{m,r} / \sqrt{c}\right)}",
    ),
    "C": (r"C = A V", r"c_{m,j} = \sum_{p=1}^{n} a_{m,p} v_{p,j}"),
}


@pytest.mark.parametrize("output", list(GOLDEN))
def test_each_step_prints_as_pinned(output):
    (step,) = [s for s in derive.steps() if s.output == output]
    assert (latex(step.matrix), latex(step.element)) == GOLDEN[output]


MULTI_HEAD_GOLDEN = {
    "Omega_l": r"\omega^{(\ell)}_{m,p} = \sum_{j=1}^{c_h} q^{(\ell)}_{m,j} k^{(\ell)}_{p,j}",
    "C_concat": r"\hat{c}_{m,c_h \left(\ell - 1\right) + j} = c^{(\ell)}_{m,j}",
    "C": r"c_{m,j} = \sum_{i=1}^{c} \hat{c}_{m,i} (W_o)_{i,j}",
}


@pytest.mark.parametrize("output", list(MULTI_HEAD_GOLDEN))
def test_multi_head_steps_print_as_pinned(output):
    (step,) = [s for s in derive.steps(heads=True) if s.output == output]
    assert latex(step.element) == MULTI_HEAD_GOLDEN[output]


def test_per_head_transpose_is_valid_latex():
    (step,) = [s for s in derive.steps(heads=True) if s.output == "Omega_l"]
    assert latex(step.matrix) == r"\Omega^{(\ell)} = Q^{(\ell)} {K^{(\ell)}}^\top"  # no x^a^b


def test_concatenation_and_causal_weights():
    (merge,) = [s for s in derive.steps(heads=True) if s.name == "merge_heads"]
    assert latex(merge.matrix.rhs) == r"\left[\, C^{(1)} \;\; C^{(2)} \;\cdots\; C^{(h)} \,\right]"
    (weights,) = [s for s in derive.steps(causal=True) if s.name == "weights"]
    assert r"\sum_{r=1}^{m}" in latex(weights.element) and r"\begin{cases}" in latex(
        weights.element
    )


def test_explicit_entries_are_one_based_and_in_seed_order():
    ea = derive.explicit_attention(5, 3, 2)
    (scores,) = [s for s in ea.steps if s.output == "Omega"]
    assert latex(scores.formula[4, 0]) == r"q_{5,1} k_{1,1} + q_{5,2} k_{1,2}"
    assert latex(ea.X[0, 2]) == "x_{1,3}"
    assert latex(ea.W_q[2, 1]) == "(W_q)_{3,2}"


def test_composed_expression_prints_five_products_and_one_transpose():
    assert latex(derive.composed_expression()) == (
        r"\operatorname{softmax}\left(\frac{X W_q \left(X W_k\right)^\top}{\sqrt{c}}\right) X W_v"
    )


def test_decimals_setting_pads_numbers():
    matrix = sp.Matrix([[sp.Float("1.428"), sp.Float("-0.00001")]])
    assert latex(matrix, decimals=4) == r"\left(\begin{matrix}1.4280 & 0.0000\end{matrix}\right)"


def test_sizes_and_head_index_symbols():
    assert latex(N.c_h) == "c_h"
    assert latex(N.ell) == r"\ell"


def test_split_sum_breaks_long_sums_and_keeps_short_ones():
    terms = [rf"x_{{1,{i}}} (W_q)_{{{i},1}}" for i in range(1, 13)]
    lines = split_sum(terms)
    assert len(lines) > 1
    assert all(visible_width(line) <= 60 for line in lines)
    assert " + ".join(lines) == " + ".join(terms)
    assert split_sum(terms[:2]) == [" + ".join(terms[:2])]


def test_visible_width_ignores_markup():
    assert visible_width(r"\exp\left(\omega_{1,2} / \sqrt{c}\right)") == len("exp(ω1,2/√c)")


def test_jupyter_reprs_are_math():
    step = derive.steps()[3]
    assert step._repr_latex_() == "$$" + step_latex(step) + "$$"
    assert derive.rows_sum_to_one()._repr_latex_() == r"$$\sum_{p=1}^{n} a_{m,p} = 1$$"
    explicit = derive.explicit_attention(2, 3, 2).steps[3]
    assert explicit._repr_latex_().startswith(r"$$\begin{aligned}\omega_{1,1} &= q_{1,1} k_{1,1}")


def test_batch_and_head_indices_print_apart():
    (context,) = [s for s in derive.steps(batch=True) if s.output == "C"]
    assert latex(context.element) == r"c_{b,m,j} = \sum_{p=1}^{n} a_{b,m,p} v_{b,p,j}"
    (scores,) = [s for s in derive.steps(batch=True, heads=True) if s.output == "Omega_l"]
    assert latex(scores.element.lhs) == r"\omega^{(\ell)}_{b,m,p}"


def test_explicit_attention_and_values_display_as_math():
    ea = derive.explicit_attention(2, 3, 2)
    shown = ea._repr_latex_()
    assert shown.startswith(r"$$\begin{aligned}X &= \left(\begin{matrix}x_{1,1}")
    assert r"c_{2,2} &= a_{2,1} v_{1,2} + a_{2,2} v_{2,2}" in shown
    values = ea.evaluate([[1, 0, 0], [0, 1, 0]], [[1, 0]] * 3, [[1, 0]] * 3, [[0, 1]] * 3)
    shown = values._repr_latex_()
    assert r"Q &= \left(\begin{matrix}1 & 0\\1 & 0\end{matrix}\right)" in shown  # exact
    assert r"A &= \left(\begin{matrix}0.500000 & 0.500000" in shown  # 30 digits, shown with 6
