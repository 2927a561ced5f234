"""The documents as a reader sees them: the HTML page laid out in Chromium at a laptop's width
(1280 px) and a phone's (420 px), the provenance of every display shown in every format, and
the PDF's pages and metadata. The page is generated here, with the options of docs/ (explicit
sizes, the worked example, the figures), so these tests hold for the code, not for a file.

Where Chromium or pdflatex is missing these tests skip, except when CI is set: then they fail.
"""

import re
import subprocess

import pytest
from headless import Visit
from programs import require

from derive.cli.docs import DOCS_OPTIONS
from derive.cli.documents import example_for
from derive.render import html_document, latex_document, markdown_document
from derive.render import prose as P
from derive.render.blocks import Display
from derive.render.documents import FIGURES, document_blocks

WIDTHS = (1280, 420)


@pytest.fixture(scope="module")
def example():
    return example_for(DOCS_OPTIONS)


@pytest.fixture(scope="module")
def page_file(tmp_path_factory, example):
    path = tmp_path_factory.mktemp("page") / "derivation.html"
    path.write_text(html_document(DOCS_OPTIONS, example=example), encoding="utf-8")
    return path


@pytest.fixture(params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def visit(request, browser, page_file):
    visit = Visit(browser, page_file, viewport={"width": request.param, "height": 800})
    yield visit
    assert visit.errors == []
    visit.close()


def _box(locator) -> dict:
    return locator.evaluate(
        "e => { const r = e.getBoundingClientRect(); return {left: r.left, "
        "right: r.right, top: r.top + scrollY, bottom: r.bottom + scrollY}; }"
    )


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def test_every_display_shows_its_provenance_beside_it_without_covering_it(visit):
    page = visit.page
    assert page.locator("div.shown").count() == page.locator("div.math.display").count() > 40
    shown = page.locator("main > div.shown")  # not those folded in a closed <details>
    count = shown.count()
    width = page.evaluate("document.documentElement.clientWidth")
    main = _box(page.locator("main"))
    for k in range(0, count, 7):  # every seventh: laying out all of them takes seconds
        block = shown.nth(k)
        block.scroll_into_view_if_needed()
        tag, display = block.locator(".provenance"), block.locator("div.math.display")
        kind = display.get_attribute("data-provenance").split(" — ")[0]
        assert tag.text_content() == kind and tag.is_visible()
        box = _box(tag)
        assert 0 <= box["left"] and box["right"] <= width  # on the screen
        assert not _overlap(box, _box(display.locator(".katex-display")))
        if width >= 1280:  # in the margin, right of the text column
            assert box["left"] >= main["right"] - 20  # main's padding is 1.25rem


def test_the_worked_example_s_matrices_stand_apart(visit):
    page = visit.page
    display = page.locator("div.math.display[data-provenance^='numeric — seeded']")
    display.scroll_into_view_if_needed()
    # each \\left( … \\right) as drawn: its entries and its parentheses (KaTeX's boxes around
    # them report the line's height, not the ink's)
    matrices = display.locator(".minner").evaluate_all("""groups => groups
        .filter(g => !g.parentElement.closest('.minner')).map(g => {
          let top = Infinity, bottom = -Infinity;
          for (const e of g.querySelectorAll('svg, .mord')) {
            const r = e.getBoundingClientRect();
            if (r.height > 0) { top = Math.min(top, r.top); bottom = Math.max(bottom, r.bottom); }
          }
          return [top, bottom]; })""")
    assert len(matrices) == 4  # X, W_q, W_k, W_v, one under the other
    gaps = [below[0] - above[1] for above, below in zip(matrices, matrices[1:], strict=False)]
    assert min(gaps) >= 12, gaps  # were 4 to 5 px, the parentheses all but touching


def test_numbers_print_the_minus_sign_of_the_math_beside_them(visit):
    cells = visit.page.locator("td.number, td.entry[data-value]").all_text_contents()
    assert len(cells) > 30 and any(c.startswith("\u2212") for c in cells)
    assert [c for c in cells if "-" in c] == []


@pytest.mark.parametrize("key", ["ctx-2-1", "a-3-2", "omegatilde-1-1", "q-2-2"])
def test_the_panel_covers_neither_the_entry_nor_what_it_reads(visit, key):
    page = visit.page
    cell = page.locator(f"#e-{key}")
    cell.scroll_into_view_if_needed()  # then to the bottom of the window, where a panel fixed
    cell.evaluate("e => scrollBy(0, e.getBoundingClientRect().bottom - innerHeight + 4)")
    cell.hover()  # to the window's bottom edge would cover it
    panel = page.locator("#entry-panel")
    assert panel.is_visible()
    lit = page.locator("td.reads, td.current")
    assert lit.count() >= 2
    around = _box(panel)
    for k in range(lit.count()):
        assert not _overlap(around, _box(lit.nth(k))), lit.nth(k).get_attribute("id")
    width = page.evaluate("document.documentElement.clientWidth")
    assert 0 <= around["left"] and around["right"] <= width


def test_the_provenance_is_printed_in_latex_and_markdown_too(example):
    blocks = [b for b in document_blocks(DOCS_OPTIONS, example=example) if isinstance(b, Display)]
    tex = latex_document(DOCS_OPTIONS, example=example)
    md = markdown_document(DOCS_OPTIONS, example=example)
    tags = re.findall(r"\\tag\*\{\\footnotesize\\textit\{(\w+)\}\}", tex)
    assert tags == [b.provenance.kind for b in blocks]
    lines = re.findall(r"-->\n\*(.+)\*\n\n\$\$", md)
    assert lines == [b.provenance.said() for b in blocks]
    assert "the LaTeX source of this document says which" not in md + tex


def test_no_display_repeats_its_previous_line(example):
    """A substitution is shown by its result with the values in (c (1·0² + …)), not by the
    previous line again under a bar of stacked subscripts."""
    for block in document_blocks(DOCS_OPTIONS, example=example):
        if isinstance(block, Display):
            assert not any(r"\right|" in line or "substack" in line for line in block.lines)


def test_the_worked_example_s_inputs_are_kept_on_one_page(example):
    tex = latex_document(DOCS_OPTIONS, example=example)
    inputs = re.search(r"X &= .*?\\end\{align\*\}", tex[tex.index("seeded embeddings") :], re.S)
    assert inputs.group(0).count("\\\\*[1.2ex]") == 3  # no page break between the four


def test_the_pdf_has_its_metadata_and_no_page_holding_only_a_figure(tmp_path, example):
    """docs/derivation.pdf as `derive docs` compiles it (its LaTeX and its figures at the
    options of docs/), without the rest of what `derive docs` writes."""
    require("pdflatex", "pdftotext")
    from derive.cli.documents import compile_pdf, figure_files

    tex = latex_document(DOCS_OPTIONS, example=example)
    pdf = compile_pdf(tex, figure_files(DOCS_OPTIONS, example))
    assert b"/Title (Trainable scaled dot-product self-attention, derived)" in pdf
    subject = re.search(rb"/Subject \(([^)]*)\)", pdf).group(1).decode()
    assert subject.startswith("Trainable scaled dot-product self-attention: every formula")
    assert b"/Author (the attention-derive authors)" in pdf
    keywords = re.search(rb"/Keywords \(([^)]*)\)", pdf).group(1).decode()
    assert "self-attention" in keywords and "sha256" not in keywords  # words, not a hash
    assert re.search(rb"/SourceSHA256 \([0-9a-f]{64}\)", pdf)  # the source's hash, apart
    (tmp_path / "d.pdf").write_bytes(pdf)
    pages = subprocess.run(
        ["pdftotext", "-layout", str(tmp_path / "d.pdf"), "-"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\f")
    captions = [P.HEATMAP_CAPTION] + [caption for _, caption in FIGURES.values()]
    for page in pages:
        words = set(re.findall(r"[A-Za-z]{3,}", page))
        for caption in captions:
            if caption[:30] in " ".join(page.split()):
                assert len(words - set(re.findall(r"[A-Za-z]{3,}", caption))) > 10, page


#: A variant whose titles are a user's plain text: Unicode math, an underscore, a percent sign.
TITLED = """
import sympy as sp
from derive import declare
from derive.declare import a, m, n, omega_tilde, p

W = declare.step("cubed_w", sp.Eq(a[m, p], omega_tilde[m, p] ** 3), shape=(n, n),
                 title="Weights σ′ ≤ 1 − λ for W_q; x^2 ~ Ω̃̄ ∇L ⊙ Kᵀ for $5",
                 twin=lambda s: s ** 3)
V = declare.variant("titled", title="Cubed_attention (100% − λ)", replaces=[W], claims=[
    declare.claim(a[m, p], omega_tilde[m, p] ** 3, title="Each a_{m,p} is ω̃³ — 50% & more")])
"""


@pytest.mark.parametrize("form", ["pdf", "markdown", "html"])
def test_titles_are_text_in_every_format(tmp_path, form):
    """A user's titles with Unicode (−, ≤, λ, σ′, ω̃) and LaTeX's special characters (_, %, &)
    are text: the PDF compiles and reads them back (its metadata's title too), Markdown and
    HTML keep them as written."""
    from derive.cli import main

    path = tmp_path / "titled.py"
    path.write_text(TITLED)
    out = tmp_path / f"d.{ {'markdown': 'md'}.get(form, form) }"
    if form == "pdf":
        require("pdflatex", "pdftotext", "pdfinfo")
    assert main([form, "-q", "--variant", f"{path}:V", "-o", str(out)]) == 0
    if form == "pdf":
        text = subprocess.run(
            ["pdftotext", str(out), "-"], check=True, capture_output=True, text=True
        ).stdout
        text = " ".join(text.split())
        info = subprocess.run(
            ["pdfinfo", str(out)], check=True, capture_output=True, text=True
        ).stdout
        assert "Title:           Cubed_attention (100% − λ), derived" in info, info
    else:
        text = out.read_text(encoding="utf-8")
    titles = ["≤ 1 − λ for W_q", "Cubed_attention (100% − λ)", "— 50% & more"]
    if form != "pdf":  # pdftotext reads ^, ~ and the accents apart; the PDF compiling is the test
        titles.append("x^2 ~ Ω̃̄ ∇L ⊙ Kᵀ for $5")
    for title in titles:
        shown = title.replace("&", "&amp;") if form == "html" else title
        if form == "pdf":  # LaTeX's \_ is a rule drawn, no glyph: pdftotext reads a space
            shown = shown.replace("_", " ")
        assert shown in text, (title, text[:2000])
