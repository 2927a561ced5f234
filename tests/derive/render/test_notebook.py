"""The notebook: valid nbformat 4 as nbformat writes it, nothing of the machine or the moment in
it, and the outputs saved in it are what a real kernel (ipykernel, through nbclient) shows."""

import json
import re
from pathlib import Path

import nbformat
import pytest

from derive import DocumentOptions
from derive.bridge.notebook import mimebundle, run_cells
from derive.render.notebook import Cell, notebook_cells, to_ipynb

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.fixture(scope="module")
def text() -> str:
    return (DOCS / "derivation.ipynb").read_text(encoding="utf-8")


def test_valid_and_written_as_nbformat_writes_it(text):
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    assert nbformat.writes(notebook) + "\n" == text
    assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)


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
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"name": "python"},
    }  # fmt: skip


def test_every_code_cell_shows_something_and_nothing_failed(text):
    notebook = nbformat.reads(text, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert len(code) > 20 and all(cell.outputs for cell in code)
    kinds = {output.output_type for cell in code for output in cell.outputs}
    assert kinds == {"execute_result", "stream"}
    mimes = {mime for cell in code for o in cell.outputs for mime in o.get("data", {})}
    assert mimes == {"text/plain", "text/latex", "image/svg+xml"}
    sources = "\n".join(cell.source for cell in code)
    for call in ("derive.steps()", "derive.facts()", "derive.backward_steps()",
                 "derive.explicit_variant('self-attention', n=3, d=4, c=2)",
                 "derive.worked_example(", "derive.cli.main(argv)", "self_attention("):
        assert call in sources, call  # fmt: skip
    verdict = [o.text for cell in code for o in cell.outputs if o.output_type == "stream"]
    assert verdict == ["derive check: 24 step values compared, all pass\n"]


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
        {"data": {"text/plain": "42"}, "execution_count": 1, "metadata": {},
         "output_type": "execute_result"},
    ]  # fmt: skip
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
    latex = [o["data"]["text/latex"] for out in outputs for o in out
             if "text/latex" in o.get("data", {})]  # fmt: skip
    assert len(latex) > 8 and any(r"\tilde{\omega}_{4,3}" in tex for tex in latex)
    assert "derive notebook --n 4 --d 2 --c 3 --variant sliding-window" in cells[0].source


@pytest.mark.slow
def test_a_real_kernel_shows_the_saved_outputs(text, tmp_path, monkeypatch):
    """nbclient runs every cell of docs/derivation.ipynb in ipykernel: no error, and each cell's
    outputs are the ones saved (so the in-process recording is what Jupyter shows)."""
    from nbclient import NotebookClient

    monkeypatch.chdir(tmp_path)
    saved = nbformat.reads(text, as_version=4)
    ran = nbformat.reads(text, as_version=4)
    NotebookClient(ran, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    errors = [o for cell in ran.cells for o in cell.get("outputs", [])
              if o.output_type == "error" or o.get("name") == "stderr"]  # fmt: skip
    assert errors == []
    for before, after in zip(saved.cells, ran.cells, strict=True):
        if before.cell_type == "code":
            assert after.outputs == before.outputs, before.source
