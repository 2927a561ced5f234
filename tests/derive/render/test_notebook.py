"""The notebook: valid nbformat 4 as nbformat writes it, nothing of the machine or the moment in
it, the outputs saved in it what a real kernel (ipykernel, through nbclient) shows; and the
Markdown document in cells: every heading, paragraph, display and table of ``derive markdown``
with the same options, in order, each announcement followed by what it announces.

The notebook tested is the one the code generates now (docs/derivation.ipynb's options);
test_docs.py checks that the committed file is that notebook.
"""

import functools
import json
import re
from dataclasses import dataclass

import nbformat
import pytest

from derive import DocumentOptions
from derive.bridge.example import example_for, worked_example
from derive.bridge.notebook import mimebundle, run_cells, without_column
from derive.cli.docs import DOCS_OPTIONS
from derive.render.blocks import to_latex, to_markdown
from derive.render.documents import latex_document, markdown_document
from derive.render.notebook import Cell, notebook_cells, to_ipynb
from derive.render.sections.explicit import example as example_section

#: The notebooks whose Markdown is checked against the document, one case per row.
CASES = {
    "docs": DOCS_OPTIONS,  # explicit at 3, 4, 2, the worked example ("the fat cat"), figures
    "gqa+rope": DocumentOptions(variant="gqa+rope", sizes=(3, 5, 4)),  # two parts combined
    "sinks": DocumentOptions(variant="sinks", sizes=(4, 3, 2)),  # a sink beside the softmax
    "causal, 2 heads": DocumentOptions(causal=True, heads=2, sizes=(3, 5, 4)),  # per-head steps
}


@dataclass(frozen=True)
class Built:
    """A notebook's cells run in-process, and the Markdown document of the same options."""

    cells: list[Cell]
    outputs: list[list[dict]]
    markdown: str


@functools.cache
def _built(case: str) -> Built:
    options = CASES[case]
    example = example_for(options)
    cells = notebook_cells(options, example=example)
    return Built(cells, run_cells(cells), markdown_document(options, example=example))


@pytest.fixture(scope="module")
def text() -> str:
    """docs/derivation.ipynb as `derive docs` writes it now."""
    built = _built("docs")
    return to_ipynb(built.cells, built.outputs)


def _texttt(part: str) -> str:
    """The Markdown spelling of ``\\texttt{x}`` outside math, which the notebook uses."""
    return part if "$$" in part else re.sub(r"\\texttt\{([^}]*)\}", r"`\1`", part)


@dataclass(frozen=True)
class Item:
    """A part of a Markdown cell (blocks are separated by blank lines) or a code cell, with
    what the code cell shows."""

    kind: str  # "markdown" or "code"
    text: str
    shows: frozenset[str] = frozenset()  # the MIME types (and "stream") of its outputs


def _items(built: Built) -> list[Item]:
    items = []
    for cell, outputs in zip(built.cells, built.outputs, strict=True):
        if cell.kind == "markdown":
            items += [Item("markdown", part) for part in cell.source.split("\n\n")]
            continue
        shows = {m for o in outputs for m in o.get("data", {})}
        shows |= {"stream" for o in outputs if o.get("text", "").strip()}
        items.append(Item("code", cell.source, frozenset(shows)))
    return items


# -- the notebook is the document ------------------------------------------------------------


def _missing(markdown: str, items: list[Item]) -> list[str]:
    """The blocks of the Markdown document (heading, paragraph, display, table, caption) that
    are not parts of the notebook's Markdown cells in the same order; a figure's image must be
    a code cell that draws it (SVG) at the same place."""
    missing, at = [], 0
    for part in markdown.strip().split("\n\n"):
        if part.startswith("!["):
            found = [i for i in range(at, len(items)) if "image/svg+xml" in items[i].shows]
        else:
            found = [
                i
                for i in range(at, len(items))
                if items[i].kind == "markdown" and items[i].text == _texttt(part)
            ]
        if not found:
            missing.append(part[:100])
            continue
        at = found[0] + 1
    return missing


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_part_of_the_markdown_document_is_in_the_notebook_in_order(case):
    built = _built(case)
    assert _missing(built.markdown, _items(built)) == []


def _level(text: str) -> int:
    return len(text) - len(text.lstrip("#"))


def _shown(item: Item) -> bool:
    """A display, a table, a list, or a code cell whose output shows something."""
    if item.kind == "code":
        return bool(item.shows & {"text/latex", "image/svg+xml", "text/plain", "stream"})
    return item.text.startswith(("$$", "|", "- ", "1. "))


def _annotation(item: Item) -> bool:
    """What goes with the display after it: its provenance (an HTML comment, its tag)."""
    return item.kind == "markdown" and item.text.startswith("<!--")


def _paragraph(item: Item) -> bool:
    return item.kind == "markdown" and not item.text.startswith(
        ("#", "$$", "<!--", "|", "![", "- ", "1. ")
    )


