"""The `derive` command: the derivation of self-attention as LaTeX, Markdown or PDF.

    derive latex                              # the generic derivation, LaTeX on stdout
    derive latex -o derivation.tex --n 3 --d 4 --c 2
    derive markdown -o derivation.md --example --figures figures
    derive pdf -o derivation.pdf --causal --heads 2
    derive docs                               # regenerate docs/ (derivation.tex/.pdf/.md, figures)
    derive check --trials 5                   # derive vs the torch implementation, step by step

Bad input (a size that is not a positive integer, heads not dividing c, an unknown option, an
output that cannot be written) exits with status 2 and one line on stderr; a missing TeX engine,
matplotlib or torch exits with status 1 and one line saying what to install. Outputs are written
to a temporary file and renamed into place, so an existing file is never truncated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ._errors import EnvironmentProblem, UsageError
from ._sizes import MAX_SIZE

__all__ = ["main"]

PROG = "derive"
#: The sizes of the explicit mode when only some of --n/--d/--c are given.
DEFAULT_SIZES = {"n": 3, "d": 4, "c": 2}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


class _Progress:
    """Messages on stderr once a job has run for more than `after` seconds (or always)."""

    def __init__(self, quiet: bool, after: float = 1.0) -> None:
        self.quiet, self.after, self.start = quiet, after, time.perf_counter()

    def __call__(self, message: str, *, always: bool = False) -> None:
        elapsed = time.perf_counter() - self.start
        if not self.quiet and (always or elapsed > self.after):
            print(f"{PROG}: {message} ({elapsed:.1f} s)", file=sys.stderr, flush=True)


def _integer(minimum: int = 1, limit: int | None = None):
    """An argparse type: an int of at least `minimum` (and at most `limit`, if given)."""
    kind = "positive integer" if minimum == 1 else "non-negative integer"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {kind}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a {kind}, got {value}")
        if limit is not None and value > limit:
            raise argparse.ArgumentTypeError(
                f"{value} is over the limit of {limit} for explicit sizes"
            )
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
    "docs": "example:\n  derive docs   # rewrites docs/derivation.{tex,pdf,md} and docs/figures",
    "check": "examples:\n  derive check                     # random sizes, one trial\n"
    "  derive check --n 5 --d 3 --c 4 --heads 2 --causal\n"
    "  derive check --trials 10 --seed 7\n\n"
    "exit status: 0 when every step agrees, 1 when one does not, 2 for bad input",
}


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="Derive trainable scaled dot-product self-attention with SymPy and print "
        "the derivation as LaTeX, Markdown or PDF.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run 'derive COMMAND --help' for the options of each command",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    helps = {
        "latex": "the derivation as LaTeX (standalone document, or --fragment)",
        "markdown": "the derivation as GitHub Markdown with $$ math",
        "pdf": "the derivation compiled to PDF with pdflatex",
        "docs": "regenerate the derivation files under docs/",
    }
    for name, text in helps.items():
        sub = commands.add_parser(
            name,
            help=text,
            description=text,
            epilog=EPILOG[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
        if name == "docs":
            sub.add_argument("--out", default="docs", help="the docs folder (default: docs)")
            continue
        sub.add_argument("-o", "--output", metavar="FILE", help="write here, not to stdout")
        if name == "latex":
            sub.add_argument("--fragment", action="store_true", help="the body only, to \\input")
        for letter, meaning in (("n", "tokens"), ("d", "input width"), ("c", "context width")):
            sub.add_argument(
                f"--{letter}",
                type=_integer(limit=MAX_SIZE),
                metavar=letter.upper(),
                help=f"explicit mode: {meaning} (default {DEFAULT_SIZES[letter]} when any "
                "size is given)",
            )
        sub.add_argument("--causal", action="store_true", help="causal attention (and masks)")
        sub.add_argument(
            "--heads", type=_integer(), default=1, metavar="H", help="multi-head, H heads"
        )
        sub.add_argument(
            "--example",
            action="store_true",
            help="the worked example 'the fat cat sat on the mat' (needs torch)",
        )
        sub.add_argument(
            "--figures",
            metavar="DIR",
            help="draw the figures into DIR and include them (needs matplotlib)",
        )
    _add_check(commands)
    return parser


def _add_check(commands) -> None:
    text = "compare every step of the derivation with the torch implementation (needs torch)"
    sub = commands.add_parser(
        "check",
        help=text,
        description=text + ": a table of step, shape, largest difference, tolerance, result",
        epilog=EPILOG["check"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for letter, meaning in (("n", "tokens"), ("d", "input width"), ("c", "context width")):
        sub.add_argument(
            f"--{letter}", type=_integer(limit=MAX_SIZE), metavar=letter.upper(),
            help=f"{meaning} (default: drawn at random with the seed)",
        )  # fmt: skip
    sub.add_argument("--causal", action="store_true", help="causal attention")
    sub.add_argument("--heads", type=_integer(), default=1, metavar="H", help="multi-head, H heads")
    sub.add_argument(
        "--seed", type=_integer(minimum=0), default=0, metavar="S", help="seed of sizes and inputs"
    )
    sub.add_argument("--trials", type=_integer(), default=1, metavar="K", help="how many draws")
    sub.add_argument(
        "--forward-only", action="store_true", help="skip the backward pass (the gradients)"
    )


def _check_output(path: str | None) -> None:
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{PROG}: cannot write {path}: it is a directory")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{PROG}: cannot write {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"{PROG}: cannot write {path}: permission denied")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `derive` console script and of ``python -m derive``."""
    from ._run import run

    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(
                f"{PROG}: missing command: latex, markdown, pdf, docs or check "
                f"(see '{PROG} --help')"
            )
        if args.command == "check":
            from ._check_command import run_check

            return run_check(args)
        return run(args, _Progress(args.quiet), _check_output)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 2
    except EnvironmentProblem as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
