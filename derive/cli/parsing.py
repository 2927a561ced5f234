"""What every subcommand's parser is built from: the parser whose errors are one line, the
integer arguments, the explicit sizes, and the variant options read off the registry.

A subcommand is a module with `add(commands)` (its parser) and `run(args, progress)`; `main`
(`derive.cli`) builds them all the same way. ``--variant`` takes a registered name or a user's
declaration, ``path/to/file.py:NAME`` or ``module:NAME``: `load_user_variants` registers those
before the parsers are built, so that the sizes and parameters they add become options too.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import TYPE_CHECKING

from ..explicit import MAX_SIZE
from ..graph import DeclarationError, declared, entry_name, load_variant, variant, variants
from ..graph.errors import DerivationError
from ..graph.registry import ROOT, registered
from ..render.sections.common import UnprovedClaim
from .errors import EnvironmentProblem, InternalFailure, UsageError

if TYPE_CHECKING:
    from ..conformance.read.models import ModelLayer

__all__ = [
    "PROG",
    "Parser",
    "Progress",
    "integer",
    "number",
    "add_sizes",
    "add_variant",
    "load_user_variants",
    "entry_of",
    "given_sizes",
    "DEFAULT_SIZES",
    "users_mistakes",
]

PROG = "derive"
#: The sizes of the explicit mode when only some of --n/--d/--c are given.
DEFAULT_SIZES = {"n": 3, "d": 4, "c": 2}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2, and which takes
    no abbreviation of an option (``--b`` is not ``--beta``: a user's parameter b is given as
    ``--value b=5``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> None:  # type: ignore[override]
        choice = re.match(r"argument .*: invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice:  # a misspelled command or choice: the closest named
            offered = [c.strip(" '") for c in choice.group(2).split(",")]
            message += did_you_mean(choice.group(1), offered)
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def did_you_mean(given: str, known, *, strip: str = "") -> str:
    """``"; did you mean '--variant'?"`` for the closest of `known` (difflib), compared with
    the characters `strip` off both ends (an option's dashes, alike in all); else ``""``."""
    bare = {option.strip(strip): option for option in known}
    close = difflib.get_close_matches(given.strip(strip), list(bare), n=1)
    return f"; did you mean {bare[close[0]]!r}?" if close else ""


class Progress:
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


def integer(minimum: int = 1, limit: int | None = None, what: str = ""):
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


def number(text: str) -> Fraction:
    """An argparse type: a number, kept exact (``0.5`` is 1/2, ``1e-6`` is 10⁻⁶)."""
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def add_sizes(sub: argparse.ArgumentParser, help_text: str) -> None:
    """--n, --d, --c, --heads and --causal."""
    for letter, meaning in (("n", "tokens"), ("d", "input width"), ("c", "context width")):
        sub.add_argument(
            f"--{letter}",
            type=integer(limit=MAX_SIZE, what=" for explicit sizes"),
            metavar=letter.upper(),
            help=help_text.format(meaning=meaning, letter=letter, default=DEFAULT_SIZES[letter]),
        )
    sub.add_argument(
        "--heads",
        type=integer(limit=MAX_SIZE, what=" (heads divide c, at most 16)"),
        default=1,
        metavar="H",
        help="H heads: multi-head attention, or the heads of a variant that has them",
    )
    sub.add_argument(
        "--causal",
        action="store_true",
        help="causal attention (the variant causal, or joined to --variant)",
    )


def value(text: str) -> tuple[str, Fraction]:
    """An argparse type: ``NAME=NUMBER`` (``b=0.5``, ``kappa=30``), the number kept exact."""
    name, equals, given = text.partition("=")
    if not equals or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER (kappa=30), got {text!r}")
    return name.strip(), number(given.strip())


def add_variant(sub: argparse.ArgumentParser, what: str) -> None:
    """--variant NAME; one option per size and parameter of the built-in variants (--w, --s,
    --d-y, --g, --d-u; --beta, --epsilon), read off the registry, so that a new built-in's
    become options with no edit here; and --value NAME=NUMBER, for any variant's, the only
    way to give a user's own (its names never clash with the built-in options)."""
    sub.add_argument(
        "--variant",
        metavar="NAME",
        action="append",
        help=f"{what} of a variant: {', '.join(variants())}, or your own "
        "(path/to/file.py:NAME, module:NAME); repeat it to combine (--variant gqa --variant "
        "rope); --heads gives the heads of one that has them",
    )
    sub.add_argument(
        "--model",
        metavar="TYPE",
        help="a transformers model type (gemma2, llama, qwen3): the attention it computes, as "
        "the combination of variants the Hugging Face adapter of derive conform reads from a "
        "layer built from its default config, with the config's values (needs transformers)",
    )
    sub.add_argument(
        "--config",
        metavar="FILE",
        help="a model's own config.json (no weights), read as --model reads a model type's",
    )
    sub.add_argument(
        "--layer",
        metavar="K",
        type=integer(minimum=0),
        default=0,
        help="with --model or --config: which kind of attention layer (0, the first; a "
        "model's local and global layers are two kinds)",
    )
    sub.add_argument(
        "--value",
        metavar="NAME=NUMBER",
        action="append",
        type=value,
        help="a size or parameter of the variant by its symbol's name (b=0.5, kappa=30); "
        "your own variant's are given this way only",
    )
    seen: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    flags: dict[str, str] = {}
    for name in variants():
        if registered(name) is not None:  # a user's: --value
            continue
        found = declared(name)
        for size in found.sizes:
            seen.setdefault(str(size.symbol), []).append(f"{name} (default {size.default})")
            kinds[str(size.symbol)] = "size"
            flags[str(size.symbol)] = size.option or str(size.symbol).replace("_", "-")
        for parameter in found.parameters:
            seen.setdefault(str(parameter.symbol), []).append(
                f"{name} (default {parameter.default})"
            )
            kinds.setdefault(str(parameter.symbol), "parameter")
    for name, users in seen.items():
        if name == "h":  # the heads: --heads
            continue
        if kinds[name] == "size":
            kind = integer(limit=MAX_SIZE, what=" for explicit sizes")
        else:
            kind = number
        sub.add_argument(
            f"--{flags.get(name, name.replace('_', '-'))}",
            dest=f"size_{name}",
            metavar=name.upper(),
            type=kind,
            help=f"{kinds[name]} {name} of " + ", ".join(users),
        )


def load_user_variants(argv: list[str]) -> None:
    """Register the variants ``--variant`` names by a file or module (``file.py:NAME``) before
    the parsers are built; a mistake in one is a usage error naming it."""
    scan = argparse.ArgumentParser(add_help=False, exit_on_error=False, allow_abbrev=False)
    scan.add_argument("--variant", action="append", default=[])
    try:
        known, _ = scan.parse_known_args(argv)
    except argparse.ArgumentError:  # --variant without its value: the command's parser says so
        return
    for spec in known.variant:
        if ":" in spec:
            try:
                load_variant(spec)
            except DeclarationError as error:
                raise UsageError(f"{PROG}: {error}") from None


def given_sizes(args) -> dict[str, object]:
    """The variant sizes and parameters given on the command line, by name: their options
    (--w 3) and --value (w=3); one given both ways is a usage error naming it."""
    found = {
        key.removeprefix("size_"): value
        for key, value in sorted(vars(args).items())
        if key.startswith("size_") and value is not None
    }
    for name, given in getattr(args, "value", None) or ():
        if name in found and found[name] != given:
            raise UsageError(
                f"{PROG} {args.command}: {name} is given twice ({found[name]} and "
                f"{given}); give it once"
            )
        found[name] = int(given) if given.denominator == 1 else given  # a size is an int
    return found


def model_layer(args, progress=None) -> ModelLayer | None:
    """The kind of attention layer ``--model`` or ``--config`` (and ``--layer``) names, as a
    `derive.conformance.read.models.ModelLayer`; None where neither is given. The kinds the
    model has are said on stderr where it has more than one."""
    if not (getattr(args, "model", None) or getattr(args, "config", None)):
        return None
    if args.model and args.config:
        raise UsageError(f"{PROG} {args.command}: give --model or --config, not both")
    if args.variant:
        raise UsageError(
            f"{PROG} {args.command}: --model and --config name the variants (the model's); "
            "drop --variant"
        )
    from ..conformance.read.models import ModelError, model_layers

    try:
        kinds = model_layers(model=args.model, config=args.config)
    except ModelError as error:
        raise UsageError(f"{PROG} {args.command}: {error}") from None
    listed = "; ".join(f"{k}: {kind.path} ({kind.variant})" for k, kind in enumerate(kinds))
    if args.layer >= len(kinds):
        raise UsageError(
            f"{PROG} {args.command}: --layer {args.layer}, but {kinds[0].model} has "
            f"{len(kinds)} kind{'s' if len(kinds) > 1 else ''} of attention layer: {listed}"
        )
    if len(kinds) > 1 and progress is not None:
        progress(
            f"{len(kinds)} kinds of attention layer ({listed}); --layer {args.layer}", always=True
        )
    chosen: int = args.layer
    return kinds[chosen]


def entry_of(args, layer: ModelLayer | None = None) -> str:
    """The entry the command line names: ``--variant`` (repeated: combined; a file's by its
    NAME), ``--causal``, ``--heads``, or the model's `layer` (`model_layer`); a usage error
    naming what is wrong."""
    if layer is not None:
        try:
            return variant(layer.variant).name
        except ValueError as error:
            raise UsageError(f"{PROG} {args.command}: {layer.model}: {error}") from None
    try:
        names = [load_variant(spec).name for spec in (args.variant or [])]
        parts = [part for name in names for part in name.split("+")]
        twice = sorted({part for part in parts if parts.count(part) > 1})
        if twice:  # a slip (the variant meant was another), never a combination
            raise ValueError(f"--variant {twice[0]} is given twice; give each variant once")
        name = "+".join(names) or None
        found = entry_name(name, causal=args.causal, heads=args.heads)
    except ValueError as error:
        raise UsageError(f"{PROG} {args.command}: {error}") from None
    _flags_are_built_ins(args, found)
    return found


def _flags_are_built_ins(args, name: str) -> None:
    """An option of a built-in variant's (--s, cross-attention's keys) gives that variant's
    value only: where the entry's symbol of that name is a user's own, a usage error says to
    give it with --value."""
    from ..graph import variant

    entry = variant(name)
    for key, value in vars(args).items():
        if not key.startswith("size_") or value is None:
            continue
        symbol = key.removeprefix("size_")
        owners = [
            v for v in entry.chain if symbol in {str(x.symbol) for x in (*v.sizes, *v.parameters)}
        ]
        if owners and all(registered(v.name) is not None for v in owners):
            flag = "--" + symbol.replace("_", "-")
            raise UsageError(
                f"{PROG} {args.command}: {flag} is a built-in variant's option; {symbol} of "
                f"{owners[0].name} (yours) is given as --value {symbol}=NUMBER"
            )


@contextlib.contextmanager
def users_mistakes(args) -> Iterator[None]:
    """A mistake in a declaration is one line and exit status 2; a failure of derive's own
    (SymPy's on a step, or anything else derive did not foresee) is one line and exit status 1,
    saying what derive could not do (``DERIVE_TRACEBACK=1`` shows the traceback instead). A
    claim SymPy could not prove is a warning on stderr, one line each (an error with
    ``--strict``)."""
    strict = bool(args.__dict__.get("strict"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error" if strict else "always", UnprovedClaim)
        try:
            yield
        except DeclarationError as error:
            raise UsageError(f"{PROG} {args.command}: {error}") from None
        except UnprovedClaim as error:
            raise UsageError(
                f"{PROG} {args.command}: {error} (--strict: nothing written)"
            ) from None
        except (UsageError, EnvironmentProblem, KeyboardInterrupt, BrokenPipeError):
            raise
        except DerivationError as error:
            if os.environ.get("DERIVE_TRACEBACK"):
                raise
            raise InternalFailure(f"{PROG} {args.command}: {error}") from None
        except Exception as error:  # noqa: BLE001 - any other failure is derive's own
            if os.environ.get("DERIVE_TRACEBACK"):
                raise
            what = "+".join(args.__dict__.get("variant") or []) or ROOT
            failed = DerivationError(f"run {args.command} on {what}", error)
            raise InternalFailure(f"{PROG} {args.command}: {failed}") from None
        finally:
            for warning in caught:
                if issubclass(warning.category, UnprovedClaim):
                    print(
                        f"{PROG} {args.command}: warning: {warning.message}; the document "
                        "marks it unproved (--strict refuses it)",
                        file=sys.stderr,
                    )