def _unannounced(items: list[Item]) -> list[str]:
    """The paragraphs not followed by what they announce (they end with a colon: a display, a
    table, a list, a code cell that shows its result, or, at the end of a section's words, the
    section's parts), and those that open with "These" or "From these" and follow nothing
    they could refer to."""
    wrong, section = [], 0
    for k, item in enumerate(items):
        if item.kind == "markdown" and item.text.startswith("#"):
            section = _level(item.text)
        if not _paragraph(item):
            continue
        if item.text.rstrip().endswith(":"):
            then = next((i for i in items[k + 1 :] if not _annotation(i)), Item("markdown", ""))
            deeper = then.text.startswith("#") and _level(then.text) > section
            if not (_shown(then) or deeper):
                wrong.append(f"{item.text[-100:]!r} is followed by {then.text[:60]!r}")
        if re.match(r"(From )?These\b", item.text, re.IGNORECASE) and not (
            k > 0 and _shown(items[k - 1])
        ):
            wrong.append(f"{item.text[:100]!r} follows {items[k - 1].text[:60]!r}")
    return wrong


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_announcement_is_followed_by_what_it_announces(case):
    assert _unannounced(_items(_built(case))) == []


@pytest.mark.slow
def test_what_the_issue_found_is_caught():
    """The docs' notebook with the assumptions left out (a paragraph announces them, the next
    refers back to them), or with the gradients' table left out (announced before the first
    part of the backward pass): each is caught."""
    built = _built("docs")
    items = _items(built)
    assert _missing(built.markdown, items) == [] and _unannounced(items) == []
    assumptions = next(
        k
        for k, i in enumerate(items)
        if i.text.startswith("$$") and "\\mathbb{E}\\left[q_{j}\\right]" in i.text
    )
    without = items[: assumptions - 1] + items[assumptions + 1 :]  # and its provenance
    assert len(_unannounced(without)) == 2
    assert len(_missing(built.markdown, without)) == 2  # the display and its provenance
    table = next(k for k, i in enumerate(items) if i.text.startswith("| gradient"))
    assert _missing(built.markdown, items[:table] + items[table + 1 :]) == [items[table].text[:100]]


# -- the worked example says what it uses ----------------------------------------------------

SHARED = "the two occurrences of *the* share one"


def test_the_example_heading_names_the_tokens_used():
    built = _built("docs")
    parts = [
        part
        for cell in built.cells
        if cell.kind == "markdown"
        for part in cell.source.split("\n\n")
    ]
    assert "## Worked example: the fat cat" in parts
    assert not any("sat on the mat" in part for part in parts if part.startswith("#"))
    assert not any(SHARED in part for part in parts)


@pytest.mark.parametrize(
    ("n", "shared"),
    [
        (3, False),  # the fat cat
        (5, False),  # the fat cat sat on
        (6, True),  # the fat cat sat on the
        (7, True),  # the whole sentence
    ],
)
def test_the_shared_embedding_is_mentioned_only_where_the_occurs_twice(n, shared):
    blocks = example_section(worked_example(n=n, d=3, c=2), None)
    assert (SHARED in to_markdown(blocks, title="t", note="")) is shared
    assert (
        "the two occurrences of \\emph{the} share one" in to_latex(blocks, title="t", note="")
    ) is shared


def test_the_whole_sentence_shares_the_embedding_in_every_document():
    options = DocumentOptions(example=True)  # all seven tokens
    example = example_for(options)
    cells = notebook_cells(options, example=example)
    assert any(SHARED in cell.source for cell in cells if cell.kind == "markdown")
    assert markdown_document(options, example=example).count(SHARED) == 1
    assert latex_document(options, example=example).count("occurrences of \\emph{the}") == 1


# -- the check shows its table ----------------------------------------------------------------


@pytest.mark.slow
def test_the_check_shows_its_table_without_the_machine_dependent_column():
    built = _built("docs")
    (shown,) = [o["text"] for out in built.outputs for o in out if o["output_type"] == "stream"]
    lines = shown.splitlines()
    assert lines[0] == "trial 1/1: self-attention, n=3 d=4 c=2, inputs seed 0"
    assert lines[1].split() == ["step", "shape", "tolerance", "result"]
    assert lines[2].split() == ["Q", "3×2", "exact", "pass"]
    assert lines[-1] == "derive check: 39 step values compared, all pass"
    assert len(lines) == 39 + 3  # one row per step value, the trial, the header and the summary
    assert not re.search(r"\d\.\d+e-\d+|difference", shown)  # no difference left to vary


def test_without_column_drops_one_column_of_each_table():
    table = (
        "trial 1/2: x\n"
        "  step  max |difference|  result\n"
        "  Q     0                 pass\n"
        "  (a note)\n"
        "trial 2/2: x\n"
        "  step   max |difference|  result\n"
        "  Omega  3.55e-15          pass\n"
        "done\n"
    )
    assert without_column(table, "max |difference|") == (
        "trial 1/2: x\n  step  result\n  Q     pass\n  (a note)\n"
        "trial 2/2: x\n  step   result\n  Omega  pass\ndone\n"
    )
    assert without_column(table, "result").splitlines()[2] == "  Q     0"
    with pytest.raises(ValueError, match="no column 'tolerance' in the table"):
        without_column(table, "tolerance")


