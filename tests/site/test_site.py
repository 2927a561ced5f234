"""The documentation site (docs/, built by MkDocs from docs/mkdocs/mkdocs.yml), tested like the
product: it builds in strict mode (no broken link, no missing reference); every page opens in
Chromium at 1280 and 420 px from a local server with no error, no request to any other host,
its math typeset by the vendored KaTeX and no wider than the screen; search finds a page with no
network; and every code block of every page runs, so that no example drifts.

Code blocks: ```python and ```py blocks run in one namespace per page, in order (a `test_…`
function a page defines is called); a block whose first line says `# excerpt` is a fragment of a
file shown elsewhere, not run alone. ```sh blocks run as written, with no word rewritten: a
page's blocks in order as one bash script (one terminal), from a fresh folder that holds docs/,
tests/ and the project's environment as .venv/, with that environment not on PATH (a bare
`derive` runs only after the page activates it, as for a reader). A block that cannot run here
says so and why on the line above its fence, `<!-- not run: REASON -->`: setting up an
environment (network, minutes: .ci/run runs the README's commands on a fresh clone) and serving
the site. ```text blocks are output or layouts. Every fence names one of these languages."""

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIG = DOCS / "mkdocs" / "mkdocs.yml"
LANGUAGES = {"python", "py", "sh", "text"}


def _pages() -> list[str]:
    """The Markdown pages of the site (nav's), relative to docs/."""
    text = CONFIG.read_text(encoding="utf-8")
    return [page for page in re.findall(r":\s*(\S+\.md)\s*$", text, re.M)]


def _sources() -> list[str]:
    """The pages and the README: every file whose code blocks run."""
    return [*_pages(), "README.md"]


class Block(NamedTuple):
    """A fenced code block of a page: its language, its code, and why it is not run (the
    `<!-- not run: REASON -->` line right above its fence), or None."""

    language: str
    code: str
    not_run: str | None


#: A fenced block, with the marker line that may stand right above it.
FENCE = re.compile(
    r"(?:^<!-- not run: (?P<why>.+?) -->\n)?^```(?P<language>\S*)\n(?P<code>.*?)^```\s*$",
    re.S | re.M,
)


