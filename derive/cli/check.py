"""`derive check`: the derivation against the torch implementation, trial by trial.

Without --seed, each run draws a fresh seed (and prints it, so that a failure can be rerun);
sizes not given are drawn from it. Exit status 0 when every row passes, 1 when one does not.
"""

from __future__ import annotations

import random
import sys
from typing import TextIO

from .errors import EnvironmentProblem, UsageError

__all__ = ["run_check", "SEED_LIMIT"]

#: Seeds are drawn from and accepted in 0 … SEED_LIMIT (torch's generators take 64-bit seeds;
#: each trial and the upstream gradient add one to it).
SEED_LIMIT = 2**32 - 1


def run_check(args, out: TextIO | None = None) -> int:
    """Execute `derive check`; 0 when every step of every trial passes, 1 otherwise."""
    out = sys.stdout if out is None else out
    from .documents import variant_arguments

    name, heads, extra = variant_arguments(args)
    given = dict(extra)
    if name is not None and (args.causal or heads > 1):
        raise UsageError(
            f"derive check: variant {name!r} is its own graph: --causal"
            f"{' and --heads do' if heads > 1 else ' does'} not apply to it"
        )
    if given and name is None:
        raise UsageError(f"derive check: {', '.join('--' + k.replace('_', '-') for k in given)}"
                         " belong to a variant; give --variant")  # fmt: skip
    multiple = args.heads if name is None else _multiple(name, given)
    if args.c is not None and args.c % multiple and name is None:
        raise UsageError(
            f"derive check: --heads {args.heads} does not divide --c {args.c} "
            "(each head gets c / heads columns)"
        )
    if args.c is not None and args.c % multiple:
        raise UsageError(f"derive check: --c {args.c} is not a multiple of {multiple} "
                         f"{_why(name, given)}")  # fmt: skip
    if name is not None:
        _fits(name, given, multiple)
    try:
        import torch  # noqa: F401 - fail early, with a clear message

        import attention  # noqa: F401

        from ..bridge.check import draw_sizes, format_table, trial_rows
        from ..bridge.variants import variant_rows
    except ImportError as error:
        raise EnvironmentProblem(
            f"derive check compares with the torch implementation and needs torch ({error}); "
            "pip install torch"
        ) from None
    seed = args.seed if args.seed is not None else random.SystemRandom().randint(0, SEED_LIMIT)
    if args.seed is None:
        print(f"derive check: seed {seed} (rerun with --seed {seed})", file=out)
    rng = random.Random(seed)
    failures = compared = 0
    for trial in range(1, args.trials + 1):
        n, d, c = draw_sizes(rng, args.n, args.d, args.c, multiple)
        inputs_seed = (seed + trial - 1) % (SEED_LIMIT + 1)
        if name is None:
            rows, note = trial_rows(n, d, c, causal=args.causal, heads=args.heads,
                                    seed=inputs_seed, forward_only=args.forward_only)  # fmt: skip
        else:
            rows, note = variant_rows(name, n, d, c, given, seed=inputs_seed,
                                      forward_only=args.forward_only)  # fmt: skip
        variant = ", causal" if args.causal else ""
        variant += f", {name}" if name else ""
        variant += "".join(f", {k}={v}" for k, v in given.items())
        heads = f", {args.heads} heads" if args.heads > 1 else ""
        print(f"trial {trial}/{args.trials}: n={n} d={d} c={c}{variant}{heads}, "
              f"inputs seed {inputs_seed}", file=out)  # fmt: skip
        print(format_table(rows), file=out)
        if note:
            print(f"  ({note})", file=out)
        failures += sum(not row.passed for row in rows)
        compared += len(rows)
    verdict = "all pass" if failures == 0 else f"{failures} FAIL"
    print(f"derive check: {compared} step values compared, {verdict}", file=out)
    return 0 if failures == 0 else 1


def _multiple(name: str, given: dict[str, int]) -> int:
    """What c must be a multiple of for a variant: its heads, twice that with RoPE."""
    from ..graph.variants import variant
    from ..notation import letters as L

    found = variant(name)
    heads = given.get("h", dict(found.sizes).get(L.h, 1))
    rope = any(step.name == "apply_rope" for step in found.graph.declarations)
    return heads * (2 if rope else 1)


def _why(name: str, given: dict[str, int]) -> str:
    from ..graph.variants import variant

    found = variant(name)
    rope = any(step.name == "apply_rope" for step in found.graph.declarations)
    parts = ["each head gets c / h columns"] if found.heads else []
    parts += ["RoPE rotates pairs of features"] if rope else []
    return "(" + "; ".join(parts) + ")"


def _fits(name: str, given: dict[str, int], c: int) -> None:
    """Sizes of the variant that cannot go together (g not dividing h): a usage error."""
    from ..graph.variants import explicit_sizes, variant

    try:
        explicit_sizes(variant(name), 1, 1, c, given)
    except ValueError as error:
        raise UsageError(f"derive check: {error}") from None
