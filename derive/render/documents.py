"""Derivation documents, assembled from the sections: LaTeX (standalone or fragment), Markdown.

`DocumentOptions` says what goes in: the generic derivation always; the causal and multi-head
sections when asked for; the explicit mode at concrete sizes; the worked example (computed by
`derive.bridge`, passed in) and the figures. `graph` replaces the declarations of the generic
derivation (a test changes one declaration and checks that every display derived from it
changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from ..explicit import ExplicitAttention
from ..explicit.forward import ExplicitGraph
from ..explicit.sizes import check_size, check_sizes
from ..graph import Graph, self_attention
from ..graph.variants import explicit_sizes, variant
from ..notation import letters as L
from . import prose as P
from . import prose_variants as PV
from .blocks import Block, Figure, Prose, to_latex, to_markdown
from .html import to_html
from .sections import backward as B
from .sections import explicit as E
from .sections import forward as F
from .sections import variant as V2
from .sections import variants as V

__all__ = ["DocumentOptions", "document_blocks", "latex_document", "markdown_document",
           "html_document", "document_title", "HEATMAP", "SATURATION"]  # fmt: skip

HEATMAP = "attention-heatmap"
SATURATION = "softmax-saturation"
SATURATION_QK_NORM = "softmax-saturation-qk-norm"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DocumentOptions:
    """What a derivation document contains.

    Attributes:
        sizes: (n, d, c) for the explicit mode, or None for the generic derivation only.
        causal: add the causal/mask section; the explicit mode and the example are causal.
        heads: h > 1 adds the multi-head section; the explicit mode uses h heads.
        example: add the worked example ("the fat cat sat on the mat"; computed with torch).
        figures: the folder, relative to the document, that holds the figures (None: no figures).
    """

    sizes: tuple[int, int, int] | None = None
    causal: bool = False
    heads: int = 1
    example: bool = False
    figures: str | None = None
    variant: str | None = None
    extra: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.sizes is not None:
            check_sizes(*self.sizes, self.heads)
        elif not isinstance(self.heads, int) or isinstance(self.heads, bool) or self.heads < 1:
            raise ValueError(f"heads must be a positive int, got heads={self.heads!r}")
        if self.variant is None:
            if self.extra:
                raise ValueError(f"sizes {dict(self.extra)} belong to a variant; give variant=")
            return
        found = variant(self.variant)  # ValueError naming the known variants
        if self.causal or self.heads > 1 or self.example:
            raise ValueError(
                f"variant {self.variant!r} is its own graph: causal, heads and example do not "
                "apply to it"
            )
        known = {str(symbol) for symbol, _ in found.sizes}
        for name, value in self.extra:
            if name not in known:
                raise ValueError(f"variant {self.variant!r} has no size {name!r}; its sizes: "
                                 f"{sorted(known) or 'none beyond n, d, c'}")  # fmt: skip
            check_size(name, value)
        if self.sizes is not None:
            self.variant_sizes()  # sizes that do not fit together: a ValueError naming them

    def variant_sizes(self) -> dict[sp.Symbol, int]:
        """The explicit sizes of a variant: n, d, c, its own (given, or its defaults), c_h and
        its parameters (`derive.graph.variants.explicit_sizes`)."""
        return explicit_sizes(variant(self.variant), *self.sizes, dict(self.extra))


def figure_path(options: DocumentOptions, name: str) -> str:
    folder = (options.figures or ".").rstrip("/")
    return f"{folder}/{name}.png"


def document_blocks(
    options: DocumentOptions,
    *,
    example: object = None,
    graph: Graph | None = None,
    progress: Progress | None = None,
) -> list[Block]:
    """The blocks of the document. `example` is the worked example (`derive.worked_example`),
    required when ``options.example``; `graph` the declarations of the generic derivation."""
    if options.variant is not None:
        return _variant_blocks(options, progress)
    base = self_attention() if graph is None else graph
    blocks: list[Block] = F.pipeline() + F.shapes(base) + F.derivation_steps(base) + F.facts(base)
    if options.figures is not None:
        figure = figure_path(options, SATURATION)
        blocks += [Prose(P.SATURATION_TEXT), Figure(figure, P.SATURATION_CAPTION)]
    blocks += F.counts(base)
    if options.causal:
        blocks += V.causal(self_attention(causal=True))
    if options.heads > 1:
        blocks += V.multi_head(self_attention(heads=True))
    blocks += V.batches(base)
    blocks += B.backward(
        base,
        causal=self_attention(causal=True) if options.causal else None,
        heads=self_attention(heads=True) if options.heads > 1 else None,
    )
    if progress is not None:
        progress("derived the steps, the facts and the backward pass")
    if options.sizes is not None:
        ea = ExplicitAttention(*options.sizes, causal=options.causal, heads=options.heads,
                               graph=graph)  # fmt: skip
        if progress is not None:
            progress(f"instantiated the steps at n={ea.n}, d={ea.d}, c={ea.c}")
        numbers = E.example_numbers(example) if options.example and example is not None else None
        blocks += E.explicit(ea, progress, numbers)
    if options.example:
        if example is None:
            raise ValueError("options.example needs the worked example: pass example=")
        figure = figure_path(options, HEATMAP) if options.figures is not None else None
        blocks += E.example(example, figure)
    return blocks


def _variant_blocks(options: DocumentOptions, progress: Progress | None) -> list[Block]:
    found = variant(options.variant)
    blocks = V2.variant_sections(found)
    if progress is not None:
        progress(f"derived the variant {found.name}")
    if options.figures is not None and bounds_scores(found):
        figure = figure_path(options, SATURATION_QK_NORM)
        blocks += [Prose(PV.QK_NORM_FIGURE_TEXT), Figure(figure, PV.QK_NORM_FIGURE_CAPTION)]
    if options.sizes is not None:
        sizes = options.variant_sizes()
        ea = ExplicitGraph(found.graph, sizes, heads=sizes.get(L.h, 1))
        blocks += E.explicit(ea, progress)
    return blocks


def bounds_scores(found) -> bool:
    """True for a variant whose document shows QK-norm's bound (its figure goes with it)."""
    claims = [getattr(claim, "claim", claim) for claim in found.claims]  # On(graph, claim)
    return any(type(claim).__name__ == "ScoreBound" for claim in claims)


