"""What an HTML page embeds: KaTeX (vendored), the page's own stylesheet and script.

KaTeX is the npm package ``katex`` at `KATEX_VERSION` (MIT licence: ``assets/katex/LICENSE``), of
which derive ships ``dist/katex.min.js``, ``dist/katex.min.css`` and the woff2 fonts as package
data under ``derive/render/assets/katex/``. The stylesheet's font URLs are replaced by the fonts
themselves (base64 ``data:`` URLs, woff2 only), so that a page fetches nothing when it is viewed.
To update KaTeX: ``npm pack katex@VERSION``, copy those files over, set `KATEX_VERSION`; a test
checks that the vendored script is that version.

``assets/page.css`` and ``assets/page.js`` are derive's own: the layout (light and dark colour
schemes, print) and the script that typesets the math and makes the explicit matrices answer
hover and focus.
"""

from __future__ import annotations

import base64
import functools
import re
from importlib import resources
from importlib.resources.abc import Traversable

__all__ = ["KATEX_VERSION", "katex_style", "katex_script", "page_style", "page_script"]

KATEX_VERSION = "0.19.1"

#: One @font-face source list of the KaTeX stylesheet: woff2, then woff and ttf fallbacks.
_SOURCES = re.compile(
    r'url\(fonts/(?P<name>[\w-]+)\.woff2\) format\("woff2"\)'
    r'(?:,url\(fonts/[\w-]+\.(?:woff|ttf)\) format\("(?:woff|truetype)"\))*'
)


def _asset(path: str) -> Traversable:
    return resources.files("derive.render").joinpath("assets", *path.split("/"))


def _font(match: re.Match) -> str:
    data = _asset(f"katex/fonts/{match['name']}.woff2").read_bytes()
    return f'url(data:font/woff2;base64,{base64.b64encode(data).decode("ascii")}) format("woff2")'


@functools.cache
def katex_style() -> str:
    """KaTeX's stylesheet with its woff2 fonts embedded (no URL left but ``data:``)."""
    css = _SOURCES.sub(_font, _asset("katex/katex.min.css").read_text(encoding="utf-8"))
    left = [url for url in re.findall(r"url\(([^)]*)\)", css) if not url.startswith("data:")]
    if left:
        raise RuntimeError(f"the KaTeX stylesheet still refers to files: {left[:3]}")
    return css


@functools.cache
def katex_script() -> str:
    """KaTeX's script (``katex.min.js``), checked to be safe inside a ``<script>`` element."""
    script = _asset("katex/katex.min.js").read_text(encoding="utf-8")
    if re.search(r"</script|<!--", script, re.IGNORECASE):
        raise RuntimeError("katex.min.js holds '</script' or '<!--': it cannot be inlined")
    return script


@functools.cache
def page_style() -> str:
    """The page's own stylesheet."""
    return _asset("page.css").read_text(encoding="utf-8")


@functools.cache
def page_script() -> str:
    """The page's own script: typesetting, the entries' formulas on hover and focus."""
    return _asset("page.js").read_text(encoding="utf-8")
