"""Attention without the softmax, derived (`derive.proofs.linear`): for linear attention, the delta
rule, the gated delta rule and Mamba-2's SSD, the recurrence keeps the invariant at symbolic
sizes, its write is the triangular system's row, its read the parallel form's row, a state
carried from chunk to chunk is the unsplit one; every split of a few tokens into chunks gives
the recurrence; the parallel form's gradient derived by SymPy is autograd's on the recurrent
form (`attention.linear`); SSD is linear attention at a ≡ 1, Δ ≡ 1 and the gated delta rule
without its correction; and each port mistake breaks a proof or a split."""

import pytest
import sympy as sp
import torch

from derive.notation import letters as L
from derive.proofs import linear as D

FACTS = (D.written, D.state, D.output, D.carried)


@pytest.mark.parametrize("fact", FACTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("rule", D.RULES.values(), ids=lambda r: r.name)
def test_each_fact_holds_at_symbolic_sizes(rule, fact):
    derived = fact(rule)
    assert derived.holds, derived.residual
    symbols = derived.claim.rhs.free_symbols | {
        s for e in derived.derivation for s in e.free_symbols
    }
    if fact is D.written and not rule.delta:  # linear attention writes v_m: nothing to sum
        return
    assert {D.S, L.m} <= symbols  # the segment's start and the token: symbols
    if fact in (D.written, D.output):  # and the width the dot products sum over
        assert L.c in symbols


def test_the_written_values_solve_the_triangular_system_only_with_the_delta_rule():
    fact = D.written(D.RULES["gated-deltanet"])
    assert fact.claim.rhs.has(D.u[L.p, L.j2])  # row m reads u_p for p < m: the system
    assert not D.written(D.RULES["linear-attention"]).claim.rhs.has(D.u)


def _decay_after_the_read(m, rule):
    """The prediction read from the state before its decay (α_m left out)."""
    return sp.Sum(D.k[m, D.J] * D.invariant(m - 1, rule), (D.J, 1, D.C))


def _beta_on_the_keys_only(m, predicted):
    """β scales what is taken out, not what is written: v_m − β_m S ᵀ k_m."""
    return D.v[m, D.J2] - D.beta[m] * predicted


@pytest.mark.parametrize(
    "name, replacement",
    [("predicted_by_state", _decay_after_the_read), ("delta_write", _beta_on_the_keys_only)],
)
def test_a_changed_recurrence_breaks_the_written_row(monkeypatch, name, replacement):
    assert D.written(D.RULES["gated-deltanet"]).holds
    monkeypatch.setattr(D, name, replacement)
    assert not D.written(D.RULES["gated-deltanet"]).holds


def test_an_inclusive_decay_breaks_the_invariant():
    wrong = D.RULES["gated-deltanet"]._replace(inclusive=True)
    assert not D.state(wrong).holds


def _zero(matrix):
    return all(entry == 0 for entry in matrix)


@pytest.mark.parametrize("rule", D.RULES.values(), ids=lambda r: r.name)
@pytest.mark.parametrize("n, c", [(4, 2), (5, 1)])
def test_every_split_into_chunks_is_the_recurrence(rule, n, c):
    found = D.every_split(n, rule, c=c)
    assert len(found) == 2 ** (n - 1)  # (2, 2), (1, 3), (3, 1)…: uneven splits among them
    assert all(_zero(difference) for difference in found.values()), found


def _transposed(Q, K, V, alpha, strengths, start, rule):
    """The triangular system solved with its transpose (the upper solve a port writes by
    mistake)."""
    size = Q.shape[0]
    gamma = [[sp.Mul(*alpha[p + 1 : m + 1]) for p in range(size)] for m in range(size)]
    system = sp.Matrix(
        size,
        size,
        lambda m, p: strengths[m] * gamma[m][p] * (K[m, :] * K[p, :].T)[0] if p < m else 0,
    )
    kept = [sp.Mul(*alpha[: m + 1]) for m in range(size)]
    right = sp.diag(*strengths) * (V - sp.diag(*kept) * K * start)
    written = (sp.eye(size) + system).T.upper_triangular_solve(right)
    scores = (Q * K.T).multiply_elementwise(
        sp.Matrix(size, size, lambda m, p: gamma[m][p] if p <= m else 0)
    )
    last = [sp.Mul(*alpha[p + 1 :]) for p in range(size)]
    return sp.diag(*kept) * Q * start + scores * written, kept[-1] * start + (
        sp.diag(*last) * K
    ).T * written


@pytest.mark.parametrize(
    "mistake",
    [
        dict(rule=D.RULES["gated-deltanet"]._replace(inclusive=True)),
        dict(rule=D.RULES["gated-deltanet"], form=_transposed),
        dict(rule=D.RULES["linear-attention"]._replace(name="gated-deltanet")),
    ],
    ids=["inclusive-decay", "transposed-solve", "delta-rule-forgotten"],
)
def test_a_port_mistake_gives_other_outputs_than_the_recurrence(mistake):
    found = D.every_split(4, **mistake)
    assert not all(_zero(difference) for difference in found.values())
    assert not _zero(found[(4,)])  # the parallel form, one chunk, among them


@pytest.mark.parametrize("rule", D.RULES.values(), ids=lambda r: r.name)
def test_the_parallel_form_s_gradient_is_autograd_s_on_the_recurrence(rule):
    from attention import linear

    n, c, c_v = 3, 2, 1
    derived = D.gradients(n, rule, c=c, c_v=c_v)
    x = D.explicit(n, c, c_v, channel=rule.channel)
    gen = torch.Generator().manual_seed(0)
    draw = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    numbers = {"Q": draw(n, c), "K": draw(n, c), "V": draw(n, c_v), "bar": draw(n, c_v)}
    decays = (n, c) if rule.channel else (n,)  # one per key channel: Kimi Delta Attention's
    alpha = torch.rand(*decays, generator=gen, dtype=torch.float64) * 0.5 + 0.4
    strengths = torch.rand(n, generator=gen, dtype=torch.float64)
    table = {}
    for name in ("Q", "K", "V"):
        symbols, values = getattr(x, name), numbers[name]
        table |= {
            symbols[a, b]: float(values[a, b]) for a in range(n) for b in range(values.shape[1])
        }
    flat = [a for row in x.alpha for a in row] if rule.channel else x.alpha
    table |= {s: float(a) for s, a in zip(flat, alpha.flatten(), strict=True)}
    table |= {s: float(b) for s, b in zip(x.beta, strengths, strict=True)}
    bar = sp.Matrix(n, c_v, lambda a, b: sp.Symbol(f"obar_{a + 1}{b + 1}", real=True))
    table |= {bar[a, b]: float(numbers["bar"][a, b]) for a in range(n) for b in range(c_v)}
    q, k, v = (numbers[name].clone().requires_grad_() for name in ("Q", "K", "V"))
    g = alpha.log().requires_grad_()
    b = strengths.clone().requires_grad_()
    number = lambda matrix: torch.tensor(  # noqa: E731
        [[float(e.xreplace(table)) for e in row] for row in matrix.tolist()], dtype=torch.float64
    )
    if rule.stepped and rule.channel:  # Mamba's scan, one channel: α_{m,j} = e^{Δ_m A_j}
        return _selective_gradients(derived, number, numbers, strengths, x, table)
    if rule.stepped:  # SSD in Mamba's layout, one head: x = V, B = K, C = Q, Δ = β, α = e^{Δ A}
        return _ssd_gradients(derived, number, numbers, strengths, x, table)
    if rule.name == "linear-attention":
        out = linear.linear_attention(q, k, v)
    elif rule.name == "deltanet":
        out = linear.delta_rule(q, k, v, b)
    elif rule.channel:
        out = linear.kimi_delta_rule(q, k, v, g, b)
    else:
        out = linear.gated_delta_rule(q, k, v, g, b)
    (out * numbers["bar"]).sum().backward()
    for name, tensor in (("dQ", q), ("dK", k), ("dV", v)):
        torch.testing.assert_close(number(derived[name]), tensor.grad, rtol=1e-12, atol=1e-12)
    if rule.gated:  # dL/dα = dL/dg / α
        found = number(derived["dalpha"])
        torch.testing.assert_close(found if rule.channel else found[0], g.grad / alpha)
    if rule.delta:
        torch.testing.assert_close(number(derived["dbeta"])[0], b.grad)


def _selective_gradients(derived, number, numbers, steps, x, table):
    """The selective scan's derived gradients, α_{m,j} and Δ_m independent symbols, against
    autograd through `attention.linear.selective_scan` (one channel: x = V, B = K, C = Q), where
    α_{m,j} = e^{Δ_m A_j} ties them: dΔ_m = ∂L/∂Δ_m + Σ_j ∂L/∂α_{m,j} α_{m,j} A_j and
    dA_j = Σ_m ∂L/∂α_{m,j} α_{m,j} Δ_m."""
    from attention import linear

    c = numbers["Q"].shape[1]
    A = torch.tensor([[-0.7, -0.3][:c]], dtype=torch.float64, requires_grad=True)
    alpha = torch.exp(steps[:, None] * A.detach()[0])
    flat = [a for row in x.alpha for a in row]
    table |= {s: float(a) for s, a in zip(flat, alpha.flatten(), strict=True)}
    C, B = (numbers[name].clone()[None].requires_grad_() for name in ("Q", "K"))
    v = numbers["V"].clone()[None].requires_grad_()  # one channel: (1, n, 1)
    dt = steps.clone()[None, :, None].requires_grad_()
    out = linear.selective_scan(v, dt, A, B, C)
    (out[0] * numbers["bar"]).sum().backward()
    for name, tensor in (("dQ", C), ("dK", B), ("dV", v)):
        assert tensor.grad is not None
        torch.testing.assert_close(number(derived[name]), tensor.grad[0], rtol=1e-12, atol=1e-12)
    by_alpha, by_step = number(derived["dalpha"]), number(derived["dbeta"])[0]
    assert dt.grad is not None and A.grad is not None
    torch.testing.assert_close(by_step + (by_alpha * alpha * A.detach()).sum(1), dt.grad[0, :, 0])
    torch.testing.assert_close((by_alpha * alpha * steps[:, None]).sum(0), A.grad[0])


def _ssd_gradients(derived, number, numbers, steps, x, table):
    """SSD's derived gradients, α_m and Δ_m independent symbols, against autograd through
    `attention.linear.ssd`, where α_m = e^{Δ_m A} ties them: dΔ_m = ∂L/∂Δ_m + ∂L/∂α_m α_m A and
    dA = Σ_m ∂L/∂α_m α_m Δ_m."""
    from attention import linear

    A = torch.tensor([-0.7], dtype=torch.float64, requires_grad=True)
    alpha = torch.exp(steps * A.detach())
    table |= {s: float(a) for s, a in zip(x.alpha, alpha, strict=True)}
    layout = lambda name: numbers[name].clone()[None, :, None, :].requires_grad_()  # noqa: E731
    C, B, v = layout("Q"), layout("K"), layout("V")
    dt = steps.clone()[None, :, None].requires_grad_()
    out = linear.ssd(v, dt, A, B, C)
    (out[0, :, 0, :] * numbers["bar"]).sum().backward()
    for name, tensor in (("dQ", C), ("dK", B), ("dV", v)):
        assert tensor.grad is not None
        got = tensor.grad[0, :, 0, :]
        torch.testing.assert_close(number(derived[name]), got, rtol=1e-12, atol=1e-12)
    by_alpha, by_step = number(derived["dalpha"])[0], number(derived["dbeta"])[0]
    assert dt.grad is not None and A.grad is not None
    torch.testing.assert_close(by_step + by_alpha * alpha * A.detach(), dt.grad[0, :, 0])
    torch.testing.assert_close((by_alpha * alpha * steps).sum(), A.grad[0])


@pytest.mark.parametrize(
    "name", ["linear-attention", "deltanet", "gated-deltanet", "ssd", "kda", "selective-scan"]
)
def test_the_page_s_states_are_the_chunked_form_s(name):
    """The state after each chunk the HTML page shows, its formulas evaluated, against
    `attention.linear.chunk_states` on the same numbers (the delta rules' written values and
    decays given: the chunks carry linear attention's state over U, decayed by Γ)."""
    from attention import linear
    from derive import variant

    graph = variant(name).graph
    n, c = 5, 2
    found = D.chunk_states(graph, {L.n: n, L.c: c})
    assert [state.letter for state in found] == ["S^{(1)}", "S^{(2)}", "S^{(3)}"]  # 2 + 2 + 1
    gen = torch.Generator().manual_seed(1)
    k, u = (
        torch.randn(n, c, generator=gen, dtype=torch.float64),
        torch.randn(n, c, generator=gen, dtype=torch.float64),
    )
    gated = name in ("gated-deltanet", "ssd")
    g = -torch.rand(n, generator=gen, dtype=torch.float64) if gated else None
    G = torch.zeros(n, dtype=torch.float64) if g is None else g.cumsum(0)
    values = "uwritten" if name in ("deltanet", "gated-deltanet", "kda") else "v"
    table = {L.base("k")[p + 1, j + 1]: float(k[p, j]) for p in range(n) for j in range(c)}
    table |= {L.base(values)[p + 1, j + 1]: float(u[p, j]) for p in range(n) for j in range(c)}
    if name in ("ssd", "selective-scan"):  # it writes Δ_p v_p, its steps in the graph
        steps = torch.rand(n, generator=gen, dtype=torch.float64) + 0.5
        table |= {L.base("deltastep")[p + 1, 1]: float(steps[p]) for p in range(n)}
        u = steps[:, None] * u
    table |= {
        L.base("gammadecay")[m + 1, p + 1]: float((G[m] - G[p]).exp())
        for m in range(n)
        for p in range(m + 1)
    }
    if name in ("kda", "selective-scan"):  # a log-decay per key channel: G_{m,j} in the graph
        g = -torch.rand(n, c, generator=gen, dtype=torch.float64)
        logs = g.cumsum(0)
        table |= {
            L.base("glog")[m + 1, j + 1]: float(logs[m, j]) for m in range(n) for j in range(c)
        }
    expected = linear.chunk_states(k, k, u, g, None, chunk_size=2)
    for state, numbers in zip(found, expected, strict=True):
        got = torch.tensor(
            [[float(e.xreplace(table)) for e in row] for row in state.formulas.tolist()],
            dtype=torch.float64,
        )
        torch.testing.assert_close(got, numbers, rtol=1e-12, atol=1e-12)


def test_canonical_forms_keep_two_sums_over_one_index_apart():
    """Σ_j a_j Σ_j b_j is not Σ_j a_j b_j: merged into one sum, the second index is renamed."""
    a, b = sp.IndexedBase("a"), sp.IndexedBase("b")
    product = sp.Sum(a[D.J], (D.J, 1, D.C)) * sp.Sum(b[D.J], (D.J, 1, D.C))
    single = sp.Sum(a[D.J] * b[D.J], (D.J, 1, D.C))
    assert D.canonical(product) != D.canonical(single)
    at = {D.C: 2, a[1]: 1, a[2]: 2, b[1]: 3, b[2]: 4}
    assert D.canonical(product).xreplace({D.C: 2}).doit().xreplace(at) == 21  # (1 + 2)(3 + 4)


def test_ssd_without_decay_and_with_unit_steps_is_linear_attention():
    fact = D.as_linear_attention()
    assert fact.holds and fact.claim.rhs == D.output(D.RULES["linear-attention"]).claim.rhs
    row = D.output(D.RULES["ssd"]).claim.rhs
    undecayed = row.replace(lambda e: isinstance(e, sp.Indexed) and e.base == D.G, lambda e: 0)
    assert D.canonical(undecayed) != fact.claim.rhs  # the steps kept: not linear attention


def test_ssd_s_write_is_the_gated_delta_rule_s_without_the_correction():
    fact = D.without_correction()
    assert fact.holds and fact.claim.rhs == D.STEP[L.m] * D.v[L.m, D.J2]
    epsilon = sp.Symbol("epsilon", nonnegative=True)
    gated = D.delta_write(
        L.m, D._cumulative(D.predicted_by_state(L.m, D.RULES["gated-deltanet"]), L.m)
    )
    assert fact.derivation[0].rhs.xreplace({epsilon: 1}) == gated  # ε = 1: the gated rule's own
    assert D.canonical(gated) != D.canonical(fact.claim.rhs.xreplace({D.STEP[L.m]: D.beta[L.m]}))


def test_ssd_keeps_the_gated_delta_rule_s_state():
    fact = D.shares_the_state()
    assert fact.holds
    assert fact.claim.rhs == D.canonical(D.state(D.RULES["ssd"]).derivation[0].rhs)
    doubled = fact.derivation[1].rhs.xreplace({D.STEP[L.m]: 2 * D.STEP[L.m]})
    assert D.canonical(doubled) != fact.claim.rhs  # another write: another state


def test_kda_s_decay_on_the_state_s_columns_breaks_the_invariant(monkeypatch):
    """Kimi Delta Attention decays each row of the state, the key channel j: a port that decays
    its columns (the value channel j') keeps another state."""
    rule = D.RULES["kda"]
    assert D.state(rule).holds and D.written(rule).holds
    original = D._alpha

    def columns(m, rule, j=D.J):
        return sp.exp(D.g[m, D.J2]) if rule.channel else original(m, rule, j)

    monkeypatch.setattr(D, "_alpha", columns)
    assert not D.state(rule).holds
    assert not D.written(rule).holds


def test_kda_with_one_decay_for_every_channel_is_the_gated_delta_rule():
    """Every split of KDA's chunked form, its channels' decays made one per token, is the gated
    delta rule's recurrence: the per-channel forms reduce to the scalar ones."""
    x = D.explicit(4, 2, 1, channel=True)
    alike = x._replace(alpha=tuple((a[0], a[0]) for a in x.alpha))
    scalar = x._replace(alpha=tuple(a[0] for a in x.alpha))
    expected = D.recurrent_outputs(scalar, D.RULES["gated-deltanet"])
    for sizes in D.splits(4):
        got = D.chunked_outputs(alike, sizes, D.RULES["kda"])
        assert (got - expected).applyfunc(sp.expand) == sp.zeros(4, 1), sizes
    apart = D.chunked_outputs(x, (4,), D.RULES["kda"])
    assert (apart - expected).applyfunc(sp.expand) != sp.zeros(4, 1)
