"""The HTML page: strict HTML5, nothing fetched, the same displays as the LaTeX with their
provenance, and every explicit entry with its formula, what it reads and its value."""

import re
from html import unescape
from pathlib import Path

import html5lib
import pytest
import sympy as sp

from derive import DocumentOptions, explicit_variant, latex
from derive.notation import letters as L
from derive.render import html_document
from derive.render.blocks import Display, Figure, Matrices, Prose, to_latex, to_markdown
from derive.render.documents import document_blocks
from derive.render.html import inline, to_html
from derive.render.sections.entries import entry_key
from derive.render.webassets import KATEX_VERSION, katex_script, katex_style

DOCS = Path(__file__).resolve().parents[3] / "docs"
#: n = 3 tokens, d = 2, c = 4: z_{2,3} exists, and no two sizes are equal.
OPTIONS = DocumentOptions(sizes=(3, 2, 4))


@pytest.fixture(scope="module")
def page() -> str:
    return html_document(OPTIONS)


@pytest.fixture(scope="module")
def committed() -> str:
    return (DOCS / "derivation.html").read_text(encoding="utf-8")


def _parse(text: str):
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)


def _entries(text: str) -> dict[str, dict[str, str]]:
    """Every entry cell of a page: id -> its attributes."""
    return {
        cell.get("id"): dict(cell.attrib)
        for cell in _parse(text).iter("td")
        if cell.get("class") == "entry"
    }


def test_pages_parse_as_strict_html5(page, committed):
    titles = ("Trainable scaled dot-product self-attention", "Causal multi-head attention")
    for text in (page, committed, html_document(DocumentOptions(causal=True, heads=2))):
        root = _parse(text)
        assert root.find("head/title").text.removesuffix(", derived") in titles
    with pytest.raises(html5lib.html5parser.ParseError, match="Expected DOCTYPE"):
        _parse(page.removeprefix("<!DOCTYPE html>\n"))  # the parser is strict indeed


def test_nothing_is_fetched(committed):
    elements = list(_parse(committed).iter())
    assert len(elements) > 500
    assert not [e.tag for e in elements if {"src", "href", "srcset", "action"} & set(e.attrib)]
    urls = [url for url in re.findall(r"url\(([^)]*)\)", committed) if not url.startswith("#")]
    assert len(urls) == 20 and all(url.startswith("data:font/woff2;base64,") for url in urls)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', committed)
    assert policy and policy.group(1).startswith("default-src 'none';")


def test_katex_is_the_pinned_version_with_its_licence():
    assert f'version:"{KATEX_VERSION}"' in katex_script()
    assert katex_style().count("@font-face") == 20
    root = Path(__file__).resolve().parents[3] / "derive" / "render" / "assets" / "katex"
    assert (root / "LICENSE").read_text().startswith("The MIT License (MIT)")


def test_every_display_with_its_provenance_in_the_latex_order(page):
    blocks = document_blocks(OPTIONS)
    displays = [block for block in blocks if isinstance(block, Display)]
    found = re.findall(
        r'<!-- provenance: ([^\n]*?) -->\n<div class="math display" '
        r'data-provenance="(.*?)"(?: data-sources="[^"]*")?>(.*?)</div>',
        page,
        re.S,
    )
    assert len(found) == len(displays) > 30
    for display, (comment, attribute, tex) in zip(displays, found, strict=True):
        said = display.provenance.said()
        assert comment == said.replace("--", "- -") and unescape(attribute) == said
        assert all(line in unescape(tex) for line in display.lines)
    tex = to_latex(blocks, title="t", note="n")
    assert tex == to_latex([b for b in blocks if not isinstance(b, Matrices)], title="t", note="n")
    assert "e-a-2-3" not in to_markdown(blocks, title="t", note="n")


