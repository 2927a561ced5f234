"""Every combination of two built-in variants that resolves derives its document (LaTeX) and
passes `derive check`: an accepted pair never fails. The whole sweep (every accepted pair) runs
with ``DERIVE_SWEEP=all`` (``bash .ci/run sweep``); the test command runs a sample of `SAMPLE`
pairs drawn with a seed that changes from run to run (``DERIVE_SWEEP_SEED=N`` replays one), and
always the combinations the published models use (`derive.graph.entries.MODELS`)."""

import datetime
import os
import random

import pytest

import derive
from derive.graph.entries import BUILT_IN, MODELS
from derive.graph.registry import compatibility

SAMPLE = 6

NAMES = tuple(found.name for found in BUILT_IN)
ACCEPTED = sorted(f"{a}+{b}" for (a, b), why in compatibility(NAMES).items() if not why)
#: One draw per run: the run's id where pytest-xdist gives one (every worker collects the same
#: pairs), else the day; DERIVE_SWEEP_SEED replays a draw (a failure names its seed).
SEED = int(
    os.environ.get("DERIVE_SWEEP_SEED")
    or int(os.environ.get("PYTEST_XDIST_TESTRUNUID", "") or "0", 16) % 2**32
    or datetime.date.today().toordinal()
)
SWEPT = (
    ACCEPTED
    if os.environ.get("DERIVE_SWEEP") == "all"
    else sorted(random.Random(SEED).sample(ACCEPTED, SAMPLE))
)


def _derives_and_checks(name: str, *, forward_only: bool = False) -> None:
    tex = derive.document(derive.DocumentOptions(variant=name), format="latex")
    assert r"\end{document}" in tex  # (its printed gradients checked by numbers first)
    checked = derive.check(name, forward_only=forward_only)
    failed = [
        (row.step, row.difference) for t in checked.trials for row in t.rows if not row.passed
    ]
    assert not failed, f"{name} (DERIVE_SWEEP_SEED={SEED}): {failed}"


@pytest.mark.parametrize("name", SWEPT)
def test_an_accepted_pair_derives_and_checks(name):
    _derives_and_checks(name)


@pytest.mark.parametrize("parts", list(MODELS), ids=["+".join(p) for p in MODELS])
def test_a_published_model_s_combination_derives_and_checks(parts):
    _derives_and_checks("+".join(parts), forward_only=True)


def test_every_refusal_names_its_rule():
    """A refused pair says why: a variant that joins no other names the step it replaces, a
    build that cannot be put into the graph names the step it collides with; no list of the
    variants that would have combined."""
    refused = {pair: why for pair, why in compatibility(NAMES).items() if why}
    assert refused
    rules = ("joins no other variant: ", "cannot be put into the graph", " takes ", "declares no")
    for (a, b), why in refused.items():
        assert any(rule in why for rule in rules), (a, b, why)
        assert " combine" not in why.replace("combines", ""), (a, b, why)
        assert a in why or b in why, (a, b, why)
