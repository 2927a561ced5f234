"""The sizes a declaration adds, the parameters it reads, and the conditions it puts on them.

Each is stated once, where it belongs: RoPE's rotation needs an even width (on its step),
grouped-query attention needs g to divide h (on its split into groups), a window needs w ≥ 1
(on its mask). The explicit sizes of a document, `derive check`'s random draws and the messages
of the command line all read them from there (`derive.graph.registry.explicit_sizes`,
`derive.graph.registry.Entry.draw`).

A `Constraint` is a condition on size symbols; `holds(sizes)` is True or False once every symbol
it reads has a value (None before), and `message(sizes)` says what is wrong, naming the sizes
and their values, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..notation import letters as L

__all__ = ["Size", "Parameter", "Constraint", "Divides", "Even", "AtLeast", "Above", "label"]


@dataclass(frozen=True)
class Size:
    """A size a variant adds to n, d, c (the window w, the groups g).

    Args:
        symbol: the size's symbol (a positive integer ``sympy.Symbol``).
        default: its value at explicit sizes, where no option gives another.
        text: a few words for the command line's help.
        option: the command line's ``--option`` that gives it, where its name is not the
            symbol's (``block-keys`` for B_c); empty (the default): the symbol's name, ``_``
            written ``-``.
        meaning: the glossary's sentence (LaTeX allowed); empty (the default): `text`.
    """

    symbol: sp.Symbol
    default: int
    text: str = ""
    option: str = ""  # the command line's --option (default: the symbol's name, _ as -)
    meaning: str = ""  # the glossary's sentence (LaTeX allowed; default: the text)


@dataclass(frozen=True)
class Parameter:
    """A number a variant's formulas read that is not a size (RoPE's base β, QK-norm's ε, a
    bias b).

    Args:
        symbol: the parameter's ``sympy.Symbol``.
        default: its value at explicit sizes: a number, or an expression in the sizes
            (``-log n``).
        text: a few words on what it is, for the list of a variant's steps and the glossary.
        meaning: the glossary's sentence (LaTeX allowed); empty (the default): `text`.
    """

    symbol: sp.Symbol
    default: sp.Expr
    text: str = ""
    meaning: str = ""  # the glossary's sentence (LaTeX allowed; default: the text)


def label(expr: sp.Expr) -> str:
    """How a message names a size: ``c / h`` for c_h, ``d_y`` for d_y."""
    return "c / h" if expr == L.c_h else str(expr)


def _value(expr: sp.Expr, sizes: dict) -> sp.Expr:
    return sp.sympify(expr).xreplace({k: sp.sympify(v) for k, v in sizes.items()})


class Constraint:
    """A condition on sizes (see the module docstring). Subclasses say `condition` and how
    they read in a message."""

    why: str

    def condition(self) -> sp.Basic:
        raise NotImplementedError

    @property
    def symbols(self) -> frozenset[sp.Symbol]:
        return frozenset(self.condition().free_symbols)

    def holds(self, sizes: dict) -> bool | None:
        """True or False where every size it reads is known, None otherwise."""
        decided = _value(self.condition(), sizes)
        if decided in (sp.true, sp.false):
            return bool(decided)
        return None

    def message(self, sizes: dict) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Divides(Constraint):
    """`small` divides `large` (h divides c: each head gets c / h columns).

    Args:
        small: the size that divides (h).
        large: the size it divides (c).
        why: the reason, said at the end of the message (``"each head gets c / h columns"``).
    """

    small: sp.Expr
    large: sp.Expr
    why: str

    def condition(self) -> sp.Basic:
        """The condition on the sizes.

        Returns:
            ``Eq(Mod(large, small), 0)``.
        """
        return sp.Eq(sp.Mod(self.large, self.small), 0)

    def message(self, sizes: dict) -> str:
        """What is wrong where the condition fails.

        Args:
            sizes: the value of each size symbol.

        Returns:
            One line naming both sizes and their values, with the reason
                (``h=3 does not divide c=8 (…)``).
        """
        a, b = _value(self.small, sizes), _value(self.large, sizes)
        return f"{label(self.small)}={a} does not divide {label(self.large)}={b} ({self.why})"


@dataclass(frozen=True)
class Even(Constraint):
    """`size` is even (RoPE rotates pairs of features).

    Args:
        size: the size that must be even (c_h).
        why: the reason, said at the start of the message (``"RoPE rotates pairs of features"``).
    """

    size: sp.Expr
    why: str

    def condition(self) -> sp.Basic:
        """The condition on the sizes.

        Returns:
            ``Eq(Mod(size, 2), 0)``.
        """
        return sp.Eq(sp.Mod(self.size, 2), 0)

    def message(self, sizes: dict) -> str:
        """What is wrong where the condition fails.

        Args:
            sizes: the value of each size symbol.

        Returns:
            One line naming the size and its value, after the reason (``…: c / h=3 must be
                even``).
        """
        return f"{self.why}: {label(self.size)}={_value(self.size, sizes)} must be even"


@dataclass(frozen=True)
class AtLeast(Constraint):
    """`size` ≥ `bound` (a window of at least one key; n ≥ w + 1, a window narrower than the
    sequence).

    Args:
        size: the size bounded below (n).
        bound: its least value, a number or an expression in the sizes (w + 1).
        why: the reason, said at the end of the message.
    """

    size: sp.Expr
    bound: sp.Expr
    why: str

    def condition(self) -> sp.Basic:
        """The condition on the sizes.

        Returns:
            ``Ge(size, bound)``.
        """
        return sp.Ge(self.size, self.bound)

    def message(self, sizes: dict) -> str:
        """What is wrong where the condition fails.

        Args:
            sizes: the value of each size symbol.

        Returns:
            One line naming the size, its value and the bound's, with the reason
                (``w=0 must be at least 1 (…)``).
        """
        value, bound = _value(self.size, sizes), _value(self.bound, sizes)
        return f"{label(self.size)}={value} must be at least {bound} ({self.why})"


@dataclass(frozen=True)
class Above(Constraint):
    """`value` > `bound`, strictly (Llama 3.1's high frequency factor above its low one).

    Args:
        value: the size or parameter bounded below (α_h).
        bound: what it must exceed (α_l).
        why: the reason, said at the end of the message.
    """

    value: sp.Expr
    bound: sp.Expr
    why: str

    def condition(self) -> sp.Basic:
        """The condition on the sizes.

        Returns:
            ``Gt(value, bound)``.
        """
        return sp.Gt(self.value, self.bound)

    def message(self, sizes: dict) -> str:
        """What is wrong where the condition fails.

        Args:
            sizes: the value of each size symbol.

        Returns:
            One line naming both and their values, with the reason.
        """
        value, bound = _value(self.value, sizes), _value(self.bound, sizes)
        return f"{label(self.value)}={value} must be above {label(self.bound)}={bound} ({self.why})"
