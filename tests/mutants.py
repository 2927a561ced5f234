"""Deliberately broken variants of `attention`, and the consistency checks that must catch them.

Each mutant swaps one small function of the implementation for a wrong one (the bugs people
actually write: no 1/√c, √d for √c, softmax over the wrong axis, K used for V, K not transposed, a
causal mask shifted by one, dropout before the softmax). `checks()` runs the symbolic-vs-numeric
comparisons of the consistency suite in miniature; against the real implementation every check
passes, against each mutant at least one fails. `python tests/mutants.py` prints the table kept in
docs/mutation-testing.md (a test keeps the two in step); `python tests/mutants.py --full` also runs
the whole pytest suite (tests/attention, tests/consistency) once per mutant, through the
ATTENTION_MUTANT variable that tests/conftest.py reads, and counts the failing tests.
"""

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as torch_F

import derive
from attention import _core, _layer, _modify
from attention import functional as F
from attention import mods as M
from derive.bridge.steps import check_against_torch, dyadic_inputs

TOLERANCE = 1e-12


def _no_scale(width):
    return 1.0


def _scale_by_d(weights, heads):
    return weights.w_q.shape[0] // heads  # d, the input width, where c belongs


def _columns_softmax(scaled, allowed, sinks=None, **_):
    if allowed is not None:
        scaled = scaled.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scaled, dim=-2).nan_to_num()


def _scores_untransposed(q, k):
    return q @ k  # (n, c) @ (n, c): only "works" when n = c


def _causal_leaking_one(self, m):
    return None, m + 2  # p ≤ m + 1


def _explicit_with_k_for_v(q, k, v, **options):
    return _ORIGINAL["attend_explicitly"](q, k, k, **options)


def _fused_with_k_for_v(q, k, v, **options):
    return _ORIGINAL["attend_fused"](q, k, k, **options)


def _explicit_dropout_first(q, k, v, *, scale, mods=(), allowed=None, dropout_p=0.0, **_):
    scaled = _core.scores(q, k) * scale
    offset = _modify.offset_of(mods)
    block = M.Block(offset, offset + q.shape[-2], 0, k.shape[-2])
    scaled = _modify.cut(
        scaled, mods, block, inplace=False
    )  # the masks; no other modification here
    if dropout_p > 0.0:
        scaled = torch_F.dropout(scaled, p=dropout_p)
    a = _core.softmax_rows(scaled, allowed)
    return _core.context(a, v), a


_ORIGINAL = {"attend_explicitly": _core.attend_explicitly, "attend_fused": _core.attend_fused}

#: name -> (what is wrong, [(module, attribute, replacement)])
MUTANTS: dict[str, tuple[str, list[tuple[object, str, Callable]]]] = {
    "no_sqrt_c": ("softmax(Ω) instead of softmax(Ω/√c)", [(_core, "scale", _no_scale)]),
    "sqrt_d": ("Ω/√d instead of Ω/√c", [(_layer, "scaling_width", _scale_by_d)]),
    "wrong_axis": (
        "softmax over the queries (columns), not the keys (rows)",
        [(_core, "softmax_rows", _columns_softmax)],
    ),
    "k_for_v": (
        "C = A K instead of C = A V",
        [
            (_core, "attend_explicitly", _explicit_with_k_for_v),
            (_core, "attend_fused", _fused_with_k_for_v),
        ],
    ),
    "k_not_transposed": ("Ω = Q K instead of Q Kᵀ", [(_core, "scores", _scores_untransposed)]),
    "mask_shifted": (
        "causal mask shifted by one: p ≤ m + 1",
        [(M.Causal, "bounds", _causal_leaking_one)],
    ),
    "dropout_first": (
        "dropout on the scores, before the softmax",
        [(_core, "attend_explicitly", _explicit_dropout_first)],
    ),
}


@contextlib.contextmanager
def mutant(name: str) -> Iterator[None]:
    """Swap the mutant's functions in, and back out on exit."""
    saved = [
        (module, attribute, getattr(module, attribute)) for module, attribute, _ in MUTANTS[name][1]
    ]
    try:
        for module, attribute, replacement in MUTANTS[name][1]:
            setattr(module, attribute, replacement)
        yield
    finally:
        for module, attribute, original in saved:
            setattr(module, attribute, original)


