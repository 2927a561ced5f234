"""Derivation documents, assembled from the sections: LaTeX (standalone or fragment), Markdown,
an HTML page.

`DocumentOptions` says what goes in: the entry of the registry (self-attention by default; its
causal and multi-head forms by the flags), the explicit mode at concrete sizes, the worked
example (computed by `derive.bridge`, passed in) and the figures. Every entry's document is made
of the same sections (`derive.render.sections`), those its declaration lists, in order. `graph`
replaces the declarations of the entry (a test changes one declaration and checks that every
display derived from it changes).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy as sp

from ..explicit.forward import ExplicitGraph
from ..explicit.sizes import check_size, check_sizes
from ..graph import Entry, Graph, entry_name, explicit_sizes, variant
from ..graph.fitting import check_given, not_its_own
from ..notation import letters as L
from . import prose as P
from . import prose_variants as PV
from .blocks import Block, Figure, Prose, to_latex, to_markdown
from .html import to_html
from .sections import backward as B
from .sections import code as C
from .sections import explicit as E
from .sections import facts as F
from .sections import introduction as I
from .sections import steps as S

__all__ = [
    "DocumentOptions",
    "document_blocks",
    "latex_document",
    "markdown_document",
    "html_document",
    "document_title",
    "HEATMAP",
    "FIGURES",
]

HEATMAP = "attention-heatmap"
#: The figures an entry may show after its facts: id -> (the words before it, its caption).
FIGURES = {
    "softmax-saturation": (P.SATURATION_TEXT, P.SATURATION_CAPTION),
    "softmax-saturation-qk-norm": (PV.QK_NORM_FIGURE_TEXT, PV.QK_NORM_FIGURE_CAPTION),
    "flash-rounding": (PV.FLASH_ROUNDING_TEXT, PV.FLASH_ROUNDING_CAPTION),
}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DocumentOptions:
    """What a derivation document contains.

    Args:
        sizes: `(n, d, c)` for the explicit mode, or None (the default) for the generic
            derivation only.
        causal: causal attention (the entry ``causal``, or the variant with it).
        heads: h > 1: multi-head attention with h heads (the entry ``multi-head``, or h for a
            variant that has heads); default 1.
        example: add the worked example ("the fat cat sat on the mat"; computed with torch).
        figures: the folder, relative to the document, that holds the figures (None: no figures).
        variant: the entry of the registry (None: self-attention), or a combination.
        extra: the entry's own sizes and parameters (``(("w", 3),)``); its defaults otherwise.
        source: where `heads` and `extra` come from, where a model's config gave them
            (``derive latex --model gemma2``): the document says so after its introduction.

    Raises:
        TypeError: when an explicit size (in `sizes`, or a size in `extra` with them) is not
            an int.
        ValueError: when an explicit size is below 1 or over `derive.explicit.MAX_SIZE`,
            `heads` is not a positive int, `variant` is not registered or does not combine
            with `causal` or multi-head attention, a name in `extra` is not the entry's own,
            a value is outside its domain or breaks a condition, `example` is asked of an
            entry that has none, or the sizes do not fit together.
    """

    sizes: tuple[int, int, int] | None = None
    causal: bool = False
    heads: int = 1
    example: bool = False
    figures: str | None = None
    variant: str | None = None
    extra: tuple[tuple[str, object], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.sizes is not None:
            check_sizes(*self.sizes)
        if not isinstance(self.heads, int) or isinstance(self.heads, bool) or self.heads < 1:
            raise ValueError(f"heads must be a positive int, got heads={self.heads!r}")
        found = self.entry  # ValueError naming the known variants, or parts that do not combine
        sizes = {str(size.symbol) for size in found.sizes}
        own = sizes | {str(parameter.symbol) for parameter in found.parameters}
        for name, value in self.extra:
            if name not in own:
                raise ValueError(not_its_own(found, name))
            if name in sizes and self.sizes is not None:  # explicit matrices: small sizes
                check_size(name, value)
        check_given(found, dict(self.extra))  # each within its domain, the conditions they decide
        if self.example and "example" not in found.document.sections:
            raise ValueError(f"{found.name} has no worked example; drop example")
        if self.sizes is not None:
            self.variant_sizes()  # sizes that do not fit together: a ValueError naming them

    @property
    def entry(self) -> Entry:
        """The entry of the registry this document is of."""
        return variant(entry_name(self.variant, causal=self.causal, heads=self.heads))

    @property
    def given(self) -> dict[str, object]:
        """The entry's own sizes given, h from `heads`."""
        return dict(self.extra) | ({"h": self.heads} if self.heads > 1 else {})

    def variant_sizes(self) -> dict[sp.Symbol, int]:
        """The explicit sizes: n, d, c, the entry's own (given, or its defaults), those its
        relations fix (c_h) and its parameters (`derive.graph.explicit_sizes`).

        Returns:
            Each size and parameter by its SymPy symbol (``{n: 3, d: 4, c: 2, h: 2, c_h: 1}``).

        Raises:
            ValueError: when the sizes do not fit together (the message names them).
        """
        assert self.sizes is not None, "variant_sizes needs explicit sizes"
        n, d, c = self.sizes
        return explicit_sizes(self.entry, n, d, c, self.given)


