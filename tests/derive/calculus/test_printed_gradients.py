"""Every gradient a document prints is the gradient: checked by numbers before it is shown.

The two declarations that printed wrong gradients while `derive check` passed (a sum over shifted
columns, a summed index inside a condition) print the right ones; a printed form corrupted on
purpose is caught by `derive check` and refused by the documents, naming the gradient and the
step; and a property test draws index expressions of the declaring language (shifts,
sub-ranges, conditions, nested and cumulative sums) and compares each printed gradient with the
gradient of the entries written out at sizes 2 to 4.
"""

import dataclasses
import re
import textwrap

import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import derive
from derive import DerivationError, calculus
from derive.explicit import checked
from derive.graph import Declaration, Graph
from derive.notation import letters as L
from derive.notation.plain import plain

n, d, c = L.n, L.d, L.c
m, p, r, j = L.m, L.p, L.r, L.j
q, k, omega = L.base("q"), L.base("k"), L.base("omega")
#: A user's own summation index (the same symbol as the head's ℓ), and another.
ell = sp.Symbol("l", integer=True, positive=True)
u = sp.Symbol("u", integer=True, positive=True)

HEAD = """
import sympy as sp
import torch
from derive import declare
from derive.declare import a, c, d, i, j, k, m, n, omega, omega_tilde, p, q, r, x
l = sp.Symbol("l", integer=True, positive=True)
"""

SHIFTED = """
def upper_scores(q, k):
    half = q.shape[-1] // 2
    return q[..., half:] @ k[..., half:].transpose(-2, -1)

SCORES = declare.step(
    "upper_scores",
    sp.Eq(omega[m, p], sp.Sum(q[m, j + c / 2] * k[p, j + c / 2], (j, 1, c / 2))),
    shape=(n, n), title="Scores of the upper halves", twin=upper_scores,
)
V = declare.variant("shifted_probe", title="Shifted", replaces=[SCORES],
                    requires=[declare.Even(c, "the halves")])
"""

CUMULATIVE = """
W_U = declare.matrix("W_U", entry="wu", shape=(1, d), meaning="bias weights")
B = declare.matrix("B", entry="bcum", shape=(n, n), latex="B", entry_latex="b",
                   meaning="cumulative bias")
S = declare.matrix("S", entry="sbias", shape=(n, n), entry_latex="s", meaning="biased scores")

def cum_bias(x, w_u):
    s = (x @ w_u.reshape(-1, 1)).reshape(-1)
    at = torch.arange(1, s.shape[0] + 1)
    inside = (at.view(-1, 1, 1) > at.view(1, 1, -1)) & (at.view(-1, 1, 1) <= at.view(1, -1, 1))
    return (inside * s.view(-1, 1, 1)).sum(0)

def biased(omega_tilde, bcum):
    return omega_tilde + bcum

def weights(sbias):
    return sbias.softmax(-1)

V = declare.variant(
    "cumulative_probe", title="Cumulative bias",
    inserts=[
        ("Omega_scaled", declare.step(
            "cum_bias",
            sp.Eq(B[m, p], sp.Sum(sp.Piecewise((sp.Sum(x[l, i] * W_U[1, i], (i, 1, d)),
                                                (l > p) & (l <= m)), (0, True)), (l, 1, n))),
            shape=(n, n), title="A cumulative bias", twin=cum_bias)),
        ("B", declare.step("biased", sp.Eq(S[m, p], omega_tilde[m, p] + B[m, p]),
                           shape=(n, n), title="Biased scores", twin=biased)),
    ],
    replaces=[declare.step(
        "biased_weights",
        sp.Eq(a[m, p], sp.exp(S[m, p]) / sp.Sum(sp.exp(S[m, r]), (r, 1, n))),
        shape=(n, n), title="Weights", twin=weights)],
)
"""


def _load(tmp_path, body: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + textwrap.dedent(body))
    return derive.load_variant(f"{path}:V")


def _free(gradient) -> set[str]:
    """The symbols a printed entry leaves free, but its own indices and the sizes."""
    rhs = gradient.element.rhs
    own = set(gradient.element.lhs.indices) | set(L.SIZES)
    labels = {entry.base.label for entry in rhs.atoms(sp.Indexed)}
    symbols = {s for s in rhs.free_symbols if type(s) is sp.Symbol}
    return {str(s) for s in symbols - own - labels}


