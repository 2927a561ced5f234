"""The consistency checks catch broken implementations (mutants of `attention`, tests/mutants.py)."""

from pathlib import Path

import pytest
from mutants import MUTANTS, failed_checks, mutant, report

DOC = Path(__file__).parents[2] / "docs" / "mutation-testing.md"


def test_the_real_implementation_passes_every_check():
    assert failed_checks() == []


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_mutant_is_caught(name):
    with mutant(name):
        assert failed_checks() != [], f"mutant {name} ({MUTANTS[name][0]}) went unnoticed"
    assert failed_checks() == []  # and the real functions are back


def test_mutation_report_in_docs_is_current():
    assert report() in DOC.read_text(encoding="utf-8"), (
        "docs/mutation-testing.md is out of date: regenerate it with python tests/mutants.py --full"
    )
