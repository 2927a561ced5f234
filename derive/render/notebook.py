r"""The derivation as a Jupyter notebook: the Markdown document in cells, with code cells that
build its objects with `derive` and `attention` and show them.

`notebook_cells` lays out the blocks of the document (`document_blocks`, the same options) as
Markdown cells, each block printed by the Markdown document's own renderer, a new cell at each
heading: every heading, paragraph, display and table of ``derive markdown``, in its order. A
figure is drawn by a code cell (inline SVG) where the document has its image. A code cell
follows the display that shows its object, found by the object's own lines (a step's matrix
form, a fact's derivation, a gradient's matrix form, the FLOP count), or the part of a section
that shows it (each explicit step, the worked example's tables, its C, its agreement); the
first cell that uses a name (``steps``, ``facts``, ``example``, …) defines it. The check, which
the documents leave to the command, ends the notebook.

`derive.bridge.notebook` runs the code cells (in-process: they import torch), `to_ipynb` writes
the notebook. No output depends on the machine: every seed is fixed, and the check's table is
saved without its column of largest differences (the CPU's floating-point kernels).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ..calculus import flop_count, steps
from ..explicit.checked import checked_backward
from ..graph.loading import spec_of
from ..graph.registry import ROOT
from ..graph.twins import Twin
from ..notation import latex
from ..notation.lines import equation
from ..proofs.claims import prove
from . import prose as P
from .blocks import Block, Display, Figure, Heading, Matrices, Prose, Table, markdown_block
from .documents import HEATMAP, DocumentOptions, document_blocks, document_title, figure_path
from .ipynb import Cell, to_ipynb
from .sections import explicit as E
from .sections.common import fact_lines

__all__ = ["Cell", "notebook_cells", "to_ipynb"]

#: The arguments of `derive check` at the notebook's sizes: the seed is fixed.
CHECK_SEED = 0
#: The column of the check's table that depends on the machine, left out of the saved output.
MACHINE_COLUMN = "max |difference|"


@dataclass(frozen=True)
class _Code:
    """A code cell before it is placed: the names it uses (defined by the first cell that uses
    each) and its own lines."""

    uses: tuple[str, ...]
    lines: tuple[str, ...]


def _command(options: DocumentOptions) -> str:
    words = ["derive notebook"]
    if options.sizes is not None:
        words += [f"--{k} {v}" for k, v in zip("ndc", options.sizes, strict=True)]
    words += ["--causal"] * options.causal + [f"--heads {options.heads}"] * (options.heads > 1)
    words += ["--example"] * options.example + ["--figures"] * (options.figures is not None)
    if options.variant is not None:
        words += [f"--variant {options.variant}"]
        words += [f"--{k.replace('_', '-')} {v}" for k, v in options.extra]
    return " ".join(words)


def _name(entry) -> str:
    """How a cell names the entry: nothing for self-attention (the default), else its name."""
    return "" if entry.name == ROOT else repr(entry.name)


def _definitions(options: DocumentOptions) -> dict[str, tuple[str, ...]]:
    """What defines each name the code cells use: imports first, then assignments."""
    entry, name = options.entry, _name(options.entry)
    loads = tuple(
        f"derive.load_variant({spec!r})"
        for spec in (spec_of(part.name) for part in entry.chain)
        if spec
    )
    sizes = "" if options.sizes is None else "n={}, d={}, c={}, ".format(*options.sizes)
    given = "".join(f", {k}={v}" for k, v in options.given.items())
    explicit = f"derive.explicit_variant({entry.name!r}, {sizes.removesuffix(', ')}{given})"
    return {
        "derive": ("import derive", *loads),
        "svg": ("from derive.render import svg",),
        "steps": (f"steps = derive.steps({name})",),
        "facts": (f"facts = derive.facts({name})",),
        "gradients": (f"gradients = derive.backward_steps({name})",),
        "explicit": (f"explicit = {explicit}",),
        "example": (
            "from derive.bridge.example import worked_example",
            f"example = worked_example({sizes}variant_name={entry.name!r})",
        ),
    }


def _first(blocks: list[Block], found: Callable[[Block], bool], start: int = 0) -> int | None:
    return next((i for i in range(start, len(blocks)) if found(blocks[i])), None)


def _holding(line: str) -> Callable[[tuple[str, ...]], bool]:
    """Lines among which is `line`."""
    return lambda lines: line in lines


def _display(test: Callable[[tuple[str, ...]], bool]) -> Callable[[Block], bool]:
    """A display whose lines pass `test`."""
    return lambda block: isinstance(block, Display) and test(block.lines)


def _symbolic(options: DocumentOptions, blocks: list[Block]) -> list[tuple[int, _Code]]:
    """Each step, fact, gradient and the FLOP count, after the display that shows it (a step:
    its matrix form; a fact: its derivation; a gradient: its matrix form)."""
    entry = options.entry
    graph = entry.graph
    shown: list[tuple[Callable[[tuple[str, ...]], bool], _Code]] = []
    for k, step in enumerate(steps(graph)):
        line = equation(step.matrix if step.matrix is not None else step.element)
        shown.append((_holding(line), _Code(("derive", "steps"), (f"steps[{k}]",))))
    for k, (claim, stage) in enumerate(entry.claims):
        lines = fact_lines(prove(stage.graph, claim, stage.before))
        shown.append((lines.__eq__, _Code(("derive", "facts"), (f"facts[{k}]",))))
    flops = latex(flop_count(graph))
    shown.append(
        (
            lambda lines: any(line.endswith(flops) for line in lines),
            _Code(
                ("derive",), (f"derive.calculus.flop_count(derive.variant({entry.name!r}).graph)",)
            ),
        )
    )
    for k, gradient in enumerate(checked_backward(entry)):
        shown.append(
            (
                _holding(equation(gradient.matrix)),
                _Code(("derive", "gradients"), (f"gradients[{k}]",)),
            )
        )
    placed = [(_first(blocks, _display(test)), code) for test, code in shown]
    return [(index, code) for index, code in placed if index is not None]


def _section_end(blocks: list[Block], start: int) -> int:
    """The index of the next heading of a section (level 1) after `start`, or the end."""
    found = _first(blocks, lambda b: isinstance(b, Heading) and b.level == 1, start + 1)
    return len(blocks) if found is None else found


def _explicit(blocks: list[Block]) -> list[tuple[int, _Code]]:
    """Each explicit step at the end of its part of the explicit section."""
    intro = _first(blocks, lambda block: block == Prose(P.EXPLICIT_INTRO))
    if intro is None:
        return []
    end = _section_end(blocks, intro)
    parts = [i for i in range(intro, end) if isinstance(blocks[i], Heading)] + [end]
    return [
        (after - 1, _Code(("derive", "explicit"), (f"explicit.steps[{k}]",)))
        for k, after in enumerate(parts[1:])
    ]


def _example(
    options: DocumentOptions, blocks: list[Block], example
) -> list[tuple[int, Cell | _Code]]:
    """The worked example computed, its C by PyTorch, the two compared: after the tables of A,
    after the display of C, after the words on their agreement."""
    if example is None:
        return []
    figure = figure_path(options, HEATMAP) if options.figures is not None else None
    section = E.example(example, figure)
    start = _first(blocks, lambda block: block == section[0])
    if start is None:
        return []

    def last(kind: type) -> int:
        return start + max(i for i, block in enumerate(section) if isinstance(block, kind))

    entry = options.entry
    twin = next(t for t in entry.twins if isinstance(t, Twin) and not t.incremental)
    module, _, function = str(twin.function).rpartition(".")
    keywords = "".join(f", {k}={v!r}" for k, v in entry.options.items() if not isinstance(v, str))
    arguments = ", ".join(f"inputs[{a!r}]" for a in twin.arguments)
    return [
        (
            last(Table),
            _Code(
                ("derive", "example"),
                ("example.values.A.evalf(4)  # every step's value: example.values",),
            ),
        ),
        (
            last(Display),
            Cell(
                "markdown",
                "The context vectors again, by the PyTorch "
                f"implementation (`{twin.function}`), from the same inputs:",
            ),
        ),
        (
            last(Display),
            _Code(
                ("example",),
                (
                    "import torch",
                    "",
                    f"from {module} import {function}",
                    "",
                    "inputs = {name: torch.tensor(rows, dtype=torch.float64)",
                    "          for name, rows in example.inputs.items()}",
                    f"C = {function}({arguments}{keywords})",
                    "C",
                ),
            ),
        ),
        (
            last(Prose),
            _Code(
                ("example",),
                (
                    'symbolic = torch.tensor(example.values.floats("C"), dtype=torch.float64)',
                    "torch.allclose(C, symbolic, rtol=0, atol=1e-12)",
                ),
            ),
        ),
    ]


def _together(first: _Code, then: _Code) -> _Code:
    """One cell for two objects shown by one display: the first shown by ``display``."""
    *lines, last = first.lines
    return _Code(
        tuple(dict.fromkeys(first.uses + then.uses)), (*lines, f"display({last})", *then.lines)
    )


def _figure(figure: Figure) -> _Code:
    """The figure drawn inline, where the document shows its image."""
    name = figure.path.rpartition("/")[2].removesuffix(".png")
    if name == HEATMAP:
        drawn = 'svg.heatmap(example.tokens, example.values.floats("A"))'
        return _Code(("svg", "example"), (drawn,))
    return _Code(("svg",), (f"svg.figure({name!r})",))


def _check(options: DocumentOptions) -> list[Cell | _Code]:
    n, d, c = options.sizes or (3, 4, 2)
    argv = ["check", "--seed", str(CHECK_SEED), "--n", str(n), "--d", str(d), "--c", str(c)]
    argv += ["--variant", options.entry.name]
    argv += [f"--{k.replace('_', '-')} {v}" for k, v in options.given.items() if k != "h"] + (
        ["--heads", str(options.heads)] if options.heads > 1 else []
    )
    return [
        Cell(
            "markdown",
            "## Checking the derivation against PyTorch\n\n"
            + markdown_block(Prose(P.NOTEBOOK_CHECK_TABLE)),
        ),
        _Code(
            (),
            (
                "import contextlib",
                "import io",
                "",
                "import derive.cli",
                "from derive.bridge.notebook import without_column",
                "",
                f"argv = {' '.join(argv)!r}.split()",
                "output = io.StringIO()",
                "with contextlib.redirect_stdout(output):",
                "    status = derive.cli.main(argv)",
                f"print(without_column(output.getvalue(), {MACHINE_COLUMN!r}), end='')",
                "status",
            ),
        ),
    ]


class _Cells:
    """The cells so far: Markdown parts gathered into one cell until a heading or a code cell;
    each name a code cell uses defined by the first that uses it."""

    def __init__(self, options: DocumentOptions) -> None:
        self.cells: list[Cell] = []
        self.parts: list[str] = []
        self.definitions = _definitions(options)
        self.defined: set[str] = set()

    def flush(self) -> None:
        if self.parts:
            self.cells.append(Cell("markdown", "\n\n".join(self.parts)))
            self.parts = []

    def add(self, item: Cell | _Code) -> None:
        self.flush()
        if isinstance(item, Cell):
            self.cells.append(item)
            return
        new = [name for name in item.uses if name not in self.defined]
        self.defined.update(new)
        lines = [line for name in new for line in self.definitions[name]]
        imports = [line for line in lines if line.startswith(("import ", "from "))]
        assigned = [line for line in lines if line not in imports]
        groups = [imports, [*assigned, *item.lines]]
        source = "\n\n".join("\n".join(group) for group in groups if group)
        self.cells.append(Cell("code", source))


def notebook_cells(options: DocumentOptions, *, example: object = None) -> list[Cell]:
    """The cells of the notebook for `options` (as `derive notebook` takes them): the same for
    every entry of the registry. `example` is the worked example
    (`derive.bridge.example.worked_example`), which the options may ask for (as
    `document_blocks` needs it)."""
    blocks: list[Block] = [
        b for b in document_blocks(options, example=example) if not isinstance(b, Matrices)
    ]
    after: dict[int, list[Cell | _Code]] = defaultdict(list)
    for index, item in [
        *_symbolic(options, blocks),
        *_explicit(blocks),
        *_example(options, blocks, example),
    ]:
        shown = after[index]
        if shown and isinstance(shown[-1], _Code) and isinstance(item, _Code):
            shown[-1] = _together(shown[-1], item)  # one display, one cell
        else:
            shown.append(item)
    how = (
        f"Generated by `{_command(options)}`. The Markdown cells are the document that "
        "`derive markdown` prints with the same options (its figures drawn by code cells); "
        "each code cell builds the objects above it with `derive` (and `attention`, the "
        "PyTorch implementation) and shows them. The outputs are saved; edit a cell and run "
        "it again."
    )
    cells = _Cells(options)
    note = markdown_block(Prose(P.AUTHORSHIP))
    cells.add(Cell("markdown", f"# {document_title(options)}\n\n> {note}\n\n{how}"))
    for index, block in enumerate(blocks):
        if isinstance(block, Heading):
            cells.flush()
        if isinstance(block, Figure):
            cells.add(_figure(block))
            cells.parts.append(markdown_block(block).partition("\n\n")[2])  # its caption
        else:
            cells.parts.append(markdown_block(block))
        for item in after[index]:
            cells.add(item)
    for item in _check(options):
        cells.add(item)
    cells.flush()
    return cells.cells
