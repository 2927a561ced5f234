"""The backward pass at symbolic sizes, derived by reverse mode from the declarations: every
gradient's matrix form, its entry, its shape, and the multi-head blocks."""

import ast
from pathlib import Path

import pytest
import sympy as sp

import derive
from derive import calculus
from derive.graph import self_attention
from derive.notation import Concat, latex
from derive.notation import letters as L

ROOT = Path(__file__).resolve().parents[3]


def _gradients(name="self-attention"):
    return {g.output: g for g in derive.backward_steps(name)}


def _S(letter):
    shapes = self_attention(heads=True).shapes | self_attention(causal=True).shapes
    base = letter.removeprefix("d") if L.is_gradient(letter) else letter
    return L.matrix_symbol(letter, *shapes[base])


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("dA", lambda: _S("dC") * _S("V").T),
        ("dV", lambda: _S("A").T * _S("dC")),
        ("dOmega", lambda: _S("dOmega_scaled") / sp.sqrt(L.c)),
        ("dQ", lambda: _S("dOmega") * _S("K")),
        ("dK", lambda: _S("dOmega").T * _S("Q")),
        ("dW_q", lambda: _S("X").T * _S("dQ")),
        ("dW_k", lambda: _S("X").T * _S("dK")),
        ("dW_v", lambda: _S("X").T * _S("dV")),
        ("dX", lambda: _S("dQ") * _S("W_q").T + _S("dK") * _S("W_k").T + _S("dV") * _S("W_v").T),
    ],
)
def test_each_linear_gradient_is_the_matrix_derivative(output, expected):
    assert _gradients()[output].matrix.rhs.doit() == expected().doit()


def test_the_softmax_gradient_is_derived_entry_by_entry():
    gradient = _gradients()["dOmega_scaled"]
    A, dA = _S("A"), _S("dA")
    expected = sp.HadamardProduct(A, dA - sp.HadamardProduct(A, dA) * sp.OneMatrix(L.n, L.n))
    assert gradient.matrix.rhs.doit() == expected.doit()
    (part,) = gradient.contributions
    assert part.chain[1].rhs.has(sp.KroneckerDelta)  # SymPy's raw derivative
    assert not part.chain[-1].rhs.has(sp.KroneckerDelta)  # summed out under the ranges
    a, da = L.base("a"), L.base("da")
    m, p, r = L.m, L.p, L.r
    assert part.chain[-1].rhs == a[m, p] * (da[m, p] - sp.Sum(a[m, r] * da[m, r], (r, 1, L.n)))


@pytest.mark.parametrize("form", [{}, {"causal": True}, {"heads": True}])
def test_every_gradient_has_the_shape_of_its_matrix(form):
    graph = self_attention(**form)
    heads = {L.c_h: L.c / L.h}  # the declared head width
    for gradient in calculus.backward(graph):
        assert gradient.matrix.lhs.shape == graph.shapes[gradient.of]
        shape = [sp.simplify(x.subs(heads)) for x in gradient.matrix.rhs.shape]
        assert shape == [sp.simplify(x.subs(heads)) for x in graph.shapes[gradient.of]]


def test_every_input_and_step_gets_a_gradient_but_the_mask():
    causal = self_attention(causal=True)
    gradients = {g.of for g in calculus.backward(causal)}
    produced = {s.output for s in causal.declarations} - {"C", "M"}
    assert gradients == produced | set(causal.inputs)
    assert "M" not in gradients


def test_the_masked_scores_pass_their_gradient_on():
    gradients = _gradients("causal")
    assert gradients["dOmega_scaled"].matrix.rhs == _S("dOmega_masked")


def test_multi_head_blocks_are_each_others_adjoints():
    gradients = _gradients("multi-head")
    assert gradients["dC_concat"].matrix.rhs == _S("dC") * _S("W_o").T
    assert gradients["dW_o"].matrix.rhs == _S("C_concat").T * _S("dC")
    per_head = gradients["dC_l"].matrix.rhs
    assert isinstance(per_head, sp.MatrixSlice) and per_head.parent == _S("dC_concat")
    for letter in "QKV":
        whole = gradients[f"d{letter}"].matrix.rhs
        assert isinstance(whole, Concat) and whole.block == _S(f"d{letter}_l")
    assert gradients["dOmega_l"].matrix.rhs == _S("dOmega_scaled_l") / sp.sqrt(L.c_h)


def test_element_forms_list_terms_in_the_order_of_the_matrix_form():
    dx = _gradients()["dX"]
    assert latex(dx.matrix.rhs) == r"\bar{Q} W_q^\top + \bar{K} W_k^\top + \bar{V} W_v^\top"
    assert latex(dx.element) == (
        r"\bar{x}_{m,i} = \sum_{j=1}^{c} \bar{q}_{m,j} (W_q)_{i,j} + \sum_{j=1}^{c} "
        r"\bar{k}_{m,j} (W_k)_{i,j} + \sum_{j=1}^{c} \bar{v}_{m,j} (W_v)_{i,j}"
    )
    assert (
        latex(_gradients()["dV"].element) == r"\bar{v}_{p,j} = \sum_{m=1}^{n} a_{m,p} \bar{z}_{m,j}"
    )


def test_a_changed_declaration_changes_the_derived_gradients():
    graph = self_attention()
    context = graph.step("C").element.rhs
    doubled = graph.replace("C", 2 * context)
    gradients = {g.output: g for g in calculus.backward(doubled)}
    assert gradients["dA"].matrix.rhs == 2 * _S("dC") * _S("V").T
    weights = graph.step("A").element.rhs
    negated = graph.replace("A", weights.xreplace({e: -e for e in weights.atoms(sp.Indexed)}))
    changed = {g.output: g for g in calculus.backward(negated)}
    assert (
        changed["dOmega_scaled"].matrix.rhs.doit()
        != _gradients()["dOmega_scaled"].matrix.rhs.doit()
    )


def test_no_gradient_is_typed_in():
    """No module of derive builds a gradient's matrix product by hand: the only MatMul, Transpose
    or HadamardProduct constructions are the matrix-form rules themselves."""
    allowed = {"derive/calculus/matrix_form.py", "derive/calculus/reverse.py"}
    for path in sorted((ROOT / "derive").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        built = names & {"MatMul", "Transpose", "HadamardProduct", "OneMatrix"}
        assert not built or relative in allowed, (relative, built)


@pytest.mark.parametrize(
    ("name", "output"),
    [("gqa+sinks", "dZeta"), ("gqa+qk-norm", "dG_q"), ("gqa+qk-norm", "dG_k")],
)
def test_a_gradient_the_heads_share_sums_every_head_in_every_equation(name, output):
    """ζ̄_{1,ℓ} and the gains' ḡ_j gather what every head sends back: each equation of the
    chain, not only the last, sums over the heads, and reads no index its left side lacks."""
    (gradient,) = [g for g in derive.backward_steps(name) if g.output == output]
    sizes = {L.n, L.c, L.c_h, L.h, L.g, L.d, L.eps}
    for part in gradient.contributions:
        *before, _ = part.chain  # the last: the deltas summed out (ζ: head ℓ's own term)
        for equation in before:
            free = (
                equation.rhs.free_symbols
                - sizes
                - {s for s in equation.rhs.free_symbols if not s.is_integer}
            )
            assert free <= equation.lhs.free_symbols, (equation, free)
            assert L.h in equation.rhs.free_symbols  # summed over the h heads
