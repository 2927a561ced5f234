"""The HTML page as a reader sees it: docs/derivation.html opened from file:// in headless
Chromium, and pages for every variant typeset without one KaTeX error.

Where Chromium is missing these tests skip, except when the environment variable CI is set: then
they fail (.ci/run installs Chromium, so a missing browser there is a broken CI).
"""

import re
from pathlib import Path

import pytest
from headless import Visit

import derive
from derive import DocumentOptions
from derive.render import html_document

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.fixture
def docs_page(browser):
    visit = Visit(browser, DOCS / "derivation.html", viewport={"width": 1000, "height": 800})
    yield visit
    visit.close()


def _reads(page) -> set[str]:
    return set(page.locator("td.reads").evaluate_all("cells => cells.map(cell => cell.id)"))


def _panel_tex(page) -> str:
    """The LaTeX the panel typeset (KaTeX keeps it in the MathML annotation)."""
    return page.locator("#entry-panel annotation").text_content()


def test_every_display_is_typeset_and_nothing_fails(docs_page):
    page = docs_page.page
    assert page.locator(".katex-error").count() == 0
    displays = page.locator("div.math.display").count()
    source = (DOCS / "derivation.html").read_text(encoding="utf-8")
    assert displays == source.count("<!-- provenance: ") - 1 > 40  # one comment is the tables'
    folded = page.locator("details.sums div.math.display").count()
    assert page.locator(".katex-display").count() == displays - folded > 30  # at load
    page.locator("details.sums > summary").evaluate_all("all => all.forEach(s => s.click())")
    page.wait_for_function(f"document.querySelectorAll('.katex-display').length === {displays}")
    unset = page.locator(".math:not(:has(.katex))").count()
    assert unset == 0 and page.locator(".katex-error").count() == 0
    assert docs_page.errors == []


def test_no_request_leaves_the_page(docs_page):
    page = docs_page.page
    page.hover("#e-a-2-3")
    page.locator("details.sums > summary").first.click()
    assert docs_page.requests and all(
        url.startswith(("file://", "data:")) for url in docs_page.requests
    ), docs_page.requests
    assert page.evaluate("document.fonts.check('16px KaTeX_Main')")  # embedded, loaded


def test_hovering_a_weight_shows_its_formula_and_the_row_it_reads(docs_page):
    page = docs_page.page
    assert page.locator("#entry-panel").is_hidden()
    cell = page.locator("#e-a-2-3")
    page.hover("#e-a-2-3")
    assert page.locator("#entry-panel").is_visible()
    formula = cell.get_attribute("data-formula")
    assert _panel_tex(page) == "a_{2,3} = " + formula
    assert formula.startswith(r"\frac{\exp\left(\tilde{\omega}_{2,3}\right)}")
    assert _reads(page) == {f"e-omegatilde-2-{p}" for p in (1, 2, 3)}
    assert re.fullmatch(r"value: 0\.\d+", page.locator(".entry-value").inner_text())
    page.mouse.move(5, 5)
    assert page.locator("#entry-panel").is_hidden() and _reads(page) == set()


def test_the_keyboard_reaches_every_entry(docs_page):
    page = docs_page.page
    page.focus("#e-ctx-2-2")  # z_{2,2}
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("document.activeElement.id") == "e-ctx-2-1"
    assert _panel_tex(page).startswith("z_{2,1} = ")
    expected = {f"e-a-2-{p}" for p in (1, 2, 3)} | {f"e-v-{p}-1" for p in (1, 2, 3)}
    assert _reads(page) == expected  # row 2 of A, column 1 of V
    page.keyboard.press("ArrowLeft")  # at the edge: stays
    assert page.evaluate("document.activeElement.id") == "e-ctx-2-1"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"  # the focus is seen
    page.keyboard.press("Tab")  # one entry per matrix in the tab order: on to the next thing
    assert not page.evaluate("document.activeElement.id.startsWith('e-ctx')")


