"""The generic backward pass (symbolic n, d, c): steps, facts, and the document section."""

import pytest
import sympy as sp

import derive
from derive import _notation as N
from derive._backward_facts import rowsum_identity, softmax_backward, softmax_jacobian, t
from derive._backward_steps import backward_steps, multi_head_backward_steps
from derive._latex import latex

SIZES = {N.n: 3, N.d: 2, N.c: 4}  # pairwise distinct


def _by_output():
    return {step.output: step for step in backward_steps() + multi_head_backward_steps()}


@pytest.mark.parametrize(
    ("output", "shape"),
    [
        ("dA", (N.n, N.n)),
        ("dV", (N.n, N.c)),
        ("dOmega_scaled", (N.n, N.n)),
        ("dOmega", (N.n, N.n)),
        ("dQ", (N.n, N.c)),
        ("dK", (N.n, N.c)),
        ("dW_q", (N.d, N.c)),  # shaped like W_q, not like Q
        ("dW_k", (N.d, N.c)),
        ("dW_v", (N.d, N.c)),
        ("dX", (N.n, N.d)),
        ("dC_concat", (N.n, N.c)),
        ("dW_o", (N.c, N.c)),
    ],
)
def test_every_gradient_has_the_shape_of_its_matrix(output, shape):
    step = _by_output()[output]
    assert step.shapes[output] == shape
    assert step.matrix.lhs.shape == shape
    assert step.matrix.rhs.shape == shape  # SymPy checks the product's inner sizes agree


def test_generic_entries_equal_the_explicit_matrix_forms():
    # The element SymPy expands from each generic matrix form, at n=3, d=2, c=4 and every
    # (row, col), is the compact form `explicit_gradients` proves against the chain rule.
    g = derive.explicit_gradients(3, 2, 4)
    for step in backward_steps():
        compact = g.step(step.output).compact
        lhs = step.element.lhs
        row, col = lhs.indices
        for a in range(compact.shape[0]):
            for b in range(compact.shape[1]):
                value = step.element.rhs.xreplace(SIZES | {row: a + 1, col: b + 1}).doit()
                expected = compact[a, b].xreplace(SIZES)  # the compact form keeps √c
                assert sp.expand(value - expected) == 0, (step.output, a, b)


def test_the_softmax_jacobian_is_derived_from_the_weights_step():
    fact = softmax_jacobian()
    assert fact.holds
    a, scaled = N.base("a"), N.base("omegatilde")
    assert fact.statement.lhs == sp.Derivative(a[N.m, N.p], scaled[N.m, t])
    derived = fact.derivation[-1].rhs
    assert sp.expand(derived - a[N.m, N.p] * sp.KroneckerDelta(N.p, t)) != 0  # not diagonal
    assert fact.derivation[1].rhs.has(sp.KroneckerDelta)  # SymPy's raw derivative


def test_softmax_backward_and_rowsum_identity_hold():
    backward, rowsum = softmax_backward(), rowsum_identity()
    assert backward.holds and rowsum.holds
    assert backward.statement.rhs == _by_output()["dOmega_scaled"].element.rhs
    assert latex(rowsum.statement) == (
        r"\sum_{r=1}^{n} a_{m,r} da_{m,r} = \sum_{j=1}^{c} dc_{m,j} c_{m,j}"
    )


def test_the_printer_writes_the_backward_notation():
    assert latex(_by_output()["dOmega_scaled"].matrix) == (
        r"d\tilde{\Omega} = A \circ \left(dA - \left(A \circ dA\right) J\right)"
    )
    assert latex(_by_output()["dW_q"].element) == r"d(W_q)_{i,j} = \sum_{m=1}^{n} x_{m,i} dq_{m,j}"
    assert latex(_by_output()["dV"].matrix) == r"dV = A^\top dC"
    assert latex(_by_output()["dOmega"].matrix) == r"d\Omega = \frac{d\tilde{\Omega}}{\sqrt{c}}"


def test_documents_have_the_backward_section():
    tex = derive.latex_document(derive.DocumentOptions())
    md = derive.markdown_document(derive.DocumentOptions())
    for text in (tex, md):
        assert "The backward pass" in text
        assert r"dW_q &= X^\top dQ" in text
        assert r"dX &= dQ W_q^\top + dK W_k^\top + dV W_v^\top" in text
    assert r"| $dW_q$ | $d \times c$ | $W_q$ |" in md
    assert r"(p > m)" not in md and "dW_o" not in md  # causal and heads only when asked
    both = derive.markdown_document(derive.DocumentOptions(causal=True, heads=2))
    assert r"d\tilde{\omega}_{m,p} &= 0 \qquad (p > m)" in both
    assert r"dW_o &= \hat{C}^\top dC" in both
