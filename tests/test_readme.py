"""The README says what is true: its example runs, its test command is the one CI runs, it stays
short (the documentation site, docs/, says the rest), and the guide's declared variant is the
example file's. (Every code block of the README and of the site's pages runs in
tests/site/test_site.py.)"""

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_python_example_runs():
    example = re.findall(r"```python\n(.*?)```", README, re.S)[0]  # the first: using attention
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["C"].shape == (6, 2) and namespace["A"].shape == (6, 6)
    assert namespace["Wq"].shape == (3, 2)


def test_the_test_command_is_what_ci_runs():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command.strip() in ci
    guide = (ROOT / "docs" / "guides" / "tests.md").read_text(encoding="utf-8")
    assert test_command.strip() in guide  # the site's guide says the same


def test_the_main_command_is_run_by_ci_as_written():
    """The README's first command that sets up and runs (the main job) is not run by the site's
    test (it installs: network, minutes), so CI runs it, as written, on its fresh clone."""
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    main = next(c for c in commands if "derive latex" in c)
    assert main.startswith("python3 -m venv .venv") and "pytest" not in main
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert main.strip() in ci


def test_the_readme_is_short_and_its_two_commands_come_first():
    assert len(README.splitlines()) <= 150
    headings = re.findall(r"^## (.*)$", README, re.M)
    assert headings[0] == "Two commands: the derivation, and the tests"


def test_the_declared_variant_is_the_example_files():
    """The guide's sigmoid attention declares what docs/examples/sigmoid_attention.py does."""
    import importlib.util

    import derive

    guide = (ROOT / "docs" / "guides" / "declare-a-variant.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if "declare" in b)
    shown: dict = {}
    exec(compile(block, "declare-a-variant.md", "exec"), shown)  # noqa: S102 - our own guide
    path = ROOT / "docs" / "examples" / "sigmoid_attention.py"
    spec = importlib.util.spec_from_file_location("readme_sigmoid_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    root = derive.variant("self-attention").graph
    mine, theirs = shown["SIGMOID"], example.SIGMOID
    steps = [(s.name, s.title, s.element) for s in mine.build(root).declarations]
    assert steps == [(s.name, s.title, s.element) for s in theirs.build(root).declarations]
    assert mine.parameters == theirs.parameters and mine.name == theirs.name

    def stated(claim):
        return {k: v for k, v in vars(claim).items() if k not in ("text", "heading", "then")}

    assert [stated(c) for c in mine.claims] == [stated(c) for c in theirs.claims]
    assert "derive check --variant docs/examples/sigmoid_attention.py:SIGMOID" in guide


def test_the_count_of_pairs_that_combine_is_the_registry_s():
    from derive.graph.entries import BUILT_IN
    from derive.graph.registry import compatibility

    pairs = compatibility(tuple(found.name for found in BUILT_IN))
    combine = sum(1 for why in pairs.values() if not why)
    said = re.search(r"(\d+) of the (\d+) pairs of built-in variants combine", README)
    assert said and (int(said[1]), int(said[2])) == (combine, len(pairs))


def test_no_link_or_image_is_relative():
    """The README is also the package's description (its metadata, an index's page), where a
    relative link or image leads nowhere: files are named as paths instead."""
    targets = re.findall(r"!?\[[^\]]*\]\(([^)]*)\)", README)
    assert [t for t in targets if not t.startswith("https://")] == []
    assert "`docs/glossary.md`" in README  # what the links were is still named
