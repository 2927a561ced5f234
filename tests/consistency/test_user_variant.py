"""A variant declared in a user's own file, docs/examples/sigmoid_attention.py: derived,
documented and checked as the built-in ones are (the README's commands), its backward pass
derived by SymPy equal to autograd on the file's plain-torch twin, and a changed formula caught.
"""

import importlib.util
import re
from pathlib import Path

import pytest
import sympy as sp
import torch

import derive
from derive.cli import main
from derive.explicit.gradients import ExplicitGradients

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "sigmoid_attention.py"
SPEC = f"{EXAMPLE}:SIGMOID"


def _run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_its_document_is_derived(capsys, tmp_path):
    target = tmp_path / "sigmoid.tex"
    status, _, err = _run(capsys, "latex", "--variant", SPEC, "-o", str(target), "-q")
    assert (status, err) == (0, "")
    tex = target.read_text()
    assert r"\title{Sigmoid attention, derived}" in tex
    declared = re.findall(r"% provenance: declared\n\\begin\{align\*\}\n(.*) \\tag\*.*\n", tex)
    assert declared == [r"a_{m,p} &= \sigma\left(\tilde{\omega}_{m,p} + b\right)"]  # its one step
    assert r"A &= \sigma\left(\tilde{\Omega} + b J\right)" in tex  # the matrix form, derived
    assert r"\bar{\tilde{\Omega}} &= A \circ \bar{A} \circ \left(J - A\right)" in tex  # backward
    assert r"\lim_{b \to -\infty} a_{m,p}" in tex and "&= 0\n" in tex  # the claim, proved
    assert r"&= \left(1 - a_{m,p}\right) \delta_{p,t} a_{m,p}" in tex  # a diagonal Jacobian
    assert r"a_{m,p} &\le 1" in tex  # the bound, derived from 1 − σ(x) = 1 / (e^x + 1)
    assert "declared as in the derivation of self-attention" in tex  # shared steps referenced


def test_its_page_shows_every_entry_with_its_formula(capsys, tmp_path):
    target = tmp_path / "sigmoid.html"
    argv = ("html", "--variant", SPEC, "--n", "3", "--d", "4", "--c", "2", "-o", str(target))
    status, _, err = _run(capsys, *argv, "-q")
    assert (status, err) == (0, "")
    page = target.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<title>Sigmoid attention, derived" in page
    assert 'id="e-a-2-3"' in page  # the weights, entry by entry, b = −log n at n = 3:
    assert r'data-formula="\sigma\left(\tilde{\omega}_{2,3} - \log{\left(3 \right)}\right)"' in page


def test_its_check_passes_every_step_gradient_and_entry_point(capsys):
    status, out, _ = _run(capsys, "check", "--variant", SPEC, "--seed", "11", "--trials", "2")
    assert status == 0, out
    rows = re.findall(
        r"^  (\S+(?: · \S+)?)\s+\d+×\d+\s+\S+\s+(?:exact|1e-1[02])\s+pass$", out, re.M
    )
    for row in ("A", "C", "C · sigmoid_attention", "dOmega_scaled", "dW_q", "dX"):
        assert rows.count(row) == 2, row  # in both trials
    assert "FAIL" not in out and out.rstrip().endswith("all pass")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location("sigmoid_example_for_a_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_derived_backward_pass_equals_autograd_on_the_twin():
    """The gradients SymPy derives by the chain rule at explicit sizes, against torch.autograd
    through the file's `sigmoid_attention` alone (no step of `attention`)."""
    entry = derive.load_variant(SPEC)
    example = _module(EXAMPLE)
    explicit = derive.explicit_variant(entry.name, 4, 3, 2)
    gradients = ExplicitGradients(explicit)
    assert gradients.proven()  # the chain rule at these sizes is the form derived at any size
    generator = torch.Generator().manual_seed(5)
    draw = {
        letter: torch.randint(-16, 17, symbols.shape, generator=generator).double() / 8
        for letter, symbols in explicit.inputs.items()
    }
    upstream = torch.randint(-16, 17, gradients.dC.shape, generator=generator).double() / 8
    values = gradients.evaluate(**draw, dC=upstream)
    leaves = {k: v.clone().requires_grad_() for k, v in draw.items()}
    bias = float(explicit.sizes[sp.Symbol("b", real=True)])
    assert bias == pytest.approx(-torch.log(torch.tensor(4.0)).item())  # b = −log n, n = 4
    example.sigmoid_attention(
        leaves["X"], leaves["W_q"], leaves["W_k"], leaves["W_v"], b=bias
    ).backward(upstream)
    for letter in ("X", "W_q", "W_k", "W_v"):
        derived = torch.tensor(values.floats("d" + letter), dtype=torch.float64)
        torch.testing.assert_close(leaves[letter].grad, derived, rtol=0, atol=1e-12)


def test_a_changed_formula_is_caught(capsys, tmp_path):
    """The same file with one sign changed in the declared step (σ(ω̃ − b)): its twins still
    compute σ(ω̃ + b), and the check fails on the weights."""
    changed = tmp_path / "sigmoid_changed.py"
    text = EXAMPLE.read_text()
    assert text.count("omega_tilde[m, p] + b") == 1
    changed.write_text(
        text.replace("omega_tilde[m, p] + b", "omega_tilde[m, p] - b").replace(
            '"sigmoid"', '"sigmoid-changed"'
        )
    )
    status, out, _ = _run(
        capsys, "check", "--variant", f"{changed}:SIGMOID", "--seed", "11", "--forward-only"
    )
    assert status == 1
    assert re.search(r"^  A\s+\d+×\d+\s+\S+\s+1e-12\s+FAIL$", out, re.M)
    assert re.search(r"^  C · sigmoid_attention\s.*FAIL$", out, re.M)
