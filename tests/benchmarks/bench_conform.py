"""Wall time of `derive conform` on a small module, start-up included (not a test; run by hand).

    python tests/benchmarks/bench_conform.py              # 5 rounds
    python tests/benchmarks/bench_conform.py --rounds 9

Each round runs, in fresh processes and interleaved (so that the load of a shared machine falls on
all of them alike): `python -c "import torch"` (the floor: no attention check starts sooner);
`derive conform` of the book's MultiHeadAttention (tests/book.py: a module that imports torch
alone; d = 64, 4 heads, causal) with an empty
cache of derivations (SymPy derives the matrix forms and the backward pass) and with the cache
that run left (`derive.conformance.evaluate.cache`); and `derive conform` of the book's MultiHeadAttention
with its heads merged by a reshape without the transpose (the same sizes), which fails and is
diagnosed (every mistake of the catalogue evaluated); a Hugging Face Llama layer (d = 64, 4 heads
in 2 groups, RoPE) built from its config, against building it alone. Prints the median and the fastest of each,
the machine's load average before and after, and a Markdown table for docs/benchmarks.md; and,
in one fresh process, where the time goes: importing torch, importing derive, loading the target,
the check itself (cache kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DERIVE = [sys.executable, "-m", "derive", "conform"]

TARGET = f"""import sys

import torch

sys.path.insert(0, {str(ROOT / "tests")!r})
from book import BookMultiHeadAttention  # noqa: E402

torch.manual_seed(0)
module = BookMultiHeadAttention(64, 64, 16, 0.0, 4)
"""

BROKEN = f"""import sys

import torch

sys.path.insert(0, {str(ROOT / "tests" / "conform" / "corpus")!r})
from broken import _HeadsMixed  # noqa: E402

torch.manual_seed(0)
module = _HeadsMixed(64, 64, 16, 0.0, 4)
"""

LLAMA = """import torch
import transformers

config = transformers.LlamaConfig(vocab_size=64, num_hidden_layers=1, hidden_size=64,
                                  intermediate_size=128, num_attention_heads=4,
                                  num_key_value_heads=2)
torch.manual_seed(0)
module = transformers.LlamaForCausalLM(config).model.layers[0].self_attn
"""


PHASES = """import json, sys, time
start = time.perf_counter()
import torch
torch_at = time.perf_counter()
import derive.cli
derive_at = time.perf_counter()
from derive.conformance.read.target import load
module = load(sys.argv[1])
target_at = time.perf_counter()
import derive
report = derive.conform(module)
done = time.perf_counter()
derive.conform(module)
again = time.perf_counter()
print(json.dumps({"import torch": torch_at - start, "import derive": derive_at - torch_at,
                  "load the target": target_at - derive_at, "conform": done - target_at,
                  "conform again": again - done}))
"""


def _timed(command: list[str], env: dict[str, str], expect: int) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - start
    if result.returncode != expect:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-conform-"))
    (folder / "target.py").write_text(TARGET)
    (folder / "broken.py").write_text(BROKEN)
    (folder / "llama.py").write_text(LLAMA)
    base = dict(os.environ, PYTHONPATH=str(ROOT))
    base.pop("DERIVE_NO_CACHE", None)
    warm = dict(base, XDG_CACHE_HOME=str(folder / "warm"))
    _timed([*DERIVE, f"{folder / 'target.py'}:module"], warm, 0)  # fill the warm cache
    _timed([*DERIVE, f"{folder / 'broken.py'}:module"], warm, 1)
    _timed([*DERIVE, f"{folder / 'llama.py'}:module"], warm, 0)
    runs: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        cold = dict(base, XDG_CACHE_HOME=str(folder / f"cold-{round_}"))
        cases = {
            "import torch (the floor)": ([sys.executable, "-c", "import torch"], base, 0),
            "conform, empty cache": ([*DERIVE, f"{folder / 'target.py'}:module"], cold, 0),
            "conform, cache kept": ([*DERIVE, f"{folder / 'target.py'}:module"], warm, 0),
            "conform of a broken one, diagnosed": (
                [*DERIVE, f"{folder / 'broken.py'}:module"],
                warm,
                1,
            ),
            "a Llama layer built, no check (its floor)": (
                [sys.executable, str(folder / "llama.py")],
                base,
                0,
            ),
            "conform of a Llama layer (gqa+rope), cache kept": (
                [*DERIVE, f"{folder / 'llama.py'}:module"],
                warm,
                0,
            ),
        }
        for name, (command, env, expect) in cases.items():
            runs.setdefault(name, []).append(_timed(command, env, expect))
        for label, file in (("", "target.py"), ("Llama layer, ", "llama.py")):
            phases = subprocess.run(
                [sys.executable, "-c", PHASES, f"{folder / file}:module"],
                env=warm,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            for name, took in json.loads(phases.stdout).items():
                runs.setdefault(f"in one process, {label}cache kept: {name}", []).append(took)
    load_after = os.getloadavg()
    shutil.rmtree(folder)
    import torch

    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.rounds} rounds, load average "
        f"{load_before[0]:.1f} before and {load_after[0]:.1f} after\n"
    )
    print("| what (d = 64, 4 heads, causal) | median | fastest |")
    print("|---|---|---|")
    for name, times in runs.items():
        print(f"| {name} | {statistics.median(times):.2f} s | {min(times):.2f} s |")


if __name__ == "__main__":
    main()
