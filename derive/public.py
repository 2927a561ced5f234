"""The functions of the public face that take a variant's name (`derive`'s module docstring):
each resolves the name in the registry, then calls the layer that computes what it asks."""

from __future__ import annotations

from typing import Any

from . import calculus
from .explicit.checked import checked_backward
from .explicit.named import explicit_gradients, explicit_variant
from .graph import variant
from .graph.registry import ROOT as ROOT_NAME
from .proofs import Fact
from .proofs.claims import prove

__all__ = [
    "steps",
    "backward_steps",
    "facts",
    "explicit_variant",
    "explicit_gradients",
    "document",
    "FORMATS",
]

#: The documents `document` writes (the command line adds pdf and notebook).
FORMATS = ("latex", "markdown", "html")


def steps(name: str = ROOT_NAME) -> tuple[calculus.Step, ...]:
    """The steps of a variant, each with its declaration and the matrix form SymPy derives
    from it.

    Args:
        name: a registered variant's name, or several joined by `+` (`"gqa+rope"`); default
            `"self-attention"`.

    Returns:
        Every step, in forward order (`step.output` is its letter: `"Omega"`, `"A"`, `"C"`).

    Raises:
        ValueError: when `name` is not registered (the message names the closest) or its
            parts do not combine.
        DerivationError: when SymPy cannot derive a step's matrix form (the message names
            the step).

    Example:
        >>> [step.output for step in steps("sliding-window")][-4:]
        ['M', 'Omega_masked', 'A', 'C']
    """
    return calculus.steps(variant(name).graph)


def backward_steps(name: str = ROOT_NAME) -> tuple[calculus.Gradient, ...]:
    """Every gradient of a variant at symbolic sizes, derived by reverse mode, each printed form
    checked by numbers against the chain rule at concrete sizes first (`derive.explicit.checked`).

    Args:
        name: a registered variant's name, or several joined by `+` (`"gqa+rope"`); default
            `"self-attention"`.

    Returns:
        Every gradient (`g.output` is its letter: `"dA"`, `"dV"`, `"dX"`), from the output's
            back to the inputs'.

    Raises:
        ValueError: when `name` is not registered (the message names the closest) or its
            parts do not combine.
        DerivationError: when a printed form differs from the chain rule by numbers, or
            SymPy cannot derive one (the message names it).

    Example:
        >>> [g.output for g in backward_steps()][:3]
        ['dA', 'dV', 'dOmega_scaled']
    """
    return checked_backward(variant(name))


def facts(name: str = ROOT_NAME) -> tuple[Fact, ...]:
    """The facts of a variant's document, each claim proved at its stage (self-attention's:
    rows sum to 1, shift invariance, the variances).

    Args:
        name: a registered variant's name, or several joined by `+` (`"gqa+rope"`); default
            `"self-attention"`.

    Returns:
        One `Fact` per claim, in the entry's order. A fact that does not hold says why
            (`Fact.verdict`: proved, unproved, or false with its counter-example); none raises.

    Raises:
        ValueError: when `name` is not registered (the message names the closest) or its
            parts do not combine.

    Example:
        >>> [fact.name for fact in facts("sliding-window")]
        ['rows_sum_to_one', 'same_as', 'allowed_pairs']
    """
    entry = variant(name)
    return tuple(prove(stage.graph, claim, stage.before) for claim, stage in entry.claims)


def document(
    options: Any,
    *,
    format: str = "latex",  # noqa: A002 - the word a reader uses
    fragment: bool = False,
    example: Any = None,
) -> str:
    r"""The derivation of ``options.variant`` as LaTeX, Markdown or one self-contained HTML
    page.

    Args:
        options: what the document contains (a `derive.DocumentOptions`: the variant, the
            explicit sizes, the worked example, the figures).
        format: `"latex"` (the default), `"markdown"` (``$$`` math) or `"html"` (KaTeX and
            the figures inlined).
        fragment: for `"latex"`, the body to `\input` instead of a standalone article;
            ignored by the other formats.
        example: the worked example (`derive.worked_example`'s); None computes it with torch
            where `options.example` asks for one.

    Returns:
        The document's text.

    Raises:
        ValueError: when `format` is not one of `FORMATS`, or the worked example cannot be
            made at `options.sizes`.
        RuntimeError: when the computed worked example's torch and declared values disagree.

    Example:
        >>> from derive import DocumentOptions
        >>> tex = document(DocumentOptions(sizes=(3, 4, 2)))
        >>> tex.count("% provenance: declared")
        8
    """
    from .render import documents

    if format not in FORMATS:
        raise ValueError(f"format is one of {', '.join(FORMATS)}, got format={format!r}")
    if example is None and options.example:
        from .bridge.example import example_for

        example = example_for(options)
    if format == "html":
        return documents.html_document(options, example=example)
    if format == "markdown":
        return documents.markdown_document(options, example=example)
    return documents.latex_document(options, fragment=fragment, example=example)
