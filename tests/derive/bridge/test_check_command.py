"""`derive check`: every option, the exit statuses, and a broken implementation caught."""

import random
import re
import subprocess
import sys

import pytest
from mutants import mutant

import derive
from derive.bridge.check import draw_sizes
from derive.cli import main


def run(capsys, *argv):
    status = main(["check", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_given_sizes_every_step_passes(capsys):
    status, out, err = run(
        capsys, "--n", "5", "--d", "3", "--c", "2", "--seed", "4", "--forward-only"
    )
    assert status == 0 and err == ""
    assert "trial 1/1: self-attention, n=5 d=3 c=2, inputs seed 4" in out
    steps = re.findall(r"^  (\w+)\s+(\d+×\d+)\s+(\S+)\s+(exact|1e-12)\s+(pass|FAIL)$", out, re.M)
    assert "(rerun with --seed" not in out  # a given seed is not announced
    assert [s[0] for s in steps] == ["Q", "K", "V", "Omega", "Omega_scaled", "A", "C"]
    assert dict((s[0], s[1]) for s in steps) == {
        "Q": "5×2",
        "K": "5×2",
        "V": "5×2",
        "Omega": "5×5",
        "Omega_scaled": "5×5",
        "A": "5×5",
        "C": "5×2",
    }
    assert all(s[4] == "pass" for s in steps)
    assert all(float(s[2]) == 0 for s in steps if s[3] == "exact")
    assert "(backward pass not checked (--forward-only))" in out
    for entry_point in ("fused path", "explicit path", "SelfAttentionV1", "generated"):
        assert re.search(rf"^  C · {entry_point}\s+5×2\s+\S+\s+1e-12\s+pass$", out, re.M), (
            entry_point
        )
    assert out.rstrip().endswith("derive check: 11 step values compared, all pass")


def test_the_backward_pass_is_checked_too(capsys):
    status, out, _ = run(capsys, "--n", "4", "--d", "3", "--c", "2", "--causal")
    assert status == 0
    rows = dict(re.findall(r"^  (d\w+)\s+(\d+×\d+)\s+\S+\s+1e-10\s+pass$", out, re.M))
    assert rows == {
        "dV": "4×2",
        "dA": "4×4",
        "dOmega_scaled": "4×4",
        "dOmega": "4×4",
        "dQ": "4×2",
        "dK": "4×2",
        "dW_q": "3×2",
        "dW_k": "3×2",
        "dW_v": "3×2",
        "dX": "4×3",
    }
    printed = dict(re.findall(r"^  (d\w+) · printed\s+(\d+×\d+)\s+\S+\s+1e-10\s+pass$", out, re.M))
    assert printed == rows  # every gradient as the documents print it, against autograd too
    assert "C · CausalAttention" in out
    for name, shape in (("dX", "4×3"), ("dW_q", "3×2"), ("dW_k", "3×2"), ("dW_v", "3×2")):
        for computed in ("self_attention_backward", "generated"):  # the derived backward, run
            assert re.search(
                rf"^  {name} · {computed}\s+{shape}\s+\S+\s+1e-10\s+pass$", out, re.M
            ), (name, computed)
    # the declared mask against attention's causal_mask, entry by entry
    assert re.search(r"^  M\s+4×4\s+0\s+exact\s+pass$", out, re.M)
    assert out.rstrip().endswith("derive check: 40 step values compared, all pass")


def test_sizes_over_the_gradient_limit_check_the_forward_pass_only(capsys):
    status, out, _ = run(capsys, "--n", "9", "--d", "3", "--c", "2")
    assert status == 0
    assert "(backward pass not checked: sizes over 8)" in out
    assert not re.search(r"^  dX", out, re.M)


def test_causal_heads_and_trials(capsys):
    status, out, _ = run(capsys, "--causal", "--heads", "2", "--trials", "3", "--seed", "1")
    assert status == 0
    trials = re.findall(
        r"^trial \d/3: multi-head\+causal, n=\d d=\d c=(\d+), h=2, inputs seed \d$", out, re.M
    )
    assert len(trials) == 3
    for c in trials:
        assert int(c) % 2 == 0  # drawn c is a multiple of the heads
    assert "A_2" in out and "C_2" in out


def test_a_broken_entry_point_is_caught_though_the_steps_agree(capsys):
    # K used for V inside self_attention only: every step function still agrees
    with mutant("k_for_v"):
        status, out, _ = run(capsys, "--n", "5", "--d", "3", "--c", "2", "--forward-only")
    assert status == 1
    assert re.search(r"^  C\s.*pass$", out, re.M)  # the steps
    assert re.search(r"^  C · fused path\s.*FAIL$", out, re.M)
    assert re.search(r"^  C · explicit path\s.*FAIL$", out, re.M)


def test_multi_head_uses_the_book_class_when_causal(capsys):
    status, out, _ = run(
        capsys, "--n", "5", "--d", "3", "--c", "4", "--heads", "2", "--causal", "--forward-only"
    )
    assert status == 0 and re.search(r"^  C · MultiHeadAttention\s+5×4\s.*pass$", out, re.M)
    status, out, _ = run(
        capsys, "--n", "5", "--d", "3", "--c", "4", "--heads", "2", "--forward-only"
    )
    assert status == 0 and "C · MultiHeadAttention" not in out  # the book's class is causal


def test_a_broken_implementation_exits_one(capsys):
    with mutant("wrong_axis"):
        status, out, _ = run(capsys, "--n", "5", "--d", "3", "--c", "2")
    assert status == 1
    assert re.search(r"^  A\s.*FAIL$", out, re.M)
    assert re.search(r"\d+ FAIL$", out.rstrip())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--n", "0"], r"argument --n: must be a positive integer, got 0"),
        (["--d", "x"], r"argument --d: must be a positive integer, got 'x'"),
        (["--c", "17"], r"argument --c: 17 is over the limit of 16"),
        (["--c", "5", "--heads", "2"], r"h=2 does not divide c=5 \(each head gets c / h columns\)"),
        (
            ["--n", "1"],
            r"n=1 must be at least 2 \(with one token every weight is 1: the softmax "
            r"would go untested\)",
        ),
        (
            ["--variant", "sliding-window", "--w", "4", "--n", "3"],
            r"n=3 must be at least 5 \(a window narrower than the sequence",
        ),
        (["--seed", "-1"], r"argument --seed: must be a non-negative integer, got -1"),
        (
            ["--variant", "flash", "--block-keys", "0"],
            r"argument --block-keys: must be a positive integer, got 0",
        ),
        (
            ["--variant", "flash", "--block-keys", "3", "--n", "3"],
            r"n=3 must be at least 4 \(more than one block of keys",
        ),
        (["--trials", "0"], r"argument --trials: must be a positive integer, got 0"),
        (["--bogus"], r"unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_exits_two_with_one_line(capsys, argv, message):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err


def test_without_torch_exits_one_saying_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    status, _, err = run(capsys, "--n", "2", "--d", "3", "--c", "1")
    assert status == 1
    assert "needs torch" in err and "pip install torch" in err


def test_without_a_seed_each_run_draws_one_and_prints_it(capsys):
    seeds = set()
    for _ in range(3):
        status, out, _ = run(capsys, "--forward-only", "--n", "2", "--d", "3")
        assert status == 0
        (seed,) = re.findall(r"^derive check: seed (\d+) \(rerun with --seed \1\)$", out, re.M)
        seeds.add(int(seed))
    assert len(seeds) > 1  # 3 draws out of 2³² agree by chance with probability ~1e-19
    status, again, _ = run(capsys, "--forward-only", "--n", "2", "--d", "3", "--seed", str(seed))
    assert status == 0 and out.split("\n", 1)[1] == again  # the printed seed reruns the trial


def test_drawn_sizes_are_distinct_seeded_and_meet_every_condition():
    root, heads = derive.variant("self-attention"), derive.variant("multi-head")
    first = [draw_sizes(root, random.Random(9), {}) for _ in range(2)]
    assert first[0] == first[1]  # the same seed, the same sizes
    for seed in range(30):
        n, d, c = (draw_sizes(root, random.Random(seed), {})[k] for k in "ndc")
        assert len({n, d, c}) == 3 and max(n, d, c) <= 6
        assert n >= 2  # one token: every weight is 1, every difference 0, and nothing tested
        assert draw_sizes(heads, random.Random(seed), {"h": 3})["c"] % 3 == 0
        rope = draw_sizes(derive.variant("gqa+rope"), random.Random(seed), {"h": 2})
        assert rope["c"] % 4 == 0 and rope["h"] % rope["g"] == 0  # even heads of width c / h
        window = draw_sizes(derive.variant("sliding-window"), random.Random(seed), {})
        assert window["n"] > window["w"]  # a window narrower than the sequence: not causal
    drawn = draw_sizes(root, random.Random(0), {"n": 4, "c": 2})
    assert (drawn["n"], drawn["c"]) == (4, 2)
    assert draw_sizes(heads, random.Random(0), {"h": 16})["c"] == 16  # as many heads as allowed


def test_console_script_help_lists_the_options():
    done = subprocess.run(
        [sys.executable, "-m", "derive", "check", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    for option in (
        "--n",
        "--d",
        "--c",
        "--causal",
        "--heads",
        "--seed",
        "--trials",
        "--forward-only",
    ):
        assert option in done.stdout


def test_a_combination_that_no_entry_point_computes_is_said_so(capsys):
    # a user's variant whose twin of the whole takes no causal flag, made causal: every
    # combination of the built-in entries has an entry point (grouped_query_attention takes
    # them all), a user's twin need not
    import sympy as sp

    from derive import declare
    from derive.declare import c, m, n, omega, omega_tilde, p

    doubled = declare.step(
        "doubled_scores",
        sp.Eq(omega_tilde[m, p], 2 * omega[m, p] / sp.sqrt(c)),
        shape=(n, n),
        title="Scaled scores, doubled",
        twin=lambda o, *, c: 2 * o / c**0.5,
        options={"c": c},
    )

    def doubled_attention(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return (2 * q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(dim=-1) @ v

    declare.variant(
        "doubled", title="Doubled scores", replaces=[doubled], twin=doubled_attention, register=True
    )
    status, out, _ = run(
        capsys, "--variant", "doubled", "--causal", "--seed", "2", "--forward-only"
    )
    assert status == 0
    assert "(no entry point computes it: doubled_attention takes no causal; backward " in out
    assert re.search(r"^  M\s+\d+×\d+\s+0\s+exact\s+pass$", out, re.M)  # the mask, checked
    # no entry point of the user's; the code generated from the declaration computes it
    assert re.findall(r"^  C · (\S+)", out, re.M) == ["generated"]


def test_a_size_of_another_variant_is_refused_not_ignored(capsys):
    status, out, err = run(capsys, "--variant", "cross-attention", "--w", "3")
    assert status == 2 and out == ""
    assert err.strip() == (
        "derive check: cross-attention has no size 'w' (w is a size of "
        "sliding-window); its own: s, d_y"
    )
    with pytest.raises(ValueError, match=r"self-attention has no size 'g'"):
        draw_sizes(derive.variant("self-attention"), random.Random(0), {"g": 2})


def _flash(capsys):
    return run(
        capsys,
        "--variant",
        "flash",
        "--n",
        "5",
        "--d",
        "3",
        "--c",
        "2",
        "--block-rows",
        "3",
        "--block-keys",
        "2",
        "--seed",
        "2",
    )


def _rows(out):
    return dict(
        re.findall(r"^  (\S+(?: · \S+(?: \S+)?)?)\s+\d+×\d+\s+\S+\s+\S+\s+(pass|FAIL)$", out, re.M)
    )


def test_flash_every_block_against_the_derivation(capsys):
    status, out, _ = _flash(capsys)
    assert status == 0, out
    assert "trial 1/1: flash, n=5 d=3 c=2, B_r=3, B_c=2" in out
    rows = _rows(out)
    blocks = {"μ": 3, "ℓ": 3, "O": 3, "dQ": 3, "dK": 2, "dV": 2}  # 3 blocks of keys, 2 of rows
    for name, count in blocks.items():
        twin = "online_softmax" if name in "μℓO" else "flash_gradients"
        for t in range(1, count + 1):
            assert rows.pop(f"{name}^({t}) · {twin}") == "pass"
        assert f"{name}^({count + 1}) · {twin}" not in rows
    for label in (
        "C · blocked reference",
        "C · fused path",
        "dQ · flash_gradients",
        "dK · flash_gradients",
        "dV · flash_gradients",
    ):
        assert rows[label] == "pass", label


def test_flash_without_the_rescaling_fails_block_by_block(capsys, monkeypatch):
    import attention.flash

    real = attention.flash.online_softmax

    def without_rescaling(*arguments, **options):
        return real(*arguments, **(options | {"rescale": False}))

    monkeypatch.setattr(attention.flash, "online_softmax", without_rescaling)
    status, out, _ = _flash(capsys)
    rows = _rows(out)
    assert status == 1
    assert rows["C · blocked reference"] == "FAIL" and rows["C · fused path"] == "pass"
    # the maxima are right; the first block has nothing to rescale; a later one does
    assert all(rows[f"μ^({t}) · online_softmax"] == "pass" for t in (1, 2, 3))
    assert rows["ℓ^(1) · online_softmax"] == rows["O^(1) · online_softmax"] == "pass"
    assert "FAIL" in (rows["ℓ^(2) · online_softmax"], rows["ℓ^(3) · online_softmax"])


def test_flash_weights_recomputed_from_the_maximum_fail(capsys, monkeypatch):
    import attention.flash

    real = attention.flash.blocked_backward

    def at_the_maximum(q, k, v, c, lse, dc, **options):
        state = attention.flash.online_softmax(
            q, k, v, block_rows=options["block_rows"], block_keys=options["block_keys"]
        )
        return real(q, k, v, c, state.mu[-1], dc, **options)

    monkeypatch.setattr(attention.flash, "blocked_backward", at_the_maximum)
    status, out, _ = _flash(capsys)
    rows = _rows(out)
    assert status == 1
    assert rows["C · blocked reference"] == "pass" and rows["dQ · flash_gradients"] == "FAIL"
    assert rows["dV^(1) · flash_gradients"] == "FAIL"


@pytest.mark.parametrize("name", ["masked+causal", "masked+gqa+rope+sliding-window+sinks"])
def test_a_given_mask_joins_the_causal_or_windowed_one(capsys, name):
    """A batch's padding on a decoder: the given M and the causal (or window) pattern M̊ both
    mask the scores, ω̂ = ω̃ + M̊ + M; every step and gradient checks, the pattern's numbers
    against its twin's."""
    status = main(["check", "--variant", name, "--n", "4", "--seed", "4"])
    out = capsys.readouterr().out
    assert status == 0 and out.rstrip().endswith("all pass"), out
    assert re.search(r"^  M_fixed\s+4×4\s+0\s+exact\s+pass$", out, re.M), out
    graph = derive.variant(name).graph
    masked = next(s for s in graph.declarations if s.name == "masked_scores")
    assert {"M", "M_fixed"} <= set(masked.inputs)


def test_a_twin_given_the_padding_alone_fails_check(capsys, monkeypatch):
    """The weights' twin handed the given mask without the causal pattern attends to later
    tokens the padding allows: check fails at A."""
    from derive.bridge.evaluate import Reader

    original = Reader.option

    def padding_only(self, value, head=None):
        return original(self, "M" if value == ("M", "M_fixed") else value, head)

    monkeypatch.setattr(Reader, "option", padding_only)
    status = main(["check", "--variant", "masked+causal", "--n", "4", "--seed", "4"])
    out = capsys.readouterr().out
    assert status == 1 and re.search(r"^  A\s.*FAIL$", out, re.M), out
