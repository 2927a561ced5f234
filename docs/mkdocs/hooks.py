"""MkDocs hooks of the documentation site: KaTeX from the copy `derive` ships, and the
docstrings' doctests shown as code.

The HTML page of the derivation inlines KaTeX from `derive/render/assets/katex` (the npm package
`katex`, MIT, its licence beside it). The site reads the same files, copied into the built site
under `assets/katex/` after the build, so that the repository holds one copy and the site makes
no request to any network.

The docstrings are plain Markdown (mkdocstrings' `docstring_style: null`: they follow no
Google or NumPy layout), with doctests (`>>> …` and the output under it) where an example
helps; Markdown would read those lines as quotations and their brackets as links, so each run of
them becomes a fenced `pycon` block first.
"""

import shutil
from pathlib import Path

from markdown import Extension
from markdown.preprocessors import Preprocessor

DOCS = Path(__file__).resolve().parents[1]
KATEX = DOCS.parent / "derive" / "render" / "assets" / "katex"


class _Doctests(Preprocessor):
    """Each run of lines from a `>>>` line to the next blank line, fenced as `pycon` (with a
    blank line before and after, so that it never continues a paragraph)."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        index = 0
        while index < len(lines):
            line = lines[index]
            if not line.lstrip().startswith(">>>"):
                out.append(line)
                index += 1
                continue
            indent = len(line) - len(line.lstrip())
            block = []
            while index < len(lines) and lines[index].strip():
                block.append(lines[index][indent:])
                index += 1
            out += ["", "```pycon", *block, "```", ""]
        return out


class Doctests(Extension):
    def extendMarkdown(self, md) -> None:  # noqa: N802 (Markdown's name)
        md.preprocessors.register(_Doctests(md), "doctests", 40)  # before the fences (30)


def on_config(config, **kwargs):
    """Every Markdown of the site, mkdocstrings' included, reads doctests as code; snippets
    (`--8<-- "examples/…"`) are read from docs/, wherever the build runs."""
    config["markdown_extensions"].append(Doctests())
    config["mdx_configs"]["pymdownx.snippets"]["base_path"] = [str(DOCS)]
    return config


def on_post_build(config, **kwargs):
    """Copy KaTeX's script, stylesheet, fonts and licence into the site."""
    target = Path(config["site_dir"]) / "assets" / "katex"
    shutil.copytree(KATEX, target, dirs_exist_ok=True)
