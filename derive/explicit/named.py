"""A variant at concrete sizes, by its name: `explicit_variant` (its forward steps, entry by
entry) and `explicit_gradients` (its backward pass by the chain rule), the public face's
(`derive.explicit_variant`, `derive.explicit_gradients`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy as sp

from ..graph import explicit_sizes, variant
from ..graph.registry import ROOT
from ..notation import letters as L
from .forward import ExplicitGraph, allowed_keys
from .gradients import ExplicitGradients
from .sizes import check_size

__all__ = ["explicit_variant", "explicit_gradients"]


def explicit_variant(
    name: str = ROOT,
    n: int = 3,
    d: int = 4,
    c: int = 2,
    *,
    mask: Sequence | Any = None,
    key_padding_mask: Sequence | Any = None,
    **sizes: object,
) -> ExplicitGraph:
    """A variant written out at sizes n, d, c and its own: every step's entries, their
    formulas, `evaluate` for numbers.

    Args:
        name: a registered variant's name, or several joined by `+` (`"gqa+rope"`); default
            `"self-attention"`.
        n: the number of tokens, the rows of X (default 3).
        d: the width of X's rows (default 4).
        c: the width of Q, K, V (default 2).
        mask: for a variant whose mask is given (`"masked"`), booleans `(n, n)`, True where
            query m may attend key p; None for none.
        key_padding_mask: for such a variant too, booleans `(n,)`, True for the keys that
            exist (with `mask`, a key is read where both allow); None for none.
        **sizes: the variant's own sizes and parameters by name (``w=3``, ``h=2``); its
            defaults otherwise.

    Returns:
        The variant's graph at these sizes (`ExplicitGraph`): its inputs' and steps' entries
            as attributes by letter (``explicit.A``).

    Raises:
        TypeError: when a size is not an int (a bool or a float included).
        ValueError: when `name` is not registered, a size is below 1 or over
            `derive.explicit.MAX_SIZE` (16), a size or parameter is not the variant's own, the
            sizes break one of its conditions, a mask is not booleans of its shape, or a mask
            is given to a variant that takes none (or missing for one that takes it).

    Example:
        >>> explicit = explicit_variant("sliding-window", 4, 3, 2, w=2)
        >>> explicit.A[3, 0]  # the fourth token does not see the first
        0
    """
    found = variant(name)
    n, d, c = (check_size(k, v) for k, v in (("n", n), ("d", d), ("c", c)))
    own = {str(size.symbol) for size in found.sizes}
    sizes = {k: check_size(k, v) if k in own else v for k, v in sizes.items()}
    at = explicit_sizes(found, n, d, c, sizes)
    given = {}
    if mask is not None or key_padding_mask is not None:
        if "M" not in found.graph.inputs:
            raise ValueError(
                f"{found.name} declares its own mask or none; a mask is given to a variant "
                "that takes one (masked, or a combination with it)"
            )
        allowed = allowed_keys(n, False, mask, key_padding_mask)
        for row in range(n):
            for col in range(n):
                value = sp.S.Zero if allowed[row][col] else -sp.oo
                given[L.base("mask")[row + 1, col + 1]] = value
    elif "M" in found.graph.inputs:
        raise ValueError(f"{found.name} takes its mask as given: give mask= or key_padding_mask=")
    return ExplicitGraph(found.graph, at, heads=int(at.get(L.h, 1)), given=given)


def explicit_gradients(
    name: str = ROOT, n: int = 3, d: int = 4, c: int = 2, **sizes: object
) -> ExplicitGradients:
    r"""The backward pass of a variant at concrete sizes, entry by entry by the chain rule
    (`explicit_variant`'s forward steps).

    Args:
        name: a registered variant's name, or several joined by `+` (`"gqa+rope"`); default
            `"self-attention"`.
        n: the number of tokens, the rows of X (default 3).
        d: the width of X's rows (default 4).
        c: the width of Q, K, V (default 2).
        **sizes: the variant's own sizes and parameters by name (``w=3``, ``h=2``); its
            defaults otherwise.

    Returns:
        The gradients (`ExplicitGradients`): `dC` (fresh entries `\bar{z}_{m,j}`), every
            gradient by its letter (``dX``, ``dW_q``, ``dA``; a tuple per head), `evaluate`, and
            `residuals` against the forms derived at symbolic sizes.

    Raises:
        TypeError: when a size is not an int (a bool or a float included).
        ValueError: as `explicit_variant` raises it, or when a size is over
            `derive.explicit.MAX_GRADIENT_SIZE` (8).

    Example:
        >>> explicit_gradients("self-attention", 2, 3, 2).dW_q.shape
        (3, 2)
    """
    return ExplicitGradients(explicit_variant(name, n, d, c, **sizes))
