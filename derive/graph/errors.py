"""The two ways a derivation fails, told apart: the user's mistake, and derive's own.

- `DeclarationError`: a mistake in a declaration (a letter no step defines, an index outside its
  range, shapes that do not chain, a twin that does not exist or returns the wrong shape, a claim
  a counter-example refutes). The command line prints it as one line and exits with status 2.
- `DerivationError`: derive could not do what the declaration asks, though nothing in it is
  wrong that derive can name (SymPy failed on a step, a rule of derive's met a form it does not
  know). It names what derive was doing and the step, and gives a hint; the command line prints
  it as one line and exits with status 1 (a failure of the tool, not of its input).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["DeclarationError", "DerivationError", "deriving", "REPORT"]

#: What to do about a failure of derive's own.
REPORT = "set DERIVE_TRACEBACK=1 for the traceback, and report it with your declaration"


class DeclarationError(ValueError):
    """A mistake in the declaration of a variant: the message names the variant, the step and
    what is wrong (a letter no step defines, an index outside its range, shapes that do not
    chain, a twin that does not exist)."""


class DerivationError(RuntimeError):
    """derive could not do what a declaration asks (see the module docstring).

    Attributes:
        doing: what derive was doing, as words that follow "derive could not" ("derive the
            gradient of S through step ssmax_weights (A)").
        cause: the exception it met, as "Type: message".
        hint: what may help, or "" (then `REPORT`).
    """

    def __init__(self, doing: str, cause: BaseException | str, hint: str = "") -> None:
        self.doing = doing
        self.cause = cause if isinstance(cause, str) else _said(cause)
        self.hint = hint
        super().__init__(f"derive could not {doing}: {self.cause}; {hint or REPORT}")


def _said(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.contextmanager
def deriving(doing: str, hint: str = "") -> Iterator[None]:
    """Any failure inside, but the user's own mistakes (`DeclarationError`) and derive's already
    named ones, becomes a `DerivationError` that says what derive was `doing`."""
    try:
        yield
    except (DeclarationError, DerivationError, KeyboardInterrupt):
        raise
    except RecursionError as error:
        raise DerivationError(doing, error, hint) from error
    except Exception as error:  # noqa: BLE001 - named, with what derive was doing
        raise DerivationError(doing, error, hint) from error
