"""What a packager and a type checker read: the licence, the metadata, the typed marker, the
changelog."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_licence_is_apache_2_and_the_metadata_says_so():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert PROJECT["license"] == "Apache-2.0 AND MIT"  # ours, and KaTeX's for its files
    for name in PROJECT["license-files"]:
        assert (ROOT / name).is_file(), name
    assert "MIT" in (ROOT / "derive/render/assets/katex/LICENSE").read_text(encoding="utf-8")


def test_both_packages_are_marked_typed():
    for package in ("attention", "derive"):
        assert (ROOT / package / "py.typed").is_file()
    assert "Typing :: Typed" in PROJECT["classifiers"]


def test_the_metadata_a_packager_expects():
    assert PROJECT["authors"] and PROJECT["keywords"] and PROJECT["description"]
    assert any(c.startswith("Development Status") for c in PROJECT["classifiers"])
    python = [
        c for c in PROJECT["classifiers"] if c.startswith("Programming Language :: Python :: 3.")
    ]
    assert "Programming Language :: Python :: 3.11" in python  # requires-python's floor
    assert PROJECT["requires-python"] == ">=3.11"


def test_the_changelog_has_the_released_version_and_what_is_unreleased():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {PROJECT['version']}" in changelog
    assert changelog.index("## Unreleased") < changelog.index(f"## {PROJECT['version']}")


def test_the_sdist_carries_what_a_user_needs_and_nothing_of_the_repository_s_own(tmp_path):
    """The packages (their assets included), the README, the licences, the changelog, the
    user's documentation and example; not the tests, the generated documents, the benchmarks
    or CI (see [tool.hatch.build.targets.sdist])."""
    import tarfile

    from hatchling.builders.sdist import SdistBuilder

    (built,) = SdistBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    with tarfile.open(built) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    for needed in (
        "attention/__init__.py",
        "attention/py.typed",
        "derive/render/assets/page.js",
        "derive/render/assets/katex/LICENSE",
        "docs/examples/sigmoid_attention.py",
        "docs/glossary.md",
        "docs/tutorial.md",
        "docs/guides/check-your-port.md",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "pyproject.toml",
    ):
        assert needed in names, needed
    left_out = ("tests/", "docs/derivation", "docs/figures/", ".ci/", "docs/benchmarks.md")
    assert [n for n in names if n.startswith(left_out)] == []
