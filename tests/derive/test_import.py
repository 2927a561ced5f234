"""`import derive` stays light: no torch, no attention, and quick."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys, time
start = time.perf_counter()
import derive
seconds = time.perf_counter() - start
print(json.dumps({
    "seconds": seconds,
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
    assert probe["torch"] is False
    assert probe["attention"] is False
    assert probe["matplotlib"] is False


def test_import_time_is_small():
    # Measured on the 2-core CI machine: about 0.35 s, nearly all of it SymPy's own import.
    assert _probe()["seconds"] < 2.0