def test_a_sum_over_shifted_columns_prints_the_upper_half(tmp_path):
    entry = _load(tmp_path, SHIFTED, "shifted")
    gradients = {g.output: g for g in checked.checked_backward(entry)}
    dq = gradients["dQ"].element.rhs
    at = {n: 3, c: 4}
    for column in range(1, 5):  # q̄_{m,j} is 0 in the lower half, Σ_p ω̄ k in the upper one
        value = dq.xreplace(at | {m: 2, j: column}).doit()
        assert (value == 0) == (column <= 2), (column, value)
    assert derive.check(entry.name, n=3, c=4, d=2).passed


def test_a_summed_index_inside_a_condition_stays_inside_its_sum(tmp_path):
    entry = _load(tmp_path, CUMULATIVE, "cumulative")
    gradients = {g.output: g for g in checked.checked_backward(entry)}
    for letter in ("dW_U", "dX"):
        assert _free(gradients[letter]) == set(), plain(gradients[letter].element)
    # w̄_{1,i} = Σ_m Σ_{p<m} b̄_{m,p} Σ_{ℓ=p+1}^{m} x_{ℓ,i}: the cumulative sum, cut to its bounds
    sums = gradients["dW_U"].element.rhs.atoms(sp.Sum)
    assert any(low != 1 for total in sums for _, low, _ in total.limits)
    checked_run = derive.check(entry.name, n=4, d=2, c=3)
    assert checked_run.passed, checked_run.table()
    printed = [row for trial in checked_run.trials for row in trial.rows if "printed" in row.step]
    assert {row.step for row in printed} >= {"dW_U · printed", "dX · printed"}


def _corrupted(monkeypatch, letter: str):
    """calculus.backward with one gradient's entry doubled where the entry's row is 1 (the
    matrix form left alone): a printed form that is wrong at some entries only."""
    original = calculus.backward

    def backward(graph):
        found = []
        for gradient in original(graph):
            if gradient.output == letter:
                row = gradient.element.lhs.indices[0]
                wrong = gradient.element.rhs * (1 + sp.KroneckerDelta(row, 1))
                element = sp.Eq(gradient.element.lhs, wrong, evaluate=False)
                gradient = dataclasses.replace(gradient, element=element)
            found.append(gradient)
        return tuple(found)

    monkeypatch.setattr(calculus, "backward", backward)


def _derived_afresh() -> None:
    """Forget what this process derived and generated, so that a test's corrupted derivation
    is the one derive check reads, whichever tests ran before it (and none after it reads the
    corruption)."""
    from derive.bridge import generated
    from derive.codegen import program

    for cache in (generated._generated, program.program, program.forward_program, checked._checked):
        cache.cache_clear()


def test_a_wrong_printed_gradient_fails_check_and_names_it(monkeypatch):
    """derive check shows its table: the printed gradient's row fails, naming the entry, and
    the generated code, whose backward pass is that gradient checked by numbers, refuses to
    run it; the forward rows still pass (the forward pass needs no gradient)."""
    _derived_afresh()
    _corrupted(monkeypatch, "dQ")
    try:
        result = derive.check("self-attention", n=3, d=2, c=4)
    finally:
        _derived_afresh()
    failed = [row.step for trial in result.trials for row in trial.rows if not row.passed]
    assert not result.passed
    assert len(failed) == 2, failed  # the gradient, and an entry of the row that was corrupted
    assert re.fullmatch(r"dQ · printed, worst q̄\[1,\d\]", failed[0]), failed
    assert failed[1] == "backward · generated, refused: print the gradient dQ", failed
    (trial,) = result.trials
    assert [r.passed for r in trial.rows if r.step == "C · generated"] == [True]
    assert "dQ" in result.table() and "FAIL" in result.table()


def test_a_wrong_printed_gradient_is_refused_by_the_documents(monkeypatch):
    _corrupted(monkeypatch, "dK")
    graph = derive.variant("self-attention").graph.named("corrupted")  # not the cached graph
    entry = derive.variant("self-attention").with_graph(graph)
    with pytest.raises(DerivationError, match=r"print the gradient dK: checked by numbers, .*k̄"):
        checked.checked_backward(entry)


