"""Headless Chromium for the tests that read the HTML page as a reader would (and the benchmark).

Playwright (the test extra) drives the system's Chromium (Debian's ``chromium``, which .ci/run
installs); it never downloads a browser. Where Chromium is missing, `require_chromium` skips,
except when the environment variable CI is set: then it fails (a missing browser there is a
broken CI), like the pdflatex tests.

Run as a script, it saves the screenshot the README shows:

    .venv/bin/python tests/headless.py docs/figures/derivation-html.png
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Headless, as root, and quiet on the network: no background fetches, no updates, no sync.
FLAGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The system Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> str:
    """Chromium's path; skip when it is missing (fail when CI is set)."""
    found = chromium()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is missing; install it (see .ci/run)")
        pytest.skip("chromium is not installed (with CI set, this is a failure)")
    return found


@contextlib.contextmanager
def launched(executable: str):
    """A headless Chromium (Playwright's browser object), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


class Visit:
    """A page opened from a file: every request it made, and every error it reported."""

    def __init__(self, browser, path: Path, **context: object) -> None:
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on(
            "console",
            lambda message: (
                self.errors.append(message.text) if message.type in ("error", "warning") else None
            ),
        )
        self.page.goto(Path(path).resolve().as_uri())

    def close(self) -> None:
        self.context.close()


def screenshot(target: Path) -> None:
    """docs/derivation.html with a_{2,3} focused: its formula and value in the space under the
    matrices, the row of Ω̃ it reads lit up."""
    with launched(require_chromium()) as browser:
        visit = Visit(
            browser,
            ROOT / "docs" / "derivation.html",
            viewport={"width": 1000, "height": 720},
            device_scale_factor=1,
        )
        page = visit.page
        page.locator(".matrices .grid").evaluate("element => element.scrollIntoView()")
        page.evaluate("window.scrollBy(0, -12)")
        page.focus("#e-a-2-3")
        page.screenshot(path=str(target))
        visit.close()


if __name__ == "__main__":
    screenshot(
        Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/figures/derivation-html.png"
    )