def document_title(options: DocumentOptions) -> str:
    return P.TITLE if options.variant is None else f"{variant(options.variant).title}, derived"


def latex_document(
    options: DocumentOptions,
    *,
    fragment: bool = False,
    example: object = None,
    graph: Graph | None = None,
    progress: Progress | None = None,
) -> str:
    """The derivation as LaTeX: a standalone article, or with `fragment` the body to \\input."""
    blocks = document_blocks(options, example=example, graph=graph, progress=progress)
    title = document_title(options)
    return to_latex(blocks, title=title, note=P.AUTHORSHIP, standalone=not fragment)


def markdown_document(
    options: DocumentOptions,
    *,
    example: object = None,
    graph: Graph | None = None,
    progress: Progress | None = None,
) -> str:
    """The derivation as GitHub-flavoured Markdown with ``$$`` math."""
    blocks = document_blocks(options, example=example, graph=graph, progress=progress)
    return to_markdown(blocks, title=document_title(options), note=P.AUTHORSHIP)


def _svg_figures(blocks: list[Block], example: object) -> dict[str, str]:
    """The SVG of each figure of the document, by the path the LaTeX gives it."""
    from . import svg

    drawn = {}
    for block in blocks:
        if isinstance(block, Figure) and block.path.endswith(f"{SATURATION}.png"):
            drawn[block.path] = svg.saturation_svg()
        elif isinstance(block, Figure) and block.path.endswith(f"{SATURATION_QK_NORM}.png"):
            drawn[block.path] = svg.qk_norm_svg()
        elif isinstance(block, Figure) and block.path.endswith(f"{HEATMAP}.png"):
            drawn[block.path] = svg.heatmap_svg(example.tokens, example.values.floats("A"))
    return drawn


def html_document(
    options: DocumentOptions,
    *,
    example: object = None,
    graph: Graph | None = None,
    progress: Progress | None = None,
) -> str:
    """The derivation as one self-contained HTML page (KaTeX and the figures inlined)."""
    blocks = document_blocks(options, example=example, graph=graph, progress=progress)
    figures = _svg_figures(blocks, example)
    return to_html(blocks, title=document_title(options), note=P.AUTHORSHIP, figures=figures)
