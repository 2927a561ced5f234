"""What SymPy derives for `derive conform` is kept between runs, under a key that changes with the
declarations and with the code that derives them."""

import pickle

import correct
import pytest

from derive import conform
from derive.conformance.evaluate import cache, matrices
from derive.graph.forms import Form, reference


@pytest.fixture
def kept(monkeypatch, tmp_path):
    monkeypatch.delenv("DERIVE_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    matrices.graph_forms.cache_clear()  # and in memory: each test starts from nothing
    matrices.gradients.cache_clear()
    return tmp_path / "attention-derive"


def test_the_derivations_are_kept_and_read_back(kept, monkeypatch):
    graph = reference(Form(heads=True, causal=True))
    first = cache.cached("backward", graph, lambda: matrices.gradients.__wrapped__(graph))
    files = sorted(p.name for p in kept.iterdir())
    assert len(files) == 1 and files[0].startswith("backward-")

    def fails():
        raise AssertionError("derived again")

    again = cache.cached("backward", graph, fails)  # read back, not derived
    assert [g.rhs for g in again] == [g.rhs for g in first]
    assert pickle.loads((kept / files[0]).read_bytes())[0].output == first[0].output


def test_another_graph_or_other_code_is_another_key(kept, monkeypatch):
    plain, causal = reference(Form()), reference(Form(causal=True))
    assert cache._key("forms", plain) != cache._key("forms", causal)
    before = cache._key("forms", plain)
    monkeypatch.setattr(cache, "_code", lambda: "edited")
    assert cache._key("forms", plain) != before


def test_a_run_with_the_cache_reports_what_a_run_without_it_does(kept, monkeypatch):
    monkeypatch.setenv("DERIVE_NO_CACHE", "1")
    without = conform(correct.book_mha())
    monkeypatch.delenv("DERIVE_NO_CACHE")
    matrices.graph_forms.cache_clear()
    matrices.gradients.cache_clear()
    with_it = conform(correct.book_mha())  # writes
    written = sorted(p.name for p in kept.iterdir())
    assert any(n.startswith("backward-") for n in written) and any(
        n.startswith("forms-") for n in written
    )
    matrices.graph_forms.cache_clear()
    matrices.gradients.cache_clear()
    read_back = conform(correct.book_mha())  # reads
    assert sorted(p.name for p in kept.iterdir()) == written
    assert with_it.as_json() == without.as_json() == read_back.as_json()


def test_a_cache_that_cannot_be_written_is_passed_by(monkeypatch, tmp_path):
    monkeypatch.delenv("DERIVE_NO_CACHE", raising=False)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    graph = reference(Form())
    assert cache.cached("forms", graph, lambda: ("derived",)) == ("derived",)
