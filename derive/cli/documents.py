"""`derive latex|markdown|pdf|html|notebook`: render a document (nothing written yet), then write
it and its figures.

`render` turns options into the bytes of a document plus its figures; `run` executes a parsed
command line. The five commands share one parser, built by `add`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..render import DocumentOptions, html_document, latex_document, markdown_document
from .errors import EnvironmentProblem, UsageError
from .files import check_folder, check_output, write, write_files, write_stdout
from .parsing import (
    DEFAULT_SIZES,
    PROG,
    add_sizes,
    add_variant,
    entry_of,
    given_sizes,
    model_layer,
)

__all__ = [
    "COMMANDS",
    "add",
    "run",
    "render",
    "figure_files",
    "compile_pdf",
    "example_for",
    "notebook",
]

#: The commands whose figures are inline SVG: their --figures takes no folder.
INLINE_FIGURES = ("html", "notebook")

#: Each document command: its help, and its examples.
COMMANDS = {
    "latex": (
        "the derivation as LaTeX (standalone document, or --fragment)",
        "examples:\n  derive latex -o derivation.tex\n"
        "  derive latex --fragment --n 3 --d 4 --c 2 > body.tex\n"
        "  derive latex -o d.tex --variant rope --n 3 --d 4 --c 4 --figures figures",
    ),
    "markdown": (
        "the derivation as GitHub Markdown with $$ math",
        "examples:\n  derive markdown -o derivation.md\n"
        "  derive markdown --n 3 --d 4 --c 2 --example --figures figures "
        "-o derivation.md",
    ),
    "pdf": (
        "the derivation compiled to PDF with pdflatex",
        "examples:\n  derive pdf -o derivation.pdf\n"
        "  derive pdf -o derivation.pdf --n 3 --d 4 --c 2 --example --figures figures",
    ),
    "html": (
        "the derivation as one self-contained HTML page (KaTeX inlined, no network)",
        "examples:\n  derive html -o derivation.html\n"
        "  derive html -o derivation.html --n 3 --d 4 --c 2 --example --figures",
    ),
    "notebook": (
        "the derivation as a Jupyter notebook, saved with its outputs (needs torch)",
        "examples:\n  derive notebook -o derivation.ipynb\n"
        "  derive notebook -o derivation.ipynb --n 3 --d 4 --c 2 --example --figures",
    ),
}

Progress = Callable[..., None]


def _quiet(message: str, *, always: bool = False) -> None:
    """A progress callback that says nothing."""


def add(commands, argparse) -> None:
    """The five document commands, built alike."""
    for name, (text, epilog) in COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=text,
            description=text,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
        sub.add_argument(
            "-o",
            "--output",
            metavar="FILE",
            help="write here (default: stdout; on a terminal, a file named after the variant)",
        )
        sub.add_argument(
            "--strict",
            action="store_true",
            help="refuse a claim SymPy could not prove (exit 2, nothing written) "
            "instead of marking it unproved in the document",
        )
        if name == "latex":
            sub.add_argument("--fragment", action="store_true", help="the body only, to \\input")
        add_sizes(
            sub, "explicit mode: {meaning} ({letter} = {default} when only other sizes are given)"
        )
        sub.add_argument(
            "--example",
            action="store_true",
            help="the worked example 'the fat cat sat on the mat' (needs torch): its first N "
            "tokens at widths D and C when sizes are given, else all 7 at D=4, C=3",
        )
        if name in INLINE_FIGURES:
            sub.add_argument(
                "--figures",
                action="store_const",
                const=".",
                help="include the figures, drawn inline as SVG (no files, no matplotlib)",
            )
        else:
            sub.add_argument(
                "--figures",
                metavar="DIR",
                help="draw the figures into DIR and include them (needs matplotlib)",
            )
        add_variant(sub, "the derivation")


def example_for(options: DocumentOptions):
    """The worked example the options ask for (`derive.bridge.example.example_for`)."""
    if not options.example:
        return None
    try:
        from ..bridge.example import example_for as computed
    except ImportError as error:  # pragma: no cover - torch is a dependency
        raise EnvironmentProblem(f"the worked example needs torch ({error})") from None
    return computed(options)


def figure_files(options: DocumentOptions, example) -> dict[str, bytes]:
    """The figure files by their path relative to the document (``figures/x.png``)."""
    if options.figures is None:
        return {}
    from ..render import figures

    try:
        files: dict[str, bytes] = {}
        for name in options.entry.document.figures:
            files |= figures.FIGURES[name]()
        if example is not None:
            files |= figures.heatmap_figure(example.tokens, example.values.floats("A"))
    except (ImportError, RuntimeError) as error:
        raise EnvironmentProblem(str(error) or figures.missing_matplotlib_message()) from None
    folder = options.figures.rstrip("/")
    return {f"{folder}/{name}": data for name, data in files.items()}


def compile_pdf(tex: str, figures: dict[str, bytes]) -> bytes:
    from ..render import pdf

    pictures = {name: data for name, data in figures.items() if name.endswith(".png")}
    try:
        return pdf.compile_pdf(tex, pictures)
    except (pdf.EngineMissing, pdf.CompileError) as error:
        raise EnvironmentProblem(str(error)) from None


def notebook(options: DocumentOptions, progress: Progress = _quiet) -> bytes:
    """The notebook for `options`, its code cells run in this process (outputs saved)."""
    from ..render.notebook import notebook_cells, to_ipynb

    try:
        from ..bridge.notebook import run_cells
    except ImportError as error:  # pragma: no cover - torch is a dependency
        raise EnvironmentProblem(f"the notebook's cells need torch ({error})") from None
    cells = notebook_cells(options, example=example_for(options))
    outputs = run_cells(cells)
    progress("ran the notebook's cells")
    return to_ipynb(cells, outputs).encode("utf-8")


def render(
    kind: str, options: DocumentOptions, *, fragment: bool = False, progress: Progress = _quiet
) -> tuple[bytes, dict[str, bytes]]:
    """The document (`kind`: latex, markdown, pdf, html or notebook) and its figure files (none
    for html and notebook, whose figures are inline SVG), as bytes."""
    if kind == "notebook":
        return notebook(options, progress), {}
    example = example_for(options)
    if example is not None:
        progress("computed the worked example with torch and SymPy")
    if kind == "html":
        page = html_document(options, example=example, progress=progress)
        progress("printed the page")
        return page.encode("utf-8"), {}
    figures = figure_files(options, example)
    if figures:
        progress("drew the figures")
    if kind == "markdown":
        text = markdown_document(options, example=example, progress=progress)
        return text.encode("utf-8"), figures
    tex = latex_document(
        options, fragment=fragment and kind == "latex", example=example, progress=progress
    )
    progress("printed the document")
    if kind == "latex":
        return tex.encode("utf-8"), figures
    pdf = compile_pdf(tex, figures)
    progress("compiled it with pdflatex", always=True)
    return pdf, figures


#: The file a document goes to without -o on a terminal: named after its variant.
_SUFFIXES = {
    "latex": ".tex",
    "markdown": ".md",
    "html": ".html",
    "notebook": ".ipynb",
    "pdf": ".pdf",
}


def _unused(variant: str, command: str) -> Path:
    """``causal.html`` in the working folder, or ``causal.1.html``, … where it is taken: a file
    the user did not name is never written over."""
    stem = variant.rpartition(":")[2].replace("/", "-") or "derivation"
    suffix = _SUFFIXES[command]
    path, count = Path(stem + suffix), 0
    while path.exists():
        count += 1
        path = Path(f"{stem}.{count}{suffix}")
    return path


def _options(args, progress: Progress | None = None) -> DocumentOptions:
    layer = model_layer(args, progress)
    name = entry_of(args, layer)
    given = {letter: getattr(args, letter) for letter in "ndc"}
    sizes: tuple[int, int, int] | None = None
    if any(value is not None for value in given.values()):
        n, d, c = (given[k] if given[k] is not None else DEFAULT_SIZES[k] for k in "ndc")
        sizes = (n, d, c)
    if args.example and sizes is not None and sizes[0] > 7:
        raise UsageError(
            f"{PROG} {args.command}: the worked example's sentence has 7 tokens, so --example "
            f"takes --n up to 7, got --n {sizes[0]}"
        )
    figures = None
    if args.figures is not None and args.command in INLINE_FIGURES:
        figures = "figures"  # only named: the figures are drawn into the document itself
    elif args.figures is not None:
        base = Path(args.output).parent if args.output else Path(".")
        figures = Path(os.path.relpath(Path(args.figures), base)).as_posix()
    try:
        return DocumentOptions(
            sizes=sizes,
            heads=args.heads if layer is None else layer.heads,
            example=args.example,
            figures=figures,
            variant=name,
            extra=tuple(((dict(layer.values) if layer else {}) | given_sizes(args)).items()),
            source="" if layer is None else layer.where(),
        )
    except ValueError as error:
        raise UsageError(f"{PROG} {args.command}: {error}") from None


def run(args, progress: Progress) -> int:
    """`derive latex|markdown|pdf|html|notebook`: render, then write the document and its
    figures."""
    check_output(args.output)
    if args.figures is not None and args.command not in INLINE_FIGURES:  # before any work
        check_folder(args.figures, "--figures")
    options = _options(args, progress)
    if args.output is None and os.isatty(1):  # a page is not for a terminal: a file, named
        args.output = str(_unused(options.variant or "derivation", args.command))
        progress(f"no -o on a terminal: writing {args.output}", always=True)
    if args.command == "pdf":
        from ..render import pdf

        try:
            pdf.require_engine()
        except pdf.EngineMissing as error:
            raise EnvironmentProblem(str(error)) from None
    data, figures = render(
        args.command, options, fragment=getattr(args, "fragment", False), progress=progress
    )
    if figures:
        write_files(Path(args.output).parent if args.output else Path("."), figures)
    if args.output is None:
        write_stdout(data)
    else:
        write(Path(args.output), data)
    return 0
