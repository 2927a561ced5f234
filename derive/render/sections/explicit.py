"""The explicit section (concrete sizes) and the worked example of a document."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import sympy as sp

from ...explicit.display import explicit_lines, matrix_line, shares_row_sums
from ...explicit.forward import ExplicitGraph
from ...graph.registry import ROOT
from ...notation import latex
from ...notation import letters as L
from .. import prose as P
from ..blocks import Block, Display, Figure, Heading, Prose, Table, derived, numeric
from .entries import Numbers, matrices, states

__all__ = ["explicit", "example", "example_numbers"]


def _sizes(ea: ExplicitGraph) -> str:
    """``$n = 3$, $d = 4$, $c = 2$`` and the graph's other sizes and parameters (heads, a
    window, RoPE's base)."""
    shown = [
        f"${latex(symbol)} = {value}$"
        for symbol, value in ea.sizes.items()
        if symbol not in (L.h, L.c_h)
    ]
    text = ", ".join(shown)
    if ea.heads > 1:
        text += f", $h = {ea.heads}$ heads of width $c_h = {ea.sizes[L.c_h]}$"
    return text


def explicit(
    ea: ExplicitGraph,
    progress: Callable[[str], None] | None = None,
    numbers: Numbers | None = None,
    kept: list | None = None,
) -> list[Block]:
    """Every step at the sizes of `ea`, entry by entry, each in the named entries it reads;
    `numbers` (`example_numbers`) give the entries their values where they fit these sizes;
    `kept`, an algorithm's state block by block, follows the steps' matrices on the page."""
    sizes = _sizes(ea)
    inputs = tuple(matrix_line(L.MATRIX_LATEX[k], v) for k, v in ea.inputs.items())
    grid = matrices(ea, numbers)
    if kept:
        grid = replace(grid, matrices=(*grid.matrices, *states(kept)))
    blocks: list[Block] = [
        Heading(f"Explicit: {sizes}"),
        Prose(P.EXPLICIT_INTRO + (P.EXPLICIT_STATES if kept else "")),
        grid,
        Display(
            inputs, derived("the named entries of the inputs at these sizes"), P.EXPLICIT_DETAIL
        ),
    ]
    how = "the declaration at these sizes and indices, its sums written out"
    for index, step in enumerate(ea.steps, 1):
        head = f" (head {step.head})" if step.head is not None else ""
        blocks.append(Heading(f"{step.step.title}{head}", 2))
        if shares_row_sums(step):
            blocks.append(Prose(P.EXPLICIT_ROW_SUM))
        lines = tuple(explicit_lines(step))
        blocks.append(Display(lines, derived(how, step.step.output), P.EXPLICIT_DETAIL))
        if progress is not None:
            progress(f"printed explicit step {index}/{len(ea.steps)}: {step.output}")
    return blocks


def example_numbers(worked) -> Numbers:
    """The worked example's inputs and the value of every step, by matrix key, as floats."""
    numbers = {name: [list(row) for row in rows] for name, rows in worked.inputs.items()}
    return numbers | {key: worked.values.floats(key) for key in worked.values}


def _rounded(rows: list[list[float]] | sp.MatrixBase, digits: int = 4) -> sp.Matrix:
    """A matrix of SymPy Floats rounded to `digits` decimals, for printing."""
    numbers = rows if isinstance(rows, list) else rows.tolist()
    return sp.Matrix([[sp.Float(f"{float(v):.{digits}f}") for v in row] for row in numbers])


def _of(worked) -> str:
    """The entry of a worked example, where it is not self-attention: ``, causal``."""
    return "" if worked.variant == ROOT else f", {worked.variant}"


def example(worked, figure: str | None) -> list[Block]:
    """The worked example: its inputs, A and C by PyTorch and by SymPy, the heatmap."""
    tokens = worked.tokens
    n = len(tokens)
    sizes = f"$n = {n}$, $d = {worked.d}$, $c = {worked.c}$"
    shared = "".join(
        P.EXAMPLE_SHARED.format(token=token)
        for token in dict.fromkeys(tokens)
        if tokens.count(token) == 2
    )
    seeded = tuple(
        f"{L.MATRIX_LATEX[name]} &= {latex(_rounded(worked.inputs[name]), decimals=4)}"
        for name in ("X", "W_q", "W_k", "W_v")
    )
    blocks: list[Block] = [
        Heading("Worked example: " + " ".join(tokens)),
        Prose(P.EXAMPLE_INTRO.format(shared=shared) + f" Sizes: {sizes}" + _of(worked) + "."),
        Display(seeded, numeric("seeded embeddings and weights, drawn by torch")),
    ]
    header = ("", *(f"{token} ({p + 1})" for p, token in enumerate(tokens)))
    symbolic = worked.values.floats("A")
    for label, matrix in (("PyTorch", worked.torch_a), ("SymPy", symbolic)):
        blocks.append(Prose(f"Attention weights $A$ computed by {label} (rows: queries):"))
        rows = tuple(
            (f"{tokens[m]} ({m + 1})", *(f"{matrix[m][p]:.3f}" for p in range(n))) for m in range(n)
        )
        blocks.append(Table(header, rows))
    lines = (
        rf"C_{{\text{{PyTorch}}}} &= {latex(_rounded(worked.torch_c), decimals=4)}",
        rf"C_{{\text{{SymPy}}}} &= {latex(_rounded(worked.values.C), decimals=4)}",
    )
    blocks.append(
        Display(
            lines,
            numeric(
                f"{worked.twin} (PyTorch), and the declarations evaluated by SymPy to 30 digits"
            ),
        )
    )
    blocks.append(Prose(P.EXAMPLE_AGREEMENT.format(tolerance="$10^{-12}$")))
    if figure is not None:
        blocks.append(Figure(figure, P.HEATMAP_CAPTION, width=0.45))  # n × n squares: small
    return blocks
