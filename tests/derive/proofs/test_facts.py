"""The facts, each derived by SymPy from the declarations (and the stated assumptions), and what
happens to each when a declaration changes."""

import pytest
import sympy as sp

import derive
from derive import proofs
from derive.graph import self_attention
from derive.graph.assumptions import ASSUMPTIONS, Assumptions, mu, sigma2
from derive.notation import latex
from derive.notation import letters as L


@pytest.mark.parametrize(
    "fact",
    [
        "rows_sum_to_one",
        "shift_invariance",
        "score_variance",
        "scaled_score_variance",
        "softmax_jacobian",
        "rowsum_identity",
    ],
)
@pytest.mark.parametrize("form", [{}, {"causal": True}, {"heads": True}])
def test_every_fact_holds_for_every_form(fact, form):
    derived = getattr(proofs, fact)(self_attention(**form))
    assert derived.holds, (fact, form, derived.residual)
    assert derived.derivation[0].lhs == derived.claim.lhs


def test_rows_sum_to_one_reaches_one_from_the_declared_weights():
    fact = proofs.rows_sum_to_one(derive.variant("self-attention").graph)
    assert latex(fact.statement) == r"\sum_{p=1}^{n} a_{m,p} = 1"
    assert latex(fact.derivation[0].rhs).startswith(r"\sum_{p=1}^{n} \frac{\exp")


def test_the_causal_limits_are_derived_from_the_declared_mask():
    element, sources = proofs.weights_element(self_attention(causal=True))
    assert set(sources) == {"A", "Omega_masked", "M"}
    (value, condition), (zero, _) = element.args
    assert zero == 0 and condition in (sp.Le(L.p, L.m), sp.Ge(L.m, L.p))  # p ≤ m, as SymPy keeps it
    (total,) = value.atoms(sp.Sum)
    assert total.limits == ((L.r, 1, L.m),)  # the denominator stops at the query
    rows = proofs.rows_sum_to_one(derive.variant("causal").graph)
    assert rows.holds and any(
        s.limits == ((L.p, 1, L.m),) for s in rows.derivation[1].rhs.atoms(sp.Sum)
    )


def test_shift_invariance_holds_and_fails_on_a_non_softmax():
    assert proofs.shift_invariance(derive.variant("self-attention").graph).holds
    graph = self_attention()
    weights = graph.step("A").element.rhs
    linear = graph.replace("A", weights.replace(sp.exp, lambda x: x))
    assert not proofs.shift_invariance(linear).holds  # a plain ratio is not shift-invariant


def test_the_variance_is_derived_for_symbolic_c_from_the_assumptions():
    fact = proofs.score_variance(derive.variant("self-attention").graph)
    assert fact.holds and fact.claim.rhs == L.c
    general = fact.derivation[-3].rhs  # before the stated values go in
    expected = L.c * (
        sigma2("q") * sigma2("k") + sigma2("q") * mu("k") ** 2 + mu("q") ** 2 * sigma2("k")
    )
    assert sp.expand(general - expected) == 0
    stated = fact.derivation[-2].rhs  # the values put in, nothing computed yet: c (0²·1 + …)
    assert stated.free_symbols == {L.c} and stated != L.c and sp.simplify(stated) == L.c
    assert any(e.rhs.has(sp.KroneckerDelta) for e in fact.derivation)
    assert (
        proofs.scaled_score_variance(derive.variant("self-attention").graph).derivation[-1].rhs == 1
    )


def test_other_assumptions_give_another_variance():
    twos = Assumptions(("q", "k"), ((mu("q"), 0), (mu("k"), 1), (sigma2("q"), 2), (sigma2("k"), 3)))
    fact = proofs.score_variance(self_attention(), twos)
    assert fact.derivation[-1].rhs == L.c * (2 * 3 + 2 * 1)  # c (σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²)
    assert not fact.holds
    assert ASSUMPTIONS.values != twos.values


def test_the_variance_follows_the_declared_scaling():
    graph = self_attention()
    scaled = graph.step("Omega_scaled").element.rhs
    unscaled = graph.replace("Omega_scaled", scaled * sp.sqrt(L.c))  # no 1/√c
    assert proofs.scaled_score_variance(unscaled).derivation[-1].rhs == L.c
    by_c = graph.replace("Omega_scaled", scaled / sp.sqrt(L.c))  # 1/c instead of 1/√c
    assert proofs.scaled_score_variance(by_c).derivation[-1].rhs == 1 / L.c


def test_the_jacobian_is_derived_from_the_weights():
    fact = proofs.softmax_jacobian(derive.variant("self-attention").graph)
    a, scaled = L.base("a"), L.base("omegatilde")
    assert fact.derivation[0].lhs == sp.Derivative(a[L.m, L.p], scaled[L.m, L.t])
    assert fact.derivation[0].rhs.has(sp.KroneckerDelta)
    expected = a[L.m, L.p] * (sp.KroneckerDelta(L.p, L.t) - a[L.m, L.t])
    assert sp.expand(fact.derivation[-1].rhs - expected) == 0
    assert not fact.derivation[-1].rhs.has(sp.exp)  # written in the weights


def test_the_rowsum_identity_reads_the_derived_gradient_and_the_context():
    fact = proofs.rowsum_identity(derive.variant("self-attention").graph)
    assert fact.holds and set(fact.sources) == {"dA", "C"}
    assert latex(fact.statement) == (
        r"\sum_{r=1}^{n} a_{m,r} \bar{a}_{m,r} = \sum_{j=1}^{c} \bar{z}_{m,j} z_{m,j}"
    )
    assert len({e.rhs for e in fact.derivation}) == len(fact.derivation)  # no line twice
