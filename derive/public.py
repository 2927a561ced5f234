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

    Example:
        >>> [step.output for step in steps("sliding-window")][-4:]
        ['M', 'Omega_masked', 'A', 'C']
    """
    return calculus.steps(variant(name).graph)


def backward_steps(name: str = ROOT_NAME) -> tuple[calculus.Gradient, ...]:
    """Every gradient of a variant at symbolic sizes, derived by reverse mode, each printed form
    checked by numbers against the chain rule at concrete sizes first (a `DerivationError`
    names one that differs: `derive.explicit.checked`).

    Example:
        >>> [g.output for g in backward_steps()][:3]
        ['dA', 'dV', 'dOmega_scaled']
    """
    return checked_backward(variant(name))


def facts(name: str = ROOT_NAME) -> tuple[Fact, ...]:
    """The facts of a variant's document, each claim proved at its stage (self-attention's:
    rows sum to 1, shift invariance, the variances). A fact that does not hold says why
    (`Fact.verdict`: proved, unproved, or false with its counter-example).

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
    r"""The derivation of ``options.variant`` (a `derive.DocumentOptions`) as LaTeX (a
    standalone article, or with `fragment` the body to \input), Markdown (``$$`` math) or one
    self-contained HTML page. With ``options.example`` the worked example is computed (torch)
    unless given.

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
