"""``python -m derive``: the same as the `derive` command."""

import sys

from .cli import main

sys.exit(main())
