r"""The stated assumptions behind the scaling by 1/√c (the book's reason for it), declared.

The components of a query and of a key are random variables: q_j with mean μ_q and variance
σ_q², k_j with mean μ_k and variance σ_k², all independent (distinct components of one vector,
and a query's from a key's). The book's case is μ = 0 and σ² = 1. These, with the declarations
of the steps, are the only hand-entered mathematics: `derive.proofs.variance` derives
Var(ω_{m,p}) = c and Var(ω̃_{m,p}) = 1 from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["Assumptions", "ASSUMPTIONS", "mu", "sigma2", "E", "Var"]

#: The expectation and the variance, as the documents print them.
E = sp.Function("E")
Var = sp.Function("Var")


def mu(name: str) -> sp.Symbol:
    """The mean of the components of the query (``"q"``) or the key (``"k"``)."""
    return sp.Symbol(f"mu_{name}", real=True)


def sigma2(name: str) -> sp.Symbol:
    """The variance of the components of the query (``"q"``) or the key (``"k"``)."""
    return sp.Symbol(f"sigma_{name}^2", positive=True)


@dataclass(frozen=True)
class Assumptions:
    """Independent components, each family with one mean and one variance, and their values.

    Attributes:
        families: the entry names whose components are random (``("q", "k")``).
        values: the book's values of the means and variances (μ = 0, σ² = 1).
    """

    families: tuple[str, ...]
    values: tuple[tuple[sp.Symbol, sp.Expr], ...]

    def rows(self) -> tuple[tuple[sp.Expr, sp.Symbol, sp.Expr], ...]:
        """(E(q_j), μ_q, 0), (Var(q_j), σ_q², 1), …: each moment, its symbol and its value."""
        from ..notation import letters as L

        values = dict(self.values)
        rows = []
        for name in self.families:
            entry = sp.IndexedBase(name, real=True)[L.j]
            rows.append((E(entry), mu(name), values[mu(name)]))
            rows.append((Var(entry), sigma2(name), values[sigma2(name)]))
        return tuple(rows)


#: The book's assumptions: independent components with mean 0 and variance 1.
ASSUMPTIONS = Assumptions(
    families=("q", "k"),
    values=(
        (mu("q"), sp.S.Zero),
        (mu("k"), sp.S.Zero),
        (sigma2("q"), sp.S.One),
        (sigma2("k"), sp.S.One),
    ),
)