def _luminance(css: str) -> float:
    """WCAG's relative luminance of an ``rgb(…)`` colour."""
    channels = [int(v) / 255 for v in re.findall(r"\d+", css)[:3]]
    red, green, blue = (
        c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels
    )
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def _contrast(page, selector: str) -> float:
    """WCAG's contrast ratio of an element's text against its background (its own, else the
    page's)."""
    style = f"getComputedStyle(document.querySelector('{selector}'))"
    background = page.evaluate(f"{style}.backgroundColor")
    if background == "rgba(0, 0, 0, 0)":
        background = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    paper, ink = _luminance(background), _luminance(page.evaluate(f"{style}.color"))
    return (max(paper, ink) + 0.05) / (min(paper, ink) + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_readable_in_light_and_dark(browser, scheme):
    visit = Visit(browser, DOCS / "derivation.html", color_scheme=scheme)
    page = visit.page
    paper = _luminance(page.evaluate("getComputedStyle(document.documentElement).backgroundColor"))
    assert (paper > 0.5) == (scheme == "light")
    assert _contrast(page, "h2 + p") >= 7  # body text: WCAG AAA
    assert _contrast(page, "p.note") >= 4.5  # muted text: AA
    page.hover("#e-a-2-3")
    assert _contrast(page, "td.reads") >= 4.5 and _contrast(page, "td.current") >= 4.5
    assert _contrast(page, ".entry-value") >= 4.5
    visit.close()


def test_printing_hides_the_panel_and_unfolds_the_sums(docs_page):
    page = docs_page.page
    page.hover("#e-a-2-3")
    page.emulate_media(media="print")
    assert (
        page.evaluate("getComputedStyle(document.getElementById('entry-panel')).display") == "none"
    )
    page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    assert page.locator("details.sums:not([open])").count() == 0
    assert page.locator("details.sums .katex-display").count() > 5


@pytest.mark.parametrize(
    "options",
    [
        DocumentOptions(),  # the generic derivation
        DocumentOptions(sizes=(3, 2, 4), causal=True, heads=2),  # causal, two heads
        DocumentOptions(variant="cross-attention", sizes=(2, 3, 2)),
        DocumentOptions(variant="sliding-window", sizes=(4, 2, 3)),
        *(DocumentOptions(variant=name) for name in derive.variants()),
        DocumentOptions(variant="gqa+qk-norm+rope", sizes=(3, 2, 4)),  # the widest formulas
    ],
    ids=[
        "generic",
        "causal-heads",
        "cross-attention-explicit",
        "sliding-window-explicit",
        *derive.variants(),
        "gqa+qk-norm+rope",
    ],
)
def test_every_page_typesets_without_error(browser, tmp_path, options):
    path = tmp_path / "page.html"
    path.write_text(html_document(options), encoding="utf-8")
    visit = Visit(browser, path)
    page = visit.page
    page.evaluate("window.dispatchEvent(new Event('beforeprint'))")  # typeset the folded sums
    assert page.locator(".math").count() > 5
    assert page.locator(".math:not(:has(.katex))").count() == 0
    assert page.locator(".katex-error").count() == 0, page.locator(
        ".katex-error"
    ).first.inner_text()
    entries = page.locator("td.entry").count()
    assert (entries > 0) == (options.sizes is not None)
    assert visit.errors == [] and all(u.startswith(("file:", "data:")) for u in visit.requests)
    visit.close()


def test_the_readme_names_a_screenshot_of_the_page():
    """docs/figures/derivation-html.png, saved by `python tests/headless.py` (Chromium); the
    README names it rather than showing it (a relative image breaks outside the repository); the
    site's home page shows it."""
    picture = DOCS / "figures" / "derivation-html.png"
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1000, 720)
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "`docs/figures/derivation-html.png` is a screenshot of the HTML page" in readme
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    assert "](figures/derivation-html.png)" in home


def test_hovering_a_block_output_lights_up_the_keys_it_has_seen(browser, tmp_path):
    options = DocumentOptions(variant="flash", sizes=(3, 2, 2), extra=(("B_c", 2),))
    path = tmp_path / "flash.html"
    path.write_text(html_document(options), encoding="utf-8")
    visit = Visit(browser, path)
    page = visit.page
    keys = lambda rows: {f"e-k-{p}-{i}" for p in rows for i in (1, 2)}  # noqa: E731
    page.hover("#e-ostate-1-2-1")  # o^{(1)}_{2,1}: block 1 holds keys 1 and 2
    lit = _reads(page)
    assert keys((1, 2)) <= lit and not keys((3,)) & lit
    assert {"e-omegatilde-2-1", "e-omegatilde-2-2", "e-v-1-1", "e-v-2-1", "e-mustate-1-2-1"} <= lit
    assert "o^{(1)}_{2,1}" in _panel_tex(page)
    page.hover("#e-ostate-2-2-1")  # after block 2 every key is seen
    lit = _reads(page)
    assert keys((1, 2, 3)) <= lit and "e-omegatilde-2-3" in lit and "e-mustate-1-2-1" not in lit
    assert visit.errors == []
    visit.close()
