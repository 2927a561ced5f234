r"""The derivation as one self-contained HTML page, laid out from the same blocks as the LaTeX.

The page fetches nothing when it is viewed: KaTeX's script and stylesheet (its fonts as
``data:`` URLs) and derive's own are inlined (`derive.render.webassets`), the figures are inline
SVG (`derive.render.svg`), and a Content-Security-Policy forbids every other source. The math is
typeset in the browser: each formula is in the page as its LaTeX source (what a reader without
JavaScript sees), which the page's script hands to KaTeX.

- `Display`: its provenance as a tag beside it (in the right margin where the window is wide
  enough, above it where not; how it was obtained on hover), as an HTML comment before it and
  in ``data-provenance`` (and the declarations it depends on in ``data-sources``); a display
  with a `detail` summary (the explicit sums) is folded into a ``<details>`` element, since
  the tables show the same entries.
- `Matrices`: one table per matrix, one cell per entry, with its LaTeX (``data-entry``), its
  formula (``data-formula``), the ids of the entries it reads (``data-reads``) and its value
  (``data-value``) where known; hovering or focusing a cell shows them (arrow keys move between
  the cells of a matrix).
- Prose: inline ``$…$`` math, ``\emph`` and ``\texttt``; anything else of LaTeX is refused.
"""

from __future__ import annotations

import re
from html import escape

from . import prose as P
from .blocks import (
    Block,
    Code,
    Display,
    Entry,
    Figure,
    Heading,
    Matrices,
    Matrix,
    Prose,
    Provenance,
    Table,
    matrix_display,
)
from .webassets import KATEX_VERSION, katex_script, katex_style, page_script, page_style

__all__ = ["to_html", "inline", "POLICY"]

#: Nothing but what the page holds: inline styles and scripts, fonts and images as data: URLs.
POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "font-src data:; img-src data:"
)


def _words(text: str, *, title: bool = False) -> str:
    """Prose outside math as HTML; a title is text (a user's "a_{m,p}" shown as typed)."""
    text = escape(text, quote=False)
    if title:
        return re.sub(r"\\([_%&#])", r"\1", text)
    text = re.sub(r"\\emph\{([^{}\\]*)\}", r"<em>\1</em>", text)
    text = re.sub(r"\\texttt\{([^{}\\]*)\}", r"<code>\1</code>", text)
    text = text.replace("~", "\u00a0")
    if re.search(r"[\\{}]", text):
        raise ValueError(f"prose holds LaTeX that a page cannot show: {text!r}")
    return text


def inline(text: str, *, title: bool = False) -> str:
    """Prose as HTML: ``$…$`` becomes a math span (typeset by the page), the rest is escaped;
    a `title`'s words are text, whatever characters they hold."""
    parts = re.split(r"(\$[^$]+\$)", text)
    return "".join(
        f'<span class="math">{escape(part[1:-1], quote=False)}</span>'
        if part.startswith("$") and part.endswith("$") and len(part) > 1
        else _words(part, title=title)
        for part in parts
    )


def _tex(block: Display) -> str:
    lines = block.lines
    if len(lines) == 1 and "&" not in lines[0]:
        return lines[0]
    # matrices apart: KaTeX's \\[gap] only pads a row to the gap, an empty row adds a line
    between = " \\\\ \\\\\n" if matrix_display(block) else " \\\\\n"
    return "\\begin{aligned}\n" + between.join(lines) + "\n\\end{aligned}"


def _tag(provenance: Provenance) -> str:
    """The provenance as the reader sees it: a small tag in the margin, the how on hover."""
    how = f' title="{escape(provenance.how)}"' if provenance.how else ""
    kind = provenance.kind
    return f'<span class="provenance {kind}"{how}>{kind}</span>'


def _display(block: Display) -> str:
    provenance = block.provenance
    sources = " ".join(provenance.sources)
    sources = f' data-sources="{escape(sources)}"' if sources else ""
    html = (
        f'<div class="shown">\n<!-- {provenance.comment().replace("--", "- -")} -->\n'
        f'<div class="math display" data-provenance="{escape(provenance.said())}"{sources}>'
        f"{escape(_tex(block), quote=False)}</div>\n{_tag(provenance)}\n</div>"
    )
    if block.detail is None:
        return html
    return f'<details class="sums">\n<summary>{inline(block.detail)}</summary>\n{html}\n</details>'


def _minus(number: str) -> str:
    """A number as the math beside it prints it: U+2212, not the hyphen-minus."""
    return number.replace("-", "\u2212")


def _td(cell: str) -> str:
    number = re.fullmatch(r"-?\d+(\.\d+)?", cell) is not None
    return f'<td class="number">{_minus(cell)}</td>' if number else f"<td>{inline(cell)}</td>"


def _table(block: Table) -> str:
    head = "".join(f"<th>{inline(cell)}</th>" for cell in block.header)
    rows = "".join("<tr>" + "".join(_td(cell) for cell in row) + "</tr>\n" for row in block.rows)
    return (
        f'<table class="data">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}</tbody>\n</table>'
    )


