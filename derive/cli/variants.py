"""`derive variants`: the registry, one line a variant; `--show NAME` one entry whole (its
steps with their formulas and the calls of their twins, its sizes, parameters, inputs, claims
and twins), a combination (``gqa+rope``) or a user's (``path/to/file.py:NAME``) alike."""

from __future__ import annotations

from ..graph import load_variant, variants
from ..render.cards import card, summary
from .errors import UsageError
from .parsing import PROG

__all__ = ["add", "run"]

EPILOG = """examples:
  derive variants                       # every variant, one line each
  derive variants --show softcap        # one: its steps, twins, sizes, claims
  derive variants --show gqa+rope
  derive variants --show docs/examples/sigmoid_attention.py:SIGMOID"""


def add(commands, argparse) -> None:
    text = "list the variants of the registry, or show one whole"
    sub = commands.add_parser(
        "variants",
        help=text,
        description=text,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument(
        "--show",
        metavar="NAME",
        help="one variant (a combination with +, or path/to/file.py:NAME): its steps, the "
        "calls of their twins, its sizes, parameters, claims and twins",
    )


def run(args, progress=None) -> int:
    if args.show is None:
        print(summary(variants()))
        return 0
    try:
        entry = load_variant(args.show)
    except ValueError as error:
        raise UsageError(f"{PROG} variants: {error}") from None
    print(card(entry))
    return 0