def test_every_entry_carries_its_formula_and_what_it_reads(page):
    entries = _entries(page)
    ea = explicit_variant("self-attention", 3, 2, 4)
    for step in ea.steps:
        for entry, formula in zip(step.entries, step.formula, strict=True):
            cell = entries[f"e-{entry_key(entry)}"]
            assert cell["data-entry"] == latex(entry)
            assert cell["data-formula"] == latex(formula)
            reads = sorted(formula.atoms(sp.Indexed), key=L.reading_key)
            assert cell["data-reads"].split() == [f"e-{entry_key(read)}" for read in reads]
            assert "data-value" not in cell  # no numbers without the worked example
    for read in (key for cell in entries.values() for key in cell.get("data-reads", "").split()):
        assert read in entries
    assert entries["e-a-2-3"]["data-reads"].split() == [f"e-omegatilde-2-{p}" for p in (1, 2, 3)]
    z23 = set(entries["e-ctx-2-3"]["data-reads"].split())
    assert z23 == {f"e-a-2-{p}" for p in (1, 2, 3)} | {f"e-v-{p}-3" for p in (1, 2, 3)}
    assert "data-formula" not in entries["e-x-1-2"]  # an input


@pytest.mark.parametrize(
    "options",
    [
        DocumentOptions(sizes=(3, 2, 4), causal=True, heads=2),  # heads: ω^{(ℓ)}, C from both
        DocumentOptions(variant="cross-attention", sizes=(2, 3, 2)),  # keys from Y
        DocumentOptions(variant="kv-cache", sizes=(3, 2, 2)),
    ],
    ids=["causal-heads", "cross-attention", "kv-cache"],
)
def test_every_entry_read_is_on_the_page(options):
    entries = _entries(html_document(options))
    reads = {key for cell in entries.values() for key in cell.get("data-reads", "").split()}
    assert len(reads) > 40 and reads <= set(entries)
    formulas = sum("data-formula" in cell for cell in entries.values())
    assert 0 < formulas < len(entries)  # the inputs have none


def test_one_entry_per_matrix_in_the_tab_order(page):
    root = _parse(page)
    tables = [t for t in root.iter("table") if t.get("role") == "grid"]
    assert len(tables) == 4 + 7  # X, the three weights; Q, K, V, Ω, Ω̃, A, C
    for table in tables:
        stops = [cell.get("tabindex") for cell in table.iter("td")]
        assert stops[0] == "0" and set(stops[1:]) == {"-1"}


def test_the_worked_example_gives_the_values(committed):
    entries = _entries(committed)
    from derive.cli.docs import DOCS_OPTIONS
    from derive.cli.documents import example_for

    example = example_for(DOCS_OPTIONS)
    assert float(entries["e-a-2-3"]["data-value"]) == pytest.approx(
        float(example.values.A[1, 2]), abs=1e-10
    )
    assert float(entries["e-x-3-4"]["data-value"]) == pytest.approx(example.inputs["X"][2][3])
    assert all("data-value" in cell for cell in entries.values())
    shown = re.search(r'id="e-a-2-3"[^>]*>([^<]*)</td>', committed).group(1)
    assert shown == f"{float(example.values.A[1, 2]):.4f}"


def test_figures_are_inline_svg(committed):
    figures = re.findall(
        r'<figure class="plot" style="--plot-width: \d+px">\n<div class="plot-area">(<svg .*?</svg>)',
        committed,
        re.S,
    )
    assert len(figures) == 2
    assert "Softmax saturation" in figures[0] and "worked example" in figures[1]
    blocks = [Figure("figures/softmax-saturation.png", "caption")]
    with pytest.raises(ValueError, match="no SVG for the figure figures/softmax-saturation.png"):
        to_html(blocks, title="t", note="n", figures={})


def test_prose_becomes_html_and_unknown_latex_is_refused():
    text = r"the weights $A$ of \emph{cat} (\texttt{dim=-1}) & $a < b$~here"
    assert inline(text) == (
        'the weights <span class="math">A</span> of <em>cat</em> (<code>dim=-1</code>) &amp; '
        '<span class="math">a &lt; b</span>\u00a0here'
    )
    with pytest.raises(ValueError, match=r"prose holds LaTeX that a page cannot show: .*cite"):
        to_html([Prose(r"as \cite{book} shows")], title="t", note="n", figures={})
