"""The corpus (tests/conform/corpus/) is imported as plain modules: `correct`, `broken`,
`conventions`, as `derive conform path/to/file.py:attribute` loads them (their folder on the
import path)."""

import sys
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
sys.path.insert(0, str(CORPUS))

import os  # noqa: E402

# Derive afresh in every test run (tests/conform/test_conform_cache.py tests the cache itself).
os.environ["DERIVE_NO_CACHE"] = "1"
