"""Shared test set-up.

Hypothesis profiles (choose with HYPOTHESIS_PROFILE=<name>):
- `quick` (the default, and what CI runs): 25 examples a property, derandomized so that a run is
  reproducible, no deadline (SymPy's first call of a kind is slow);
- `thorough`: 500 examples a property, random seeds; for local runs before a release;
- `mutants`: 10 examples and no shrinking, for `python tests/mutants.py --full`, where most
  properties fail and shrinking every failure would take minutes.

ATTENTION_MUTANT=<name> runs the whole suite against one deliberately broken variant of
`attention` (see tests/mutants.py); `python tests/mutants.py --full` does it for every mutant.
"""

import os

import pytest

# No test depends on the machine's speed: `derive`'s progress lines show once a job has run for
# a second, which a loaded machine reaches where an idle one does not, and a test reading
# stderr would see them or not. Here they never show (subprocesses inherit it); the lines
# themselves are tested with a fake clock, and the variable with its own values.
os.environ["DERIVE_PROGRESS_AFTER"] = "inf"
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "quick",
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "mutants",
    max_examples=10,
    derandomize=True,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


@pytest.fixture(autouse=True)
def _registry_as_it_was():
    """A variant a test registers (`derive.register_variant`, `--variant file.py:NAME`) is
    gone after it, and so are the letters its file declared: the registry and the notation each
    test sees are the built-in ones."""
    from derive import variants
    from derive.graph import edits, loading
    from derive.graph.registry import unregister_variant
    from derive.notation import letters

    before = set(variants())
    tables = ("LETTERS", "BASES", "ENTRY_LATEX", "MATRIX_LATEX", "_LETTERS", "_AFTER")
    kept = {name: dict(getattr(letters, name)) for name in tables}
    constants, shapes = letters.CONSTANT_LETTERS, dict(edits.SHAPES)
    files = dict(loading._LOADED)  # a file loaded again declares its letters again
    yield
    for name in set(variants()) - before:
        unregister_variant(name)
    for name, table in kept.items():  # and the letters a user's file declared
        getattr(letters, name).clear()
        getattr(letters, name).update(table)
    letters.CONSTANT_LETTERS = constants
    edits.SHAPES.clear()
    edits.SHAPES.update(shapes)
    letters._order.cache_clear()
    loading._LOADED.clear()
    loading._LOADED.update(files)


@pytest.fixture(autouse=True, scope="session")
def _apply_mutant():
    name = os.environ.get("ATTENTION_MUTANT")
    if not name:
        yield
        return
    from mutants import mutant

    with mutant(name):
        yield


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every test that opens a page (the derivation's page, the
    documentation site): tests/headless.py, skipped where it is missing, a failure when CI is
    set."""
    from headless import launched, require_chromium

    with launched(require_chromium()) as launched_browser:
        yield launched_browser
