"""The generic steps: order, names, shapes, and element-wise equations that SymPy derived.

Sizes are pairwise distinct (n=5, d=3, c=2) so that a swapped axis cannot pass.
"""

import pytest
import sympy as sp

import derive
from derive import _notation as N

SIZES = {N.n: 5, N.d: 3, N.c: 2}


def _instantiate(expr, sizes, **fixed):
    """Substitute the sizes and fixed indices, then expand the finite sums."""
    return expr.xreplace({**sizes, **fixed}).doit()


def test_single_head_steps_in_the_seeds_order():
    names = [(s.name, s.output) for s in derive.steps()]
    assert names == [
        ("projection", "Q"),
        ("projection", "K"),
        ("projection", "V"),
        ("scores", "Omega"),
        ("scaled_scores", "Omega_scaled"),
        ("weights", "A"),
        ("context", "C"),
    ]
    assert {s.name for s in derive.steps(heads=True)} <= set(derive.STEP_NAMES)


def test_step_names_exist_in_attention_functional():
    from attention import functional

    for name in derive.STEP_NAMES:
        assert callable(getattr(functional, name)), name


def test_shapes_follow_the_seed():
    shapes = {}
    for step in derive.steps():
        shapes |= step.shapes
    assert shapes == {
        "X": (N.n, N.d),
        "W_q": (N.d, N.c),
        "W_k": (N.d, N.c),
        "W_v": (N.d, N.c),
        "Q": (N.n, N.c),
        "K": (N.n, N.c),
        "V": (N.n, N.c),
        "Omega": (N.n, N.n),
        "Omega_scaled": (N.n, N.n),
        "A": (N.n, N.n),
        "C": (N.n, N.c),
    }


def test_matrix_equations_have_consistent_shapes():
    for step in derive.steps() + derive.steps(heads=True):
        lhs, rhs = step.matrix.lhs.shape, step.matrix.rhs.shape
        per_head = {N.c: N.h * N.c_h}  # the multi-head variant's definition of c_h
        differences = [sp.expand((a - b).xreplace(per_head)) for a, b in zip(lhs, rhs, strict=True)]
        assert differences == [0, 0], step.output


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        # q_{m,j} = sum_i x_{m,i} (W_q)_{i,j}
        ("Q", sp.Sum(N.base("x")[N.m, N.i] * N.base("wq")[N.i, N.j], (N.i, 1, N.d))),
        # omega_{m,p} = sum_j q_{m,j} k_{p,j}: the dot product q_m . k_p
        ("Omega", sp.Sum(N.base("q")[N.m, N.j] * N.base("k")[N.p, N.j], (N.j, 1, N.c))),
        # c_{m,j} = sum_p a_{m,p} v_{p,j}
        ("C", sp.Sum(N.base("a")[N.m, N.p] * N.base("v")[N.p, N.j], (N.p, 1, N.n))),
    ],
)
def test_sympy_expanded_the_products_into_the_seeds_sums(output, expected):
    (step,) = [s for s in derive.steps() if s.output == output]
    assert step.element.rhs == expected


@pytest.mark.parametrize("output", ["Q", "K", "V", "Omega", "C"])
def test_element_formula_equals_explicit_matrix_product(output):
    """The generic entry, at n=5, d=3, c=2, minus the explicit product's entry is zero."""
    (step,) = [s for s in derive.steps() if s.output == output]
    ea = derive.explicit_attention(5, 3, 2)
    (explicit,) = [s for s in ea.steps if s.output == output]
    rows, cols = explicit.formula.shape
    column = N.p if output == "Omega" else N.j
    for row in range(rows):
        for col in range(cols):
            generic = _instantiate(step.element.rhs, SIZES | {N.m: row + 1, column: col + 1})
            assert sp.expand(generic - explicit.formula[row, col]) == 0
            assert (
                _instantiate(step.element.lhs, {N.m: row + 1, column: col + 1})
                == (explicit.entries[row, col])
            )


