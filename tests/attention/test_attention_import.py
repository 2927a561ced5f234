"""Importing attention costs no more than it must: torch._dynamo (0.7 s) loads only when a
compilation starts, not at import (the time itself is measured by bench_attention.py)."""

import subprocess
import sys


def run(program):
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_does_not_load_dynamo():
    assert run("import sys, attention; print('torch._dynamo' in sys.modules)") == "False"


def test_beartype_loads_at_the_first_check_not_with_the_import():
    """Importing beartype is about 0.15 s; a module built and called loads it (its first call
    is a full check), a plain import does not."""
    probe = "import sys, torch, attention; print('beartype' in sys.modules, end=' '); "
    probe += "attention.SelfAttentionV1(3, 2)(torch.rand(4, 3)); print('beartype' in sys.modules)"
    assert run(probe) == "False True"


def test_checks_run_eagerly_under_compile_after_a_plain_import():
    program = (
        "import sys, torch\n"
        "from attention import SelfAttentionV2, ShapeError\n"
        "m = torch.compile(SelfAttentionV2(3, 2), backend='eager')\n"
        "print(m(torch.rand(5, 3)).shape, 'torch._dynamo' in sys.modules)\n"
        "try:\n"
        "    m(torch.rand(5, 4))\n"
        "except ShapeError as error:\n"
        "    print(error)\n"
    )
    shape, message = run(program).splitlines()
    assert shape == "torch.Size([5, 2]) True"
    assert message.startswith("SelfAttentionV2.forward: W_query.weight has d=3 but x has d=4")
