"""`derive check`: an entry of the registry against its torch twins, trial by trial
(`derive.bridge.check`).

Without --seed, each run draws a fresh seed (and prints it, so that a failure can be rerun);
sizes not given are drawn from it, every condition the entry states holding (an even head width
for RoPE, g dividing h, a window narrower than the sequence, n ≥ 2). Exit status 0 when every
row passes, 1 when one does not.
"""

from __future__ import annotations

import random
import sys
from typing import TextIO

from ..graph import DeclarationError, variant
from .errors import EnvironmentProblem, UsageError
from .parsing import PROG, add_sizes, add_variant, entry_of, given_sizes, integer, model_layer

__all__ = ["add", "run", "run_check", "SEED_LIMIT"]

#: Seeds are drawn from and accepted in 0 … SEED_LIMIT (`derive.bridge.check.SEED_LIMIT`,
#: repeated here so that the parser does not import torch).
SEED_LIMIT = 2**32 - 1

EPILOG = """examples:
  derive check                     # random sizes, one trial
  derive check --n 5 --d 3 --c 4 --heads 2 --causal
  derive check --variant rope --trials 10 --seed 7
  derive check --variant docs/examples/sigmoid_attention.py:SIGMOID

exit status: 0 when every step agrees, 1 when one does not, 2 for bad input"""


def add(commands, argparse) -> None:
    text = "compare every step of the derivation with the torch implementation (needs torch)"
    sub = commands.add_parser(
        "check",
        help=text,
        epilog=EPILOG,
        description=text + ": a table of step, shape, largest difference, tolerance, result",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_sizes(sub, "{meaning} (default: drawn at random with the seed)")
    sub.add_argument(
        "--seed",
        type=integer(minimum=0, limit=SEED_LIMIT),
        metavar="S",
        help="seed of sizes and inputs (default: a fresh one each run, printed)",
    )
    sub.add_argument(
        "--trials", type=integer(limit=10_000), default=1, metavar="K", help="how many draws"
    )
    sub.add_argument(
        "--forward-only", action="store_true", help="skip the backward pass (the gradients)"
    )
    sub.add_argument(
        "-q", "--quiet", action="store_true", help="print only the rows that fail and the verdict"
    )
    add_variant(sub, "the check")


def run(args, progress=None) -> int:
    return run_check(args)


def run_check(args, out: TextIO | None = None) -> int:
    """Execute `derive check`; 0 when every step of every trial passes, 1 otherwise."""
    out = sys.stdout if out is None else out
    layer = model_layer(
        args, lambda message, always=False: print(f"{PROG}: {message}", file=sys.stderr)
    )
    entry = variant(entry_of(args, layer))
    given = given_sizes(args) | {k: getattr(args, k) for k in "ndc" if getattr(args, k)}
    if layer is not None:  # the model's numbers; its sizes (h, g, a window) too large to check
        sizes = {str(s.symbol) for v in entry.chain for s in v.sizes}
        kept = {k: v for k, v in layer.values if k not in sizes}
        given = kept | given
        print(
            f"{PROG} check: {layer.said()}; its parameters given, its sizes drawn small",
            file=out,
        )
    if args.heads > 1:
        given["h"] = args.heads
    try:
        import torch  # noqa: F401 - fail early, with a clear message

        import attention  # noqa: F401

        from ..bridge.check import draw_sizes, format_table, run_trials
    except ImportError as error:
        raise EnvironmentProblem(
            f"derive check compares with the torch implementation and needs torch ({error}); "
            "pip install torch"
        ) from None
    try:
        draw_sizes(entry, random.Random(0), given)  # the given sizes fit the entry
    except ValueError as error:
        raise UsageError(f"{PROG} check: {error}") from None
    seed = args.seed if args.seed is not None else random.SystemRandom().randint(0, SEED_LIMIT)
    quiet = getattr(args, "quiet", False)
    if args.seed is None:
        print(f"{PROG} check: seed {seed} (rerun with --seed {seed})", file=out)
    failures = compared = 0
    found = run_trials(entry, given, seed=seed, count=args.trials, forward_only=args.forward_only)
    for number in range(1, args.trials + 1):
        try:
            trial = next(found)
        except DeclarationError as error:
            raise UsageError(f"{PROG} check: {error}") from None
        shown = " ".join(f"{k}={trial.sizes[k]}" for k in "ndc")
        told = trial.sizes | trial.values  # the values checked, said: given or default
        more = "".join(f", {k}={v}" for k, v in told.items() if k not in "ndc")
        if not quiet or not trial.passed:
            print(
                f"trial {number}/{args.trials}: {entry.name}, {shown}{more}, inputs seed "
                f"{trial.seed}",
                file=out,
            )
        shown = [row for row in trial.rows if not row.passed] if quiet else trial.rows
        if shown:
            print(format_table(shown), file=out)
        if trial.note and not quiet:
            print(f"  ({trial.note})", file=out)
        failures += sum(not row.passed for row in trial.rows)
        compared += len(trial.rows)
    verdict = "all pass" if failures == 0 else f"{failures} FAIL"
    print(f"{PROG} check: {compared} step values compared, {verdict}", file=out)
    return 0 if failures == 0 else 1