def _blocks_of(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, snippets (`--8<-- "path"`) read in."""
    return [
        Block(
            m["language"],
            re.sub(r'^--8<-- "(.+?)"$', lambda s: (DOCS / s[1]).read_text(), m["code"], flags=re.M),
            m["why"],
        )
        for m in FENCE.finditer(text)
    ]


def _blocks(page: str) -> list[Block]:
    """The fenced blocks of a page (or of the README)."""
    return _blocks_of(
        (ROOT / page if page == "README.md" else DOCS / page).read_text(encoding="utf-8")
    )


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
    for generated in ("reference/cli.html", "reference/api/derive.html", "variants.html"):
        assert (site / generated).stat().st_size > 10_000, generated
    # the API reference is read from the docstrings: a function's own words are on the page
    api = (site / "reference/api/attention.functional.html").read_text(encoding="utf-8")
    assert "One attention layer, every variant of this package" in api
    assert (site / "assets/katex/katex.min.js").is_file()


def _visit(context, url: str, host: str) -> tuple[list, list, dict]:
    """Open one page in a tab of `context` (one per width: the pages share its cache of the
    site's scripts, styles and fonts, as a reader's browser does): (its errors and failed
    requests, the requests to other hosts, the state of its math and width)."""
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
    tab.close()
    return errors, elsewhere, state


@pytest.mark.parametrize("width", [1280, 420])
def test_every_page_opens_with_its_math_typeset_and_nothing_outside(browser, server, width):
    host = server.split("//")[1]
    problems = []
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        for page in _pages():
            url = f"{server}/{page.replace('.md', '.html')}"
            errors, elsewhere, state = _visit(context, url, host)
            if errors or elsewhere:
                problems.append((page, errors, elsewhere))
            if state["typeset"] != state["math"] or state["katexErrors"]:
                problems.append((page, state))
            if state["overflow"] > 0:  # the page itself scrolls sideways: something sticks out
                problems.append((page, f"{state['overflow']} px wider than the {width} px screen"))
    finally:
        context.close()
    assert problems == []


def test_a_page_that_needs_transformers_says_so_at_its_top():
    needs = re.compile(
        r"import transformers|from transformers|--model |from_hf|attention.huggingface"
    )
    pages = [
        p for p in _pages() if p.startswith("guides/") and needs.search((DOCS / p).read_text())
    ]
    assert len(pages) >= 3
    for page in pages:
        top = "\n".join((DOCS / page).read_text(encoding="utf-8").splitlines()[:8])
        assert '!!! note "' in top and "transformers" in top and "[huggingface]" in top, page


#: The API pages whose every public name has its table of parameters (tests/test_api_docs.py
#: checks the docstrings; this, that the page shows them as tables).
API_PAGES = ("attention", "attention.mods", "derive", "derive.declare", "derive.testing")


@pytest.mark.parametrize("module", API_PAGES)
def test_an_api_page_shows_parameter_tables(browser, server, module):
    import importlib

    tab = browser.new_page(viewport={"width": 1280, "height": 800})
    tab.goto(f"{server}/reference/api/{module}.html")
    heads = tab.locator("table thead").all_inner_texts()
    parameters = [h for h in heads if "Name" in h and "Description" in h]
    functions = [
        n for n in importlib.import_module(module).__all__ if not n[0].isupper()
    ]  # each function a table of parameters, or its Returns table at least
    assert len(parameters) >= max(3, len(functions) // 2), (module, len(parameters), heads[:5])
    assert tab.locator("table tbody tr code, table tbody tr td").count() > 3 * len(parameters)
    tab.close()


def test_the_cli_page_has_a_table_of_options_per_command(browser, server):
    from derive.cli import COMMANDS

    tab = browser.new_page(viewport={"width": 1280, "height": 800})
    tab.goto(f"{server}/reference/cli.html")
    heads = tab.locator("table thead").all_inner_texts()
    assert sum("Option" in h and "Default" in h for h in heads) == len(COMMANDS)
    assert tab.locator("table").first.locator("tbody tr").count() == len(COMMANDS)
    assert tab.locator("td code", has_text="--variant NAME").count() >= 1
    tab.close()


def test_the_conformance_table_shows_its_verdicts_at_1280_px(browser, server):
    tab = browser.new_page(viewport={"width": 1280, "height": 800})
    tab.goto(f"{server}/conformance.html")
    header = tab.locator("table th", has_text="verdict").first
    box = header.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280, box
    verdicts = tab.locator("table tbody tr td:nth-child(2)").all_inner_texts()
    assert len(verdicts) > 100 and "conforms" in verdicts, verdicts[:5]
    tab.close()


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
    results.first.wait_for(timeout=120_000)  # a busy machine indexes slowly
    links = [results.nth(i).get_attribute("href") or "" for i in range(results.count())]
    assert any("explanation/backward.html" in link for link in links), links
    tab.close()


def test_every_fence_names_a_language_the_runner_knows():
    for page in _sources():
        for block in _blocks(page):
            assert block.language in LANGUAGES, (page, block.language)


def _script(blocks: list[Block]) -> str:
    """A page's shell blocks that run, in order, as one bash script: what a reader types into
    one terminal (an activated environment stays activated). The first failing command stops it
    and is named on stderr."""
    lines = ["set -eo pipefail", "trap 'echo \"failed: $BASH_COMMAND\" >&2' ERR"]
    lines += [block.code for block in blocks if block.language == "sh" and not block.not_run]
    return "\n".join(lines)


def _path_outside() -> str:
    """PATH without the project's environment (the one running the tests): a reader's PATH
    before activating it."""
    own = str(Path(sys.prefix) / "bin")
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != own)


def _run_as_written(script: str, folder: Path) -> subprocess.CompletedProcess:
    """Run a page's commands as written from a fresh folder that holds docs/, tests/ and the
    project's environment as .venv (the folder a reader is in after the README's commands), with
    that environment *not* on PATH: a bare `derive` works only where the page activates it."""
    for name, target in (("docs", DOCS), ("tests", ROOT / "tests"), (".venv", Path(sys.prefix))):
        (folder / name).symlink_to(target)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PATH": _path_outside()}
    return subprocess.run(
        ["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=900
    )


def test_every_block_not_run_says_why_and_is_the_environment_s_own_or_a_server():
    marked = [(page, b) for page in _sources() for b in _blocks(page) if b.not_run]
    assert marked, "the install commands are on the pages, marked"
    for page, block in marked:  # each sets up an environment or serves the site, nothing else
        assert block.language == "sh" and len(block.not_run) > 20, (page, block)
        assert re.match(r"(python3 -m venv|\.venv/bin/pip install)", block.code), (page, block)


def test_the_environment_is_set_up_only_in_blocks_that_say_why():
    for page in _sources():
        for block in _blocks(page):
            if block.language == "sh" and not block.not_run:
                assert not re.search(r"pip install|python3 -m venv|apt-get", block.code), page


@pytest.mark.parametrize(
    "page",
    sorted({p for p in _sources() for b in _blocks(p) if b.language == "sh" and not b.not_run}),
)
def test_every_command_of_a_page_runs_as_written(page, tmp_path):
    done = _run_as_written(_script(_blocks(page)), tmp_path)
    assert done.returncode == 0, (page, done.stdout[-2000:], done.stderr[-2000:])


def test_a_page_with_a_broken_command_fails_and_names_it(tmp_path):
    page = (
        "Activate, then derive:\n\n```sh\nsource .venv/bin/activate\nderive variants\n```\n\n"
        "A misspelt variant:\n\n```sh\nderive latex --variant casual -o out.tex\n```\n"
    )
    done = _run_as_written(_script(_blocks_of(page)), tmp_path)
    assert done.returncode == 2 and "failed: derive latex --variant casual" in done.stderr
    assert "did you mean 'causal'" in done.stderr


def test_a_bare_derive_fails_where_the_page_does_not_activate(tmp_path):
    assert shutil.which("derive", path=_path_outside()) is None, "derive is installed elsewhere"
    done = _run_as_written(_script(_blocks_of("```sh\nderive variants\n```\n")), tmp_path)
    assert done.returncode == 127, done.stderr  # the reader's "command not found"


def _runs(language: str, code: str) -> bool:
    return language in ("python", "py") and not code.startswith("# excerpt")


@pytest.mark.parametrize(
    "page", [p for p in _sources() if any(_runs(b.language, b.code) for b in _blocks(p))]
)
def test_every_python_example_of_a_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_example"}
    ran = 0
    for block in _blocks(page):
        if _runs(block.language, block.code):
            exec(compile(block.code, page, "exec"), namespace)  # noqa: S102 - our own pages
            ran += 1
    assert ran >= 1 and len(namespace) > 2  # the page's examples ran and defined their names
    tests = [value for name, value in namespace.items() if name.startswith("test_")]
    for test in tests:  # a page's example of a test in a user's suite: it must pass
        test()