# -- nbformat, and nothing of the machine or the moment ---------------------------------------


@pytest.mark.slow
def test_valid_and_written_as_nbformat_writes_it(text):
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    assert nbformat.writes(notebook) + "\n" == text
    assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)


@pytest.mark.slow
def test_nothing_of_the_machine_or_the_moment(text):
    for pattern in (r"/(home|root|tmp|work|usr)/", r"site-packages", r" at 0x", r"\b20\d\d-\d\d-"):
        assert not re.search(pattern, text), pattern
    notebook = json.loads(text)
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1))
    assert [cell["id"] for cell in notebook["cells"]] == [
        f"cell-{k:03d}" for k in range(1, len(notebook["cells"]) + 1)
    ]
    assert notebook["metadata"] == {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }


@pytest.mark.slow
def test_every_code_cell_shows_something_and_nothing_failed(text):
    notebook = nbformat.reads(text, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert len(code) > 20 and all(cell.outputs for cell in code)
    kinds = {output.output_type for cell in code for output in cell.outputs}
    assert kinds == {
        "execute_result",
        "display_data",
        "stream",
    }  # display: one display, two objects
    mimes = {mime for cell in code for o in cell.outputs for mime in o.get("data", {})}
    assert mimes == {"text/plain", "text/latex", "image/svg+xml"}
    sources = "\n".join(cell.source for cell in code)
    for call in (
        "derive.steps()",
        "derive.facts()",
        "derive.backward_steps()",
        "derive.explicit_variant('self-attention', n=3, d=4, c=2)",
        "example = worked_example(",
        "derive.cli.main(argv)",
        "self_attention(",
        "derive.calculus.flop_count(derive.variant('self-attention').graph)",
        "svg.figure('softmax-saturation')",
        "svg.heatmap(",
    ):
        assert call in sources, call
    streams = [o.text for cell in code for o in cell.outputs if o.output_type == "stream"]
    assert [text.splitlines()[-1] for text in streams] == [
        "derive check: 39 step values compared, all pass"
    ]


def test_cells_run_as_ipython_runs_them():
    cells = [
        Cell("markdown", "# a title"),
        Cell("code", "import derive\nx = 6 * 7\nprint('printed')\nx"),
        Cell("code", "display(derive.steps()[0])\nprint('after')\ny = x"),
    ]
    outputs = run_cells(cells)
    assert outputs[0] == []
    assert outputs[1] == [
        {"name": "stdout", "output_type": "stream", "text": "printed\n"},
        {
            "data": {"text/plain": "42"},
            "execution_count": 1,
            "metadata": {},
            "output_type": "execute_result",
        },
    ]
    shown, after = outputs[2]
    assert shown["output_type"] == "display_data"
    assert shown["data"]["text/latex"].startswith("$$Q = X W_q")
    assert after == {"name": "stdout", "output_type": "stream", "text": "after\n"}
    notebook = nbformat.reads(to_ipynb(cells, outputs), as_version=4)
    nbformat.validate(notebook)
    assert notebook.cells[1].outputs[1].data["text/plain"] == "42"


def test_an_output_that_differs_from_run_to_run_is_refused():
    with pytest.raises(ValueError, match="object shows a memory address; it cannot be saved"):
        mimebundle(object())


def test_a_variant_notebook_runs():
    options = DocumentOptions(variant="sliding-window", sizes=(4, 2, 3))
    cells = notebook_cells(options)
    outputs = run_cells(cells)
    latex = [
        o["data"]["text/latex"] for out in outputs for o in out if "text/latex" in o.get("data", {})
    ]
    assert len(latex) > 8 and any(r"\tilde{\omega}_{4,3}" in tex for tex in latex)
    assert "derive notebook --n 4 --d 2 --c 3 --variant sliding-window" in cells[0].source


@pytest.mark.slow
def test_a_real_kernel_shows_the_saved_outputs(text, tmp_path, monkeypatch):
    """nbclient runs every cell of the docs' notebook in ipykernel: no error, and each cell's
    outputs are the ones saved (so the in-process recording is what Jupyter shows)."""
    from nbclient import NotebookClient

    monkeypatch.chdir(tmp_path)
    saved = nbformat.reads(text, as_version=4)
    ran = nbformat.reads(text, as_version=4)
    NotebookClient(
        ran, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o
        for cell in ran.cells
        for o in cell.get("outputs", [])
        if o.output_type == "error" or o.get("name") == "stderr"
    ]
    assert errors == []
    for before, after in zip(saved.cells, ran.cells, strict=True):
        if before.cell_type == "code":
            assert after.outputs == before.outputs, before.source
