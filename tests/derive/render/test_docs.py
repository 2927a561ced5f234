"""docs/ holds what `derive docs` generates now: a test fails when the files drift.

- derivation.tex, derivation.md, derivation.html, derivation.ipynb (saved with its outputs),
  glossary.md and the figures' CSV data: byte for byte.
- the figures' PNGs: byte for byte when the installed matplotlib is the one that drew them (its
  version is in the PNG); otherwise the CSV of the plotted numbers is what must not drift.
- derivation.pdf: it carries the SHA-256 of the source it was built from (the .tex and the
  PNGs), which must be the committed source; and where the local pdfTeX is the one that built it,
  rebuilding gives the same bytes.

Regenerate with: `derive docs` (or `python -m derive docs`).
"""

import re
import struct
import zlib
from pathlib import Path

import pytest
from programs import require

from derive.cli.docs import generate_docs
from derive.cli.model_pages import HEADLINES, model_page
from derive.render.pdf import compile_pdf, pdf_producer, pdf_source_hash, source_hash

DOCS = Path(__file__).resolve().parents[3] / "docs"
HINT = "docs/ drifted from the code; regenerate with `derive docs`"


@pytest.fixture(scope="module")
def generated():
    import matplotlib  # noqa: F401 - a test dependency; the figures need it

    return generate_docs(pdf=False, models=False)  # the models' pages: test_model_page_matches


def _png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            chunks[key.decode()] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            chunks[key.decode()] = zlib.decompress(rest[1:]).decode("latin-1")
        offset += 12 + length
    return chunks


def test_text_files_match(generated):
    assert {"derivation.html", "derivation.ipynb"} <= set(generated)
    for name, data in generated.items():
        if name.endswith((".tex", ".md", ".csv", ".html", ".ipynb")):
            path = DOCS / name
            assert path.exists(), f"{name} is missing; {HINT}"
            assert path.read_bytes() == data, f"{name}: {HINT}"


def test_figures_match(generated):
    import matplotlib

    pngs = [name for name in generated if name.endswith(".png")]
    assert sorted(pngs) == [
        "figures/attention-heatmap.png",
        "figures/flash-rounding.png",
        "figures/softmax-saturation.png",
    ]
    for name in pngs:
        committed = (DOCS / name).read_bytes()
        drawn_by = _png_text(committed).get("Software")
        if drawn_by == f"matplotlib {matplotlib.__version__}":
            assert committed == generated[name], f"{name}: {HINT}"
        else:  # another matplotlib draws other pixels; the plotted data is pinned by the CSV
            assert (DOCS / name.replace(".png", ".csv")).read_bytes() == generated[
                name.replace(".png", ".csv")
            ]


def test_figures_are_referenced(generated):
    for document in ("derivation.tex", "derivation.md"):
        text = generated[document].decode()
        assert "figures/attention-heatmap.png" in text
        assert "figures/softmax-saturation.png" in text


def _committed_pictures() -> dict[str, bytes]:
    """The PNGs the committed LaTeX includes (docs/figures also holds the page's screenshot)."""
    tex = (DOCS / "derivation.tex").read_text(encoding="utf-8")
    return {
        f"figures/{path.name}": path.read_bytes()
        for path in sorted((DOCS / "figures").glob("*.png"))
        if f"figures/{path.name}" in tex
    }


def test_pdf_was_built_from_the_committed_source(generated):
    pdf = (DOCS / "derivation.pdf").read_bytes()
    tex = (DOCS / "derivation.tex").read_text(encoding="utf-8")
    assert tex.encode() == generated["derivation.tex"], HINT
    assert pdf_source_hash(pdf) == source_hash(tex, _committed_pictures()), (
        f"derivation.pdf: {HINT}"
    )


def test_pdf_rebuilds_byte_for_byte():
    require("pdflatex")
    committed = (DOCS / "derivation.pdf").read_bytes()
    tex = (DOCS / "derivation.tex").read_text(encoding="utf-8")
    rebuilt = compile_pdf(tex, _committed_pictures())
    assert pdf_source_hash(rebuilt) == pdf_source_hash(committed)
    if pdf_producer(rebuilt) == pdf_producer(committed):
        assert rebuilt == committed, f"derivation.pdf: {HINT}"
    else:  # another pdfTeX lays out other bytes; the source hash above still pins the content
        assert pdf_producer(rebuilt).startswith("pdfTeX")