def _figure(block: Figure, figures: dict[str, str]) -> str:
    if block.path not in figures:
        raise ValueError(f"no SVG for the figure {block.path}; known: {sorted(figures)}")
    svg = figures[block.path]
    width = re.search(r'width="(\d+)"', svg)
    style = f' style="--plot-width: {width[1]}px"' if width else ""  # the figure's own width
    return (
        f'<figure class="plot"{style}>\n<div class="plot-area">{svg}</div>\n'
        f"<figcaption>{inline(block.caption)}</figcaption>\n</figure>"
    )


def _number(value: float) -> str:
    return _minus(f"{value:.4f}".replace("-0.0000", "0.0000"))


def _cell(entry: Entry, first: bool) -> str:
    attributes = [f'id="e-{entry.key}"', f'data-entry="{escape(entry.tex)}"']
    if entry.formula is not None:
        attributes.append(f'data-formula="{escape(entry.formula)}"')
        attributes.append(f'data-reads="{" ".join(f"e-{key}" for key in entry.reads)}"')
    shown = f'<span class="math">{escape(entry.tex, quote=False)}</span>'
    if entry.value is not None:
        attributes.append(f'data-value="{entry.value:.10g}"')
        shown = _number(entry.value)
    tabindex = "0" if first else "-1"
    return f'<td class="entry" tabindex="{tabindex}" {" ".join(attributes)}>{shown}</td>'


def _matrix(matrix: Matrix, index: int) -> str:
    rows = "".join(
        "<tr>" + "".join(_cell(entry, r == c == 0) for c, entry in enumerate(row)) + "</tr>\n"
        for r, row in enumerate(matrix.rows)
    )
    size = f"{len(matrix.rows)} × {len(matrix.rows[0])}"
    caption = (
        f'<figcaption id="matrix-{index}"><span class="math">'
        f'{escape(matrix.letter, quote=False)}</span> <span class="role">'
        f"{inline(matrix.role)}, {size}</span></figcaption>"
    )
    return (
        f'<figure class="matrix">{caption}\n<table role="grid" '
        f'aria-labelledby="matrix-{index}">\n<tbody>\n{rows}</tbody>\n</table>\n</figure>'
    )


def _matrices(block: Matrices) -> str:
    said = block.provenance.said()
    tables = "\n".join(_matrix(matrix, k) for k, matrix in enumerate(block.matrices, 1))
    return (
        f"<!-- {block.provenance.comment().replace('--', '- -')} -->\n"
        f'<div class="matrices" data-provenance="{escape(said)}">\n'
        f'<p class="hint">{inline(P.MATRICES_HINT)} {_tag(block.provenance)}</p>\n'
        f'<div class="grid">\n{tables}\n</div>\n'
        f'<div class="entry-slot"><p class="slot-hint">{inline(P.SLOT_HINT)}</p></div>\n</div>'
    )


def _block(block: Block, figures: dict[str, str]) -> str:
    if isinstance(block, Heading):
        level = min(block.level + 1, 4)
        return f"<h{level}>{inline(block.text, title=True)}</h{level}>"
    if isinstance(block, Prose):
        return f"<p>{inline(block.text)}</p>"
    if isinstance(block, Display):
        return _display(block)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        return _figure(block, figures)
    if isinstance(block, Matrices):
        return _matrices(block)
    if isinstance(block, Code):
        return f'<pre class="code"><code>{escape(block.text.rstrip())}</code></pre>'
    raise TypeError(f"unknown block {block!r}")


_PANEL = (
    '<aside id="entry-panel" class="entry-panel" aria-live="polite" hidden>\n'
    '<div class="entry-formula"></div>\n<div class="entry-value"></div>\n</aside>'
)


def to_html(blocks: list[Block], *, title: str, note: str, figures: dict[str, str]) -> str:
    """The document as one HTML page; `figures` maps each `Figure`'s path to its SVG."""
    body = "\n\n".join(_block(block, figures) for block in blocks)
    panel = _PANEL + "\n" if any(isinstance(block, Matrices) for block in blocks) else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
        f'<meta name="generator" content="attention-derive (derive html), KaTeX {KATEX_VERSION}">\n'
        f"<title>{escape(title)}</title>\n"
        f"<style>/* KaTeX {KATEX_VERSION}, MIT licence */\n{katex_style()}</style>\n"
        f"<style>\n{page_style()}</style>\n</head>\n<body>\n<main>\n"
        f'<h1>{inline(title)}</h1>\n<p class="note">{inline(note)}</p>\n\n{body}\n</main>\n'
        f"{panel}<script>/* KaTeX {KATEX_VERSION}, MIT licence */\n{katex_script()}</script>\n"
        f"<script>\n{page_script()}</script>\n</body>\n</html>\n"
    )
