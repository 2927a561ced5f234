"""The `derive` command: the derivation of attention as LaTeX, Markdown, PDF, an HTML page or a
Jupyter notebook, and checks.

    derive latex                              # the generic derivation, LaTeX on stdout
    derive latex -o derivation.tex --n 3 --d 4 --c 2
    derive markdown -o derivation.md --example --figures figures
    derive pdf -o derivation.pdf --variant rope --n 3 --d 4 --c 4
    derive html -o derivation.html --n 3 --d 4 --c 2 --example --figures
    derive notebook -o derivation.ipynb --n 3 --d 4 --c 2 --example
    derive docs                               # regenerate docs/ (derivation.*, figures)
    derive check --trials 5                   # derive vs the torch implementation, step by step
    derive latex --variant my_attention.py:MINE   # a variant declared in your own file
    derive conform my_model.py:attention      # anyone's attention vs the derivation
    derive variants --show softcap            # the registry, or one entry whole

Each subcommand is a module (`documents` for the five documents, `docs`, `check`, `conform`)
with `add(commands, argparse)` and `run(args, progress)`, its parser built from the same pieces
(`derive.cli.parsing`). Bad input (a size or seed out of range, a variant that does not exist or
whose declaration is wrong, an output that cannot be written) exits with status 2 and one line
on stderr; a missing or broken TeX engine, matplotlib or torch exits with status 1 and one line
saying what to do; a failure of derive's own exits with status 3 and one line saying what it
could not do (distinct from 1, which `derive check` and `derive conform` also give for a port
that fails: a script tells a broken tool from a broken port). Outputs are written to a
temporary file and renamed into place, so an existing file is never truncated. No traceback.
Progress goes to stderr once a job has run for a second (``DERIVE_PROGRESS_AFTER=SECONDS``
sets when: 0 for every line, inf for none).
"""

from __future__ import annotations

import argparse
import sys

from . import check, conform, docs, documents, variants
from .errors import EnvironmentProblem, InternalFailure, UsageError
from .parsing import PROG, Parser, Progress, did_you_mean, load_user_variants, users_mistakes

__all__ = ["main", "COMMANDS"]

#: The subcommands, each a module with `add` and `run`.
COMMANDS = {
    **dict.fromkeys(documents.COMMANDS, documents),
    "docs": docs,
    "check": check,
    "conform": conform,
    "variants": variants,
}


def _figures_take_no_folder(where: str, argv: list[str], extra: list[str]) -> None:
    """`derive html --figures figs`: html's figures are inline, so its --figures is a flag;
    say so rather than that 'figs' is not an argument."""
    if "--figures" not in argv:
        return
    after = argv.index("--figures") + 1
    if after < len(argv) and argv[after] in extra:
        raise UsageError(
            f"{where}: --figures takes no folder here ({argv[after]!r}): the page draws its "
            f"figures inline as SVG (see '{where} --help')"
        )


class _Version(argparse.Action):
    """--version: derive's version and those of what it runs with (torch, SymPy, transformers,
    TeX...), read only when asked (reading the installed metadata costs tens of ms, too much for
    every command's start)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        from .versions import versions

        print("\n".join(versions()))
        parser.exit()


def _parser() -> Parser:
    parser = Parser(
        prog=PROG,
        description="Derive trainable scaled dot-product self-attention and its variants with "
        "SymPy and print the derivation as LaTeX, Markdown, PDF, HTML or a Jupyter notebook.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run 'derive COMMAND --help' for the options of each command",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="print the version of derive, and of torch, SymPy, transformers and TeX found; exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in dict.fromkeys(COMMANDS.values()):
        module.add(commands, argparse)
    return parser


def _closest_option(parser: argparse.ArgumentParser, command: str, extra: list[str]) -> str:
    """ "; did you mean '--variant'?" for the first unrecognized option of `command`."""
    flag = next((x.partition("=")[0] for x in extra if x.startswith("--")), None)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = commands.choices[command]._option_string_actions
    long = [option for option in options if option.startswith("--")]
    return did_you_mean(flag, long, strip="-") if flag else ""


def progress_after() -> float:
    """How many seconds a job runs before its progress lines show: ``DERIVE_PROGRESS_AFTER``
    (a number of seconds, ``0`` for every line, ``inf`` for none but those always shown, such
    as the file written), 1 by default; a UsageError naming the variable otherwise."""
    import math
    import os

    given = os.environ.get("DERIVE_PROGRESS_AFTER")
    if given is None:
        return 1.0
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds) or seconds < 0:
        raise UsageError(
            f"{PROG}: DERIVE_PROGRESS_AFTER must be a number of seconds ≥ 0 (or inf), got {given!r}"
        )
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `derive` console script and of ``python -m derive``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        load_user_variants(argv)
        parser = _parser()
        args, extra = parser.parse_known_args(argv)
        if extra and args.command is not None:  # named by the subcommand, whose help lists them
            where = f"{PROG} {args.command}"
            _figures_take_no_folder(where, argv, extra)
            raise UsageError(
                f"{where}: unrecognized arguments: {' '.join(extra)}"
                f"{_closest_option(parser, args.command, extra)} (see '{where} --help')"
            )
        if extra:
            raise UsageError(
                f"{PROG}: unrecognized arguments: {' '.join(extra)} (see '{PROG} --help')"
            )
        if args.command is None:
            *others, last = COMMANDS
            raise UsageError(
                f"{PROG}: missing command: {', '.join(others)} or {last} (see '{PROG} --help')"
            )
        progress = Progress(getattr(args, "quiet", False), after=progress_after())
        with users_mistakes(args):
            return COMMANDS[args.command].run(args, progress)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 2
    except EnvironmentProblem as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    except InternalFailure as error:
        print(str(error), file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (derive variants | head): stop as a shell's tools do
        _stdout_to_null()
        return 141


def _stdout_to_null() -> None:
    """Point standard output at the null device, so that flushing it at exit, with its reader
    gone, raises nothing more (the remedy of Python's documentation for SIGPIPE)."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stream): nothing to do
        pass
