"""Time of the symbolic-vs-numeric check per size (not a test; run it by hand).

    PYTHONPATH=. python tests/benchmarks/bench_derive.py            # n = d = c = 2 … 12
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --sizes 2 8 --expanded 4
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --sizes 2 2 --claims
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --sizes 2 1 --commands
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --sizes 2 1 --symbolic
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --variants
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --sizes 2 1 --first-try --profile
    PYTHONPATH=. python tests/benchmarks/bench_derive.py --sizes 2 1 --models

``--commands`` includes a user's variant (docs/examples/sigmoid_attention.py). For each size it
reports, in seconds: building `explicit_attention(n, n, n)` (the steps),
evaluating every step on dyadic float64 inputs (exact projections and scores, 30-digit softmax
and context), running `attention.functional` step by step, and comparing; then the whole check
(`check_against_torch`), and its ratio to n³ (the work grows like n²c + ndc). With
``--expanded K`` it also times the path the steps avoid, for sizes up to K: lambdify of the fully
composed C (the "one expanded expression" route). With ``--commands`` it times, best of five
fresh processes, `import derive` and the `derive` command (start-up included). With
``--symbolic`` it times, each in a fresh process (the derivations are cached per graph), what
SymPy derives at symbolic sizes from the declarations of each graph: the matrix forms, the
backward pass, the facts. With ``--variants`` it times each variant's document (symbolic, and
explicit) and its check, each in a fresh process. With ``--first-try`` it times the published
variants of docs/examples/ (Scalable-Softmax, differential and cosine attention, the
Forgetting Transformer, stick-breaking attention, Softpick and talking heads: latex, check, conform, each in a
fresh process), `derive.explicit_variant("self-attention", 6, 6, 6)` and
`derive html --example --n 3`. With ``--models`` it times the combination of each model the
registry names (`derive.graph.entries.MODELS`), in a fresh process each (cold caches): `derive
latex` as a command, and, in one more process, where that time goes (the steps' declarations
and matrix forms, the facts, the backward pass checked by numbers, the printing). With ``--profile`` it prints where `derive latex` spends its time
(cProfile, in this process, the 15 functions of largest cumulative time under the command).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(call):
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def bench_steps(size: int) -> dict[str, float]:
    import derive
    from derive.bridge.steps import check_against_torch, compare, dyadic_inputs, torch_steps

    ea, build = _timed(lambda: derive.explicit_variant("self-attention", size, size, size))
    inputs = dyadic_inputs(ea, seed=0)
    values, evaluate = _timed(lambda: ea.evaluate(**inputs))
    tensors, numeric = _timed(lambda: torch_steps(ea, **inputs))
    report, compare_s = _timed(lambda: compare(values, tensors))
    _, whole = _timed(lambda: check_against_torch("self-attention", size, size, size))
    worst = max(item.max_abs_error for item in report)
    return {
        "build": build,
        "evaluate": evaluate,
        "torch": numeric,
        "compare": compare_s,
        "check": whole,
        "worst": worst,
    }


def bench_expanded(size: int) -> float:
    import sympy as sp

    import derive

    ea = derive.explicit_variant("self-attention", size, size, size)
    symbols = [*ea.X, *ea.W_q, *ea.W_k, *ea.W_v]
    _, seconds = _timed(lambda: sp.lambdify(symbols, ea.C, modules="math", cse=True))
    return seconds


def check_claims() -> None:
    """The measurements the design rests on: xreplace vs subs, and lambdify to torch."""
    import sympy as sp

    import derive

    for size in (4, 6, 8):
        ea = derive.explicit_variant("self-attention", size, size, size)
        _ = ea.C  # build the composed matrices first; time the substitution alone
        numbers = {s: sp.Rational(k % 7 - 3, 8) for k, s in enumerate([*ea.X, *ea.W_q])}
        _, fast = _timed(lambda ea=ea, numbers=numbers: ea.Q.xreplace(numbers))
        _, slow = _timed(lambda ea=ea, numbers=numbers: ea.Q.subs(numbers))
        print(f"Q at n=d=c={size}: xreplace {1e3 * fast:.1f} ms, subs {1e3 * slow:.1f} ms")
    import torch

    ea = derive.explicit_variant("self-attention", 3, 3, 2)
    (scaled,) = [step for step in ea.steps if step.name == "scaled_scores"]
    formula = scaled.formula  # an exact sqrt(2) in every entry
    symbols = sorted(formula.free_symbols, key=str)
    try:
        sp.lambdify(symbols, formula, modules="torch")(*[torch.tensor(0.5)] * len(symbols))
        print("lambdify(modules='torch') with exact sqrt(2): works")
    except TypeError as error:
        print(f"lambdify(modules='torch') with exact sqrt(2): TypeError: {error}")


#: A user's variant, declared in its own file (the README's example).
EXAMPLE = f"{Path(__file__).resolve().parents[2] / 'docs' / 'examples' / 'sigmoid_attention.py'}"

COMMANDS = {
    "python -c 'import derive'": ["-c", "import derive"],
    "derive latex (generic)": ["-m", "derive", "latex", "-o", "d.tex"],
    "derive latex --n 8 --d 8 --c 8": [
        "-m",
        "derive",
        "latex",
        "--n",
        "8",
        "--d",
        "8",
        "--c",
        "8",
        "-o",
        "d.tex",
    ],
    "derive markdown (generic)": ["-m", "derive", "markdown", "-o", "d.md"],
    "derive pdf (generic, pdflatex included)": ["-m", "derive", "pdf", "-o", "d.pdf"],
    "derive check --n 5 --d 3 --c 2": ["-m", "derive", "check", "--n", "5", "--d", "3", "--c", "2"],
    "derive latex --variant sigmoid_attention.py:SIGMOID (a user's)": [
        "-m",
        "derive",
        "latex",
        "--variant",
        f"{EXAMPLE}:SIGMOID",
        "-o",
        "s.tex",
    ],
    "derive html --variant sigmoid_attention.py:SIGMOID --n 3": [
        "-m",
        "derive",
        "html",
        "--variant",
        f"{EXAMPLE}:SIGMOID",
        "--n",
        "3",
        "-o",
        "s.html",
    ],
    "derive check --variant sigmoid_attention.py:SIGMOID --n 4 --d 3 --c 2": [
        "-m",
        "derive",
        "check",
        "--variant",
        f"{EXAMPLE}:SIGMOID",
        "--n",
        "4",
        "--d",
        "3",
        "--c",
        "2",
        "--seed",
        "1",
    ],
}


def bench_commands(repeats: int = 5) -> None:
    """Wall time of each command in a fresh process, best of `repeats`."""
    print("| command | seconds (best of 5, start-up included) |\n|---|--:|")
    with tempfile.TemporaryDirectory() as folder:
        for label, argv in COMMANDS.items():
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                subprocess.run([sys.executable, *argv], cwd=folder, check=True, capture_output=True)
                times.append(time.perf_counter() - start)
            print(f"| `{label}` | {min(times):.2f} |", flush=True)


#: The variants timed by --variants: a document each (symbolic, then explicit) and a check.
VARIANTS = {
    "causal": [],
    "masked": [],
    "multi-head": ["--heads", "2"],
    "kv-cache": [],
    "sliding-window": [],
    "cross-attention": [],
    "rope": [],
    "qk-norm": [],
    "gqa": ["--heads", "4", "--g", "2"],
    "mla": ["--heads", "2"],
    "gqa+rope": ["--heads", "4", "--g", "2"],
    "gqa+qk-norm+rope": ["--heads", "4", "--g", "2"],
}


def bench_variants(repeats: int = 3) -> None:
    """Wall time of `derive latex --variant`, symbolic and at n=3, d=4, c=8, and of `derive
    check --variant` at n=4, d=3, c=8, in a fresh process each, best of `repeats`."""
    print("| variant | latex (symbolic) | latex (n=3, d=4, c=8) | check (n=4, d=3, c=8) |")
    print("|---|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as folder:
        for name, extra in VARIANTS.items():
            flags = [x for part in name.split("+") for x in ("--variant", part)] + extra
            runs = (
                ["latex", "-o", "v.tex", "-q"],
                ["latex", "-o", "v.tex", "-q", "--n", "3", "--d", "4", "--c", "8"],
                ["check", "--n", "4", "--d", "3", "--c", "8", "--seed", "1"],
            )
            cells = []
            for argv in runs:
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    subprocess.run(
                        [sys.executable, "-m", "derive", *argv, *flags],
                        cwd=folder,
                        check=True,
                        capture_output=True,
                    )
                    times.append(time.perf_counter() - start)
                cells.append(f"{min(times):.2f} s")
            print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)


_HERE = Path(__file__).resolve().parents[2]
_EXAMPLES = _HERE / "docs" / "examples"

#: The published variants: (file, declaration's name, what conform is told besides) — each
#: run through latex, check, conform.
FIRST_TRY = (
    ("scalable_softmax.py", "SSMAX", ()),
    ("differential_attention.py", "DIFFERENTIAL", ()),
    ("cosine_attention.py", "COSINE", ()),
    ("forgetting_transformer.py", "FOX", ("--param", "B_f=W_f.bias")),
    ("stick_breaking.py", "STICK_BREAKING", ()),
    ("softpick.py", "SOFTPICK", ()),
    ("talking_heads.py", "TALKING_HEADS", ()),
)

#: Calls timed beside them, in a fresh process each.
OTHERS = {
    "derive.explicit_variant('self-attention', 6, 6, 6)": [
        "-c",
        "import derive; derive.explicit_variant('self-attention', 6, 6, 6).C",
    ],
    "derive html --example --n 3": [
        "-m",
        "derive",
        "html",
        "--example",
        "--n",
        "3",
        "-o",
        "e.html",
    ],
    "derive latex (generic)": ["-m", "derive", "latex", "-o", "d.tex"],
    "python -c 'import derive'": ["-c", "import derive"],
}


#: What one process times, phase by phase, for --models (each phase reuses what the one
#: before it derived, as derive latex does).
_PHASES = """
import sys, time
start = time.perf_counter()
import derive
from derive.render import DocumentOptions, latex_document
name = sys.argv[1]
marks = [("import", time.perf_counter())]
derive.steps(name); marks.append(("steps", time.perf_counter()))
derive.facts(name); marks.append(("facts", time.perf_counter()))
derive.backward_steps(name); marks.append(("backward", time.perf_counter()))
latex_document(DocumentOptions(variant=name)); marks.append(("printing", time.perf_counter()))
last = start
for label, when in marks:
    print(f"{label}={when - last:.2f}")
    last = when
