"""A researcher's own variant works the first time: each wall a user met declaring published
variants (Scalable-Softmax, cosine, ReLU and differential attention) from the docs alone, gone.

Each test below failed on the code before: a learnable 1 × 1 number inside a summed step
crashed the backward pass; SymPy's own failures read as the user's mistakes; a true claim SymPy
could not prove said "does not hold: residual nan"; Max and Piecewise were refused somewhere;
mistakes of wiring passed until `derive check`; counts dropped the steps without a matrix form;
index letters left their ranges; a substitution was not shown; a user's parameter clashed with
a built-in option and never reached the check.
"""

import re
import textwrap
import warnings

import pytest
import sympy as sp
import torch

import derive
from derive import calculus, declare
from derive.cli import main
from derive.declare import a, c, d, m, n, p
from derive.notation import letters as L

HEAD = """
import math
import sympy as sp
from derive import declare
from derive.declare import a, c, d, i, j, k, m, n, omega, omega_tilde, p, q, r, v, x, z
"""


def _file(tmp_path, body: str, name: str = "mine.py") -> str:
    path = tmp_path / name
    path.write_text(HEAD + textwrap.dedent(body))
    return str(path)


def _run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# -- a learnable number inside a sum -----------------------------------------------------------

SSMAX = """
S = declare.matrix("S", entry="sscale", shape=(1, 1))

def weights(omega_scaled, s):
    return (s * math.log(omega_scaled.shape[-1]) * omega_scaled).softmax(-1)

def _e(t):
    return sp.exp(S[1, 1] * sp.log(n) * omega_tilde[m, t])

STEP = declare.step("ssmax_weights", sp.Eq(a[m, p], _e(p) / sp.Sum(_e(r), (r, 1, n))),
                    shape=(n, n), title="SSMax", twin=weights)
V = declare.variant("ssmax_test", title="SSMax", replaces=[STEP], claims=[
    declare.claim(sp.Sum(a[m, p], (p, 1, n)), 1, title="Rows sum to 1")])
"""


def test_a_learnable_number_in_a_summed_step_has_its_gradient(tmp_path, capsys):
    spec = _file(tmp_path, SSMAX) + ":V"
    entry = derive.load_variant(spec)
    gradients = {g.output: g for g in derive.backward_steps(entry.name)}
    assert gradients["dS"].shape == (1, 1)
    # the chain rule's double sum over every weight of every row, pulled as one: it reads ā
    # and a, and sums over both the queries and the keys
    element = gradients["dS"].element.rhs
    read = {e.base.label.name for e in element.atoms(sp.Indexed)}
    assert {"da", "a", "omegatilde"} <= read
    assert (
        any(len(total.limits) == 2 for total in element.atoms(sp.Sum))
        or len(element.atoms(sp.Sum)) >= 2
    )
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "3")
    assert status == 0, out + err
    assert re.search(r"^  dS\s+1×1\s+\S+\s+1e-10\s+pass$", out, re.M), out


def test_sums_equal_up_to_their_index_cancel(tmp_path):
    entry = derive.load_variant(_file(tmp_path, SSMAX) + ":V")
    (fact,) = derive.facts(entry.name)
    assert fact.verdict == "proved"
    assert fact.derivation[-1].rhs == 1


# -- derive's own failures against the user's mistakes ----------------------------------------


def test_a_failure_of_derive_is_exit_1_naming_what_and_the_step(tmp_path, capsys, monkeypatch):
    from derive.calculus import reverse

    spec = _file(tmp_path, SSMAX.replace("ssmax_test", "ssmax_failing")) + ":V"

    def broken(step, letter, shapes, relations):
        raise ValueError("too many values to unpack (expected 1)")

    monkeypatch.setattr(reverse, "_contribution", broken)
    reverse.backward.cache_clear()
    try:
        status, out, err = _run(capsys, "latex", "--variant", spec)
    finally:
        reverse.backward.cache_clear()
    assert status == 3 and out == "" and err.count("\n") == 1, err
    assert err.startswith("derive latex: derive could not derive the gradient of ")
    assert re.search(r"through step \w+ \(\w+\): ValueError: too many values", err), err
    assert "DERIVE_TRACEBACK=1" in err  # the hint: how to see more, and to report it