def test_api_mapping_names_exist():
    """Every `attention.…` and `derive.…` name the mapping page cites can be imported."""
    import importlib

    text = (DOCS / "api-mapping.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`((?:attention|derive)(?:\.\w+)+)", text))
    assert len(names) > 15
    for dotted in sorted(names):
        module_name, _, attribute = dotted.rpartition(".")
        module = importlib.import_module(module_name)
        assert hasattr(module, attribute), dotted
    functional = importlib.import_module("attention.functional")
    for name in re.findall(r"`(\w+)\(", text):
        if name not in ("derive",):
            assert hasattr(functional, name) or any(
                hasattr(importlib.import_module(m), name) for m in ("derive", "attention")
            ), name


def test_the_variants_page_has_a_row_for_every_built_in_entry(generated):
    """docs/variants.md, generated from the registry: each entry's row, with its base, its
    twins and the models that combine it (the file itself is compared byte for byte above)."""
    from derive.graph.entries import BUILT_IN

    page = generated["variants.md"].decode("utf-8")
    table, pairs = page.split("## Which variants combine")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [found.name for found in BUILT_IN]
    gated = next(row for row in rows if row.startswith("| `gated-deltanet`"))
    assert "`linear-attention`" in gated and "`attention.linear.read_written`" in gated
    gqa = next(row for row in rows if row.startswith("| `gqa`"))
    assert "Llama 3" in gqa and "Qwen 3" in gqa


def test_the_variants_page_pictures_which_pairs_combine_and_why_not(generated):
    """Its section on pairs: the count, the picture (written beside it), and a row per refused
    pair with the rule that refuses it, as the registry resolves them."""
    from derive.graph.entries import BUILT_IN
    from derive.graph.registry import compatibility

    names = tuple(found.name for found in BUILT_IN)
    pairs = compatibility(names)
    refused = {f"{a}+{b}": why for (a, b), why in pairs.items() if why}
    section = generated["variants.md"].decode("utf-8").split("## Which variants combine")[1]
    assert (
        f"Of the {len(pairs)} pairs of built-in variants, {len(pairs) - len(refused)} combine"
        in section
    )
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(refused)
    picture = generated["figures/compatibility.svg"].decode("utf-8")
    assert picture.count("<rect") == 2 * len(pairs)  # each pair twice, across the diagonal
    assert picture.count('fill="none"') == 2 * len(refused)
    assert "figures/compatibility.svg" in section


def test_the_mistakes_page_shows_every_mistake_with_the_step_it_changes(generated):
    """docs/mistakes.md, generated from the catalogue: a row per mistake, in the catalogue's
    order, each with the formula it computes beside the derivation's (but the one that changes
    no formula, NaN on empty rows, which says so)."""
    from derive.conformance.kda import MISTAKES as KDA
    from derive.conformance.linear import MISTAKES as LINEAR
    from derive.conformance.ssm import MAMBA_MISTAKES as MAMBA
    from derive.conformance.ssm import MISTAKES as SSM
    from derive.graph.mistakes import MISTAKES

    page = generated["mistakes.md"].decode("utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [
        m.id for m in (*MISTAKES, *LINEAR, *KDA, *SSM, *MAMBA)
    ]
    for row in rows[: len(MISTAKES)]:
        cells = [cell.strip() for cell in row.strip("| ").split(" | ")]
        assert len(cells) == 4 and cells[2] and cells[3] and cells[2] != cells[3], row


@pytest.mark.parametrize("headline", HEADLINES, ids=lambda h: h.slug)
def test_model_page_matches(headline):
    """Each headline model's page (docs/models/), generated apart so that the pages spread over
    the test workers."""
    pytest.importorskip("transformers", reason="the models' pages read transformers' configs")
    page = model_page(headline)
    assert (DOCS / "models" / f"{headline.slug}.md").read_text(encoding="utf-8") == page, HINT
    if headline.config is not None:
        written = (DOCS / headline.config_path).read_text(encoding="utf-8")
        assert written == headline.config_text(), HINT


def test_the_model_pages_say_what_each_layer_is_and_are_on_the_site():
    """Every page is in the site's navigation, and a model with layers is derived by kind."""
    site = (DOCS / "mkdocs" / "mkdocs.yml").read_text(encoding="utf-8")
    for headline in HEADLINES:
        assert f"models/{headline.slug}.md" in site
    gpt_oss = (DOCS / "models" / "gpt-oss.md").read_text(encoding="utf-8")
    assert gpt_oss.count("## Layer ") == 2 and "yarn-rope" in gpt_oss
    assert r"\rho_{a}" in gpt_oss  # YaRN's attention factor, derived
    deepseek = (DOCS / "models" / "deepseek-v3.md").read_text(encoding="utf-8")
    assert "**Not derived.**" in deepseek and "## Layer" not in deepseek
