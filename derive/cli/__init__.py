"""The `derive` command: the derivation of self-attention as LaTeX, Markdown, PDF, an HTML page
or a Jupyter notebook, and checks.

    derive latex                              # the generic derivation, LaTeX on stdout
    derive latex -o derivation.tex --n 3 --d 4 --c 2
    derive markdown -o derivation.md --example --figures figures
    derive pdf -o derivation.pdf --causal --heads 2
    derive html -o derivation.html --n 3 --d 4 --c 2 --example --figures
    derive notebook -o derivation.ipynb --n 3 --d 4 --c 2 --example
    derive docs                               # regenerate docs/ (derivation.*, figures)
    derive check --trials 5                   # derive vs the torch implementation, step by step
    derive conform my_model.py:attention      # anyone's attention vs the derivation

Bad input (a size or seed out of range, heads not dividing c, an unknown option, an output that
cannot be written) exits with status 2 and one line on stderr; a missing or broken TeX engine,
matplotlib or torch exits with status 1 and one line saying what to do. Outputs are written to a
temporary file and renamed into place, so an existing file is never truncated. No traceback.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..explicit import MAX_SIZE
from .errors import EnvironmentProblem, UsageError

__all__ = ["main", "DEFAULT_SIZES"]

PROG = "derive"
#: The commands whose figures are inline SVG: their --figures takes no folder.
INLINE_FIGURES = ("html", "notebook")
#: The sizes of the explicit mode when only some of --n/--d/--c are given.
DEFAULT_SIZES = {"n": 3, "d": 4, "c": 2}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


class _Progress:
    """Progress on stderr, each line with its own step's time, once the job has run for more
    than `after` seconds (or always, for the lines that say so)."""

    def __init__(self, quiet: bool, after: float = 1.0) -> None:
        self.quiet, self.after = quiet, after
        self.start = self.last = time.perf_counter()

    def __call__(self, message: str, *, always: bool = False) -> None:
        now = time.perf_counter()
        took, self.last = now - self.last, now
        if not self.quiet and (always or now - self.start > self.after):
            print(f"{PROG}: {message} ({took:.2f} s)", file=sys.stderr, flush=True)


def _integer(minimum: int = 1, limit: int | None = None, what: str = ""):
    """An argparse type: an int of at least `minimum` and at most `limit` (if given)."""
    kind = "positive integer" if minimum == 1 else "non-negative integer"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {kind}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a {kind}, got {value}")
        if limit is not None and value > limit:
            raise argparse.ArgumentTypeError(f"{value} is over the limit of {limit}{what}")
        return value

    return parse


EPILOG = {
    "latex": "examples:\n  derive latex -o derivation.tex\n"
    "  derive latex --fragment --n 3 --d 4 --c 2 > body.tex\n"
    "  derive latex -o d.tex --causal --heads 2 --example --figures figures",
    "markdown": "examples:\n  derive markdown -o derivation.md\n"
    "  derive markdown --n 3 --d 4 --c 2 --example --figures figures -o derivation.md",
    "pdf": "examples:\n  derive pdf -o derivation.pdf\n"
    "  derive pdf -o derivation.pdf --n 3 --d 4 --c 2 --example --figures figures",
    "html": "examples:\n  derive html -o derivation.html\n"
    "  derive html -o derivation.html --n 3 --d 4 --c 2 --example --figures",
    "notebook": "examples:\n  derive notebook -o derivation.ipynb\n"
    "  derive notebook -o derivation.ipynb --n 3 --d 4 --c 2 --example --figures",
    "docs": "example:\n  derive docs   # rewrites docs/derivation.{tex,pdf,md,html,ipynb} and "
    "docs/figures",
    "check": "examples:\n  derive check                     # random sizes, one trial\n"
    "  derive check --n 5 --d 3 --c 4 --heads 2 --causal\n"
    "  derive check --trials 10 --seed 7\n\n"
    "exit status: 0 when every step agrees, 1 when one does not, 2 for bad input",
}


def _variant_options(sub, what: str) -> None:
    """--variant NAME and one option per size a variant adds (--w, --s, --d-y), read off the
    registry: a new variant's sizes become options with no edit here."""
    from ..graph.variants import REGISTRY, variants
    from ..notation import letters as L

    sub.add_argument("--variant", choices=variants(), metavar="NAME", action="append",
                     help=f"{what} of a variant: {', '.join(variants())}; gqa, qk-norm and "
                     "rope combine (--variant gqa --variant rope); --heads gives their "
                     "heads")  # fmt: skip
    seen: dict[str, list[str]] = {}
    for found in REGISTRY().values():
        for symbol, default in found.sizes:
            if symbol != L.h:  # the heads of a variant: --heads
                seen.setdefault(str(symbol), []).append(f"{found.name} (default {default})")
    for name, users in seen.items():
        sub.add_argument(
            f"--{name.replace('_', '-')}", dest=f"size_{name}", metavar=name.upper(),
            type=_integer(limit=MAX_SIZE, what=" for explicit sizes"),
            help=f"size {name} of " + ", ".join(users),
        )  # fmt: skip