# -- claims: proved, unproved, or false ------------------------------------------------------

COSINE = """
tau = sp.Symbol("tau", positive=True)
jj = sp.Symbol("j'", integer=True, positive=True)
QH = declare.matrix("Q_hat", entry="qhat", shape=(n, c))
KH = declare.matrix("K_hat", entry="khat", shape=(n, c), indices=(p, j))

def unit(rows):
    return rows / rows.norm(dim=-1, keepdim=True)

def scores(q_hat, k_hat, *, tau):
    return q_hat @ k_hat.transpose(-2, -1) / tau

NQ = declare.step("unit_q", sp.Eq(QH[m, j], q[m, j] / sp.sqrt(sp.Sum(q[m, jj] ** 2, (jj, 1, c)))),
                  shape=(n, c), title="Unit queries", twin=unit)
NK = declare.step("unit_k", sp.Eq(KH[p, j], k[p, j] / sp.sqrt(sp.Sum(k[p, jj] ** 2, (jj, 1, c)))),
                  shape=(n, c), title="Unit keys", twin=unit)
SC = declare.step("cos_scores", sp.Eq(omega[m, p], sp.Sum(QH[m, j] * KH[p, j], (j, 1, c)) / tau),
                  shape=(n, n), title="Cosine scores", twin=scores, options={"tau": tau})
V = declare.variant("cosine_test", title="Cosine", inserts=[("V", NQ), ("Q_hat", NK)],
                    replaces=[SC], parameters={tau: sp.Rational(1, 2)}, claims=[
    declare.claim(sp.Sum(QH[m, j] ** 2, (j, 1, c)), 1, title="Unit length"),
    declare.bound(omega[m, p], 1 / tau, title="Bounded by one over tau")])
"""


def test_a_claim_sympy_cannot_prove_is_marked_unproved_not_false(tmp_path, capsys):
    spec = _file(tmp_path, COSINE) + ":V"
    out_file = tmp_path / "cosine.tex"
    status, out, err = _run(capsys, "latex", "-q", "--variant", spec, "-o", str(out_file))
    assert status == 0, err
    assert (
        err.count("\n") == 1 and "warning: variant cosine_test: claim 'Bounded by one over " in err
    )
    assert "could not be proved by SymPy, and no counter-example was found" in err
    assert "does not hold" not in err
    tex = out_file.read_text()
    unproved = tex.index("% provenance: unproved")
    assert r"\omega_{m,p} &\le \frac{1}{\tau}" in tex[unproved:]  # the claim, as stated
    assert "\\emph{Unproved.}" in tex
    proved = tex.index("Unit length")
    assert "% provenance: derived" in tex[proved:unproved]  # the other claim: derived
    facts = {f.title: f for f in derive.facts("cosine_test")}
    assert facts["Unit length"].verdict == "proved"
    assert facts["Bounded by one over tau"].verdict == "unproved"


def test_strict_refuses_an_unproved_claim_and_writes_nothing(tmp_path, capsys):
    spec = _file(tmp_path, COSINE.replace("cosine_test", "cosine_strict")) + ":V"
    target = tmp_path / "kept.tex"
    target.write_text("before")
    status, out, err = _run(capsys, "latex", "--strict", "--variant", spec, "-o", str(target))
    assert status == 2 and err.count("\n") == 1
    assert "claim 'Bounded by one over tau' (ω[m,p] ≤ 1/τ) could not be proved" in err
    assert err.rstrip().endswith("(--strict: nothing written)")
    assert target.read_text() == "before"


