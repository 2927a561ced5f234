"""Documents: the blocks and their LaTeX, Markdown and HTML, the prose, the sections, PDF,
figures (PNG and SVG) and notebooks."""

from .blocks import Display, Provenance
from .documents import (
    DocumentOptions,
    document_blocks,
    html_document,
    latex_document,
    markdown_document,
)

__all__ = [
    "Display",
    "DocumentOptions",
    "Provenance",
    "document_blocks",
    "html_document",
    "latex_document",
    "markdown_document",
]
