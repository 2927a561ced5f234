"""`derive check` compares the generated code like a twin (its C and every input's gradient),
and a declared variant with no twin written is checked step by step through its generated
code."""

from pathlib import Path

import pytest

import derive
from derive.cli import main
from derive.codegen import program as programs

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


def test_check_has_rows_for_the_generated_code():
    checked = derive.check("gqa+rope", seed=4)
    rows = {row.step: row for row in checked.trials[0].rows}
    for label in ("C · generated", "dX · generated", "dW_k · generated", "dW_o · generated"):
        assert rows[label].passed, rows[label]


def test_check_fails_where_the_generated_code_is_wrong(monkeypatch):
    """Generated code that scales by c in place of √c: its rows fail, the twins' pass."""
    source, sizes = programs.forward_program.__wrapped__(derive.variant("causal"))
    broken = source.replace("math.sqrt(c)", "c")
    assert broken != source
    monkeypatch.setattr("derive.bridge.generated.forward_program", lambda entry: (broken, sizes))
    from derive.bridge import generated

    generated._generated.cache_clear()
    try:
        checked = derive.check("causal", seed=1, n=4, c=3)
        rows = {row.step: row for row in checked.trials[0].rows}
        assert not rows["C · generated"].passed
        assert rows["C"].passed
    finally:
        generated._generated.cache_clear()


NO_TWIN = """
import sympy as sp
from derive import declare
from derive.declare import a, m, n, omega_tilde, p, sigmoid

b = sp.Symbol("b", real=True)
WEIGHTS = declare.step(
    "my_sigmoid_weights", sp.Eq(a[m, p], sigmoid(omega_tilde[m, p] + b)), shape=(n, n),
    title="Attention weights (sigmoid of each score)",
)
SIGMOID = declare.variant(
    "my-sigmoid", title="Sigmoid attention, no twin written", replaces=[WEIGHTS],
    parameters={b: -sp.log(n)}, text="Declared with no torch written.",
)
"""


def test_a_variant_with_no_twin_is_checked_through_its_generated_code(tmp_path, capsys):
    """No twin of the step, none of the whole: every step is computed by the code generated
    from its formula and passes; the generated C and gradients have their rows."""
    path = tmp_path / "mine.py"
    path.write_text(NO_TWIN)
    status = main(["check", "--variant", f"{path}:SIGMOID", "--seed", "3"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "C · generated" in out and "dW_q · generated" in out
    assert out.rstrip().endswith("all pass")


def test_a_step_with_no_twin_and_a_formula_it_cannot_print_says_which(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text(
        NO_TWIN.replace("sigmoid(omega_tilde[m, p] + b)", "sp.gamma(omega_tilde[m, p] + b)")
    )
    status = main(["check", "--variant", f"{path}:SIGMOID", "--seed", "3"])
    err = capsys.readouterr().err
    assert status != 0
    assert "cannot print gamma" in err


@pytest.mark.parametrize("example", ["softpick.py:SOFTPICK", "stick_breaking.py:STICK_BREAKING"])
def test_the_examples_piecewise_rules_and_products_run_as_generated(example):
    """Softpick's Heaviside step and stick-breaking's ∏ over the keys between p and m."""
    from derive.graph.loading import load_variant

    name = load_variant(f"{EXAMPLES / example}").name
    checked = derive.check(name, seed=2)
    rows = {row.step: row for row in checked.trials[0].rows}
    assert rows["C · generated"].passed and rows["dX · generated"].passed
