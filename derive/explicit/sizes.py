"""Validation of the concrete sizes n, d, c, heads: the errors name the argument and the value.

`MAX_SIZE` bounds each explicit size. Building the steps and evaluating them grows like the work
(about n²c + ndc operations): the whole symbolic-vs-numeric check takes about 0.25 s at
n = d = c = 8 and 1.7 s at 16 on a 2-core machine (docs/benchmarks.md). Past 16 the
check runs for many seconds and the explicit documents run to hundreds of pages, so larger
sizes are refused up front rather than left to hang; the generic derivation (symbolic n, d, c)
covers every size.
"""

from __future__ import annotations

import numbers

__all__ = ["MAX_SIZE", "check_size", "check_sizes"]

#: The largest n, d or c that `explicit_attention` accepts.
MAX_SIZE = 16


def check_size(
    name: str,
    value: object,
    *,
    limit: int = MAX_SIZE,
    what: str = "derive.explicit.MAX_SIZE",
    generic: str = "derive.steps()",
) -> int:
    """Return `value` as an int if it is a positive integer no larger than `limit`.

    `what` names the limit in the message and `generic` the symbolic alternative
    (`derive.explicit.MAX_GRADIENT_SIZE` and `derive.backward_steps()` for the backward pass).

    Raises `TypeError` for a bool, a float or anything that is not an integer, and `ValueError`
    for an integer below 1 or above `limit`; the message names the argument and its value.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    size = int(value)
    if size < 1:
        raise ValueError(f"{name} must be a positive int, got {name}={size}")
    if size > limit:
        raise ValueError(
            f"{name}={size} is over the limit of {limit} for explicit matrices "
            f"({what}); use the generic derivation ({generic}) for symbolic sizes"
        )
    return size


def check_sizes(n: object, d: object, c: object, heads: object = 1) -> tuple[int, int, int, int]:
    """Check n, d, c and heads together; heads must divide c."""
    sizes = (check_size("n", n), check_size("d", d), check_size("c", c))
    count = check_size("heads", heads)
    if sizes[2] % count:
        raise ValueError(
            f"heads must divide c: got heads={count} and c={sizes[2]} "
            f"(c / heads = {sizes[2] / count:g} is not an integer)"
        )
    return (*sizes, count)
