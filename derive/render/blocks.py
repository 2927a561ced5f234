r"""Layout: the blocks of a document and their two renderings, LaTeX and GitHub Markdown.

A document is a list of blocks (`Heading`, `Prose`, `Display`, `Table`, `Figure`, `Matrices`).
The blocks carry finished LaTeX for their mathematics (printed by `derive.notation.latex` from
SymPy objects) and prose from `derive.render.prose`; the renderers only lay them out. Every
display carries its `Provenance`: declared (typed in, in `derive.graph`), derived (by SymPy, and
how) or numeric (computed, and by what); the LaTeX puts it in a comment line before the display,
the Markdown in an HTML comment.

- LaTeX: ``align*`` for displays (``\allowdisplaybreaks`` lets long ones cross pages),
  ``booktabs`` tables, ``graphicx`` figures; standalone (a whole ``article``) or a fragment to
  ``\input``. Packages: amsmath, amssymb, geometry, graphicx, booktabs — all in TeX Live's
  latex-base and latex-recommended.
- Markdown: ``$$ … $$`` blocks holding ``aligned``, which GitHub renders; inline ``$…$``;
  pipe tables; images.

`Matrices` (the explicit matrices, entry by entry, each entry with its formula and what it reads)
is the interactive view of the HTML page (`derive.render.html`); LaTeX and Markdown show the same
entries in the displays of the explicit steps and leave it out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Heading",
    "Prose",
    "Provenance",
    "Display",
    "Table",
    "Figure",
    "Entry",
    "Matrix",
    "Matrices",
    "Code",
    "Block",
    "to_latex",
    "to_markdown",
    "markdown_block",
    "matrix_display",
    "declared",
    "derived",
    "numeric",
    "unproved",
    "KINDS",
]


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 1


@dataclass(frozen=True)
class Prose:
    """A paragraph; may hold inline math ``$…$`` and ``\\emph{…}``."""

    text: str


#: The kinds of provenance, in the order a reader trusts them.
KINDS = ("declared", "derived", "numeric", "unproved")


@dataclass(frozen=True)
class Provenance:
    """Where a display comes from.

    Attributes:
        kind: ``"declared"``, ``"derived"``, ``"numeric"`` or ``"unproved"`` (a claim of a
            user's variant that SymPy could not prove and no counter-example refutes: shown as
            stated, never as derived).
        how: for derived and numeric displays, a few words on how (or by what).
        sources: the outputs of the declarations the display depends on (not printed; a test
            changes each declaration and checks that the displays citing it change).
    """

    kind: str
    how: str = ""
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"provenance must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind != "declared" and not self.how:
            raise ValueError(f"a {self.kind} display must say how it was obtained")

    def comment(self) -> str:
        """``provenance: derived — matrix_form of the declaration``."""
        return f"provenance: {self.kind}" + (f" — {self.how}" if self.how else "")

    def said(self) -> str:
        """What the reader sees beside the display: ``derived — matrix_form of …``."""
        return self.comment().removeprefix("provenance: ")


def unproved(why: str, *sources: str) -> Provenance:
    """A claim shown as stated: SymPy could not prove it, and why."""
    return Provenance("unproved", why, sources)


def declared(*sources: str) -> Provenance:
    """A display of declarations (the only typed-in mathematics)."""
    return Provenance("declared", "", sources)


def derived(how: str, *sources: str) -> Provenance:
    """A display SymPy derived, and how."""
    return Provenance("derived", how, sources)


def numeric(what: str, *sources: str) -> Provenance:
    """A display of numbers, and what computed them."""
    return Provenance("numeric", what, sources)


@dataclass(frozen=True)
class Display:
    """Display math: one equation per line, ``&`` marks the alignment point.

    `detail`, when set, says that a view with a better primary view of the same content (the
    HTML page's tables of entries) may fold this display under that summary; LaTeX and Markdown
    show it as any other.
    """

    lines: tuple[str, ...]
    provenance: Provenance
    detail: str | None = None


@dataclass(frozen=True)
class Table:
    """Cells are text with inline math."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    """An image file, referenced by a path relative to the document; `width` is its width in
    LaTeX, a fraction of the text width."""

    path: str
    caption: str
    width: float = 0.72


@dataclass(frozen=True)
class Entry:
    """One entry of an explicit matrix.

    Attributes:
        key: its name in a page (``"a-2-3"``; a head's ``"omega-1-2-3"``), unique in a document.
        tex: its LaTeX (``a_{2,3}``).
        formula: the LaTeX of its formula in the previous steps' entries, or None for an input.
        reads: the keys of the entries its formula reads (its `Indexed` atoms), in reading order.
        value: its number, when the document has numbers for it (the worked example).
    """

    key: str
    tex: str
    formula: str | None = None
    reads: tuple[str, ...] = ()
    value: float | None = None


@dataclass(frozen=True)
class Matrix:
    """An explicit matrix: its letter (LaTeX), what it is, its entries row by row."""

    letter: str
    role: str
    rows: tuple[tuple[Entry, ...], ...]


@dataclass(frozen=True)
class Matrices:
    """Every matrix of the explicit mode, entry by entry (HTML only; see the module docstring)."""

    matrices: tuple[Matrix, ...]
    provenance: Provenance


@dataclass(frozen=True)
class Code:
    """A listing of code (the torch code generated from the declarations): printed as it is,
    in a monospaced block."""

    text: str
    language: str = "python"


Block = Heading | Prose | Display | Table | Figure | Matrices | Code

_PREAMBLE = r"""\documentclass[11pt]{article}
\usepackage[margin=2.2cm]{geometry}
\usepackage{amsmath,amssymb}
\usepackage{graphicx}
\usepackage{booktabs}
\allowdisplaybreaks
\pdfinfoomitdate=1
\pdftrailerid{}
\pdfsuppressptexinfo=-1
"""


#: The characters a title or a sentence may hold as Unicode (a user's "sums to 1 − λ", "σ′"),
#: typeset by pdflatex as the math they stand for: its default input encoding knows none of them.
_UNICODE_MATH = {
    "−": "-",
    "≤": r"\leq",
    "≥": r"\geq",
    "≠": r"\neq",
    "≈": r"\approx",
    "×": r"\times",
    "·": r"\cdot",
    "∘": r"\circ",
    "…": r"\ldots",
    "′": r"{}^{\prime}",
    "″": r"{}^{\prime\prime}",
    "∑": r"\sum",
    "∏": r"\prod",
    "√": r"\surd",
    "∞": r"\infty",
    "→": r"\to",
    "∈": r"\in",
    "∂": r"\partial",
    "ℓ": r"\ell",
    "ᵀ": r"{}^{\top}",
    "∇": r"\nabla",
    "⊙": r"\odot",
    "⊗": r"\otimes",
    **dict(
        zip(
            "αβγδεζηθικλμνξπρςστυφχψωΓΔΘΛΞΠΣΦΨΩ",
            (
                rf"\{name}"
                for name in (
                    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi "
                    "rho varsigma sigma tau upsilon phi chi psi omega Gamma Delta Theta Lambda Xi "
                    "Pi Sigma Phi Psi Omega"
                ).split()
            ),
            strict=True,
        )
    ),
}


def _unicode_preamble(text: str) -> str:
    """pdflatex told what each character of `_UNICODE_MATH` the document holds is."""
    return "".join(
        f"\\DeclareUnicodeCharacter{{{ord(ch):04X}}}{{\\ensuremath{{{tex}}}}}\n"
        for ch, tex in _UNICODE_MATH.items()
        if ch in text
    )


_ACCENTS = {"\u0303": "tilde", "\u0302": "hat", "\u0304": "bar", "\u0307": "dot"}


def _accented(text: str) -> str:
    """A letter with combining accents (ω̃, written ω then U+0303; Ω̃̄, two of them) as LaTeX's
    accents on the letter, \\ensuremath{\\bar{\\tilde{\\Omega}}}: pdflatex reads no combining
    mark."""

    def accents(found: re.Match) -> str:
        tex = _UNICODE_MATH.get(found.group(1), found.group(1))
        for mark in found.group(2):
            tex = f"\\{_ACCENTS[mark]}{{{tex}}}"
        return f"\\ensuremath{{{tex}}}"

    return re.sub("(.)([" + "".join(_ACCENTS) + "]+)", accents, text)


def _text_part(part: str) -> str:
    """Words outside math: _ % & # escaped where no backslash escapes them already, ^ and ~
    written as the characters they are (LaTeX reads a superscript and a space)."""
    part = re.sub(r"(?<!\\)([_%&#])", r"\\\1", part)
    part = re.sub(r"(?<!\\)\^", r"\\textasciicircum{}", part)
    return re.sub(r"(?<!\\)~", r"\\textasciitilde{}", part)


def text_latex(text: str) -> str:
    """A title as LaTeX text: its words escaped (`_text_part`) outside $…$ (a title may hold
    math: "At $s = 1/\\log n$"); a lone $ is a dollar sign."""
    if text.count("$") % 2:
        text = text.replace("$", "\\$")
    parts = re.split(r"((?<!\\)\$[^$]*(?<!\\)\$)", text)
    return _accented(
        "".join(
            part if part.startswith("$") and len(part) > 1 else _text_part(part) for part in parts
        )
    )


def _printed(blocks: list[Block]) -> list[Block]:
    """The blocks LaTeX and Markdown print: all but the HTML's interactive `Matrices`."""
    return [block for block in blocks if not isinstance(block, Matrices)]


def _latex_lines(block: Display) -> str:
    """The display's lines, its provenance tagged in the margin of the first (``\\tag*``, where
    equation numbers go); displays of matrices spaced apart and kept on one page (``\\\\*``)."""
    tag = rf" \tag*{{\footnotesize\textit{{{block.provenance.kind}}}}}"
    lines = [block.lines[0] + tag, *block.lines[1:]]
    between = " \\\\*[1.2ex]\n" if matrix_display(block) else " \\\\\n"
    return between.join(lines)


def matrix_display(block: Display) -> bool:
    """A display of several matrices, one per line (the worked example's inputs)."""
    return len(block.lines) > 1 and all("\\begin{matrix}" in line for line in block.lines)


def _latex_block(block: Block) -> str:
    if isinstance(block, Heading):
        command = {1: "section", 2: "subsection"}.get(block.level, "subsubsection")
        return rf"\{command}*{{{text_latex(block.text)}}}"
    if isinstance(block, Prose):
        return _accented(block.text)
    if isinstance(block, Display):
        comment = f"% {block.provenance.comment()}\n"
        return comment + "\\begin{align*}\n" + _latex_lines(block) + "\n\\end{align*}"
    if isinstance(block, Table):
        columns = "l" * len(block.header)
        lines = [
            rf"\begin{{tabular}}{{{columns}}}",
            r"\toprule",
            " & ".join(block.header) + r" \\",
            r"\midrule",
            *(" & ".join(row) + r" \\" for row in block.rows),
            r"\bottomrule",
            r"\end{tabular}",
        ]
        return "\\begin{center}\n" + "\n".join(lines) + "\n\\end{center}"
    if isinstance(block, Code):  # plain LaTeX (a fragment needs no package); ASCII only
        text = block.text.encode("ascii", "replace").decode("ascii").rstrip()
        text = "\n".join(part for line in text.splitlines() for part in code_lines(line))
        return f"{{\\scriptsize\n\\begin{{verbatim}}\n{text}\n\\end{{verbatim}}\n}}"
    if isinstance(block, Figure):
        return (
            "\\begin{figure}[!htbp]\n\\centering\n"
            rf"\includegraphics[width={block.width}\textwidth]{{{block.path}}}"
            f"\n\n\\smallskip{{\\small {block.caption}}}\n\\end{{figure}}"
        )
    raise TypeError(f"unknown block {block!r}")


#: The most characters of a line of code the PDF's page holds (\scriptsize verbatim).
CODE_WIDTH = 90


def code_lines(line: str, width: int = CODE_WIDTH) -> list[str]:
    """A line of Python broken to `width` where Python allows it, inside brackets: after a
    comma or before a binary + or *, each piece after the first indented 4 more (the code still
    runs as printed). A piece with no such place is kept whole."""
    indent = line[: len(line) - len(line.lstrip())] + "    "
    pieces, depth = [], 0
    while len(line) > width:
        cut, at, level, quote = -1, depth, depth, ""
        for k, char in enumerate(line[:width]):
            if quote:
                quote = "" if char == quote else quote
            elif char in "\"'":
                quote = char
            elif char in "([{":
                level += 1
            elif char in ")]}":
                level -= 1
            elif level > 0 and k > len(indent) and char == "," and line[k + 1 : k + 2] == " ":
                cut, at = k + 1, level
            elif level > 0 and k > len(indent) and line[k : k + 3] in (" + ", " * "):
                cut, at = k, level
        if cut < 0:
            break
        pieces.append(line[:cut].rstrip())
        line, depth = indent + line[cut:].lstrip(), at
    return [*pieces, line]


def _pdf_string(text: str) -> str:
    """A PDF text string: ``(text)`` where it is plain ASCII with nothing TeX or PDF reads as
    a command, else UTF-16 in hexadecimal (``<FEFF…>``), so that a user's "1 − λ" or "W_q"
    reads as typed in a viewer's window."""
    if re.fullmatch(r"[ -~]*", text) and not re.search(r"[\\{}%#&~^_()$]", text):
        return f"({text})"
    return "<FEFF" + text.encode("utf-16-be").hex().upper() + ">"


def _pdf_info(title: str) -> str:
    """The PDF's Title and Subject (what a viewer's window and a library's index show), in plain
    text: the title without its LaTeX."""
    plain = re.sub(r"\\[a-zA-Z]+\{([^{}]*)\}", r"\1", title).replace("$", "")
    plain = re.sub(r"\\([_%&#])", r"\1", plain)
    what = plain.removesuffix(", derived")
    subject = f"{what}: every formula derived by SymPy from its declarations"
    keywords = "attention, self-attention, transformer, SymPy, derivation, backward pass"
    return (
        f"\\pdfinfo{{/Title {_pdf_string(plain)} /Subject {_pdf_string(subject)} /Author (the "
        f"attention-derive authors) /Keywords ({keywords}) /Creator (attention-derive)}}\n"
    )


def to_latex(blocks: list[Block], *, title: str, note: str, standalone: bool = True) -> str:
    """The document as LaTeX: a whole ``article``, or with ``standalone=False`` the body only."""
    body = "\n\n".join(_latex_block(block) for block in _printed(blocks)) + "\n"
    if not standalone:
        return f"% {title}\n% {note}\n\n" + body
    head = (
        _PREAMBLE
        + _unicode_preamble(title + body)
        + _pdf_info(title)
        + f"\\title{{{text_latex(title)}}}\n\\author{{}}\n\\date{{}}\n"
    )
    return (
        head + "\n\\begin{document}\n\\maketitle\n\n" + f"{note}\n\n" + body + "\\end{document}\n"
    )


def _markdown_text(text: str, *, title: bool = False) -> str:
    """LaTeX prose to Markdown prose: emphasis, code and non-breaking marks; math stays as is.
    A title is text: its ~ is a tilde."""
    text = re.sub(r"\\emph\{([^}]*)\}", r"*\1*", text)
    text = re.sub(r"\\texttt\{([^}]*)\}", r"`\1`", text)
    return text if title else text.replace("~", " ")


def markdown_block(block: Block) -> str:
    """One block as Markdown (the notebook's Markdown cells are made of these)."""
    if isinstance(block, Heading):
        return "#" * (block.level + 1) + " " + _markdown_text(block.text, title=True)
    if isinstance(block, Prose):
        return _markdown_text(block.text)
    if isinstance(block, Display):
        lines = list(block.lines)
        comment = f"<!-- {block.provenance.comment()} -->\n*{block.provenance.said()}*\n\n"
        if len(lines) == 1 and "&" not in lines[0]:
            return comment + "$$\n" + lines[0] + "\n$$"
        return comment + "$$\n\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}\n$$"
    if isinstance(block, Table):
        rows = [block.header, tuple("---" for _ in block.header), *block.rows]
        return "\n".join("| " + " | ".join(_markdown_text(c) for c in row) + " |" for row in rows)
    if isinstance(block, Code):
        return f"```{block.language}\n{block.text.rstrip()}\n```"
    if isinstance(block, Figure):
        caption = _markdown_text(block.caption)
        return f"![{caption}]({block.path})\n\n*{caption}*"
    raise TypeError(f"unknown block {block!r}")


def to_markdown(blocks: list[Block], *, title: str, note: str) -> str:
    """The document as GitHub-flavoured Markdown with ``$$`` math."""
    parts = [f"# {title}", f"> {_markdown_text(note)}"]  # a quote: the note has emphasis in it
    parts += [markdown_block(block) for block in _printed(blocks)]
    return "\n\n".join(parts) + "\n"
