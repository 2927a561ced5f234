"""Numbers in, numbers out: converting inputs to exact SymPy matrices, and the values of each step.

Inputs may be torch tensors, NumPy arrays, nested lists, SymPy matrices; entries may be ints,
floats, `fractions.Fraction` or SymPy numbers. A float becomes the exact rational it stores (a
binary64 float is a dyadic rational), so nothing is rounded on the way in: duck typing on
``tolist()`` reads tensors and arrays without importing torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sympy as sp

__all__ = [
    "to_matrix",
    "to_rows",
    "Values",
    "evaluate_steps",
    "size_values",
    "compose",
    "exact_numbers",
    "by_letter",
]


# Any, not object, for a value told apart by isinstance against SymPy's classes or by hasattr:
# the type checker reads SymPy untyped (pyproject.toml) and follows no hasattr.
def _exact(name: str, value: Any) -> sp.Expr:
    """One entry as an exact SymPy number."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must hold numbers, got the bool {value!r}")
    if isinstance(value, sp.Basic):
        if not value.is_number or value.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
            raise ValueError(f"{name} must hold finite numbers, got {value}")
        return value
    if isinstance(value, numbers.Integral):
        return sp.Integer(int(value))
    if isinstance(value, numbers.Rational):
        return sp.Rational(int(value.numerator), int(value.denominator))
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{name} must hold finite numbers, got {number}")
        return sp.Rational(number)  # exact: the dyadic rational the float stores
    raise TypeError(f"{name} must hold real numbers, got {type(value).__name__} {value!r}")


def to_rows(name: str, value: Any) -> list:  # Any: see _exact
    """Nested Python lists from a tensor, an array, a SymPy matrix or nested sequences."""
    if isinstance(value, sp.MatrixBase):
        return value.tolist()
    if hasattr(value, "detach"):  # a torch tensor: leave autograd and the device behind
        value = value.detach().cpu()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_rows(name, item) if _nested(item) else item for item in value]
    raise TypeError(
        f"{name} must be a matrix (torch tensor, NumPy array, SymPy matrix or nested lists), "
        f"got {type(value).__name__}"
    )


def _nested(item: object) -> bool:
    return hasattr(item, "tolist") or (
        isinstance(item, Sequence) and not isinstance(item, str | bytes)
    )


def _shape_of(rows: object) -> tuple[int, ...]:
    shape: list[int] = []
    while isinstance(rows, list):
        shape.append(len(rows))
        rows = rows[0] if rows else None
    return tuple(shape)


def to_matrix(name: str, value: object, shape: tuple[int, int]) -> sp.ImmutableMatrix:
    """An exact `ImmutableMatrix` of the given shape; errors name the argument and both shapes."""
    rows = to_rows(name, value)
    received = _shape_of(rows)
    ragged = len(received) == 2 and any(
        not isinstance(row, list) or len(row) != received[1] for row in rows
    )
    if received != shape or ragged:
        raise ValueError(
            f"{name} must have shape {shape}, got "
            f"{'ragged rows' if ragged else f'shape {received}'}"
        )
    return sp.ImmutableMatrix([[_exact(name, entry) for entry in row] for row in rows])


@dataclass(frozen=True)
class Values:
    """The value of every step for one set of inputs, in derivation order.

    ``values["Omega"]`` (or ``values.Omega``) is a SymPy matrix; multi-head variants hold one
    matrix per head under ``"Omega_1"``, ``"Omega_2"``, … and ``Omega`` is the tuple of them.
    Projections and scores are exact rationals when the inputs are; the later steps are SymPy
    `Float`s with `digits` significant digits, or exact expressions when ``digits`` is None.
    """

    matrices: dict[str, sp.ImmutableMatrix]
    heads: int
    digits: int | None

    def __getitem__(self, letter: str) -> sp.ImmutableMatrix:
        if letter not in self.matrices:
            raise KeyError(f"no step produces {letter!r}; known: {list(self.matrices)}")
        return self.matrices[letter]

    def __iter__(self) -> Iterator[str]:
        return iter(self.matrices)

    def __getattr__(self, letter: str) -> sp.ImmutableMatrix | tuple[sp.ImmutableMatrix, ...]:
        matrices = self.__dict__.get("matrices", {})
        if letter in matrices:
            return matrices[letter]
        per_head = [matrices.get(f"{letter}_{head}") for head in range(1, self.heads + 1)]
        if self.heads > 1 and all(matrix is not None for matrix in per_head):
            return tuple(per_head)
        raise AttributeError(letter)

    def _repr_latex_(self) -> str:
        from ..notation import latex
        from ..notation.letters import MATRIX_LATEX as MATRIX_LETTERS

        lines = []
        for key, matrix in self.matrices.items():
            letter, _, head = key.rpartition("_") if key[-1].isdigit() else (key, "", "")
            name = MATRIX_LETTERS.get(letter, letter)
            name = f"{name}^{{({head})}}" if head else name
            if all(isinstance(entry, sp.Rational) for entry in matrix):
                lines.append(f"{name} &= {latex(matrix)}")  # exact: as it is
            else:
                lines.append(f"{name} &= {latex(matrix.evalf(8), decimals=6)}")
        return "$$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$$"

    def floats(self, letter: str) -> list[list[float]]:
        """One step's value as nested lists of Python floats (rounded once, at the end)."""
        return [[float(entry) for entry in row] for row in self[letter].tolist()]


