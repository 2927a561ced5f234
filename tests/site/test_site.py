"""The documentation site (docs/, built by MkDocs from docs/mkdocs/mkdocs.yml), tested like the
product: it builds in strict mode (no broken link, no missing reference); every page opens in
Chromium at 1280 and 420 px from a local server with no error, no request to any other host,
its math typeset by the vendored KaTeX and no wider than the screen; search finds a page with no
network; and every code block of every page runs, so that no example drifts.

Code blocks: ```python and ```py blocks run in one namespace per page, in order (a `test_…`
function a page defines is called); a block whose first line says `# excerpt` is a fragment of a
file shown elsewhere, not run alone. ```sh lines run from a scratch folder that sees docs/ and
tests/, except the lines that set up an environment or run the test suite (`INSTALL`), which are
the README's and CI's own commands. ```text blocks are output or layouts. Every fence names one
of these languages."""

import functools
import http.server
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIG = DOCS / "mkdocs" / "mkdocs.yml"
LANGUAGES = {"python", "py", "sh", "text"}
#: Lines of ```sh blocks that are not run here: setting up an environment (what the README's two
#: commands and .ci/run do on a fresh machine) and running the test suite itself.
INSTALL = re.compile(r"pip install|python3 -m venv|apt-get|pytest|oldest_torch\.sh|mutants\.py")


def _pages() -> list[str]:
    """The Markdown pages of the site (nav's), relative to docs/."""
    text = CONFIG.read_text(encoding="utf-8")
    return [page for page in re.findall(r":\s*(\S+\.md)\s*$", text, re.M)]


def _sources() -> list[str]:
    """The pages and the README: every file whose code blocks run."""
    return [*_pages(), "README.md"]


def _blocks(page: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of a page (or of the README), snippets
    (`--8<-- "path"`) read in."""
    text = (ROOT / page if page == "README.md" else DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```(\S*)\n(.*?)^```\s*$", text, re.S | re.M)
    return [
        (
            language,
            re.sub(r'^--8<-- "(.+?)"$', lambda m: (DOCS / m[1]).read_text(), code, flags=re.M),
        )
        for language, code in blocks
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built once, strictly (the configuration says strict), into a scratch folder."""
    try:
        import material  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI is set but MkDocs (the test extra) is missing")
        pytest.skip("MkDocs is not installed (pip install -e '.[docs]')")
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(CONFIG), "-d", str(target)],
        capture_output=True,
        text=True,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    return target


@pytest.fixture(scope="module")
def server(site):
    """The built site served from 127.0.0.1 (a browser blocks the search index's fetch from a
    file), its address."""
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request in the test output
        pass


def test_the_site_builds_with_every_page_of_its_nav(site):
    pages = _pages()
    assert len(pages) >= 25
    for page in pages:
        assert (site / page.replace(".md", ".html")).is_file(), page
    for generated in ("reference/cli.html", "reference/api.html", "variants.html", "glossary.html"):
        assert (site / generated).stat().st_size > 10_000, generated
    # the API reference is read from the docstrings: a function's own words are on the page
    api = (site / "reference/api.html").read_text(encoding="utf-8")
    assert "One attention layer, every variant of this package" in api
    assert (site / "assets/katex/katex.min.js").is_file()