"""


def bench_models(repeats: int = 2) -> None:
    """`derive latex` of each model's combination, cold, best of `repeats` fresh processes,
    and its phases in one more."""
    from derive.graph.entries import MODELS

    print(
        "| model | combination | derive latex (cold) | import | steps | facts | backward | printing |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as folder:
        for parts, model in MODELS.items():
            name = "+".join(parts)
            flags = [x for part in parts for x in ("--variant", part)]
            whole = _best(["-m", "derive", "latex", "-o", "m.tex", "-q", *flags], folder, repeats)
            done = subprocess.run(
                [sys.executable, "-c", _PHASES, name],
                cwd=folder,
                check=True,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(_HERE)},
            )
            phases = dict(line.split("=") for line in done.stdout.split())
            cells = " | ".join(
                f"{float(phases[k]):.2f}"
                for k in ("import", "steps", "facts", "backward", "printing")
            )
            print(f"| {model} | `{name}` | {whole:.2f} s | {cells} |", flush=True)


def _best(argv: list[str], folder: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, *argv], cwd=folder, check=True, capture_output=True, env=_ENV
        )
        times.append(time.perf_counter() - start)
    return min(times)


#: The child processes import this checkout's packages, wherever the benchmark is run from.
_ENV = {**os.environ, "PYTHONPATH": str(_HERE)}


def bench_first_try(repeats: int = 3) -> None:
    """Wall time, start-up included, best of `repeats` fresh processes: each published
    variant's latex, check and conform, then the calls of `OTHERS`."""
    print("| variant (docs/examples/) | latex | check | conform |\n|---|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as folder:
        for file, name, told in FIRST_TRY:
            spec = f"{_EXAMPLES / file}:{name}"
            layer = f"{_EXAMPLES / file}:layer"
            runs = (
                ["-m", "derive", "latex", "-q", "--variant", spec, "-o", "v.tex"],
                ["-m", "derive", "check", "-q", "--variant", spec, "--seed", "7"],
                ["-m", "derive", "conform", "-q", layer, "--variant", spec, *told],
            )
            cells = [f"{_best(argv, folder, repeats):.2f} s" for argv in runs]
            print(f"| `{file}` | " + " | ".join(cells) + " |", flush=True)
        print("\n| call | seconds |\n|---|--:|")
        for label, argv in OTHERS.items():
            print(f"| `{label}` | {_best(argv, folder, repeats):.2f} |", flush=True)


def profile_latex(top: int = 15) -> None:
    """Where `derive latex` spends its time: cProfile of the command in this process."""
    import cProfile
    import io
    import pstats

    from derive.cli import main as derive_main

    with tempfile.TemporaryDirectory() as folder:
        profiler = cProfile.Profile()
        profiler.enable()
        derive_main(["latex", "-q", "-o", str(Path(folder) / "d.tex")])
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    print(out.getvalue())


SYMBOLIC = """
import time
start = time.perf_counter()
from derive import calculus, proofs
from derive.graph import self_attention
imported = time.perf_counter()
graph = self_attention({form})
calculus.steps(graph)
forms = time.perf_counter()
calculus.backward(graph)
backward = time.perf_counter()
proofs.facts(graph), proofs.softmax_jacobian(graph), proofs.rowsum_identity(graph)
facts = time.perf_counter()
print(imported - start, forms - imported, backward - forms, facts - backward)
"""


def bench_symbolic() -> None:
    """What the derivation at symbolic sizes costs, per graph, in a fresh process."""
    print("| graph | import | matrix forms | backward pass | facts |\n|---|--:|--:|--:|--:|")
    for label, form in (
        ("self-attention", ""),
        ("causal", "causal=True"),
        ("multi-head", "heads=True"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", SYMBOLIC.format(form=form)],
            check=True,
            capture_output=True,
            text=True,
        )
        times = [float(x) for x in done.stdout.split()]
        print(f"| {label} | " + " | ".join(f"{t:.2f} s" for t in times) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs=2, type=int, default=(2, 12), metavar=("FROM", "TO"))
    parser.add_argument("--expanded", type=int, default=0, metavar="K")
    parser.add_argument("--claims", action="store_true", help="xreplace vs subs; torch lambdify")
    parser.add_argument("--commands", action="store_true", help="import and command wall times")
    parser.add_argument("--symbolic", action="store_true", help="the derivation's own cost")
    parser.add_argument("--variants", action="store_true", help="each variant's document, check")
    parser.add_argument("--first-try", action="store_true", help="the published variants")
    parser.add_argument("--profile", action="store_true", help="a profile of derive latex")
    parser.add_argument("--models", action="store_true", help="each model's combination")
    args = parser.parse_args()
    if args.models:
        bench_models()
    if args.first_try:
        bench_first_try()
    if args.profile:
        profile_latex()
    if args.variants:
        bench_variants()
        return
    if args.symbolic:
        bench_symbolic()
    if args.claims:
        check_claims()
    if args.commands:
        bench_commands()
    print(
        f"{'n=d=c':>5} {'build':>7} {'evaluate':>9} {'torch':>7} {'compare':>8} "
        f"{'check':>7} {'check/n^3 (us)':>15} {'worst error':>12}"
    )
    for size in range(args.sizes[0], args.sizes[1] + 1):
        row = bench_steps(size)
        print(
            f"{size:>5} {row['build']:>7.3f} {row['evaluate']:>9.3f} {row['torch']:>7.3f} "
            f"{row['compare']:>8.3f} {row['check']:>7.3f} {1e6 * row['check'] / size**3:>15.1f} "
            f"{row['worst']:>12.2e}",
            flush=True,
        )
    for size in range(2, args.expanded + 1):
        print(
            f"lambdify of the composed C at n=d=c={size}: {bench_expanded(size):.2f} s", flush=True
        )


if __name__ == "__main__":
    main()