def _float(value: sp.Expr, digits: int) -> sp.Float:
    """A number to `digits` digits: a rational rounded once, an exact expression (a parameter's
    −log n) evaluated to that precision."""
    value = sp.sympify(value)
    return sp.Float(value if value.is_Rational else value.evalf(digits), digits)


def evaluate_steps(steps: tuple, exact: dict, digits: int | None, heads: int) -> Values:
    """Substitute numbers into each step's formula in order (`xreplace`, exact).

    `exact` maps the input symbols and the sizes to exact numbers. Polynomial steps (projections,
    scores) are evaluated on exact values; the others on `digits`-digit Floats (SymPy then
    evaluates exp and the quotients numerically as it builds them), or exactly when `digits` is
    None. Each step's value feeds the next step under the step's named entries.
    """
    floats = None
    if digits is not None:
        floats = {symbol: _float(value, digits) for symbol, value in exact.items()}
    matrices = {}
    for step in steps:
        env = exact if step.polynomial or floats is None else floats
        value = step.formula.xreplace(env)
        if not step.polynomial and digits is not None:  # √2 and friends, to `digits` digits
            value = value.applyfunc(
                lambda e: e if e.is_Float else sp.Float(e.evalf(digits), digits)
            )
        matrices[step.output] = value
        pairs = list(zip(step.entries, value, strict=True))
        exact.update(pairs)
        if floats is not None:
            floats.update((symbol, sp.Float(entry, digits)) for symbol, entry in pairs)
    return Values(matrices, heads, digits)


def size_values(sizes: dict[sp.Symbol, int]) -> dict[sp.Basic, sp.Basic]:
    """The substitution of the concrete sizes for their symbols (n -> 5, c -> 2, …), and of
    the parameters (β -> 10000, ε -> 1/1000000)."""
    return {symbol: sp.sympify(size) for symbol, size in sizes.items()}


def compose(steps: Sequence, env: dict[sp.Basic, sp.Basic]) -> dict[str, sp.ImmutableMatrix]:
    """Each step's formula with the previous steps' composed entries substituted in, by output.

    `env` starts as the substitutions known so far and is extended in place with every step's
    named entries, so that a later call can compose further steps on top.
    """
    composed = {}
    for step in steps:
        value = step.formula.xreplace(env)
        composed[step.output] = value
        env.update(zip(step.entries, value, strict=True))
    return composed


def by_letter(
    inputs: dict[str, sp.ImmutableMatrix], positional: tuple, given: dict[str, object]
) -> dict[str, object]:
    """The inputs of an `evaluate`: given by letter, or positionally in the order of `inputs`;
    a TypeError names what is missing or unknown."""
    if len(positional) > len(inputs):
        raise TypeError(
            f"evaluate takes at most {len(inputs)} inputs ({', '.join(inputs)}), got "
            f"{len(positional)}"
        )
    found = dict(zip(inputs, positional, strict=False)) | given
    missing = sorted(set(inputs) - set(found))
    unknown = sorted(set(found) - set(inputs))
    if missing or unknown:
        raise TypeError(
            f"evaluate needs exactly {list(inputs)}: missing {missing}, unknown {unknown}"
        )
    return found


def exact_numbers(
    inputs: dict[str, sp.ImmutableMatrix],
    sizes: dict[sp.Symbol, int],
    given: dict[str, object],
    digits: int | None,
) -> dict[sp.Basic, sp.Basic]:
    """The exact substitution for `evaluate`: the sizes, and each given input's entries read
    exactly; `digits` checked on the way."""
    if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int)):
        raise TypeError(f"digits must be a positive int or None, got {digits!r}")
    if digits is not None and digits < 1:
        raise ValueError(f"digits must be a positive int or None, got digits={digits}")
    exact = size_values(sizes)
    for name, value in given.items():
        symbols = inputs[name]
        exact.update(zip(symbols, to_matrix(name, value, symbols.shape), strict=True))
    return exact
