"""`derive docs`: regenerate the derivation files under docs/ (the drift tests compare them with
the committed ones): the derivation of self-attention as LaTeX, PDF, Markdown, HTML and a
notebook, explicit at n = 3, d = 4, c = 2 with the worked example at the same sizes, its figures,
the glossary, the variants' table, the mistakes' catalogue, the figure docs/benchmarks.md shows
(FlashAttention's rounding), and the site's pages that are generated: the CLI reference
(`reference/cli.md`) and the explanations cut from the derivation (`explanation/`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..render import DocumentOptions, html_document, latex_document, markdown_document
from .documents import compile_pdf, example_for, figure_files, notebook
from .errors import EnvironmentProblem, UsageError
from .files import check_folder, check_output, write_files
from .parsing import PROG

__all__ = ["DOCS_OPTIONS", "add", "run", "generate_docs"]

#: What docs/derivation.* contain: the derivation, explicit at n = 3, d = 4, c = 2, the worked
#: example at the same sizes ("the fat cat") and the figures (in docs/figures).
DOCS_OPTIONS = DocumentOptions(sizes=(3, 4, 2), example=True, figures="figures")

Progress = Callable[..., None]


def _quiet(message: str, *, always: bool = False) -> None:
    """A progress callback that says nothing."""


def add(commands, argparse) -> None:
    text = "regenerate the derivation files under docs/"
    sub = commands.add_parser(
        "docs",
        help=text,
        description=text,
        epilog="example:\n  derive docs   # rewrites docs/derivation."
        "{tex,pdf,md,html,ipynb} and docs/figures",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    sub.add_argument("--out", default="docs", help="the docs folder, created if missing")
    sub.add_argument("--no-pdf", action="store_true", help="skip docs/derivation.pdf")


def generate_docs(
    *, pdf: bool = True, models: bool = True, progress: Progress = _quiet
) -> dict[str, bytes]:
    """Every generated file under docs/, by path relative to docs/ (deterministic); `models`:
    the headline models' pages too (docs/models/, `model_pages`; they need transformers)."""
    from ..conformance import kda, linear, ssm
    from ..render.explanations import explanation_pages
    from ..render.glossary import glossary_markdown
    from ..render.mistakes_page import mistakes_markdown
    from ..render.variants_page import (
        COMPATIBILITY_FIGURE,
        compatibility_figure,
        variants_markdown,
    )
    from .reference import cli_markdown

    example = example_for(DOCS_OPTIONS)
    progress("computed the worked example")
    figures = figure_files(DOCS_OPTIONS, example)
    progress("drew the figures")
    from ..render.figures import FIGURES, FLASH_ROUNDING

    shown = {f"figures/{name}": data for name, data in FIGURES[FLASH_ROUNDING]().items()}
    tex = latex_document(DOCS_OPTIONS, example=example, progress=progress)
    derivation_md = markdown_document(DOCS_OPTIONS, example=example)
    explained = explanation_pages(
        derivation_md,
        lambda name: markdown_document(
            replace(DOCS_OPTIONS, sizes=None, example=False, variant=name)
        ),
    )
    files = {
        "glossary.md": glossary_markdown().encode("utf-8"),
        "variants.md": variants_markdown().encode("utf-8"),
        COMPATIBILITY_FIGURE: compatibility_figure().encode("utf-8"),
        "mistakes.md": mistakes_markdown(
            (
                (
                    "Gated DeltaNet's ports",
                    f"the gated delta rule's recurrence, {linear.RULE}",
                    linear.MISTAKES,
                ),
                (
                    "Kimi Delta Attention's ports",
                    f"KDA's recurrence, {kda.RULE}",
                    kda.MISTAKES,
                ),
                ("Mamba-2's ports", f"SSD's recurrence, {ssm.RULE}", ssm.MISTAKES),
                (
                    "Mamba's ports",
                    f"the selective scan's recurrence, {ssm.MAMBA_RULE}",
                    ssm.MAMBA_MISTAKES,
                ),
            )
        ).encode("utf-8"),
        "reference/cli.md": cli_markdown().encode("utf-8"),
        "derivation.tex": tex.encode("utf-8"),
        "derivation.md": derivation_md.encode("utf-8"),
        "derivation.html": html_document(DOCS_OPTIONS, example=example).encode("utf-8"),
        **{path: page.encode("utf-8") for path, page in explained.items()},
        **figures,
        **shown,
    }
    progress("printed the documents")
    if models:
        from .model_pages import model_pages

        files |= {path: page.encode("utf-8") for path, page in model_pages().items()}
        progress("derived the headline models' pages")
    files["derivation.ipynb"] = notebook(DOCS_OPTIONS, progress)
    if pdf:
        files["derivation.pdf"] = compile_pdf(tex, figures)
        progress("compiled docs/derivation.pdf with pdflatex", always=True)
    return files


def run(args, progress: Progress) -> int:
    """`derive docs`: regenerate the files under --out (created if missing)."""
    root = Path(args.out)
    check_folder(root, "--out")  # before any work: an existing file, an unwritable parent
    try:
        exists = root.is_dir()
    except OSError as error:
        raise UsageError(f"{PROG} docs: cannot use --out {args.out}: {error.strerror}") from None
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