def _first_equation_corrupted(monkeypatch, letter: str):
    """calculus.backward with the first equation of one gradient's chains (the chain rule with
    its Derivative objects, as the documents print it first) doubled, the others left alone."""
    original = calculus.backward

    def backward(graph):
        found = []
        for gradient in original(graph):
            if gradient.output == letter:
                parts = []
                for part in gradient.contributions:
                    first, *rest = part.chain
                    wrong = sp.Eq(first.lhs, 2 * first.rhs)
                    parts.append(dataclasses.replace(part, chain=(wrong, *rest)))
                gradient = dataclasses.replace(gradient, contributions=tuple(parts))
            found.append(gradient)
        return tuple(found)

    monkeypatch.setattr(calculus, "backward", backward)


@pytest.mark.parametrize(
    ("name", "letter"),
    [("causal", "dOmega_masked"), ("gqa+sinks", "dZeta"), ("gqa+sinks", "dOmega_masked_l")],
)
def test_a_wrong_first_equation_of_a_chain_is_refused(monkeypatch, name, letter):
    """The first equation of each chain (Σ ∂y/∂u · ȳ) is checked by numbers too: each
    derivative put in as its value's formula at the check's sizes."""
    _first_equation_corrupted(monkeypatch, letter)
    graph = derive.variant(name).graph.named("corrupted")  # not the cached graph
    entry = derive.variant(name).with_graph(graph)
    with pytest.raises(DerivationError, match=rf"print the gradient {letter}.*the chain rule,? "):
        checked.checked_backward(entry)


# -- a property: index expressions of the declaring language ------------------------------------

#: Blocks of one entry ω_{m,p}: each a formula in q and k (n × c, c even) and a short name.
BLOCKS = {
    "whole": lambda: sp.Sum(q[m, j] * k[p, j], (j, 1, c)),
    "upper half": lambda: sp.Sum(q[m, j + c / 2] * k[p, j + c / 2], (j, 1, c / 2)),
    "crossed halves": lambda: sp.Sum(q[m, j] * k[p, j + c / 2], (j, 1, c / 2)),
    "lower half": lambda: sp.Sum(q[m, j] * k[p, j], (j, 1, c / 2)),
    "first column": lambda: q[m, 1] * k[p, c],
    "keys up to m": lambda: sp.Sum(sp.Sum(q[m, j] * k[ell, j], (j, 1, c)), (ell, 1, m)),
    "keys p … m": lambda: sp.Sum(q[ell, 1] * k[p, 1], (ell, p, m)),
    "after p up to m": lambda: sp.Sum(q[ell, 2] * k[ell, 1], (ell, p + 1, m)),
    "condition in a sum": lambda: sp.Sum(
        sp.Piecewise((sp.Sum(q[ell, j] * k[p, j], (j, 1, c)), (ell > p) & (ell <= m)), (0, True)),
        (ell, 1, n),
    ),
    "nested with a condition": lambda: sp.Sum(
        sp.Sum(sp.Piecewise((q[u, j] * k[ell, j], u <= ell), (0, True)), (u, 1, n)),
        (ell, 1, m),
        (j, 1, c),
    ),
    "squared": lambda: sp.Sum(q[m, j] ** 2 * k[p, j], (j, 1, c)),
    "a decay": lambda: sp.exp(sp.Sum(q[ell, 1], (ell, p + 1, m))),
    "a product between p and m": lambda: sp.Product(1 - q[u, 1] * k[p, 1], (u, p + 1, m - 1)),
    "stick-breaking": lambda: (
        q[m, 1] * k[p, 1] * sp.Product(1 - q[m, 2] * k[u, 2], (u, p + 1, m - 1))
    ),
    "a condition on a summed index": lambda: sp.Sum(
        sp.Piecewise((q[u, j] * k[p, j], u < m), (0, True)), (u, 1, n), (j, 1, c)
    ),
}
CONDITIONS = {
    "p ≤ m": lambda: p <= m,
    "p < m": lambda: p < m,
    "m < p": lambda: m < p,
    "a band": lambda: (p <= m) & (m < p + 2),
}