def _sizes(sub, help_text: str) -> None:
    for letter, meaning in (("n", "tokens"), ("d", "input width"), ("c", "context width")):
        sub.add_argument(
            f"--{letter}", type=_integer(limit=MAX_SIZE, what=" for explicit sizes"),
            metavar=letter.upper(), help=help_text.format(meaning=meaning, letter=letter),
        )  # fmt: skip
    sub.add_argument(
        "--heads", type=_integer(limit=MAX_SIZE, what=" (heads divide c, at most 16)"),
        default=1, metavar="H", help="multi-head, H heads (H divides c)",
    )  # fmt: skip
    sub.add_argument("--causal", action="store_true", help="causal attention (and masks)")


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="Derive trainable scaled dot-product self-attention with SymPy and print "
        "the derivation as LaTeX, Markdown, PDF, HTML or a Jupyter notebook.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run 'derive COMMAND --help' for the options of each command",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    helps = {
        "latex": "the derivation as LaTeX (standalone document, or --fragment)",
        "markdown": "the derivation as GitHub Markdown with $$ math",
        "pdf": "the derivation compiled to PDF with pdflatex",
        "html": "the derivation as one self-contained HTML page (KaTeX inlined, no network)",
        "notebook": "the derivation as a Jupyter notebook, saved with its outputs (needs torch)",
        "docs": "regenerate the derivation files under docs/",
    }
    for name, text in helps.items():
        sub = commands.add_parser(name, help=text, description=text, epilog=EPILOG[name],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        sub.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
        if name == "docs":
            sub.add_argument("--out", default="docs", help="the docs folder, created if missing")
            sub.add_argument("--no-pdf", action="store_true", help="skip docs/derivation.pdf")
            continue
        sub.add_argument("-o", "--output", metavar="FILE", help="write here, not to stdout")
        if name == "latex":
            sub.add_argument("--fragment", action="store_true", help="the body only, to \\input")
        _sizes(sub, "explicit mode: {meaning} (default " + "{letter} from 3, 4, 2 when any "
               "size is given)")  # fmt: skip
        sub.add_argument(
            "--example", action="store_true",
            help="the worked example 'the fat cat sat on the mat' (needs torch): its first N "
            "tokens at widths D and C when sizes are given, else all 7 at D=4, C=3",
        )  # fmt: skip
        if name in INLINE_FIGURES:
            sub.add_argument("--figures", action="store_const", const=".",
                             help="include the figures, drawn inline as SVG (no files, no "
                             "matplotlib)")  # fmt: skip
        else:
            sub.add_argument("--figures", metavar="DIR",
                             help="draw the figures into DIR and include them (needs matplotlib)")

        _variant_options(sub, "the derivation")
    _add_check(commands)
    from .conform import add_conform

    add_conform(commands, lambda low, high: _integer(minimum=low, limit=high))
    return parser


def _add_check(commands) -> None:
    from .check import SEED_LIMIT

    text = "compare every step of the derivation with the torch implementation (needs torch)"
    sub = commands.add_parser(
        "check", help=text, epilog=EPILOG["check"],
        description=text + ": a table of step, shape, largest difference, tolerance, result",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    _sizes(sub, "{meaning} (default: drawn at random with the seed)")
    sub.add_argument(
        "--seed", type=_integer(minimum=0, limit=SEED_LIMIT), metavar="S",
        help="seed of sizes and inputs (default: a fresh one each run, printed)",
    )  # fmt: skip
    sub.add_argument("--trials", type=_integer(limit=10_000), default=1, metavar="K",
                     help="how many draws")  # fmt: skip
    sub.add_argument("--forward-only", action="store_true",
                     help="skip the backward pass (the gradients)")  # fmt: skip
    _variant_options(sub, "the check")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `derive` console script and of ``python -m derive``."""
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            raise UsageError(
                f"{PROG}: missing command: latex, markdown, pdf, html, notebook, docs, check or "
                f"conform (see '{PROG} --help')"
            )
        if args.command == "check":
            from .check import run_check

            return run_check(args)
        if args.command == "conform":
            from .conform import run_conform

            return run_conform(args)
        from .documents import run_docs, run_document

        progress = _Progress(args.quiet)
        return run_docs(args, progress) if args.command == "docs" else run_document(args, progress)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 2
    except EnvironmentProblem as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
