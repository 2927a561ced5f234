"""Derivation documents, assembled from the sections: LaTeX (standalone or fragment), Markdown.

    >>> from derive import DocumentOptions, latex_document
    >>> tex = latex_document(DocumentOptions(sizes=(3, 4, 2)))

`DocumentOptions` says what goes in: the generic derivation always; the causal and multi-head
sections when asked for; the explicit mode at concrete sizes; the worked example (computed by
torch, reproduced by the formulas; the only part that imports torch) and the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import _prose as P
from . import _sections as S
from ._blocks import Block, Display, Figure, Heading, Prose, Table, to_latex, to_markdown
from ._explicit import explicit_attention
from ._figures import HEATMAP, SATURATION
from ._latex import latex
from ._section_backward import backward
from ._sizes import check_sizes

__all__ = ["DocumentOptions", "document_blocks", "latex_document", "markdown_document"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DocumentOptions:
    """What a derivation document contains.

    Attributes:
        sizes: (n, d, c) for the explicit mode, or None for the generic derivation only.
        causal: add the causal/mask section; the explicit mode and the example are causal.
        heads: h > 1 adds the multi-head section; the explicit mode uses h heads.
        example: add the worked example ("the fat cat sat on the mat"; imports torch).
        figures: the folder, relative to the document, that holds the figures (None: no figures).
    """

    sizes: tuple[int, int, int] | None = None
    causal: bool = False
    heads: int = 1
    example: bool = False
    figures: str | None = None

    def __post_init__(self) -> None:
        if self.sizes is not None:
            check_sizes(*self.sizes, self.heads)
        elif not isinstance(self.heads, int) or isinstance(self.heads, bool) or self.heads < 1:
            raise ValueError(f"heads must be a positive int, got heads={self.heads!r}")


def _figure_path(options: DocumentOptions, name: str) -> str:
    folder = (options.figures or ".").rstrip("/")
    return f"{folder}/{name}.png"


def _example_blocks(example, options: DocumentOptions) -> list[Block]:
    from ._example import rounded

    tokens = example.tokens
    n = len(tokens)
    sizes = f"$n = {n}$, $d = {example.d}$, $c = {example.c}$"
    blocks: list[Block] = [
        Heading("Worked example: the fat cat sat on the mat"),
        Prose(P.EXAMPLE_INTRO + f" Sizes: {sizes}" + (", causal." if example.causal else ".")),
        Display(
            tuple(
                f"{letter} &= {latex(rounded(example.inputs[name]), decimals=4)}"
                for name, letter in (("X", "X"), ("W_q", "W_q"), ("W_k", "W_k"), ("W_v", "W_v"))
            )
        ),
    ]
    symbolic_a = rounded(example.values.A, 3)
    header = ("", *(f"{token} ({p + 1})" for p, token in enumerate(tokens)))
    for label, matrix in (("PyTorch", rounded(example.torch_a, 3)), ("SymPy", symbolic_a)):
        blocks.append(Prose(f"Attention weights $A$ computed by {label} (rows: queries):"))
        rows = tuple(
            (f"{tokens[m]} ({m + 1})", *(f"{float(matrix[m, p]):.3f}" for p in range(n)))
            for m in range(n)
        )
        blocks.append(Table(header, rows))
    blocks.append(
        Display(
            (
                rf"C_{{\text{{PyTorch}}}} &= {latex(rounded(example.torch_c), decimals=4)}",
                rf"C_{{\text{{SymPy}}}} &= {latex(rounded(example.values.C), decimals=4)}",
            )
        )
    )
    blocks.append(Prose(P.EXAMPLE_AGREEMENT.format(tolerance="$10^{-12}$")))
    if options.figures is not None:
        blocks.append(Figure(_figure_path(options, HEATMAP), P.HEATMAP_CAPTION))
    return blocks


def document_blocks(
    options: DocumentOptions, *, example: object = None, progress: Progress | None = None
) -> list[Block]:
    """The blocks of the document; `example` is a precomputed `WorkedExample` (else computed)."""
    blocks: list[Block] = S.pipeline() + S.shapes() + S.derivation_steps() + S.facts()
    if options.figures is not None:
        blocks += [
            Prose(P.SATURATION_TEXT),
            Figure(_figure_path(options, SATURATION), P.SATURATION_CAPTION),
        ]
    blocks += S.counts()
    if options.causal:
        blocks += S.causal()
    if options.heads > 1:
        blocks += S.multi_head()
    blocks += S.batches()
    blocks += backward(causal=options.causal, heads=options.heads)
    if options.sizes is not None:
        ea = explicit_attention(*options.sizes, causal=options.causal, heads=options.heads)
        blocks += S.explicit(ea, progress)
    if options.example:
        if example is None:
            from ._example import worked_example

            example = worked_example(causal=options.causal)
        blocks += _example_blocks(example, options)
    return blocks


def latex_document(
    options: DocumentOptions,
    *,
    fragment: bool = False,
    example: object = None,
    progress: Progress | None = None,
) -> str:
    """The derivation as LaTeX: a standalone article, or with `fragment` the body to \\input."""
    blocks = document_blocks(options, example=example, progress=progress)
    return to_latex(blocks, title=P.TITLE, note=P.AUTHORSHIP, standalone=not fragment)


def markdown_document(
    options: DocumentOptions, *, example: object = None, progress: Progress | None = None
) -> str:
    """The derivation as GitHub-flavoured Markdown with ``$$`` math."""
    blocks = document_blocks(options, example=example, progress=progress)
    return to_markdown(blocks, title=P.TITLE, note=P.AUTHORSHIP)
