"""The explanation pages of the documentation site that the derivation itself explains, cut
from its Markdown documents (so that they say what the documents say, and drift with nothing):
why the scores are scaled, the backward pass, and where float32 breaks FlashAttention's route
to the weights. Each is a short introduction, then the document's own sections, one heading
level up, its figures read from `docs/figures/` (the pages sit in `docs/explanation/`)."""

import re
from collections.abc import Callable

__all__ = ["explanation_pages", "section"]

#: page -> (title, introduction, which document, the first heading, the heading it stops at)
PAGES = {
    "explanation/scaling.md": (
        "Why 1/√c",
        "The book scales the scores by 1/√c before the softmax. Here is why, derived rather than "
        "asserted: from the moments the book assumes of the queries' and keys' components, an "
        "expectation operator that knows only linearity and independence derives the variance "
        "of a score, then of a scaled one. From [the derivation](../derivation.html).",
        "self-attention",
        "### Why the scores are scaled",
        "## ",
    ),
    "explanation/backward.md": (
        "The backward pass",
        "Every gradient of self-attention, derived by reverse mode from the declarations at "
        "symbolic sizes: through the context, the softmax, the scores, to the weights and the "
        "inputs, and the rowsum identity that lets the backward pass sum over the c columns "
        "instead of the n keys (what the fast path computes, block by block). From [the "
        "derivation](../derivation.html).",
        "self-attention",
        "## The backward pass",
        "## Explicit",
    ),
    "explanation/flash-rounding.md": (
        "FlashAttention and its rounding",
        "FlashAttention's backward pass recomputes each weight from the row's log-sum-exp L_m; "
        "this package's fast path recomputes it from the row's maximum instead. Why, to first "
        "order in float32's rounding, derived by SymPy: a weight from the stored L_m carries an "
        "error that grows with the size of the scores, one from the maximum does not. From "
        "`derive markdown --variant flash` ([the guide](../guides/flash.md)).",
        "flash",
        "### Where float32 breaks it",
        "## ",
    ),
}


def section(markdown: str, first: str, stop: str) -> str:
    """The lines of `markdown` from the heading that starts with `first` up to (not including)
    the next line after it that starts with `stop`, or the end; ValueError if `first` is not a
    heading of it."""
    lines = markdown.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(first))
    except StopIteration:
        raise ValueError(f"no heading {first!r} in the document") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(stop)), len(lines))
    return "\n".join(lines[start:end]).strip() + "\n"


def _one_level_up(text: str) -> str:
    return re.sub(r"^(#{2,}) ", lambda m: m.group(1)[1:] + " ", text, flags=re.M)


def explanation_pages(derivation: str, markdown_of: Callable[[str], str]) -> dict[str, str]:
    """Each page of `PAGES`, cut from `derivation` (the Markdown of docs/derivation.md) or from
    `markdown_of(variant)`, the generic Markdown document of another variant."""
    pages = {}
    for path, (title, introduction, document, first, stop) in PAGES.items():
        text = derivation if document == "self-attention" else markdown_of(document)
        body = section(text, first, stop)
        body = body.replace("](figures/", "](../figures/")
        pages[path] = f"# {title}\n\n{introduction}\n\n{_one_level_up(body)}"
    return pages
