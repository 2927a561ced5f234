"""Documents: assembled from the declarations and what SymPy derives from them, in the book's
order, with nothing off the page."""

import re

import pytest

import derive
from derive import DocumentOptions, calculus
from derive.notation.lines import visible_width
from derive.render.blocks import (
    Display,
    Figure,
    Heading,
    Prose,
    Provenance,
    Table,
    declared,
    derived,
    to_latex,
    to_markdown,
)
from derive.render.documents import document_blocks, latex_document, markdown_document


@pytest.fixture(scope="module")
def plain():
    return latex_document(DocumentOptions())


def test_standalone_and_fragment(plain):
    assert plain.startswith(r"\documentclass[11pt]{article}")
    assert plain.rstrip().endswith(r"\end{document}")
    fragment = latex_document(DocumentOptions(), fragment=True)
    assert r"\documentclass" not in fragment and r"\begin{document}" not in fragment
    assert fragment.split("\n\n", 1)[1] in plain


def test_sections_in_the_books_order(plain):
    order = [
        "From tokens to the input matrix",
        "The steps",
        "Query projection",
        "Attention scores",
        "Scaling by the square root of the width",
        "Attention weights (row-wise softmax)",
        "Context vectors",
        "What the steps imply",
        "The rows of the weights",
        "Why the scores are scaled",
        "Five matrix products and one transpose",
        "Batches",
        "The backward pass",
        "The rowsum identity",
    ]
    positions = [plain.index(title) for title in order]
    assert positions == sorted(positions)


def test_every_step_is_printed_from_its_objects(plain):
    for step in derive.steps():
        assert derive.latex(step.element.rhs) in plain, step.output
        assert derive.latex(step.matrix.rhs) in plain, step.output
    for gradient in derive.backward_steps():
        assert derive.latex(gradient.matrix.rhs) in plain, gradient.output
    assert derive.latex(calculus.flop_count(derive.variant("self-attention").graph)) in plain


def test_the_book_is_cited_and_never_the_seed(plain):
    assert r"\emph{Build a Large Language Model (from Scratch)}" in plain
    md = markdown_document(DocumentOptions(causal=True, heads=2))
    for text in (plain, md, latex_document(DocumentOptions(causal=True, heads=2, sizes=(3, 2, 4)))):
        assert "seed" not in text.lower().replace("seeded", "")


def test_causal_and_heads_are_entries_of_the_registry():
    """--causal and --heads are the entries causal and multi-head: their own documents, built
    from the same sections as every variant's, referring to self-attention's steps."""
    plain = latex_document(DocumentOptions())
    causal = latex_document(DocumentOptions(causal=True))
    heads = latex_document(DocumentOptions(heads=2))
    assert causal == latex_document(DocumentOptions(variant="causal"))
    assert r"\title{Causal attention, derived}" in causal and "Causal attention" not in plain
    assert "declared as in the derivation of self-attention" in causal  # shared: referenced
    assert r"\sum_{r=1}^{m}" in causal  # the causal limits, derived
    assert r"M_{m,p} &= \begin{cases} 0 & \text{for}\: p \leq m" in causal  # declared
    assert r"\bar{\tilde{\omega}}_{m,p} &= \bar{\hat{\omega}}_{m,p}" in causal  # masked gradient
    assert r"\title{Multi-head attention, derived}" in heads and r"\hat{C}" in heads
    assert r"q^{(\ell)}_{m,j} &= q_{m,\left(\ell - 1\right) c_h + j}" in heads  # the split
    assert derive.latex(calculus.flop_count(derive.variant("multi-head").graph)) in heads
    assert r"\bar{W}_o &= \hat{C}^\top \bar{C}" in heads


def test_explicit_mode_writes_each_step_in_the_previous_entries():
    tex = latex_document(DocumentOptions(sizes=(3, 4, 2)))
    assert r"\omega_{3,2} &= q_{3,1} k_{2,1} + q_{3,2} k_{2,2}" in tex
    assert r"\tilde{\omega}_{1,2} &= \frac{\omega_{1,2}}{\sqrt{2}}" in tex  # c = 2: √2
    assert r"a_{1,2} &= \frac{\exp\left(\tilde{\omega}_{1,2}\right)}{D_{1}}" in tex
    assert r"z_{2,1} &= a_{2,1} v_{1,1} + a_{2,2} v_{2,1} + a_{2,3} v_{3,1}" in tex
    scores = tex[tex.index(r"\omega_{1,1} &=") : tex.index(r"\tilde{\omega}_{1,1} &=")]
    assert "x_{" not in scores and "W_q" not in scores  # never expanded down to x and w


