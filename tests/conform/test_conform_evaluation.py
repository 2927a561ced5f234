"""The evaluator of derived matrix forms (derive.conformance.evaluate.matrices) against derive.explicit's
exact values at tiny sizes: every step of every form, the mistakes SymPy finds matrix forms for,
the steps evaluated entry by entry against the explicit entries, the backward pass, and the
rounding bound against what float32 does."""

import pytest
import sympy as sp
import torch

from attention import functional as F
from derive.calculus import NoMatrixForm
from derive.calculus.forward import declared_matrix
from derive.conformance.evaluate.elementwise import evaluate_element
from derive.conformance.evaluate.matrices import Evaluation, Rounding
from derive.explicit.forward import ExplicitGraph
from derive.explicit.gradients import ExplicitGradients
from derive.explicit.instantiate import cells
from derive.graph.forms import RHO, Form, reference
from derive.graph.mistakes import MISTAKES
from derive.notation import Entries
from derive.notation import letters as L

N, D, C = 3, 5, 4  # distinct, so that a swapped axis cannot pass

FORMS = [
    Form(),  # one head
    Form(causal=True),  # the causal mask, declared
    Form(heads=True),  # 2 heads of c_h = 2
    Form(heads=True, causal=True),
    Form(masked=True),  # a mask given as an input
    Form(heads=True, masked=True, causal=True),  # causal folded into the given mask
    Form(projections=False, causal=True),  # Q, K, V given (an sdpa function)
    Form(dropout=True, causal=True),  # dropout keeping every weight, ρ = 1/2
]


def _allowed(form):
    allowed = torch.tensor([[(m + p) % 2 == 0 for p in range(N)] for m in range(N)])
    return allowed & torch.ones(N, N, dtype=torch.bool).tril() if form.causal else allowed