def test_a_counter_example_makes_a_bound_false(tmp_path):
    entry = derive.load_variant(_file(tmp_path, SSMAX.replace("ssmax_test", "ssmax_b")) + ":V")
    fact = derive.proofs.claims.prove(
        entry.graph, declare.bound(a[m, p], sp.Rational(1, 4), title="a quarter at most")
    )
    assert fact.verdict == "false"
    found = dict(fact.counterexample)
    assert float(found["left side"]) > 0.25 and found["right side"] == "0.25"


# -- natural SymPy: Max, Min, Abs, Heaviside, Piecewise --------------------------------------


@pytest.mark.parametrize(
    "relu",
    [
        "sp.Max(0, omega_tilde[m, p]) / n",
        "sp.Piecewise((omega_tilde[m, p], omega_tilde[m, p] > 0), (0, True)) / n",
    ],
    ids=["Max", "Piecewise"],
)
def test_relu_attention_in_either_form_derives_checks_and_proves_its_bound(tmp_path, capsys, relu):
    name = "relu_max" if "Max" in relu else "relu_piecewise"
    spec = _file(
        tmp_path,
        f"""
        def weights(omega_scaled):
            return omega_scaled.clamp_min(0) / omega_scaled.shape[-1]
        STEP = declare.step("relu_weights", sp.Eq(a[m, p], {relu}), shape=(n, n),
                            title="ReLU", twin=weights)
        V = declare.variant("{name}", title="ReLU", replaces=[STEP], claims=[
            declare.bound(0, a[m, p], title="No weight is negative")])
        """,
        name=f"{name}.py",
    )
    entry = derive.load_variant(spec + ":V")
    (fact,) = derive.facts(entry.name)
    assert fact.verdict == "proved", fact
    explicit = derive.explicit_variant(entry.name, 2, 2, 2)
    values = explicit.evaluate(
        [[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, -1]], [[1, 0], [0, 1]]
    )
    assert min(float(e) for e in values.A) == 0.0  # ω̃ = -1/√2 clamped
    status, out, err = _run(capsys, "check", "--variant", spec + ":V", "--seed", "5")
    assert status == 0, out + err


def test_conform_evaluates_max_min_abs_heaviside_and_sign():
    from derive.conformance.evaluate.elementwise import entries_values

    w = L.base("omega")
    formula = (
        sp.Max(0, w[m, p])
        + sp.Min(w[m, p], 1) * sp.Abs(w[m, p])
        + sp.Heaviside(w[m, p]) * sp.sign(w[m, p] - 1)
    )
    omega_ = torch.tensor([[-2.0, 0.5], [0.0, 3.0]], dtype=torch.float64)
    got, _ = entries_values(formula, (m, p), (L.n, L.n), {"Omega": omega_[None]}, {L.n: 2}, 1)
    t = omega_
    expected = (
        t.clamp_min(0)
        + t.clamp_max(1) * t.abs()
        + torch.heaviside(t, torch.tensor(0.5, dtype=t.dtype)) * torch.sign(t - 1)
    )
    assert torch.equal(got[0], expected)


# -- wiring, checked when declared -----------------------------------------------------------

