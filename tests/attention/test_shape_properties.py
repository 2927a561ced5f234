"""Shape checks as properties: for random sizes and a random wrong size in a random argument, the
error names that argument, the other argument it disagrees with, the letter, and both sizes."""

import re

import torch
from hypothesis import given
from hypothesis import strategies as st

from attention import ShapeError
from attention import functional as F

# (argument to corrupt, its axis, the letter there, the argument reported beside it).
# x is bound first, then w_q, w_k, w_v in order, so the message compares with the first binder.
CORRUPTIONS = [
    ("x", -1, "d", "w_q"),  # x's width: w_q disagrees with it
    ("w_q", 0, "d", "x"),
    ("w_k", 0, "d", "x"),
    ("w_v", 0, "d", "x"),
    ("w_q", 1, "c", "w_k"),  # w_q binds c first, so w_k disagrees with it
    ("w_k", 1, "c", "w_q"),
    ("w_v", 1, "c", "w_q"),
]


@st.composite
def corrupted_calls(draw):
    n, d, c = draw(st.lists(st.integers(1, 7), min_size=3, max_size=3, unique=True))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    name, axis, letter, other = draw(st.sampled_from(CORRUPTIONS))
    right = {"d": d, "c": c}[letter]
    wrong = draw(st.integers(1, 9).filter(lambda size: size != right))
    shapes = {"x": [*batch, n, d], "w_q": [d, c], "w_k": [d, c], "w_v": [d, c]}
    shapes[name][axis] = wrong
    tensors = {key: torch.zeros(shape) for key, shape in shapes.items()}
    return tensors, name, letter, other, right, wrong


@given(corrupted_calls())
def test_a_wrong_size_is_named(call):
    tensors, name, letter, other, right, wrong = call
    try:
        F.self_attention(tensors["x"], tensors["w_q"], tensors["w_k"], tensors["w_v"])
    except ShapeError as error:
        message = str(error)
    else:
        raise AssertionError(f"no error for {name} with {letter}={wrong}")
    if name == "x" or (letter == "c" and name == "w_q"):
        # the corrupted argument bound the letter first; the other one is reported against it
        expected = rf"self_attention: {other} has {letter}={right} but {name} has {letter}={wrong}"
    else:
        expected = rf"self_attention: {name} has {letter}={wrong} but {other} has {letter}={right}"
    assert re.search(expected, message), message


@given(
    sizes=st.lists(st.integers(1, 6), min_size=3, max_size=3, unique=True),
    heads=st.integers(2, 4),
)
def test_heads_that_do_not_divide_c_are_named(sizes, heads):
    n, d, c = sizes
    x, w = torch.zeros(n, d), torch.zeros(d, c)
    if c % heads == 0:
        out = F.multi_head_attention(x, w, w, w, torch.zeros(c, c), heads=heads)
        assert out.shape == (n, c)
        return
    try:
        F.multi_head_attention(x, w, w, w, torch.zeros(c, c), heads=heads)
    except ShapeError as error:
        assert f"c={c} (the width of w_q) is not divisible by heads={heads}" in str(error)
    else:
        raise AssertionError("no error")
