"""Shared test set-up.

ATTENTION_MUTANT=<name> runs the whole suite against one deliberately broken variant of
`attention` (see tests/mutants.py); `python tests/mutants.py --full` does it for every mutant.
"""

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _apply_mutant():
    name = os.environ.get("ATTENTION_MUTANT")
    if not name:
        yield
        return
    from mutants import mutant

    with mutant(name):
        yield
