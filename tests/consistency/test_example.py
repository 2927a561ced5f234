"""The worked example: torch computes it, the symbolic formulas reproduce it."""

import pytest
import torch

from attention import functional as F
from derive import DocumentOptions, latex_document
from derive._example import TOKENS, TOLERANCE, worked_example


@pytest.fixture(scope="module")
def example():
    return worked_example()


def test_tokens_and_shapes(example):
    assert example.tokens == ("the", "fat", "cat", "sat", "on", "the", "mat")
    assert len(example.inputs["X"]) == len(TOKENS) == 7
    assert (example.d, example.c) == (4, 3)


def test_symbolic_values_reproduce_torch(example):
    assert example.max_error <= TOLERANCE
    for row_s, row_t in zip(example.values.A.tolist(), example.torch_a, strict=True):
        assert all(abs(float(s) - t) <= TOLERANCE for s, t in zip(row_s, row_t, strict=True))


def test_inputs_are_seeded_and_the_two_thes_differ_by_position(example):
    again = worked_example()
    assert again.inputs == example.inputs
    x = example.inputs["X"]
    assert x[0] != x[5]  # "the" twice: same token embedding, different position embedding


def test_torch_recomputes_the_same_weights(example):
    x, w_q, w_k, w_v = (
        torch.tensor(example.inputs[name], dtype=torch.float64)
        for name in ("X", "W_q", "W_k", "W_v")
    )
    _, a = F.self_attention(x, w_q, w_k, w_v, return_weights=True)
    assert a.tolist() == example.torch_a


def test_causal_example_is_lower_triangular():
    causal = worked_example(causal=True)
    assert all(causal.torch_a[m][p] == 0 for m in range(7) for p in range(m + 1, 7))
    assert causal.max_error <= TOLERANCE


def test_document_shows_the_torch_numbers(example):
    tex = latex_document(DocumentOptions(example=True), example=example)
    first_row = " & ".join(f"{value:.3f}" for value in example.torch_a[0])
    assert f"the (1) & {first_row}" in tex
    assert "Attention weights $A$ computed by PyTorch" in tex
    assert "Attention weights $A$ computed by SymPy" in tex
