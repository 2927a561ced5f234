"""The book's notation: letters and index ranges (`letters`; the book's own matrices in `book`,
each variant's declared by its entry), the matrix expressions SymPy lacks, and the LaTeX
printer every object and document shares (at the bottom of the pipeline: everything else
imports it, it imports nothing of `derive`)."""

from . import book, letters
from .matexpr import Concat, Diag, Entries, GroupConcat, RMSNorm, Softmax
from .printer import AttentionPrinter, latex

__all__ = [
    "letters",
    "book",
    "Concat",
    "GroupConcat",
    "Softmax",
    "RMSNorm",
    "Diag",
    "Entries",
    "AttentionPrinter",
    "latex",
]
