"""`derive latex|markdown|pdf|html|notebook|docs`: render documents (nothing written yet), then
write them.

`render` turns options into the bytes of a document plus its figures; `generate_docs` renders
the files under docs/ (the drift test compares them with the committed ones); `run_document`
and `run_docs` execute a parsed command line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..render import DocumentOptions, html_document, latex_document, markdown_document
from . import DEFAULT_SIZES, INLINE_FIGURES
from .errors import EnvironmentProblem, UsageError
from .files import check_output, write, write_files, write_stdout

__all__ = [
    "DOCS_OPTIONS", "render", "generate_docs", "run_document", "run_docs", "example_for",
    "variant_arguments",
]  # fmt: skip

#: What docs/derivation.* contain: the derivation, explicit at n = 3, d = 4, c = 2, the worked
#: example at the same sizes ("the fat cat") and the figures (in docs/figures).
DOCS_OPTIONS = DocumentOptions(sizes=(3, 4, 2), example=True, figures="figures")

Progress = Callable[..., None]


def _quiet(message: str, *, always: bool = False) -> None:
    """A progress callback that says nothing."""


def example_for(options: DocumentOptions):
    """The worked example the options ask for: the sentence's first n tokens at widths d and
    c when sizes are given (the explicit section's sizes), else the whole sentence at 4, 3."""
    if not options.example:
        return None
    try:
        from ..bridge.example import worked_example
    except ImportError as error:  # pragma: no cover - torch is a dependency
        raise EnvironmentProblem(f"the worked example needs torch ({error})") from None
    if options.sizes is None:
        return worked_example(causal=options.causal)
    n, d, c = options.sizes
    return worked_example(n=n, d=d, c=c, causal=options.causal)


def _figures(options: DocumentOptions, example) -> dict[str, bytes]:
    """The figure files by their path relative to the document (``figures/x.png``)."""
    if options.figures is None:
        return {}
    from ..graph.variants import variant
    from ..render import figures
    from ..render.documents import bounds_scores

    try:
        files = figures.saturation_figure()
        if options.variant is not None and bounds_scores(variant(options.variant)):
            files |= figures.qk_norm_figure()
        if example is not None:
            files |= figures.heatmap_figure(example.tokens, example.values.floats("A"))
    except (ImportError, RuntimeError) as error:
        raise EnvironmentProblem(str(error) or figures.missing_matplotlib_message()) from None
    folder = options.figures.rstrip("/")
    return {f"{folder}/{name}": data for name, data in files.items()}


def _compile(tex: str, figures: dict[str, bytes]) -> bytes:
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
    cells = notebook_cells(options)
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
    figures = _figures(options, example)
    if figures:
        progress("drew the figures")
    if kind == "markdown":
        text = markdown_document(options, example=example, progress=progress)
        return text.encode("utf-8"), figures
    tex = latex_document(options, fragment=fragment and kind == "latex", example=example,
                         progress=progress)  # fmt: skip
    progress("printed the document")
    if kind == "latex":
        return tex.encode("utf-8"), figures
    pdf = _compile(tex, figures)
    progress("compiled it with pdflatex", always=True)
    return pdf, figures


def generate_docs(*, pdf: bool = True, progress: Progress = _quiet) -> dict[str, bytes]:
    """Every generated file under docs/, by path relative to docs/ (deterministic)."""
    from ..render.glossary import glossary_markdown

    example = example_for(DOCS_OPTIONS)
    progress("computed the worked example")
    figures = _figures(DOCS_OPTIONS, example)
    progress("drew the figures")
    tex = latex_document(DOCS_OPTIONS, example=example, progress=progress)
    files = {
        "glossary.md": glossary_markdown().encode("utf-8"),
        "derivation.tex": tex.encode("utf-8"),
        "derivation.md": markdown_document(DOCS_OPTIONS, example=example).encode("utf-8"),
        "derivation.html": html_document(DOCS_OPTIONS, example=example).encode("utf-8"),
        **figures,
    }
    progress("printed the documents")
    files["derivation.ipynb"] = notebook(DOCS_OPTIONS, progress)
    if pdf:
        files["derivation.pdf"] = _compile(tex, figures)
        progress("compiled docs/derivation.pdf with pdflatex", always=True)
    return files


def variant_arguments(args) -> tuple[str | None, int, tuple[tuple[str, int], ...]]:
    """(the variant's name, joining repeated --variant with "+", the heads left for the
    generic derivation, the variant's own sizes given, --heads as h for a variant with
    heads)."""
    extra = tuple(
        (key.removeprefix("size_"), value)
        for key, value in sorted(vars(args).items())
        if key.startswith("size_") and value is not None
    )
    if not args.variant:
        return None, args.heads, extra
    name = "+".join(dict.fromkeys(args.variant))
    from ..graph.variants import variant

    try:
        found = variant(name)
    except ValueError as error:
        raise UsageError(f"derive {args.command}: {error}") from None
    if args.heads > 1 and found.heads:
        return found.name, 1, (*extra, ("h", args.heads))
    return found.name, args.heads, extra


def _options(args) -> DocumentOptions:
    name, heads, extra = variant_arguments(args)
    given = {letter: getattr(args, letter) for letter in "ndc"}
    sizes = None
    if any(value is not None for value in given.values()):

        sizes = tuple(
            given[letter] if given[letter] is not None else DEFAULT_SIZES[letter]
            for letter in "ndc"
        )
        if sizes[2] % args.heads:
            raise UsageError(
                f"derive {args.command}: --heads {args.heads} does not divide --c {sizes[2]} "
                "(each head gets c / heads columns)"
            )
    if args.example and args.heads > 1:
        raise UsageError(
            f"derive {args.command}: the worked example is single-head; drop --heads or --example"
        )
    if args.example and sizes is not None and sizes[0] > 7:
        raise UsageError(
            f"derive {args.command}: the worked example's sentence has 7 tokens, so --example "
            f"takes --n up to 7, got --n {sizes[0]}"
        )
    figures = None
    if args.figures is not None and args.command in INLINE_FIGURES:
        figures = "figures"  # only named: the figures are drawn into the document itself
    elif args.figures is not None:
        base = Path(args.output).parent if args.output else Path(".")
        figures = Path(os.path.relpath(Path(args.figures), base)).as_posix()
    if extra and name is None:
        from ..graph.variants import REGISTRY

        (name, _), *_ = extra
        owners = [v.name for v in REGISTRY().values() if name in {str(x) for x, _ in v.sizes}]
        option = "--" + name.replace("_", "-")
        raise UsageError(
            f"derive {args.command}: {option} is a size of {' and '.join(owners)}; "
            f"give --variant {owners[0]}"
        )
    try:
        return DocumentOptions(
            sizes=sizes, causal=args.causal, heads=heads, example=args.example,
            figures=figures, variant=name, extra=extra,
        )  # fmt: skip
    except ValueError as error:
        raise UsageError(f"derive {args.command}: {error}") from None


def run_document(args, progress: Progress) -> int:
    """`derive latex|markdown|pdf|html|notebook`: render, then write the document and its
    figures."""
    check_output(args.output)
    if args.command == "pdf" and args.output is None and os.isatty(1):
        raise UsageError("derive pdf: refusing to write a PDF to a terminal; use -o FILE")
    options = _options(args)
    if args.command == "pdf":
        from ..render import pdf

        try:
            pdf.require_engine()
        except pdf.EngineMissing as error:
            raise EnvironmentProblem(str(error)) from None
    data, figures = render(args.command, options, fragment=getattr(args, "fragment", False),
                           progress=progress)  # fmt: skip
    if figures:
        write_files(Path(args.output).parent if args.output else Path("."), figures)
    if args.output is None:
        write_stdout(data)
    else:
        write(Path(args.output), data)
    return 0


def run_docs(args, progress: Progress) -> int:
    """`derive docs`: regenerate the files under --out (created if missing)."""
    root = Path(args.out)
    try:
        exists = root.is_dir()
    except OSError as error:
        raise UsageError(f"derive docs: cannot use --out {args.out}: {error.strerror}") from None
    if exists:
        check_output(str(root / "derivation.tex"))
    if not args.no_pdf:
        from ..render import pdf

        try:
            pdf.require_engine()
        except pdf.EngineMissing as error:
            raise EnvironmentProblem(f"{error} (or skip the PDF with --no-pdf)") from None
    files = generate_docs(pdf=not args.no_pdf, progress=progress)
    write_files(root, files)
    progress(f"wrote {len(files)} files under {root}", always=True)
    return 0
