"""The worked example: SymPy's values from the declarations against torch, each side computed
independently (the book's class on one side, the evaluated declarations on the other)."""

import re

import pytest
import torch

import attention
from attention import functional as F
from derive import DocumentOptions
from derive.bridge.example import TOKENS, TOLERANCE, worked_example
from derive.render.documents import latex_document


@pytest.fixture(scope="module")
def example():
    return worked_example()


def _inputs(example):
    return {name: torch.tensor(rows, dtype=torch.float64) for name, rows in example.inputs.items()}


def test_tokens_and_shapes(example):
    assert example.tokens == ("the", "fat", "cat", "sat", "on", "the", "mat") == TOKENS
    assert (len(example.inputs["X"]), example.d, example.c) == (7, 4, 3)
    x = example.inputs["X"]
    assert x[0] != x[5]  # "the" twice: same token embedding, different position embedding
    assert worked_example().inputs == example.inputs  # seeded


def test_sympy_values_equal_the_books_class(example):
    """The declarations evaluated by SymPy, against `SelfAttentionV1` holding the same weights."""
    inputs = _inputs(example)
    module = attention.SelfAttentionV1(example.d, example.c).double()
    with torch.no_grad():
        for name, key in (("W_query", "W_q"), ("W_key", "W_k"), ("W_value", "W_v")):
            getattr(module, name).copy_(inputs[key])
    context, weights = module(inputs["X"], return_weights=True)
    sympy_a = torch.tensor(example.values.floats("A"), dtype=torch.float64)
    sympy_c = torch.tensor(example.values.floats("C"), dtype=torch.float64)
    torch.testing.assert_close(sympy_a, weights, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(sympy_c, context, rtol=0, atol=TOLERANCE)
    assert sympy_a.sum(dim=-1).sub(1).abs().max() < 1e-25 or torch.allclose(
        sympy_a.sum(dim=-1), torch.ones(7, dtype=torch.float64), rtol=0, atol=1e-15
    )


def test_the_document_table_is_sympys_and_agrees_with_torch(example):
    tex = latex_document(DocumentOptions(example=True), example=example)
    table = tex[tex.index("computed by SymPy") :]
    rows = re.findall(r"^(\w+) \((\d)\) & (.*) \\\\$", table, re.M)[:7]
    printed = [[float(v) for v in cells.split(" & ")] for _, _, cells in rows]
    assert printed == [[round(v, 3) for v in row] for row in example.values.floats("A")]
    inputs = _inputs(example)
    _, weights = F.self_attention(
        inputs["X"], inputs["W_q"], inputs["W_k"], inputs["W_v"], return_weights=True
    )
    assert torch.allclose(torch.tensor(printed, dtype=torch.float64), weights, atol=5e-4, rtol=0)


def test_a_disagreement_stops_the_example(monkeypatch):
    real = F.self_attention

    def off_by_a_little(*args, **kwargs):  # the entry point the example calls: C, or (C, A)
        out = real(*args, **kwargs)
        return (out[0] + 1e-9, out[1]) if isinstance(out, tuple) else out + 1e-9

    monkeypatch.setattr(F, "self_attention", off_by_a_little)
    with pytest.raises(RuntimeError, match=r"worked example: torch and the declarations differ"):
        worked_example()


def test_the_causal_example_and_a_shorter_sentence():
    causal = worked_example(causal=True)
    a = causal.values.floats("A")
    assert all(a[m][p] == 0 for m in range(7) for p in range(m + 1, 7))
    assert all(causal.torch_a[m][p] == 0 for m in range(7) for p in range(m + 1, 7))
    short = worked_example(n=3, d=4, c=2)
    assert short.tokens == ("the", "fat", "cat") and (short.d, short.c) == (4, 2)
    with pytest.raises(ValueError, match=r"the worked example has 1 to 7 tokens, got n=8"):
        worked_example(n=8)