@pytest.mark.parametrize("causal", [False, True])
def test_weights_formula_equals_explicit_softmax(causal):
    (step,) = [s for s in derive.steps(causal=causal) if s.name == "weights"]
    ea = derive.explicit_attention(5, 3, 2, causal=causal)
    (explicit,) = [s for s in ea.steps if s.name == "weights"]
    for row in range(5):
        for col in range(5):
            generic = _instantiate(step.element.rhs, {N.n: 5, N.m: row + 1, N.p: col + 1})
            local = explicit.formula[row, col].xreplace({N.c: 2})
            assert sp.simplify(generic.xreplace({N.c: 2}) - local) == 0


def test_causal_weights_vanish_above_the_diagonal():
    (step,) = [s for s in derive.steps(causal=True) if s.name == "weights"]
    assert _instantiate(step.element.rhs, {N.m: 2, N.p: 3}) == 0
    assert _instantiate(step.element.rhs, {N.m: 3, N.p: 2}) != 0


def test_padding_mask_enters_the_exponentials():
    (step,) = [s for s in derive.steps(masked=True) if s.name == "weights"]
    masked = step.element.rhs.xreplace({N.base("mask")[N.m, N.p]: -sp.oo})
    assert masked == 0


def test_multi_head_steps_scale_by_the_head_width():
    chain = derive.steps(heads=True)
    assert [s.name for s in chain] == [
        "projection",
        "projection",
        "projection",
        "split_heads",
        "scores",
        "scaled_scores",
        "weights",
        "context",
        "merge_heads",
        "projection",
    ]
    (scaled,) = [s for s in chain if s.name == "scaled_scores"]
    assert scaled.element.rhs == N.base("omega")[N.ell, N.m, N.p] / sp.sqrt(N.c_h)
    assert chain[-1].shapes["W_o"] == (N.c, N.c)


def test_causal_and_masked_are_exclusive():
    with pytest.raises(ValueError, match=r"choose one of causal=True or masked=True"):
        derive.steps(causal=True, masked=True)


def test_batched_steps_add_the_sequence_index_to_per_sequence_entries_only():
    chain = derive.steps(batch=True)
    (context,) = [s for s in chain if s.output == "C"]
    a, v, ctx = N.base("a"), N.base("v"), N.base("ctx")
    assert context.element.lhs == ctx[N.b, N.m, N.j]
    assert context.element.rhs == sp.Sum(a[N.b, N.m, N.p] * v[N.b, N.p, N.j], (N.p, 1, N.n))
    (query,) = [s for s in chain if s.output == "Q"]
    assert N.base("wq")[N.i, N.j] in query.element.rhs.atoms(sp.Indexed)  # weights are shared
    assert [s.name for s in chain] == [s.name for s in derive.steps()]


@pytest.mark.parametrize("output", ["Omega_l", "C_l"])
def test_per_head_formula_equals_explicit_heads(output):
    """Generic head l (with the split q^(l)_{m,j} = q_{m,(l-1)c_h+j}) against each explicit head,
    at n=5, d=3, c=6, h=3 (c_h=2)."""
    (step,) = [s for s in derive.steps(heads=True) if s.output == output]
    ea = derive.explicit_attention(5, 3, 6, heads=3)
    split = {name: N.base(name) for name in ("q", "k", "v")}

    def unsplit(entry):  # q[l, m, j] -> q[m, (l - 1) c_h + j]
        head, row, col = entry.indices
        return entry.base[row, (head - 1) * N.c_h + col]

    generic = step.element.rhs.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base in split.values() and len(e.indices) == 3,
        unsplit,
    )
    column = N.p if output == "Omega_l" else N.j
    for head in (1, 2, 3):
        (explicit,) = [s for s in ea.steps if s.output == f"{output[:-2]}_{head}"]
        rows, cols = explicit.formula.shape
        for row in range(rows):
            for col in range(cols):
                fixed = {N.n: 5, N.c_h: 2, N.ell: head, N.m: row + 1, column: col + 1}
                value = generic.xreplace(fixed).doit()
                assert sp.expand(value - explicit.formula[row, col]) == 0