def test_explicit_sums_are_in_numeric_order():
    tex = latex_document(DocumentOptions(sizes=(10, 12, 2)))
    q = tex[tex.index(r"q_{1,1} &=") :]
    q = q[: q.index(r"q_{1,2} &=")]
    positions = [q.index(f"x_{{1,{i}}}") for i in range(1, 13)]
    assert positions == sorted(positions)
    omegas = [tex.index(rf"\omega_{{1,{p}}} &=") for p in range(1, 11)]
    assert omegas == sorted(omegas)


def test_explicit_lines_stay_on_the_page():
    """At the largest size, every display line fits (about 70 visible characters)."""
    blocks = document_blocks(DocumentOptions(sizes=(16, 16, 16)))
    lines = [line for block in blocks if isinstance(block, Display) for line in block.lines]
    explicit = [line for line in lines if re.match(r"(q|k|v|\\omega|a|z|D)_\{\d", line)]
    assert len(explicit) > 16 * 16
    widest = max(visible_width(line) for line in explicit)
    assert widest <= 75, widest


def test_explicit_causal_and_heads_variants():
    tex = latex_document(DocumentOptions(sizes=(3, 4, 2), causal=True, heads=2))
    assert r"a^{(1)}_{1,2} &= 0" in tex
    assert r"a^{(1)}_{1,1} &= 1" in tex  # the first query has one key: its weight is 1
    assert r"z_{1,1} &= z^{(1)}_{1,1} (W_o)_{1,1} + z^{(2)}_{1,1} (W_o)_{2,1}" in tex


def test_markdown_uses_github_math():
    md = markdown_document(DocumentOptions(sizes=(2, 3, 2)))
    assert md.startswith("# Trainable scaled dot-product self-attention, derived")
    blocks = re.findall(r"^\$\$\n(.*?)\n\$\$$", md, flags=re.S | re.M)
    assert len(blocks) > 10
    assert all("align*" not in block for block in blocks)
    assert r"\emph" not in md and "*the fat cat sat on the mat*" in md
    assert md.count("<!-- provenance: ") == len(blocks)


def test_documents_are_deterministic():
    options = DocumentOptions(sizes=(3, 4, 2), causal=True)
    assert latex_document(options) == latex_document(options)
    assert markdown_document(options) == markdown_document(options)


def test_blocks_render_in_both_formats():
    blocks = [
        Heading("H"),
        Prose(r"Some \emph{text} with $x$."),
        Display(("a &= b", "&= c"), derived("by hand, in a test")),
        Display(("q &= x",), declared("Q")),
        Table(("x", "y"), (("1", "$2$"),)),
        Figure("figures/f.png", "A caption."),
    ]
    tex = to_latex(blocks, title="T", note="N", standalone=False)
    assert r"\section*{H}" in tex and r"\begin{align*}" in tex and r"\toprule" in tex
    assert "% provenance: derived — by hand, in a test\n\\begin{align*}" in tex
    assert "% provenance: declared\n\\begin{align*}" in tex
    assert r"\includegraphics[width=0.72\textwidth]{figures/f.png}" in tex
    md = to_markdown(blocks, title="T", note="N")
    assert "## H" in md and "Some *text* with $x$." in md and "| 1 | $2$ |" in md
    assert "$$\n\\begin{aligned}\na &= b \\\\\n&= c\n\\end{aligned}\n$$" in md
    assert "![A caption.](figures/f.png)" in md


def test_a_derived_display_must_say_how():
    with pytest.raises(ValueError, match="a derived display must say how"):
        derived("")
    with pytest.raises(ValueError, match="provenance must be one of declared, derived, numeric"):
        Provenance("guessed")


def test_options_are_checked():
    with pytest.raises(ValueError, match=r"h=3 does not divide c=2 \(each head gets c / h"):
        DocumentOptions(sizes=(3, 4, 2), heads=3)
    with pytest.raises(ValueError, match=r"n=20 is over the limit"):
        DocumentOptions(sizes=(20, 4, 2))
    with pytest.raises(ValueError, match=r"heads must be a positive int, got heads=0"):
        DocumentOptions(heads=0)
    with pytest.raises(ValueError, match=r"options.example needs the worked example"):
        document_blocks(DocumentOptions(example=True))
