"""Documents: the blocks and their LaTeX and Markdown, the prose, the sections, PDF and figures."""

from .blocks import Display, Provenance
from .documents import DocumentOptions, document_blocks, latex_document, markdown_document

__all__ = ["Display", "DocumentOptions", "Provenance", "document_blocks", "latex_document",
           "markdown_document"]  # fmt: skip
