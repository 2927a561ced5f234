"""Golden tests: the LaTeX of each step, as the printer writes it in the book's notation."""

import pytest
import sympy as sp

import derive
from derive import calculus, proofs
from derive.explicit.display import explicit_lines
from derive.notation import latex
from derive.notation import letters as L
from derive.notation.lines import packed, visible_width

GOLDEN = {
    # output: (element-wise, declared; matrix-level, derived)
    "Q": (r"q_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_q)_{i,j}", r"Q = X W_q"),
    "K": (r"k_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_k)_{i,j}", r"K = X W_k"),
    "V": (r"v_{m,j} = \sum_{i=1}^{d} x_{m,i} (W_v)_{i,j}", r"V = X W_v"),
    "Omega": (r"\omega_{m,p} = \sum_{j=1}^{c} q_{m,j} k_{p,j}", r"\Omega = Q K^\top"),
    "Omega_scaled": (
        r"\tilde{\omega}_{m,p} = \frac{\omega_{m,p}}{\sqrt{c}}",
        r"\tilde{\Omega} = \frac{\Omega}{\sqrt{c}}",
    ),
    "A": (
        r"a_{m,p} = \frac{\exp\left(\tilde{\omega}_{m,p}\right)}"
        r"{\sum_{r=1}^{n} \exp\left(\tilde{\omega}_{m,r}\right)}",
        r"A = \operatorname{softmax}\left(\tilde{\Omega}\right)",
    ),
    "C": (r"z_{m,j} = \sum_{p=1}^{n} a_{m,p} v_{p,j}", r"C = A V"),
}


@pytest.mark.parametrize("output", list(GOLDEN))
def test_each_step_prints_as_pinned(output):
    (step,) = [s for s in derive.steps() if s.output == output]
    assert (latex(step.element), latex(step.matrix)) == GOLDEN[output]


MULTI_HEAD_GOLDEN = {
    "Q_l": r"q^{(\ell)}_{m,j} = q_{m,\left(\ell - 1\right) c_h + j}",
    "Omega_l": r"\omega^{(\ell)}_{m,p} = \sum_{j=1}^{c_h} q^{(\ell)}_{m,j} k^{(\ell)}_{p,j}",
    "C_concat": r"\hat{z}_{m,\left(\ell - 1\right) c_h + j} = z^{(\ell)}_{m,j}",
    "C": r"z_{m,j} = \sum_{i=1}^{c} \hat{z}_{m,i} (W_o)_{i,j}",
}


@pytest.mark.parametrize("output", list(MULTI_HEAD_GOLDEN))
def test_multi_head_steps_print_as_pinned(output):
    (step,) = [s for s in derive.steps("multi-head") if s.output == output]
    assert latex(step.element) == MULTI_HEAD_GOLDEN[output]


def test_per_head_matrices_blocks_and_concatenation():
    steps = {s.output: s for s in derive.steps("multi-head")}
    assert latex(steps["Omega_l"].matrix) == r"\Omega^{(\ell)} = Q^{(\ell)} {K^{(\ell)}}^\top"
    assert latex(steps["Q_l"].matrix.rhs) == (
        r"Q_{:,\; \left(\ell - 1\right) c_h + 1 \ldots \ell c_h}"
    )
    assert latex(steps["C_concat"].matrix.rhs) == (
        r"\left[\, C^{(1)} \;\; C^{(2)} \;\cdots\; C^{(h)} \,\right]"
    )


def test_the_causal_mask_reads_left_to_right():
    (mask,) = [s for s in derive.steps("causal") if s.output == "M"]
    assert latex(mask.element.rhs) == (
        r"\begin{cases} 0 & \text{for}\: p \leq m \\-\infty & \text{otherwise} \end{cases}"
    )


def test_explicit_sums_are_in_numeric_index_order():
    ea = derive.explicit_variant("self-attention", 10, 12, 2)
    first = " ".join(explicit_lines(ea.steps[0])[:3])
    assert first.index("x_{1,2}") < first.index("x_{1,10}") < first.index("x_{1,12}")
    (scores,) = [s for s in ea.steps if s.output == "Omega"]
    lines = explicit_lines(scores)
    assert lines.index(r"\omega_{1,2} &= q_{1,1} k_{2,1} + q_{1,2} k_{2,2}") < lines.index(
        r"\omega_{1,10} &= q_{1,1} k_{10,1} + q_{1,2} k_{10,2}"
    )