WIRING = [
    (
        'STEP = declare.step("w1", sp.Eq(a[m, p], sp.exp(omega_tilde[m, p]) * sp.IndexedBase("zz")[m, p]),'
        " shape=(n, n), title='t', twin=lambda s: s)\nV = declare.variant('bad1', title='B', replaces=[STEP])",
        r"step w1 \(A\) reads zz\[m, p\], whose letter 'zz' is neither one of the book's nor a "
        r"matrix declared with derive.declare.matrix",
    ),
    (
        "STEP = declare.step('w2', sp.Eq(a[m, j], sp.exp(omega_tilde[m, j])), shape=(n, n), "
        "title='t', twin=lambda s: s)\nV = declare.variant('bad2', title='B', replaces=[STEP])",
        r"step w2 \(A\): the columns of A run over 1 … n with the index j, a context feature "
        r"\(1 … c\); an axis of n is indexed by m or p",
    ),
    (
        "STEP = declare.step('context', sp.Eq(z[m, j], sp.Sum(2 * a[m, p] * v[p, j], (p, 1, n))),"
        " shape=(n, c), title='t')\nV = declare.variant('bad3', title='B', replaces=[STEP])",
        r"step context \(C\) of variant bad3 changes the formula of self-attention's step "
        r"context and declares no twin",
    ),
    (
        "QX = declare.matrix('Q_x', entry='qx', shape=(n, n))\n"
        "STEP = declare.step('early', sp.Eq(QX[m, p], 2 * a[m, p]), shape=(n, n), title='t', "
        "twin=lambda a: a)\nV = declare.variant('bad4', title='B', inserts=[('Omega', STEP)])",
        r"variant bad4: step early \(Q_x\) reads A, which step weights computes after it; "
        r"insert it after A",
    ),
    (
        "def one(a):\n    return a\n"
        "STEP = declare.step('two', sp.Eq(a[m, p], omega_tilde[m, p] * omega[m, p]), shape=(n, n),"
        " title='t', twin=one)\nV = declare.variant('bad5', title='B', replaces=[STEP])",
        r"step two \(A\): twin one\(Omega, Omega_scaled\): it is called with the 2 matrices the "
        r"step reads, and its positional parameters are \(a\); give arguments=",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"),
    WIRING,
    ids=["undeclared-letter", "index-kind", "inherited-twin", "order", "twin-signature"],
)
def test_a_mistake_of_wiring_is_one_line_naming_the_step(tmp_path, capsys, body, message):
    spec = _file(tmp_path, body) + ":V"
    for command in ("latex", "check"):
        status, out, err = _run(capsys, command, "--variant", spec)
        assert status == 2 and out == "" and err.count("\n") == 1, (command, err)
        assert re.search(message, err), err


def test_a_twin_is_given_its_matrices_by_its_parameters_names(tmp_path, capsys):
    spec = _file(
        tmp_path,
        """
        AD = declare.matrix("A_d", entry="ad", shape=(n, n))
        def doubled(a):
            return 2 * a
        def context(a_d, v):  # named: called as context(A_d, V), not in the book's order
            return a_d @ v
        S1 = declare.step("doubled", sp.Eq(AD[m, p], 2 * a[m, p]), shape=(n, n), title="2A",
                          twin=doubled)
        S2 = declare.step("context", sp.Eq(z[m, j], sp.Sum(AD[m, p] * v[p, j], (p, 1, n))),
                          shape=(n, c), title="C", twin=context)
        V = declare.variant("named_twins", title="N", inserts=[("A", S1)], replaces=[S2])
        """,
    )
    entry = derive.load_variant(spec + ":V")
    assert entry.graph.step("C").twin.arguments == ("A_d", "V")
    status, out, err = _run(capsys, "check", "--variant", spec + ":V", "--seed", "1")
    assert status == 0, out + err


# -- what documents say -----------------------------------------------------------------------


def test_counts_read_off_every_step_even_without_a_matrix_form(tmp_path):
    entry = derive.load_variant(_file(tmp_path, COSINE.replace("cosine_test", "cosine_c")) + ":V")
    assert isinstance(derive.steps(entry.name)[3].matrix.rhs, derive.notation.Entries)
    assert calculus.operation_count(entry.graph) == {"matrix products": 5, "transposes": 1}
    assert sp.expand(calculus.flop_count(entry.graph) - (6 * c * d * n + 4 * c * n**2)) == 0


def _twin_flops(name: str, n_: int, d_: int, c_: int, **own) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    from derive.bridge.evaluate import dyadic, torch_values

    explicit = derive.explicit_variant(name, n_, d_, c_, **own)
    inputs = dyadic(explicit, 0)
    with FlopCounterMode(display=False) as counter:
        torch_values(explicit, inputs)
    return counter.get_total_flops()


@pytest.mark.parametrize(
    ("name", "own"),
    [
        ("self-attention", {}),
        ("causal+multi-head", {"h": 2}),
        ("gqa", {"h": 4, "g": 2}),
        ("mla", {"h": 2}),
        ("cross-attention", {}),
        ("gate", {"h": 2}),
        ("softcap", {}),
        ("qk-norm+rope", {}),
    ],
)
def test_each_documents_count_is_the_count_of_its_evaluated_twins(name, own):
    """What the document says the matrix products cost, at sizes n = 5, d = 3, c = 4, against
    torch's own flop counter running the steps' twins."""
    entry = derive.variant(name)
    sizes = derive.explicit_variant(name, 5, 3, 4, **own).sizes
    counted = calculus.flop_count(entry.graph).xreplace(sizes)
    assert int(counted) == _twin_flops(name, 5, 3, 4, **own), name


def test_a_users_matrices_get_the_indices_of_their_shape():
    from derive.calculus import book_indices

    declare.matrix("Sq", entry="sq", shape=(n, n))
    declare.matrix("Wide", entry="wide", shape=(d, c))
    declare.matrix("One", entry="one", shape=(1, 1))
    declare.matrix("Cc", entry="cc", shape=(c, c))
    assert book_indices("Sq") == (L.m, L.p) and book_indices("dSq") == (L.m, L.p)
    assert book_indices("Wide") == (L.i, L.j)
    assert book_indices("One") == (1, 1)
    assert book_indices("Cc") == (L.j, L.j2)


def test_a_substitution_is_shown_where_a_claim_uses_one():
    facts = {f.name: f for f in derive.facts("gqa")}
    same = facts["same_as"]
    assert same.derivation[0] == sp.Eq(L.g, L.h, evaluate=False)  # said first
    assert r"\big|_{g = h}" in str(same.claim.lhs)


def test_gqa_with_rope_names_each_step_once_and_its_width():
    tex = derive.document(derive.DocumentOptions(variant="gqa+rope"))
    headings = re.findall(r"\\subsection\*\{([^}]*)\}", tex)
    steps = headings[: headings.index("The rows of the weights")]
    assert len(steps) == len(set(steps)), steps
    assert "Split the keys into groups" in steps and "Split the values into groups" in steps
    assert "$c_h$, each head's, where there are heads" in tex
    assert (
        r"\text{grouped-query attention}\big|_{g = h} &= \text{multi-head causal self-attention}"
        in tex
    )


# -- the command line: a user's numbers, namespaced and checked --------------------------------


def test_a_users_parameter_named_like_a_built_in_size_is_given_by_value(tmp_path, capsys):
    spec = (
        _file(
            tmp_path,
            """
        s = sp.Symbol("s", positive=True)
        def weights(omega_scaled, *, s):
            return (s * omega_scaled).softmax(-1)
        STEP = declare.step("scaled_weights", sp.Eq(a[m, p], sp.exp(s * omega_tilde[m, p])
                            / sp.Sum(sp.exp(s * omega_tilde[m, r]), (r, 1, n))), shape=(n, n),
                            title="Scaled", twin=weights, options={"s": s})
        V = declare.variant("s_named", title="S", replaces=[STEP], parameters={s: 2})
        """,
        )
        + ":V"
    )
    status, out, err = _run(capsys, "check", "--variant", spec, "--value", "s=3", "--seed", "2")
    assert status == 0, out + err
    assert re.search(r"^trial 1/1: s_named, n=\d+ d=\d+ c=\d+, s=3, inputs seed 2$", out, re.M)
    status, _, err = _run(capsys, "check", "--variant", spec, "--s", "3")
    assert status == 2 and err.count("\n") == 1
    assert "--s is a built-in variant's option; s of s_named (yours) is given as --value s=" in err


def test_check_checks_the_values_it_is_told(capsys):
    rows = {}
    for kappa in ("3", "50"):
        sizes = ("--n", "3", "--d", "2", "--c", "2", "--seed", "4")
        status, out, _ = _run(capsys, "check", "--variant", "softcap", "--kappa", kappa, *sizes)
        assert status == 0 and f", kappa={kappa}, inputs seed 4" in out
        rows[kappa] = out
    assert rows["3"] != rows["50"]
    checked = derive.check("softcap", n=3, d=2, c=2, kappa=3, seed=4)
    assert checked.trials[0].values == {"kappa": 3} and checked.passed
    assert derive.check("softcap", n=3, d=2, c=2, seed=4).trials[0].values == {"kappa": 50}


def test_variants_lists_the_registry_and_shows_one_whole(tmp_path, capsys):
    status, out, _ = _run(capsys, "variants")
    listed = re.search(r"^softcap\s+Logit softcapping\s+on self-attention\s+kappa=50$", out, re.M)
    assert status == 0 and listed
    spec = _file(tmp_path, SSMAX.replace("ssmax_test", "ssmax_shown")) + ":V"
    status, out, _ = _run(capsys, "variants", "--show", spec)
    assert status == 0
    assert "    A: a[m,p] = " in out and "        twin: weights(Omega_scaled, S)" in out
    assert "  inputs: X (n × d), W_q (d × c), W_k (d × c), W_v (d × c), S (1 × 1)" in out
    assert "  claims: Rows sum to 1" in out


def test_a_reader_that_leaves_early_is_no_failure():
    """`derive variants | head -1`: the reader closes the pipe; derive stops without a word
    (141, as a shell's tools do), never "derive could not run variants: BrokenPipeError"."""
    import subprocess
    import sys

    shell = f"{sys.executable} -m derive variants --show softcap | head -c 1"
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {shell}"], capture_output=True, text=True
    )
    assert done.stderr == "" and done.returncode in (0, 141), done.stderr


