"""The programs some tests need besides Python's packages (pdflatex, pdftotext; Chromium has
its own helper, tests/headless.py). Where one is missing its tests skip, except when the
environment variable CI is set: then they fail, a missing program there being a broken CI
(.ci/run installs them)."""

import os
import shutil

import pytest


def require(*programs: str) -> None:
    """Skip the calling test when a program is not on PATH (fail it when CI is set)."""
    missing = " and ".join(p for p in programs if shutil.which(p) is None)
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {missing} is missing; install it (see .ci/run)")
        pytest.skip(f"{missing} is not installed (with CI set, this is a failure)")