def _setting(form, graph):
    heads = 2 if form.heads else 1
    sizes = {L.n: N, L.d: D, L.c: C, L.h: heads, L.c_h: C // heads}
    given = {}
    if form.masked:
        for m, row in enumerate(_allowed(form).tolist()):
            for p, allowed in enumerate(row):
                given[L.base("mask")[m + 1, p + 1]] = sp.S.Zero if allowed else -sp.oo
    # explicit sizes are integers: ρ goes into the declarations as a number
    rho = sp.Rational(1, 2)
    steps = tuple(s.with_element(s.element.rhs.xreplace({RHO: rho})) for s in graph.declarations)
    explicit = ExplicitGraph(
        type(graph)(graph.name, steps, graph.relations), sizes, heads=heads, given=given
    )
    generator = torch.Generator().manual_seed(3)
    inputs = {
        k: torch.randint(-8, 9, v.shape, generator=generator).double() / 8
        for k, v in explicit.inputs.items()
    }
    evaluation = Evaluation({**sizes, RHO: rho}, empty_rows="zero")
    for letter, tensor in inputs.items():
        evaluation.give(letter, tensor)
    if form.masked:
        evaluation.give("M", torch.where(_allowed(form), 0.0, -torch.inf).double())
    return explicit, inputs, evaluation


def _same(evaluation, values):
    """Every explicit step's value, against the evaluator's (per head: key A_2 is head 2)."""
    compared = 0
    for key in values.matrices:
        expected = torch.tensor(values.floats(key), dtype=torch.float64)
        letter, _, head = key.rpartition("_")
        got = evaluation[letter + "_l"][int(head) - 1] if head.isdigit() else evaluation[key]
        assert torch.allclose(got, expected, rtol=0, atol=1e-12), key
        compared += 1
    return compared


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_every_step_equals_the_explicit_values(form):
    graph = reference(form)
    explicit, inputs, evaluation = _setting(form, graph)
    evaluation.forward(graph)
    assert _same(evaluation, explicit.evaluate(**inputs)) >= 3


def _explicit_can(step, graph):
    """Has SymPy a matrix form for the step (not only the matrix of its entries, `Entries`)?"""
    if step.constant:
        return True
    try:
        return not isinstance(declared_matrix(step, graph.relations).rhs, Entries)
    except NoMatrixForm:  # a block of columns SymPy cannot read
        return False


def _changing(found, limit=2):
    """The first forms a mistake changes something in (at most `limit`)."""
    forms = [f for f in FORMS if found.graph(f) not in (None, reference(f))]
    return forms[:limit]


def _matrix_mistakes():
    for found in MISTAKES:
        for form in _changing(found):
            graph = found.graph(form)
            if all(_explicit_can(s, graph) for s in graph.declarations):
                yield pytest.param(form, found.id, id=f"{found.id}-{form}")


@pytest.mark.parametrize("form, id", list(_matrix_mistakes()))
def test_each_mistake_with_a_matrix_form_equals_its_explicit_values(form, id):
    graph = next(m for m in MISTAKES if m.id == id).graph(form)
    explicit, inputs, evaluation = _setting(form, graph)
    evaluation.forward(graph)
    assert _same(evaluation, explicit.evaluate(**inputs)) >= 3


def _element_steps():
    for found in MISTAKES:
        for form in _changing(found):
            graph = found.graph(form)
            for step in graph.declarations:
                if not _explicit_can(step, graph) and found.id != "heads-mixed":
                    yield pytest.param(form, found.id, step.output, id=f"{found.id}-{form}")


@pytest.mark.parametrize("form, id, output", list(_element_steps()))
@pytest.mark.parametrize("route", ["evaluation", "grid"])
def test_each_step_explicit_cannot_build_equals_its_entries(form, id, output, route):
    """A step with no matrix form SymPy finds for itself (the transpose of one, or none),
    evaluated as `Evaluation` does and entry by entry on grids, against the same step's
    explicit entries (derive.explicit's cells) with the values of the matrices it reads."""
    graph = next(m for m in MISTAKES if m.id == id).graph(form)
    _, _, evaluation = _setting(form, reference(form))
    evaluation.forward(graph)
    step = graph.step(output)
    heads = 2 if form.heads else 1
    got = evaluation.values[output]
    if route == "grid":
        got = evaluate_element(step, evaluation.values, evaluation.sizes, heads)
    env = {}
    for letter, tensor in evaluation.values.items():
        name = L.name_of(letter) if letter.removesuffix("_l") in L.BASES.values() else None
        if name is None or L.is_gradient(letter):
            continue
        per_head = letter.endswith("_l")
        for index, value in enumerate(tensor.reshape(-1).tolist()):
            h, m, p = torch.unravel_index(torch.tensor(index), tensor.shape)
            key = (h + 1, m + 1, p + 1) if per_head else (m + 1, p + 1)
            env[L.base(name)[tuple(int(k) for k in key)]] = sp.Float(value, 30)
    sizes = {k: sp.sympify(v) for k, v in evaluation.sizes.items()}
    compared = 0
    for head, entry, formula in cells(step.element, step.shapes[step.output], sizes, heads, None):
        expected = complex(formula.xreplace(env).evalf(30))
        indices = [int(i) - 1 for i in entry.indices]
        value = got[(indices[0], *indices[1:]) if head else (0, *indices)]
        assert value.item() == pytest.approx(expected.real, abs=1e-12), entry
        compared += 1
    assert compared >= N * N


@pytest.mark.parametrize("route", ["evaluation", "grid"])
def test_heads_mixed_is_the_reshape_without_the_transpose(route):
    """Its index arithmetic (⌊·⌋, mod: beyond derive.explicit's indices) against torch's own
    reading of (h, n, c_h) memory as (n, c)."""
    form = Form(heads=True)
    graph = next(m for m in MISTAKES if m.id == "heads-mixed").graph(form)
    _, _, evaluation = _setting(form, reference(form))
    evaluation.forward(graph)
    per_head = evaluation["C_l"]  # (h, n, c_h)
    got = evaluation["C_concat"]
    if route == "grid":
        got = evaluate_element(graph.step("C_concat"), evaluation.values, evaluation.sizes, 2)[0]
    assert torch.equal(got, per_head.contiguous().view(N, C))
    assert not torch.equal(got, per_head.transpose(0, 1).reshape(N, C))


@pytest.mark.parametrize(
    "form", [Form(), Form(heads=True, causal=True), Form(masked=True)], ids=str
)
def test_the_backward_pass_equals_the_explicit_gradients(form):
    graph = reference(form)
    explicit, inputs, evaluation = _setting(form, graph)
    evaluation.forward(graph)
    gradients = ExplicitGradients(explicit)
    upstream = torch.randint(-8, 9, gradients.dC.shape, generator=torch.Generator().manual_seed(4))
    upstream = upstream.double() / 8
    values = gradients.evaluate(**inputs, dC=upstream)
    evaluation.backward(graph, upstream)
    compared = 0
    for step in gradients.steps:
        letter, _, head = step.output.rpartition("_")
        per_head = head.isdigit() and letter + "_l" in evaluation.values
        got = evaluation[letter + "_l"][int(head) - 1] if per_head else evaluation[step.output]
        expected = torch.tensor(values.floats(step.output), dtype=torch.float64)
        assert torch.allclose(got, expected, rtol=0, atol=1e-10), step.output
        compared += 1
    assert compared >= 8


def test_the_rounding_bound_covers_what_float32_does():
    """attention.functional in float32 on dyadic inputs, against the float64 evaluation: every
    entry within its first-order bound (which would be false with a bound for float64)."""
    form = Form(heads=True, causal=True)
    generator = torch.Generator().manual_seed(5)
    x = torch.randint(-16, 17, (2, 7, 12), generator=generator).double() / 8
    w = [
        torch.randint(-8, 9, shape, generator=generator).double() / 16
        for shape in ((12, 8), (12, 8), (12, 8), (8, 8))
    ]
    sizes = {L.n: 7, L.d: 12, L.c: 8, L.h: 2, L.c_h: 4}
    bounds = {}
    for name, units in (("float32", (2.0**-24, 2.0**-24)), ("float64", (2.0**-53, 2.0**-53))):
        evaluation = Evaluation(sizes, Rounding(*units))
        for letter, tensor in zip(("X", "W_q", "W_k", "W_v", "W_o"), (x, *w), strict=True):
            evaluation.give(letter, tensor)
        evaluation.forward(reference(form))
        bounds[name] = evaluation.bound("C")
    single = F.multi_head_attention(x.float(), *(t.float() for t in w), heads=2, causal=True)
    error = (single.double() - evaluation["C"]).abs()
    assert bool((error <= bounds["float32"]).all())
    assert not bool((error <= bounds["float64"]).all())
