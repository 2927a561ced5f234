"""Every parameter of every registered variant has a domain, read off the symbol its
declaration gives (SymPy's assumptions) and the conditions the variant states; the command line
and the Python API refuse a value outside it with one line naming it (exit 2), and leave an
existing output file as it was."""

import pytest
import sympy as sp

import derive
from derive.cli import main
from derive.graph.registry import variants


def _outside(symbol: sp.Symbol) -> list[str]:
    """Values outside a symbol's domain: ≤ 0 for a positive one, < 0 for a non-negative one,
    a fraction for an integer, and beyond float64's range for any."""
    found = ["1e400"]
    if symbol.is_positive:
        found += ["0", "-1"]
    elif symbol.is_nonnegative:
        found += ["-1"]
    if symbol.is_integer:
        found += ["2.5"]
    return found


CASES = [
    (name, str(p.symbol), bad)
    for name in variants()
    for p in derive.variant(name).parameters
    if p in derive.variant(name).chain[-1].parameters  # each parameter with its own variant
    for bad in _outside(p.symbol)
]


def test_every_parameter_has_a_domain():
    """No parameter of a built-in variant accepts every number."""
    assert CASES
    for name in variants():
        for p in derive.variant(name).chain[-1].parameters:
            assert p.symbol.is_positive or p.symbol.is_nonnegative, (name, p.symbol)


@pytest.mark.parametrize(("variant", "parameter", "bad"), CASES)
@pytest.mark.parametrize("command", ["latex", "check"])
def test_a_value_outside_its_domain_is_refused_in_one_line(
    tmp_path, capsys, command, variant, parameter, bad
):
    out = tmp_path / "kept.tex"
    out.write_text("before")
    argv = [command, "--variant", variant, "--value", f"{parameter}={bad}"]
    argv += ["-o", str(out)] if command == "latex" else []
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{variant}: {parameter} must be" in err, err
    assert out.read_text() == "before"


@pytest.mark.parametrize(("variant", "parameter", "bad"), CASES[::3])
def test_the_python_api_refuses_it_too(variant, parameter, bad):
    with pytest.raises(ValueError, match=rf"{variant}: {parameter} must be"):
        derive.check(variant, n=3, d=2, c=4, **{parameter: sp.sympify(bad)})


#: conditions between values, and on a variant's sizes, each with what it says
CONDITIONS = [
    (["--variant", "llama3-rope", "--alpha-l", "4", "--alpha-h", "1"], "alpha_h=1 must be above"),
    (["--variant", "llama3-rope", "--alpha-l", "2", "--alpha-h", "2"], "alpha_h=2 must be above"),
    (["--variant", "partial-rope", "--c-r", "3"], "c_r=3 must be even"),
    (["--variant", "sinks", "--variant", "sinks"], "--variant sinks is given twice"),
    (["--variant", "gqa+rope", "--variant", "rope"], "--variant rope is given twice"),
    (["--variant"], "argument --variant: expected one argument"),
]


@pytest.mark.parametrize(("argv", "said"), CONDITIONS, ids=lambda x: " ".join(x)[:40])
@pytest.mark.parametrize("command", ["latex", "check"])
def test_a_condition_broken_is_refused_in_one_line(tmp_path, capsys, command, argv, said):
    out = tmp_path / "kept.tex"
    out.write_text("before")
    extra = ["-o", str(out)] if command == "latex" else []
    assert main([command, *extra, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and err.startswith(f"derive {command}: "), err
    assert out.read_text() == "before"


def test_a_user_s_symbol_brings_its_domain(tmp_path, capsys):
    """A user's parameter declared sp.Symbol("tau", positive=True) is refused at τ = 0."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "cosine_attention.py"
    spec = f"{example}:COSINE"
    assert main(["check", "-q", "--variant", spec, "--value", "tau=0"]) == 2
    assert "tau must be a positive" in capsys.readouterr().err


def test_conform_refuses_a_value_outside_its_domain_too():
    from attention import MultiHeadAttention
    from derive import ConformError

    module = MultiHeadAttention(8, 8, 6, 0.0, 2, softcap=5.0)
    with pytest.raises(ConformError, match=r"^softcap: kappa must be a positive"):
        derive.conform(module, variant="softcap", values={"kappa": 0})


SIZED = """
import sympy as sp
from derive import declare
from derive.declare import a, m, n, omega_tilde, p, r

k = sp.Symbol("k")  # no assumptions: a size is a positive integer all the same


def weights(omega_scaled):
    return omega_scaled.softmax(-1)


def _e(t):
    return sp.exp(omega_tilde[m, t])


STEP = declare.step("weights", sp.Eq(a[m, p], _e(p) / sp.Sum(_e(r), (r, 1, n))),
                    shape=(n, n), title="Weights", twin=weights)
V = declare.variant("sized_test", title="Sized", replaces=[STEP], sizes={k: 2})
"""


@pytest.mark.parametrize("bad", ["5/2", "-7", "0"])
def test_a_user_s_size_is_a_positive_integer_whatever_its_symbol_says(tmp_path, capsys, bad):
    path = tmp_path / "sized.py"
    path.write_text(SIZED)
    assert main(["check", "-q", "--variant", f"{path}:V", "--value", f"k={bad}"]) == 2
    assert "sized_test: k must be a positive integer" in capsys.readouterr().err
