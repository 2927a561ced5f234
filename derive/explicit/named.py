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
    """A variant written out at sizes n, d, c and its own (``w=3``, ``h=2``; its defaults
    otherwise): every step's entries, their formulas, `evaluate` for numbers. A variant whose
    mask is given (``"masked"``) takes it as booleans, True where a query may attend: `mask`
    (n, n) and `key_padding_mask` (n,), True for the keys that exist (both: where both allow).

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
    (`explicit_variant`'s forward steps): `dC` (fresh entries \bar{z}_{m,j}), every gradient
    (``dX``, ``dW_q``, ``dA``; a tuple per head), `evaluate`, and `residuals` against the forms
    derived at symbolic sizes. Each size is at most `derive.explicit.MAX_GRADIENT_SIZE`.

    Example:
        >>> explicit_gradients("self-attention", 2, 3, 2).dW_q.shape
        (3, 2)
    """
    return ExplicitGradients(explicit_variant(name, n, d, c, **sizes))
