"""Running a notebook's code cells in this process, to save the notebook with its outputs.

No Jupyter kernel is needed to generate a notebook: each code cell runs here, in one namespace,
the way IPython runs it (the value of a last expression statement is the cell's result, what it
prints is a stream, ``display(x)`` shows x), and each shown object is recorded as IPython's
display formatter records it: ``text/plain`` its ``repr``, and one entry per ``_repr_*_`` method
that returns something (``text/latex``, ``image/svg+xml``, …). A test runs the same notebook in
a real kernel (nbclient, ipykernel) and compares the outputs.

The cells import torch (the worked example, the check), hence this module's place in `bridge`.
`without_column` is for a cell: it drops a column of a plain-text table (the check's largest
differences, which depend on the machine's floating-point kernels) from what the cell prints.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re

__all__ = ["run_cells", "mimebundle", "without_column"]

#: The rich representations IPython's display formatter asks for, by method.
_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)


def mimebundle(value: object) -> dict[str, object]:
    """What a kernel shows of `value`: its ``repr`` and each rich representation it has.

    Raises ValueError for a representation that would differ from run to run (an address)."""
    plain = repr(value)
    bundle: dict[str, object] = {"text/plain": plain}
    for method, mime in _METHODS:
        shown = getattr(value, method, None)
        if callable(shown) and (data := shown()) is not None:
            bundle[mime] = data
    if re.search(r" at 0x[0-9a-f]+", plain):
        raise ValueError(f"{type(value).__name__} shows a memory address; it cannot be saved")
    return bundle


def _run(source: str, namespace: dict, count: int) -> object:
    """Execute a cell; return the value of its last expression statement (or None)."""
    tree = ast.parse(source)
    last = None
    if tree.body and isinstance(final := tree.body[-1], ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    exec(compile(tree, f"<cell {count}>", "exec"), namespace)  # noqa: S102 - our own cells
    return None if last is None else eval(compile(last, f"<cell {count}>", "eval"), namespace)


def run_cells(cells: list) -> list[list[dict]]:
    """The outputs of each cell (`derive.render.notebook.Cell`), code cells run in order in one
    fresh namespace; execution counts 1, 2, … . An exception in a cell propagates."""
    namespace: dict = {"__name__": "__main__"}
    outputs: list[list[dict]] = []
    count = 0
    for cell in cells:
        if cell.kind != "code":
            outputs.append([])
            continue
        count += 1
        produced: list[dict] = []
        stream = io.StringIO()

        def flush(stream: io.StringIO = stream, produced: list[dict] = produced) -> None:
            text = stream.getvalue()
            if text:
                produced.append({"name": "stdout", "output_type": "stream", "text": text})
                stream.seek(0)
                stream.truncate()

        def display(*values: object, flush=flush, produced=produced) -> None:
            for value in values:
                flush()
                produced.append(
                    {"data": mimebundle(value), "metadata": {}, "output_type": "display_data"}
                )

        namespace["display"] = display
        with contextlib.redirect_stdout(stream):
            value = _run(cell.source, namespace, count)
        flush()
        if value is not None:
            produced.append(
                {
                    "data": mimebundle(value),
                    "execution_count": count,
                    "metadata": {},
                    "output_type": "execute_result",
                }
            )
        outputs.append(produced)
    return outputs


def _column(line: str, header: str) -> tuple[int, int | None] | None:
    """Where the column `header` of a header line runs, with one separator, as a slice; None
    when the line has no such column."""
    at = line.find(f"  {header}")
    if at < 0:
        return None
    end = at + 2 + len(header)
    following = end + len(line[end:]) - len(line[end:].lstrip(" "))
    if not line[following:].strip():  # the last column: it and the separator before it
        return at, None
    return at + 2, following


def without_column(text: str, header: str) -> str:
    """`text` with the column named `header` taken out of each plain-text table in it (as
    `derive check` prints them: a header line, then rows indented by two spaces, each cell
    padded to its column's width); the other lines stay as they are.

    Raises ValueError when no line of `text` has that column.

    Example:
        >>> print(without_column("  step  max  result\\n  Q     0    pass\\ndone", "max"))
          step  result
          Q     pass
        done
    """
    lines, span, found = [], None, False
    for line in text.splitlines(True):
        if (header_span := _column(line, header)) is not None:
            span, found = header_span, True
        elif span is None or not line.startswith("  ") or line.startswith("  ("):
            span = None  # not a row (a trial's line, a note, the verdict): the table ended
            lines.append(line)
            continue
        begin, end = span
        newline = "\n" if line.endswith("\n") else ""
        kept = line[:begin] + ("" if end is None else line.removesuffix("\n")[end:])
        lines.append(kept.rstrip() + newline)
    if not found:
        raise ValueError(f"no column {header!r} in the table")
    return "".join(lines)