@st.composite
def _formulas(draw):
    names = draw(st.lists(st.sampled_from(sorted(BLOCKS)), min_size=1, max_size=2))
    factors = [BLOCKS[name]() for name in names]
    formula = factors[0] * factors[1] if len(factors) == 2 and draw(st.booleans()) else sum(factors)
    condition = draw(st.sampled_from([None, *sorted(CONDITIONS)]))
    if condition is not None:
        formula = sp.Piecewise((formula, CONDITIONS[condition]()), (0, True))
        names.append(f"if {condition}")
    return " · ".join(names), formula


def _graph(formula: sp.Expr) -> Graph:
    shapes = {"Omega": (n, n), "Q": (n, c), "K": (n, c)}
    step = Declaration("probe", "Omega", "A probe", sp.Eq(omega[m, p], formula), shapes)
    return Graph("probe", (step,))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_formulas(), st.sampled_from([(2, 2), (3, 4), (4, 2)]))
def test_every_printed_gradient_is_the_gradient_of_the_written_out_entries(drawn, sizes):
    name, formula = drawn
    size_n, size_c = sizes
    graph = _graph(formula)
    at = {n: size_n, d: 1, c: size_c}
    found = checked.mismatches(graph, at, heads=1, given={}, seed=size_n)
    assert found == [], f"{name}: {found[0]}"
    for gradient in calculus.backward(graph):  # no index left free: each within its sum
        assert _free(gradient) == set(), (name, plain(gradient.element))


SOFTPICK = """
eps = sp.Symbol("epsilon", positive=True)

def softpick(omega_scaled, *, epsilon):
    e = omega_scaled.exp() - 1
    return e.relu() / (e.abs().sum(-1, keepdim=True) + epsilon)

def _e(key):
    return sp.exp(omega_tilde[m, key]) - 1

WEIGHTS = declare.step(
    "softpick", sp.Eq(a[m, p], sp.Max(0, _e(p)) / (sp.Sum(sp.Abs(_e(r)), (r, 1, n)) + eps)),
    shape=(n, n), title="Softpick", twin=softpick, options={"epsilon": eps})
V = declare.variant("kink_probe", title="Kinks", replaces=[WEIGHTS],
                    parameters={eps: sp.Rational(1, 4)})
"""


def test_a_kink_takes_torchs_derivative_and_the_document_says_so(tmp_path):
    """max(0, x) and |x| at 0, every score 0 (W_k = 0): the printed gradient of Ω̃ is
    autograd's (θ(0) = 0, sign(0) = 0; SymPy's θ(0) = 1/2 would give ā/(2ε)), and the
    document states the convention."""
    import torch

    from derive.explicit.forward import ExplicitGraph
    from derive.explicit.gradients import ExplicitGradients

    entry = _load(tmp_path, SOFTPICK, "kinks")
    explicit = ExplicitGraph(
        entry.graph,
        {n: 2, d: 2, c: 2, sp.Symbol("epsilon", positive=True): sp.Rational(1, 4)},
        heads=1,
    )
    g = ExplicitGradients(explicit)
    rng = torch.Generator().manual_seed(0)
    values = {
        x: torch.randint(-4, 5, tuple(s.shape), generator=rng).double() / 4
        for x, s in g.inputs.items()
    }
    values["W_k"] = torch.zeros_like(values["W_k"])
    given = {x: sp.ImmutableMatrix(v.tolist()) for x, v in values.items()}
    printed = checked.printed_gradients(g, given)
    leaves = {x: v.clone().requires_grad_() for x, v in values.items() if not x.startswith("d")}
    q_, k_, v_ = (leaves["X"] @ leaves[w] for w in ("W_q", "W_k", "W_v"))
    scores = (q_ @ k_.T / 2**0.5).detach().requires_grad_()
    e = scores.exp() - 1
    weights = e.relu() / (e.abs().sum(-1, keepdim=True) + 0.25)
    ((weights @ v_) * values["dC"]).sum().backward()
    got = torch.tensor(sp.matrix2numpy(printed["dOmega_scaled"], float))
    assert torch.allclose(got, scores.grad, atol=1e-12), (got, scores.grad)
    document = derive.document(derive.DocumentOptions(variant=entry.name))
    assert r"$\theta(0) = 0$" in document
    # the chain rule keeps the denominator's square whole: (Σ |·| + ε)², not Σ² + 2εΣ + ε²
    assert r"+ \epsilon\right)^{2}" in document and r"2 \epsilon" not in document