def figure_path(options: DocumentOptions, name: str) -> str:
    folder = (options.figures or ".").rstrip("/")
    return f"{folder}/{name}.png"


def _figures(entry: Entry, options: DocumentOptions) -> list[Block]:
    if options.figures is None:
        return []
    blocks: list[Block] = []
    for name in entry.document.figures:
        text, caption = FIGURES[name]
        blocks += [Prose(text), Figure(figure_path(options, name), caption)]
    return blocks


def _explicit(entry: Entry, options: DocumentOptions, example, progress) -> list[Block]:
    if options.sizes is None:
        return []
    sizes = options.variant_sizes()
    ea = ExplicitGraph(entry.graph, sizes, heads=int(sizes.get(L.h, 1)))
    if progress is not None:
        shown = ", ".join(
            f"{symbol}={value}" for symbol, value in sizes.items() if symbol in L.SIZES
        )
        progress(f"instantiated the steps at {shown}")
    numbers = E.example_numbers(example) if options.example and example is not None else None
    kept = None
    if entry.document.states is not None:
        module, _, name = entry.document.states.rpartition(".")
        kept = getattr(importlib.import_module(module), name)(entry.graph, sizes)
    return E.explicit(ea, progress, numbers, kept)


def _example(entry: Entry, options: DocumentOptions, example) -> list[Block]:
    if not options.example:
        return []
    if example is None:
        raise ValueError("options.example needs the worked example: pass example=")
    figure = figure_path(options, HEATMAP) if options.figures is not None else None
    return E.example(example, figure)


def document_blocks(
    options: DocumentOptions,
    *,
    example: object = None,
    graph: Graph | None = None,
    progress: Progress | None = None,
) -> list[Block]:
    """The blocks of the document, section by section (those the entry lists). `example` is the
    worked example (`derive.worked_example`), required when ``options.example``; `graph` the
    declarations in place of the entry's."""
    entry = options.entry if graph is None else options.entry.with_graph(graph)
    sections = {
        "introduction": lambda: [*I.introduction(entry), *I.values_of(entry, options)],
        "shapes": lambda: I.shapes(entry),
        "steps": lambda: S.steps(entry),
        "facts": lambda: F.facts(entry),
        "figures": lambda: _figures(entry, options),
        "counts": lambda: F.counts(entry),
        "batches": lambda: F.batches(entry),
        "backward": lambda: B.backward(entry),
        "code": lambda: C.code(entry),
        "explicit": lambda: _explicit(entry, options, example, progress),
        "example": lambda: _example(entry, options, example),
    }
    blocks: list[Block] = []
    for name in entry.document.sections:
        blocks += sections[name]()
        if name == "backward" and progress is not None:
            progress(f"derived {entry.name}: its steps, facts and backward pass")
    return blocks


def document_title(options: DocumentOptions) -> str:
    return f"{options.entry.title}, derived"


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


def _svg_figures(blocks: list[Block], example: Any) -> dict[str, str]:
    """The SVG of each figure of the document, by the path the LaTeX gives it."""
    from . import svg

    drawn = {}
    for block in blocks:
        if not isinstance(block, Figure):
            continue
        name = block.path.rpartition("/")[2].removesuffix(".png")
        if name == HEATMAP:
            drawn[block.path] = svg.heatmap_svg(example.tokens, example.values.floats("A"))
        else:
            drawn[block.path] = svg.FIGURES[name]()
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