def test_a_matrix_given_as_a_value_is_told_it_is_drawn(tmp_path, capsys):
    """SSMax's S is a 1 × 1 matrix the variant reads: --value S=0.7 is refused, saying that
    check draws it and --value gives a declared parameter."""
    spec = _file(tmp_path, SSMAX) + ":V"
    for name in ("S", "sscale"):  # by its letter or its entries' name
        status, _, err = _run(capsys, "check", "--variant", spec, "--value", f"{name}=0.7")
        assert status == 2 and f"{name} is a matrix it reads, 1 × 1: check draws" in err


# -- one public face ---------------------------------------------------------------------------


def test_the_public_face_is_about_twenty_names_in_one_dialect():
    assert 18 <= len(derive.__all__) <= 26  # 26 since score_mod, beside torch_function
    import inspect

    for name in ("steps", "backward_steps", "facts", "explicit_variant", "explicit_gradients"):
        first = next(iter(inspect.signature(getattr(derive, name)).parameters))
        assert first == "name", name  # a variant by its name, never flags
    for gone in ("explicit_attention", "rows_sum_to_one", "graph", "flop_count"):
        assert gone not in derive.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import derive.graph.registry as registry  # a module, not a function of the facade

    assert registry.variant("causal").name == "causal"


def test_import_derive_loads_nothing_until_used():
    """`import derive` is cheap because it loads nothing heavy until a name is used: read from
    what it loads, not timed (a wall-clock bound fails on a busy machine; the import's time is
    bench_derive.py's)."""
    import subprocess
    import sys

    probe = (
        "import sys; before = set(sys.modules); import derive; "
        "print(*sorted(set(sys.modules) - before))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    loaded = result.stdout.split()
    assert "derive" in loaded
    heavy = [m for m in loaded if m.split(".")[0] in ("sympy", "torch", "numpy", "mpmath")]
    assert heavy == [] and "derive.graph" not in loaded, loaded
    assert len([m for m in loaded if m.startswith("derive")]) <= 3, loaded
