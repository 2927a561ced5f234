"""What the `derive` subcommands do, separate from parsing: render documents and write them.

`render` turns options into the bytes of a document plus its figures (nothing written yet);
`generate_docs` renders the files under docs/ (the drift test compares them with the committed
ones); `run` executes a parsed command line, writing every file atomically.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from ._atomic import atomic_write
from ._documents import DocumentOptions, latex_document, markdown_document
from ._errors import EnvironmentProblem, UsageError
from ._figures import missing_matplotlib_message

__all__ = ["DOCS_OPTIONS", "render", "generate_docs", "write_files", "run"]

#: What docs/derivation.* contain: the seed's derivation, explicit at n=3, d=4, c=2, the worked
#: example and the figures (in docs/figures).
DOCS_OPTIONS = DocumentOptions(sizes=(3, 4, 2), example=True, figures="figures")

Progress = Callable[..., None]


def _quiet(message: str, *, always: bool = False) -> None:
    """A progress callback that says nothing."""


def _example(options: DocumentOptions, progress: Progress):
    if not options.example:
        return None
    progress("computing the worked example with torch", always=False)
    try:
        from ._example import worked_example

        return worked_example(causal=options.causal)
    except ImportError as error:
        raise EnvironmentProblem(
            f"the worked example needs torch and attention ({error}); "
            "pip install 'attention-derive' with torch"
        ) from None


def _figures(options: DocumentOptions, example, progress: Progress) -> dict[str, bytes]:
    """The figure files by their path relative to the document (``figures/x.png``)."""
    if options.figures is None:
        return {}
    progress("drawing the figures")
    try:
        from . import _figures
    except ImportError:  # pragma: no cover - numpy is a dependency
        raise EnvironmentProblem(missing_matplotlib_message()) from None
    try:
        files = _figures.saturation_figure()
        if example is not None:
            weights = example.values.floats("A")
            files |= _figures.heatmap_figure(example.tokens, weights)
    except (ImportError, RuntimeError) as error:
        raise EnvironmentProblem(str(error) or missing_matplotlib_message()) from None
    folder = options.figures.rstrip("/")
    return {f"{folder}/{name}": data for name, data in files.items()}


def render(
    kind: str, options: DocumentOptions, *, fragment: bool = False, progress: Progress = _quiet
) -> tuple[bytes, dict[str, bytes]]:
    """The document (`kind`: latex, markdown or pdf) and its figures, as bytes."""
    example = _example(options, progress)
    figures = _figures(options, example, progress)
    if kind == "markdown":
        text = markdown_document(options, example=example, progress=progress)
        return text.encode("utf-8"), figures
    tex = latex_document(
        options, fragment=fragment and kind == "latex", example=example, progress=progress
    )
    if kind == "latex":
        return tex.encode("utf-8"), figures
    from . import _pdf

    progress("compiling with pdflatex", always=True)
    pictures = {name: data for name, data in figures.items() if name.endswith(".png")}
    try:
        return _pdf.compile_pdf(tex, pictures), figures
    except (_pdf.EngineMissing, _pdf.CompileError) as error:
        raise EnvironmentProblem(str(error)) from None


def generate_docs(*, pdf: bool = True, progress: Progress = _quiet) -> dict[str, bytes]:
    """Every generated file under docs/, by path relative to docs/ (deterministic)."""
    from ._example import worked_example

    example = worked_example(causal=DOCS_OPTIONS.causal)
    figures = _figures(DOCS_OPTIONS, example, progress)
    tex = latex_document(DOCS_OPTIONS, example=example, progress=progress)
    from ._glossary import glossary_markdown

    files = {
        "glossary.md": glossary_markdown().encode("utf-8"),
        "derivation.tex": tex.encode("utf-8"),
        "derivation.md": markdown_document(DOCS_OPTIONS, example=example).encode("utf-8"),
        **figures,
    }
    if pdf:
        from . import _pdf

        progress("compiling docs/derivation.pdf with pdflatex", always=True)
        pictures = {name: data for name, data in figures.items() if name.endswith(".png")}
        files["derivation.pdf"] = _pdf.compile_pdf(tex, pictures)
    return files


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """Write each file under `root`, atomically, creating folders as needed."""
    for name, data in files.items():
        target = root / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"derive: cannot create {target.parent}: {error.strerror}") from None
        _write(target, data)


def _write(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as error:
        raise UsageError(f"derive: cannot write {path}: {error.strerror or error}") from None


def _options(args) -> DocumentOptions:
    given = {letter: getattr(args, letter) for letter in "ndc"}
    sizes = None
    if any(value is not None for value in given.values()):
        from .cli import DEFAULT_SIZES

        sizes = tuple(
            given[letter] if given[letter] is not None else DEFAULT_SIZES[letter]
            for letter in "ndc"
        )
        if sizes[2] % args.heads:
            raise UsageError(
                f"derive {args.command}: --heads {args.heads} does not divide --c {sizes[2]} "
                "(each head gets c / heads columns)"
            )
    figures = None
    if args.figures is not None:
        base = Path(args.output).parent if args.output else Path(".")
        figures = Path(os.path.relpath(Path(args.figures), base)).as_posix()
    return DocumentOptions(
        sizes=sizes, causal=args.causal, heads=args.heads, example=args.example, figures=figures
    )


def run(args, progress: Progress, check_output: Callable[[str | None], None]) -> int:
    """Execute a parsed command line; returns the exit status."""
    if args.command == "docs":
        root = Path(args.out)
        check_output(str(root / "derivation.tex"))
        from . import _pdf

        try:
            files = generate_docs(progress=progress)
        except (_pdf.EngineMissing, _pdf.CompileError, ImportError) as error:
            raise EnvironmentProblem(str(error)) from None
        write_files(root, files)
        progress(f"wrote {len(files)} files under {root}", always=True)
        return 0
    check_output(args.output)
    if args.command == "pdf" and args.output is None and sys.stdout.isatty():
        raise UsageError("derive pdf: refusing to write a PDF to a terminal; use -o FILE")
    options = _options(args)
    data, figures = render(
        args.command, options, fragment=getattr(args, "fragment", False), progress=progress
    )
    if figures:
        base = Path(args.output).parent if args.output else Path(".")
        write_files(base, figures)
    if args.output is None:
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        except OSError as error:  # a full disk, a closed pipe
            raise UsageError(
                f"derive: cannot write to standard output: {error.strerror or error}"
            ) from None
    else:
        _write(Path(args.output), data)
    return 0
