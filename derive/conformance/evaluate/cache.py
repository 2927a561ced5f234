"""What SymPy derives for `derive conform`, kept between runs.

The matrix forms and the backward pass of a graph take SymPy about a second; the numbers
`derive conform` then computes take a fraction of that. So the derived objects are pickled under
the user's cache folder (``$XDG_CACHE_HOME/attention-derive``, else ``~/.cache/attention-derive``),
each under a key made of the graph's declarations (`sympy.srepr` of every element, shape and
relation), the SymPy version and the source of the code that derives or prints them
(`derive.calculus`, `derive.notation`, `derive.graph.declaration`, the formulas of the checks):
a change to any of them derives afresh. Writes are
atomic; a cache that cannot be read or written is passed by, silently. ``DERIVE_NO_CACHE=1``
turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import sympy as sp

from ...graph import Graph

__all__ = ["cached", "folder"]

T = TypeVar("T")
_PACKAGE = Path(__file__).resolve().parents[2]
_SOURCES = ("calculus", "notation", "graph/declaration.py", "conformance/evaluate/formulas.py")


def folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attention-derive"


@functools.cache
def _code() -> str:
    """A digest of the code that derives: any edit to it is a new key."""
    digest = hashlib.sha256(sp.__version__.encode())
    for source in _SOURCES:
        path = _PACKAGE / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _key(kind: str, graph: Graph) -> str:
    parts = [kind, graph.name, _code(), sp.srepr(graph.relations)]
    for step in graph.declarations:
        shapes = sorted((k, sp.srepr(v)) for k, v in step.shapes.items())
        parts += [step.name, step.output, sp.srepr(step.element), str(step.constant), str(shapes)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def cached(kind: str, graph: Graph, derive: Callable[[], T]) -> T:
    """`derive()`, or what it returned last time for this graph and this code."""
    if os.environ.get("DERIVE_NO_CACHE"):
        return derive()
    path = folder() / f"{kind}-{_key(kind, graph)}.pickle"
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - missing, unreadable or stale: derive afresh
        pass
    value = derive()
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "wb") as stream:
            pickle.dump(value, stream, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, path)
    except Exception:  # noqa: BLE001 - a read-only home, a full disk: run without it
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
    return value
