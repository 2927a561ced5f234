"""Symbolic ≡ numeric as properties: random small sizes, random values, every variant, every step.

Sizes n, d, c from 1 to 6, pairwise distinct where they can be (so a swapped axis cannot pass by
coincidence), heads dividing c, batch shapes of up to two dimensions; inputs are dyadic rationals
k/8, exact in float64. The polynomial steps (Q, K, V, Ω) must agree exactly, the others (Ω/√c,
A, C, evaluated by SymPy to 30 digits) to 1e-12. The number of examples comes from the
Hypothesis profile (tests/conftest.py): `quick` in CI, `thorough` locally.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

import derive
from attention import functional as F
from derive.bridge.steps import compare, dyadic_inputs, torch_steps

TOLERANCE = 1e-12


@st.composite
def sizes(draw, heads=1):
    """(n, d, c): distinct where possible, c a multiple of `heads`."""
    c = heads * draw(st.integers(1, max(1, 6 // heads)))
    n = draw(st.sampled_from([v for v in range(1, 7) if v != c]))
    d = draw(st.sampled_from([v for v in range(1, 7) if v not in (n, c)]))
    return n, d, c


def assert_agrees(ea, seed, inputs=None):
    inputs = dyadic_inputs(ea, seed=seed) if inputs is None else inputs
    exact = {step.output for step in ea.steps if step.polynomial}
    report = compare(ea.evaluate(**inputs), torch_steps(ea, **inputs))
    assert report, "nothing compared"
    for item in report:
        if item.output in exact:
            assert item.exact, f"{item.output} differs: {item.max_abs_error}"
        else:
            assert item.max_abs_error <= TOLERANCE, f"{item.output}: {item.max_abs_error}"


@given(sizes(), st.booleans(), st.integers(0, 2**16))
def test_single_head_plain_and_causal(shape, causal, seed):
    assert_agrees(derive.explicit_variant(("causal" if causal else "self-attention"), *shape), seed)


@given(sizes(), st.data(), st.integers(0, 2**16))
def test_padding_and_full_masks(shape, data, seed):
    n = shape[0]
    if data.draw(st.booleans(), label="key padding"):
        keys = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="keys")
        assert_agrees(derive.explicit_variant("masked", *shape, key_padding_mask=keys), seed)
    else:
        row = st.lists(st.booleans(), min_size=n, max_size=n)
        mask = data.draw(st.lists(row, min_size=n, max_size=n), label="mask")
        assert_agrees(derive.explicit_variant("masked", *shape, mask=mask), seed)


@given(
    st.integers(2, 3).flatmap(lambda h: st.tuples(st.just(h), sizes(heads=h))),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_multi_head(heads_and_shape, causal, seed):
    heads, shape = heads_and_shape
    assert_agrees(
        derive.explicit_variant(("multi-head+causal" if causal else "multi-head"), *shape, h=heads),
        seed,
    )


@given(
    sizes(),
    st.lists(st.integers(1, 3), min_size=1, max_size=2),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_batches_sequence_by_sequence(shape, batch, causal, seed):
    n, d, c = shape
    ea = derive.explicit_variant(("causal" if causal else "self-attention"), n, d, c)
    weights = dyadic_inputs(ea, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-16, 17, (*batch, n, d), generator=generator).double() / 8
    out, a = F.self_attention(
        x, weights["W_q"], weights["W_k"], weights["W_v"], causal=causal, return_weights=True
    )
    flat_x, flat_c, flat_a = x.reshape(-1, n, d), out.reshape(-1, n, c), a.reshape(-1, n, n)
    symbolic = ea.evaluate_batch(flat_x, weights["W_q"], weights["W_k"], weights["W_v"])
    for index, values in enumerate(symbolic):
        for name, numeric in (("C", flat_c[index]), ("A", flat_a[index])):
            expected = torch.tensor(values.floats(name), dtype=torch.float64)
            torch.testing.assert_close(numeric, expected, rtol=0, atol=TOLERANCE)
