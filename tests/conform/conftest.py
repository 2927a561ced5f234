"""The corpus (tests/conform/corpus/) is imported as plain modules: `correct`, `broken`,
`conventions`, as `derive conform path/to/file.py:attribute` loads them (their folder on the
import path)."""

import sys
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
sys.path.insert(0, str(CORPUS))
