"""The matrix form of every declared step, derived by matrix_form; the element forms agree with
the matrix forms entry by entry at concrete sizes (n=5, d=3, c=2: a swapped axis cannot pass)."""

import pytest
import sympy as sp

import derive
from derive import calculus
from derive.graph import STEP_NAMES, self_attention
from derive.notation import Concat, Softmax
from derive.notation import letters as L

SIZES = {L.n: 5, L.d: 3, L.c: 2}


def _symbol(letter, shapes):
    return L.matrix_symbol(letter, *shapes[letter])


def test_single_head_matrix_forms():
    graph = self_attention()
    shapes = graph.shapes
    S = {letter: _symbol(letter, shapes) for letter in shapes}
    forms = {s.output: s.matrix.rhs for s in derive.steps()}
    assert forms == {
        "Q": S["X"] * S["W_q"],
        "K": S["X"] * S["W_k"],
        "V": S["X"] * S["W_v"],
        "Omega": S["Q"] * S["K"].T,
        "Omega_scaled": S["Omega"] / sp.sqrt(L.c),
        "A": Softmax(S["Omega_scaled"]),
        "C": S["A"] * S["V"],
    }


def test_the_forms_come_from_the_declarations_not_the_names():
    graph = self_attention()
    scores = graph.step("Omega").element.rhs
    swapped = graph.replace(
        "Omega",
        scores.xreplace(
            {L.m: L.p, L.p: L.m},
        ),
    )
    (form,) = [s.matrix.rhs for s in calculus.steps(swapped) if s.output == "Omega"]
    Q, K = (_symbol(x, graph.shapes) for x in "QK")
    assert form == K * Q.T


def test_causal_and_multi_head_forms():
    causal = {s.output: s for s in derive.steps("causal")}
    assert causal["M"].matrix is None  # a pattern of numbers, not a product
    masked = causal["Omega_masked"].matrix.rhs
    assert masked == L.matrix_symbol("Omega_scaled", L.n, L.n) + L.matrix_symbol("M", L.n, L.n)
    heads = {s.output: s for s in derive.steps("multi-head")}
    assert isinstance(heads["C_concat"].matrix.rhs, Concat)
    assert heads["C_concat"].matrix.rhs.count == L.h  # c / c_h with c_h = c / h
    split = heads["Q_l"].matrix.rhs
    assert isinstance(split, sp.MatrixSlice) and split.shape == (L.n, L.c_h)


def _entries(letter, shape):
    name = L.name_of(letter)
    return sp.ImmutableMatrix(*shape, lambda a, b: L.base(name)[a + 1, b + 1])


@pytest.mark.parametrize("output", ["Q", "K", "V", "Omega", "Omega_scaled", "C"])
def test_element_and_matrix_forms_agree_at_concrete_sizes(output):
    graph = self_attention()
    (step,) = [s for s in derive.steps() if s.output == output]
    shapes = {k: tuple(int(x.subs(SIZES)) for x in v) for k, v in graph.shapes.items()}
    concrete = {
        sp.MatrixSymbol(letter, *shapes[letter]): _entries(letter, shapes[letter])
        for letter in step.declaration.inputs
    }
    matrix = step.matrix.rhs.subs(SIZES).xreplace(concrete).as_explicit()
    row, col = step.declaration.free
    for a in range(shapes[output][0]):
        for b in range(shapes[output][1]):
            element = step.element.rhs.xreplace({row: a + 1, col: b + 1, **SIZES}).doit()
            assert sp.simplify(matrix[a, b] - element) == 0, (output, a, b)


def test_step_names_exist_in_attention_functional():
    from attention import functional

    for name in STEP_NAMES:
        assert callable(getattr(functional, name)), name
    for step in derive.steps("causal+multi-head"):
        assert step.name in STEP_NAMES


def test_composed_expression_and_counts():
    expr = calculus.composed_expression(derive.variant("self-attention").graph)
    assert isinstance(expr.args[0], Softmax)
    assert calculus.operation_count(derive.variant("self-attention").graph) == {
        "matrix products": 5,
        "transposes": 1,
    }
    n, d, c, h = L.n, L.d, L.c, L.h
    assert (
        sp.expand(
            calculus.flop_count(derive.variant("self-attention").graph)
            - (6 * n * d * c + 4 * n**2 * c)
        )
        == 0
    )
    counted = calculus.operation_count(derive.variant("multi-head").graph)
    assert counted == {"matrix products": 2 * h + 4, "transposes": h}
    assert (
        sp.expand(
            calculus.flop_count(derive.variant("multi-head").graph)
            - (6 * n * d * c + 4 * n**2 * c + 2 * n * c**2)
        )
        == 0
    )
