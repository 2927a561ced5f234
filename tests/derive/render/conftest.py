"""The headless Chromium the page's tests share (tests/headless.py: skipped where it is missing,
a failure when CI is set)."""

import pytest
from headless import launched, require_chromium


@pytest.fixture(scope="module")
def browser():
    with launched(require_chromium()) as browser:
        yield browser
