"""`import derive` stays light: no torch, no attention (its import time is measured by
tests/benchmarks/bench_derive.py --commands, not here)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import derive
print(json.dumps({
    "derive": "derive" in sys.modules,
    "torch": "torch" in sys.modules,
    "attention": "attention" in sys.modules,
    "matplotlib": "matplotlib" in sys.modules,
}))
"""


def _probe() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True, cwd=ROOT
    )
    return json.loads(result.stdout)


def test_import_does_not_import_torch_or_attention():
    probe = _probe()
    assert probe["derive"] is True
    assert probe["torch"] is False
    assert probe["attention"] is False
    assert probe["matplotlib"] is False

