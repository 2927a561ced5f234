"""A notebook as nbformat 4.5 JSON, written the way nbformat writes it (sorted keys, one-space
indent, multi-line strings split into lines), cell ids numbered and execution counts running
1, 2, …, so that the same cells and outputs give the same bytes (`derive.render.notebook` lays
out the cells)."""

import json
from dataclasses import dataclass

__all__ = ["Cell", "to_ipynb"]


@dataclass(frozen=True)
class Cell:
    """A notebook cell: ``"markdown"`` or ``"code"``, and its source."""

    kind: str
    source: str


def _lines(text: str) -> list[str]:
    return text.splitlines(True)


def _output(output: dict) -> dict:
    """An output with its multi-line strings split into lines, as nbformat writes them."""
    output = dict(output)
    if output["output_type"] == "stream":
        output["text"] = _lines(output["text"])
    elif "data" in output:
        output["data"] = {
            mime: _lines(value) if mime.startswith("text/") or mime == "image/svg+xml" else value
            for mime, value in output["data"].items()
        }
    return output


def to_ipynb(cells: list[Cell], outputs: list[list[dict]]) -> str:
    """The notebook as nbformat 4.5 JSON; `outputs` holds each cell's outputs (empty for
    Markdown cells), each output as nbformat has it (``output_type``, ``data``, …)."""
    written, count = [], 0
    for index, (cell, produced) in enumerate(zip(cells, outputs, strict=True), 1):
        entry = {
            "cell_type": cell.kind,
            "id": f"cell-{index:03d}",
            "metadata": {},
            "source": _lines(cell.source),
        }
        if cell.kind == "code":
            count += 1
            entry |= {"execution_count": count, "outputs": [_output(o) for o in produced]}
        written.append(entry)
    notebook = {
        "cells": written,
        "metadata": {
            "kernelspec": {
                "display_name": "Python 3 (ipykernel)",
                "language": "python",
                "name": "python3",
            },
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return (
        json.dumps(notebook, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False)
        + "\n"
    )
