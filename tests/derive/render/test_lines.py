"""Aligned lines: a line wider than the page is broken where the formula allows it."""

import sympy as sp

import derive
from derive import DocumentOptions
from derive.notation import latex
from derive.notation.lines import WIDEST_LINE, chain, equation, visible_width
from derive.render.documents import latex_document

q, k = sp.IndexedBase("q"), sp.IndexedBase("k")
m, p, j = sp.symbols("m p j", integer=True)


def _lines(tex: str) -> list[str]:
    return tex.split(" \\\\\n")


def test_a_short_equation_is_one_line():
    eq = sp.Eq(sp.Symbol("omega"), q[m, 1] * k[p, 1] + q[m, 2] * k[p, 2], evaluate=False)
    assert equation(eq) == f"{latex(eq.lhs)} &= {latex(eq.rhs)}"


def test_a_long_sum_is_broken_between_its_terms_and_keeps_every_term():
    terms = [q[m, i] * k[p, i] * sp.cos(sp.Symbol(f"theta_{i}")) for i in range(1, 13)]
    rhs = sp.Add(*terms)
    lines = _lines(equation(sp.Eq(sp.Symbol("omega"), rhs, evaluate=False)))
    assert len(lines) > 1
    assert all(line.startswith(r"&\quad + ") for line in lines[1:])
    assert all(visible_width(line) <= WIDEST_LINE for line in lines)
    text = " ".join(lines)
    assert all(f" {latex(term)} " in f" {text} " for term in terms)


def test_a_long_product_under_a_sum_sign_is_bracketed_across_lines():
    left = sp.Add(*(sp.cos(sp.Symbol(f"a_{i}")) * q[m, i] for i in range(1, 8)))
    right = sp.Add(*(sp.sin(sp.Symbol(f"b_{i}")) * k[p, i] for i in range(1, 8)))
    rhs = sp.Sum(left * right, (j, 1, sp.Symbol("c")))
    steps = (sp.Eq(sp.Symbol("omega"), sp.Symbol("s")), sp.Eq(sp.Symbol("s"), rhs))
    lines = _lines(" \\\\\n".join(chain(steps)))
    broken = [line for line in lines if "Bigl" in line or "Bigr" in line or "quad" in line]
    assert broken[0].startswith(r"&= \sum_{j=1}^{c} \Bigl(") and broken[-1].endswith(r"\Bigr)")
    assert text_balanced(" ".join(lines))


def text_balanced(tex: str) -> bool:
    return tex.count(r"\left(") == tex.count(r"\right)") and tex.count("Bigl") == tex.count("Bigr")


def test_a_long_left_side_gets_a_line_of_its_own():
    lhs = sp.Symbol(r"\text{grouped-query attention with QK-norm with RoPE}")
    rhs = sp.Symbol(r"\text{multi-head causal self-attention with QK-norm with RoPE}")
    lines = _lines(equation(sp.Eq(lhs, rhs, evaluate=False)))
    assert lines == [f"& {latex(lhs)}", f"&= {latex(rhs)}"]


def test_no_line_of_the_rope_identity_runs_off_the_page():
    tex = latex_document(DocumentOptions(variant="rope"))
    block = tex.split(r"\subsection*{The score depends on $p - m$ only}")[1].split(r"\end{align*}")[
        0
    ]
    lines = block.split(r"\begin{align*}")[1].strip().split(" \\\\\n")
    assert len(lines) > 3  # the first two right-hand sides are broken
    assert all(visible_width(line) <= WIDEST_LINE for line in lines)
    assert "rope" in derive.variants()
