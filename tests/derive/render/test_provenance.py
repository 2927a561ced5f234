"""Provenance: every display of a document says where it comes from (declared, derived, numeric),
every derived display changes when a declaration it cites changes, and the prose states no
formula of its own."""

import re
from pathlib import Path

import pytest
import sympy as sp

from derive import DocumentOptions
from derive.graph import self_attention
from derive.notation import letters as L
from derive.render.blocks import Display, Prose
from derive.render.documents import document_blocks

DOCS = Path(__file__).resolve().parents[3] / "docs"
OPTIONS = DocumentOptions(sizes=(3, 4, 2))


def _displays(tex: str) -> list[tuple[str, str]]:
    """(the line before, the display) for every display of a LaTeX document."""
    found = []
    lines = tex.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(r"\begin{align*}"):
            found.append((lines[index - 1], line))
    return found


def test_every_display_of_the_committed_derivation_has_its_provenance():
    tex = (DOCS / "derivation.tex").read_text(encoding="utf-8")
    displays = _displays(tex)
    assert len(displays) > 40
    for before, _ in displays:
        assert re.fullmatch(r"% provenance: (declared|derived — .+|numeric — .+)", before), before
    kinds = [before.split()[2] for before, _ in displays]
    assert 1 <= kinds.count("declared") <= 10
    assert kinds.count("numeric") >= 1 and kinds.count("derived") > 30


def test_a_display_without_provenance_is_caught():
    bad = "x\n% provenance: derived — somehow\n\\begin{align*}\na\n\\end{align*}\n\\begin{align*}\n"
    assert [before for before, _ in _displays(bad)] == [
        "% provenance: derived — somehow",
        r"\end{align*}",
    ]


def _swap(expr):
    return expr.xreplace({L.m: L.p, L.p: L.m})


#: One change per declaration; each keeps the facts the document states true (rows sum to 1,
#: shift invariance, the variances, the rowsum identity), so that the document still prints.
MUTATIONS = {
    "Q": lambda rhs: 2 * rhs,  # twice the query
    "K": lambda rhs: 2 * rhs,
    "V": lambda rhs: 2 * rhs,
    "Omega": _swap,  # ω_{m,p} = q_p · k_m: the transposed scores
    "Omega_scaled": lambda rhs: -rhs,  # the opposite sign keeps the variance
    "A": lambda rhs: rhs.replace(sp.exp, lambda x: sp.exp(-x)),  # a softmax of −s
    "C": lambda rhs: 2 * rhs,
}


@pytest.fixture(scope="module")
def base():
    return document_blocks(OPTIONS)


@pytest.mark.parametrize("output", list(MUTATIONS))
def test_every_derived_display_changes_when_its_declaration_changes(base, output):
    graph = self_attention()
    changed = graph.replace(output, MUTATIONS[output](graph.step(output).element.rhs))
    blocks = document_blocks(OPTIONS, graph=changed)
    before = [b for b in base if isinstance(b, Display)]
    after = [b for b in blocks if isinstance(b, Display)]
    assert [b.provenance for b in before] == [b.provenance for b in after]  # the same layout
    citing = [(b, a) for b, a in zip(before, after, strict=True) if output in b.provenance.sources]
    assert len(citing) >= 3, output
    unchanged = [b.lines for b, a in citing if b.lines == a.lines]
    assert not unchanged, (output, unchanged)


def test_the_prose_states_no_formula(base):
    """Inline math in the words names a letter or a number, never a relation or an operation."""
    one_symbol = re.compile(r"\\?[A-Za-z]+(\{[^{}]*\})?(_\{?[A-Za-z0-9,]+\}?)?(\^\{?[-0-9]+\}?)?")
    allowed_numbers = {"10^{-12}", "10^{-10}"}
    for block in base:
        if isinstance(block, Prose):
            for math in re.findall(r"\$([^$]+)\$", block.text):
                assert math in allowed_numbers or one_symbol.fullmatch(math), math
    words = " ".join(block.text for block in base if isinstance(block, Prose))
    for typed in (r"\mathrm{diag}", r"\circ", r"c / h", r"r \le m", r"1/\sqrt", "aa^"):
        assert typed not in words, typed