def _steps_agree(name: str = "self-attention", **given) -> bool:
    n, d, c = (5, 3, 4) if "h" in given else (5, 3, 2)
    for item in check_against_torch(name, n, d, c, **given):
        polynomial = item.output[0] in "QKV" or (
            item.output.startswith("Omega") and "scaled" not in item.output
        )
        if not (item.exact if polynomial else item.max_abs_error < TOLERANCE):
            return False
    return True


def _end_to_end_agrees(causal: bool, return_weights: bool) -> bool:
    ea = derive.explicit_variant(("causal" if causal else "self-attention"), 5, 3, 2)
    inputs = dyadic_inputs(ea, seed=3)
    expected = torch.tensor(ea.evaluate(**inputs).floats("C"), dtype=torch.float64)
    out = F.self_attention(
        inputs["X"],
        inputs["W_q"],
        inputs["W_k"],
        inputs["W_v"],
        causal=causal,
        return_weights=return_weights,
    )
    got = out[0] if return_weights else out
    return bool(torch.allclose(got, expected, rtol=0, atol=TOLERANCE))


def _dropout_scales_kept_weights() -> bool:
    g = torch.Generator().manual_seed(5)
    x, w = (
        torch.randn(6, 3, generator=g, dtype=torch.float64),
        torch.randn(3, 2, generator=g, dtype=torch.float64),
    )
    _, clean = F.self_attention(x, w, w, w, return_weights=True)
    torch.manual_seed(0)
    _, dropped = F.self_attention(x, w, w, w, dropout_p=0.5, return_weights=True)
    kept = dropped != 0
    return bool(torch.allclose(dropped[kept], clean[kept] * 2, rtol=0, atol=TOLERANCE))


#: name -> check; each returns True when the implementation agrees with the derivation.
CHECKS: dict[str, Callable[[], bool]] = {
    "steps (single head)": lambda: _steps_agree(),
    "steps (causal)": lambda: _steps_agree("causal"),
    "steps (padding mask)": lambda: _steps_agree(
        "masked", key_padding_mask=[True, True, True, False, False]
    ),
    "steps (2 heads)": lambda: _steps_agree("multi-head", h=2),
    "C (fused path)": lambda: _end_to_end_agrees(causal=False, return_weights=False),
    "C (explicit path)": lambda: _end_to_end_agrees(causal=False, return_weights=True),
    "C (causal, fused path)": lambda: _end_to_end_agrees(causal=True, return_weights=False),
    "dropout after softmax": _dropout_scales_kept_weights,
}


def failed_checks() -> list[str]:
    """The checks that fail (an exception counts as a failure: the suite stops the mutant)."""
    failed = []
    for name, check in CHECKS.items():
        try:
            passed = check()
        except Exception:  # noqa: BLE001 - a crash is a caught mutant too
            passed = False
        if not passed:
            failed.append(name)
    return failed


def report() -> str:
    """The Markdown table of docs/mutation-testing.md."""
    lines = ["| mutant | what is wrong | checks that catch it |", "|---|---|---|"]
    lines.append(f"| (none) | the real implementation | {'; '.join(failed_checks()) or '—'} |")
    for name, (what, _) in MUTANTS.items():
        with mutant(name):
            caught = failed_checks()
        lines.append(f"| `{name}` | {what} | {'; '.join(caught) or '**not caught**'} |")
    return "\n".join(lines) + "\n"


def full_suite_failures(name: str) -> str:
    """Run the pytest suite with the mutant applied; return pytest's closing counts."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "tests/attention",
            "tests/consistency",
            "--ignore=tests/consistency/test_mutants.py",
        ],
        env={**os.environ, "ATTENTION_MUTANT": name, "HYPOTHESIS_PROFILE": "mutants"},
        capture_output=True,
        text=True,
    )
    counts = re.findall(r"(\d+ (?:failed|passed|error|errors))", done.stdout)
    return ", ".join(counts) or done.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    sys.stdout.write(report())
    if "--full" in sys.argv:
        print("\n| mutant | whole suite (tests/attention, tests/consistency) |\n|---|---|")
        for name in MUTANTS:
            print(f"| `{name}` | {full_suite_failures(name)} |")