def _visit(browser, url: str, width: int, host: str) -> tuple[list, list, dict]:
    """Open one page: (its errors and failed requests, the requests to other hosts, the state
    of its math and width)."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    elsewhere: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("requestfailed", lambda request: errors.append(f"failed: {request.url}"))
    tab.on(
        "request",
        lambda request: elsewhere.append(request.url) if host not in request.url else None,
    )
    tab.goto(url)
    tab.wait_for_load_state("load")
    state = tab.evaluate(
        """() => ({
            math: document.querySelectorAll('.arithmatex').length,
            typeset: document.querySelectorAll('.arithmatex .katex').length,
            katexErrors: document.querySelectorAll('.katex-error').length,
            overflow: document.documentElement.scrollWidth - window.innerWidth,
        })"""
    )
    context.close()
    return errors, elsewhere, state


@pytest.mark.parametrize("width", [1280, 420])
def test_every_page_opens_with_its_math_typeset_and_nothing_outside(browser, server, width):
    host = server.split("//")[1]
    problems = []
    for page in _pages():
        url = f"{server}/{page.replace('.md', '.html')}"
        errors, elsewhere, state = _visit(browser, url, width, host)
        if errors or elsewhere:
            problems.append((page, errors, elsewhere))
        if state["typeset"] != state["math"] or state["katexErrors"]:
            problems.append((page, state))
        if state["overflow"] > 0:  # the page itself scrolls sideways: something sticks out
            problems.append((page, f"{state['overflow']} px wider than the {width} px screen"))
    assert problems == []


def test_math_is_typeset_where_the_pages_have_it(browser, server):
    tab = browser.new_page()
    tab.goto(f"{server}/explanation/scaling.html")
    assert tab.locator(".arithmatex .katex").count() >= 3
    tab.close()


def test_search_finds_a_page_with_no_network(browser, server):
    tab = browser.new_page(viewport={"width": 1280, "height": 800})
    tab.goto(f"{server}/index.html")
    tab.locator(".md-search__input").click()
    tab.keyboard.type("rowsum identity")  # typed: the theme searches on key presses
    results = tab.locator("a.md-search-result__link")
    results.first.wait_for(timeout=15_000)
    links = [results.nth(i).get_attribute("href") or "" for i in range(results.count())]
    assert any("explanation/backward.html" in link for link in links), links
    tab.close()


def test_every_fence_names_a_language_the_runner_knows():
    for page in _sources():
        for language, _ in _blocks(page):
            assert language in LANGUAGES, (page, language)


def _sh_lines() -> list[tuple[str, str]]:
    return [
        (page, line)
        for page in _sources()
        for language, code in _blocks(page)
        if language == "sh"
        for line in code.strip().splitlines()
    ]


def test_the_lines_not_run_are_the_environment_s_own():
    skipped = [line for _, line in _sh_lines() if INSTALL.search(line)]
    assert skipped, "the install commands are on the pages"
    for line in skipped:  # each sets up an environment or runs the suite, and nothing else
        assert re.match(r"(python3 -m venv|\.venv/bin/(pip|python)|HYPOTHESIS|bash|pip)", line), (
            line
        )


@pytest.mark.parametrize(
    "page", sorted({page for page, line in _sh_lines() if not INSTALL.search(line)})
)
def test_every_command_of_a_page_runs(page, tmp_path):
    (tmp_path / "docs").symlink_to(DOCS)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "out").mkdir()  # where the pages write (the README's first command makes it)
    for language, code in _blocks(page):
        if language != "sh":
            continue
        lines = [line for line in code.strip().splitlines() if not INSTALL.search(line)]
        for command in [part for line in lines for part in line.split(" && ")]:
            words = shlex.split(command)
            if words[0] == "mkdir":
                (tmp_path / words[-1]).mkdir(parents=True, exist_ok=True)
                continue
            if words[0] in ("derive", ".venv/bin/derive"):
                words = [sys.executable, "-m", "derive", *words[1:]]
            elif words[0] == "python":
                words = [sys.executable, *words[1:]]
            else:
                pytest.fail(f"{page}: a command the runner does not know: {command}")
            done = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True)
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])


def _runs(language: str, code: str) -> bool:
    return language in ("python", "py") and not code.startswith("# excerpt")


@pytest.mark.parametrize("page", [p for p in _sources() if any(_runs(*b) for b in _blocks(p))])
def test_every_python_example_of_a_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_example"}
    ran = 0
    for language, code in _blocks(page):
        if _runs(language, code):
            exec(compile(code, page, "exec"), namespace)  # noqa: S102 - our own pages
            ran += 1
    assert ran >= 1 and len(namespace) > 2  # the page's examples ran and defined their names
    tests = [value for name, value in namespace.items() if name.startswith("test_")]
    for test in tests:  # a page's example of a test in a user's suite: it must pass
        test()
