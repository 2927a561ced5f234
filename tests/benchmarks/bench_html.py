"""Speed of the HTML page: `derive html` start to finish, and the page's load in Chromium (not a
test; run it by hand).

    .venv/bin/python tests/benchmarks/bench_html.py            # 7 repeats of each
    .venv/bin/python tests/benchmarks/bench_html.py --repeats 3

For each command it reports, in seconds, the wall time of fresh processes (start-up, the
derivation, the page written; the median and the best): `derive html` at symbolic sizes and at
n = d = c = 8, and `derive notebook` with the docs' options for comparison. Then, in headless
Chromium (the system's, through Playwright; see tests/headless.py), docs/derivation.html (the
worked example at n = 3, d = 4, c = 2) opened from file:// in a fresh browser context each
repeat: DOM interactive (the page parsed and its script run: every formula outside the folded
sums typeset) and the end of the load event, both from the start of navigation (Navigation
Timing).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for headless

from headless import ROOT, Visit, launched, require_chromium  # noqa: E402

DERIVE = str(Path(sys.executable).with_name("derive"))
COMMANDS = {
    "derive html (symbolic)": ["html", "-q", "-o", "{out}/page.html"],
    "derive html --n 8 --d 8 --c 8": [
        "html",
        "-q",
        "-o",
        "{out}/page.html",
        "--n",
        "8",
        "--d",
        "8",
        "--c",
        "8",
    ],
    "derive notebook --n 3 --d 4 --c 2 --example --figures": [
        "notebook",
        "-q",
        "-o",
        "{out}/nb.ipynb",
        "--n",
        "3",
        "--d",
        "4",
        "--c",
        "2",
        "--example",
        "--figures",
    ],
}


def _wall(argv: list[str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([DERIVE, *(a.format(out=out) for a in argv)], check=True)
        return time.perf_counter() - start


def bench_commands(repeats: int) -> None:
    print("| command | median | best |\n|---|---|---|")
    for name, argv in COMMANDS.items():
        times = [_wall(argv) for _ in range(repeats)]
        print(f"| `{name}` | {statistics.median(times):.2f} s | {min(times):.2f} s |")


def bench_page(repeats: int) -> None:
    marks: dict[str, list[float]] = {"domInteractive": [], "loadEventEnd": []}
    with launched(require_chromium()) as browser:
        for _ in range(repeats):
            visit = Visit(browser, ROOT / "docs" / "derivation.html")
            for mark, times in marks.items():
                times.append(
                    visit.page.evaluate(f"performance.getEntriesByType('navigation')[0].{mark}")
                    / 1000
                )
            visit.close()
    print("\n| docs/derivation.html in headless Chromium | median | best |\n|---|---|---|")
    for mark, label in (
        ("domInteractive", "parsed, script run (typeset)"),
        ("loadEventEnd", "load event ends"),
    ):
        times = marks[mark]
        print(f"| {label} | {statistics.median(times):.2f} s | {min(times):.2f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    bench_commands(args.repeats)
    bench_page(args.repeats)


if __name__ == "__main__":
    main()