def test_explicit_scaling_prints_the_number():
    ea = derive.explicit_variant("self-attention", 2, 3, 2)
    (scaled,) = [s for s in ea.steps if s.output == "Omega_scaled"]
    assert latex(scaled.formula[0, 1]) == r"\frac{\omega_{1,2}}{\sqrt{2}}"
    wider = derive.explicit_variant("self-attention", 2, 3, 4)
    (scaled,) = [s for s in wider.steps if s.output == "Omega_scaled"]
    assert latex(scaled.formula[0, 1]) == r"\frac{\omega_{1,2}}{2}"


def test_composed_expression_prints_five_products_and_one_transpose():
    assert latex(calculus.composed_expression(derive.variant("self-attention").graph)) == (
        r"\operatorname{softmax}\left(\frac{X W_q \left(X W_k\right)^\top}{\sqrt{c}}\right) X W_v"
    )


def test_decimals_setting_pads_numbers():
    matrix = sp.Matrix([[sp.Float("1.428"), sp.Float("-0.00001")]])
    assert latex(matrix, decimals=4) == r"\left(\begin{matrix}1.4280 & 0.0000\end{matrix}\right)"


def test_sizes_and_head_index_symbols():
    assert latex(L.c_h) == "c_h"
    assert latex(L.ell) == r"\ell"
    assert latex(L.j2) == "j'"


def test_packing_breaks_long_sums_and_keeps_short_ones():
    terms = [rf"x_{{1,{i}}} (W_q)_{{{i},1}}" for i in range(1, 13)]
    lines = [" + ".join(line) for line in packed(terms, 56)]
    assert len(lines) > 1
    assert all(visible_width(line) <= 60 for line in lines)
    assert " + ".join(lines) == " + ".join(terms)
    assert packed(terms[:2], 56) == [terms[:2]]


def test_visible_width_ignores_markup():
    assert visible_width(r"\exp\left(\omega_{1,2} / \sqrt{c}\right)") == len("exp(ω1,2/√c)")


def test_jupyter_reprs_are_math():
    step = derive.steps()[3]
    assert (
        step._repr_latex_()
        == r"$$\Omega = Q K^\top \qquad \omega_{m,p} = \sum_{j=1}^{c} q_{m,j} k_{p,j}$$"
    )
    assert (
        proofs.rows_sum_to_one(derive.variant("self-attention").graph)._repr_latex_()
        == r"$$\sum_{p=1}^{n} a_{m,p} = 1$$"
    )
    explicit = derive.explicit_variant("self-attention", 2, 3, 2).steps[3]
    assert explicit._repr_latex_().startswith(r"$$\begin{aligned}\omega_{1,1} &= q_{1,1} k_{1,1}")
    assert derive.backward_steps()[0]._repr_latex_().startswith(r"$$\bar{A} = \bar{C} V^\top")


def test_explicit_attention_and_values_display_as_math():
    ea = derive.explicit_variant("self-attention", 2, 3, 2)
    shown = ea._repr_latex_()
    assert shown.startswith(r"$$\begin{aligned}X &= \left(\begin{matrix}x_{1,1}")
    assert r"z_{2,2} &= a_{2,1} v_{1,2} + a_{2,2} v_{2,2}" in shown
    values = ea.evaluate([[1, 0, 0], [0, 1, 0]], [[1, 0]] * 3, [[1, 0]] * 3, [[0, 1]] * 3)
    shown = values._repr_latex_()
    assert r"Q &= \left(\begin{matrix}1 & 0\\1 & 0\end{matrix}\right)" in shown  # exact
    assert r"A &= \left(\begin{matrix}0.500000 & 0.500000" in shown  # 30 digits, shown with 6


def test_a_chain_s_continuation_line_is_measured_after_the_left_hand_side_it_aligns_with():
    """A continuation line ``&= rhs`` sits after the first line's left-hand side: an rhs that fits
    alone but not after that side is broken (the selective scan's carried state overflowed)."""
    from derive.notation.lines import WIDEST_LINE, chain

    terms = sp.symbols("alpha_1:40")
    lhs = sp.Symbol("S_{long left side}")
    rhs = sp.Add(*terms[:1])
    for count in range(2, len(terms)):  # the widest sum that still fits alone
        candidate = sp.Add(*terms[:count])
        if visible_width(sp.latex(candidate)) > WIDEST_LINE - 4:
            break
        rhs = candidate
    assert visible_width(sp.latex(rhs)) <= WIDEST_LINE < visible_width(sp.latex(lhs + rhs))
    first, continued = chain((sp.Eq(lhs, sp.Symbol("x"), evaluate=False), sp.Eq(lhs, rhs)))
    assert "\\\\" not in first and "\\\\" in continued  # broken, though it fits by itself
