"""The facts are computed by SymPy from the steps, so a changed formula breaks them."""

import pytest
import sympy as sp

import derive._steps as steps_module
from derive import _facts
from derive import _notation as N


@pytest.mark.parametrize("causal", [False, True])
def test_rows_of_a_sum_to_one(causal):
    fact = _facts.rows_sum_to_one(causal=causal)
    assert fact.residual == 0
    assert fact.holds


def test_shift_invariance():
    fact = _facts.shift_invariance()
    assert fact.holds
    t = sp.Symbol("t", real=True)
    assert t in fact.statement.lhs.free_symbols


def test_variance_of_the_dot_product_is_c():
    fact = _facts.score_variance()
    assert fact.holds
    assert fact.statement.rhs == N.c
    assert fact.derivation[1].rhs == 1  # Var(q_j k_j) = 1 for one pair


@pytest.mark.parametrize("width", [1, 3])
def test_variance_with_sympy_stats_at_concrete_widths(width):
    fact = _facts.score_variance(width)
    assert fact.holds and fact.statement.rhs == width


def test_operation_count_is_five_products_and_one_transpose():
    assert _facts.operation_count() == {"matrix products": 5, "transposes": 1}


def test_flop_formula():
    assert sp.expand(_facts.flop_count() - (6 * N.n * N.d * N.c + 4 * N.n**2 * N.c)) == 0


def test_multi_head_counts():
    counts = _facts.operation_count(heads=True)
    assert counts == {"matrix products": 2 * N.h + 4, "transposes": N.h}
    flops = 6 * N.n * N.d * N.c + 4 * N.n**2 * N.c + 2 * N.n * N.c**2
    assert sp.expand(_facts.flop_count(heads=True) - flops) == 0


def test_composed_expression_has_the_seeds_structure():
    expr = _facts.composed_expression()
    assert sp.srepr(expr).count("Transpose") == 1
    assert str(expr) == "Softmax(1/sqrt(c)*((X*W_q)*(X*W_k).T))*(X*W_v)"


def _wrong_axis_weights(**_):
    """A mutant: softmax over the column (axis 0) instead of the row."""
    w = N.base("omega")
    total = sp.Sum(sp.exp(w[N.r, N.p] / sp.sqrt(N.c)), (N.r, 1, N.n))
    element = sp.Eq(N.base("a")[N.m, N.p], sp.exp(w[N.m, N.p] / sp.sqrt(N.c)) / total)
    original = _ORIGINAL_WEIGHTS()
    return steps_module.Step(
        original.name, original.output, original.title, original.matrix, element, original.shapes
    )


_ORIGINAL_WEIGHTS = steps_module.weights


def test_a_wrong_softmax_axis_breaks_the_row_sum(monkeypatch):
    monkeypatch.setattr(steps_module, "weights", _wrong_axis_weights)
    assert not _facts.rows_sum_to_one().holds


def test_flop_count_follows_the_expression(monkeypatch):
    """Dropping the value projection from the context step changes the count."""
    original = steps_module.context

    def context_without_v(**kwargs):
        step = original(**kwargs)
        a = step.matrix.rhs.args[0]
        return steps_module.Step(
            step.name,
            step.output,
            step.title,
            sp.Eq(step.matrix.lhs, a * a, evaluate=False),
            step.element,
            step.shapes,
        )

    monkeypatch.setattr(steps_module, "context", context_without_v)
    assert _facts.operation_count() != {"matrix products": 5, "transposes": 1}
