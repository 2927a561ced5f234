"""What bad input gets: errors that name the function, the argument, the letter and both sizes."""

import os
import subprocess
import sys

import jaxtyping
import pytest
import torch

from attention import DeviceError, DtypeError, ShapeError
from attention import functional as F

N, D, C = 5, 3, 2


def good(dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, D, generator=g, dtype=dtype)
    return x, *(torch.randn(D, C, generator=g, dtype=dtype) for _ in range(3))


def call_with(**changes):
    x, w_q, w_k, w_v = good()
    arguments = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, **changes}
    return F.self_attention(
        arguments.pop("x"),
        arguments.pop("w_q"),
        arguments.pop("w_k"),
        arguments.pop("w_v"),
        **arguments,
    )


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        # w_k has the wrong input width d
        ({"w_k": torch.randn(4, C)}, ShapeError, r"self_attention: w_k has d=4 but x has d=3"),
        # w_v has the wrong context width c
        ({"w_v": torch.randn(D, 7)}, ShapeError, r"self_attention: w_v has c=7 but w_q has c=2"),
        # X given as a vector, not a matrix
        ({"x": torch.randn(D)}, ShapeError, r"x must have shape \(\*batch, n, d\).*got 1 dim"),
        # a weight with a batch dimension
        ({"w_q": torch.randn(1, D, C)}, ShapeError, r"w_q must have shape \(d, c\).*got 3 dim"),
        # n = 0: no tokens
        ({"x": torch.randn(0, D)}, ShapeError, r"self_attention: x has n=0; every dimension"),
        # integer X
        (
            {"x": torch.ones(N, D, dtype=torch.int64)},
            DtypeError,
            r"x must be a floating-point .*int64",
        ),
        # bool weights
        (
            {"w_q": torch.ones(D, C, dtype=torch.bool)},
            DtypeError,
            r"w_q must be a floating-point .*bool",
        ),
        # float64 X with float32 weights: jaxtyping alone would let this reach torch
        (
            {"x": torch.randn(N, D, dtype=torch.float64)},
            DtypeError,
            r"w_q has dtype torch.float32 but x has torch.float64",
        ),
        # a weight on another device ("meta" stands in for a GPU on this CPU-only machine)
        ({"w_v": torch.randn(D, C, device="meta")}, DeviceError, r"w_v is on meta but x is on cpu"),
        # not a tensor at all
        (
            {"w_q": [[1.0, 2.0]] * D},
            TypeError,
            r"w_q must be a torch.Tensor of shape \(d, c\), got list",
        ),
        # a bias of the wrong width
        ({"b_q": torch.randn(3)}, ShapeError, r"b_q has c=3 but w_q has c=2"),
        # a float mask
        (
            {"mask": torch.ones(N, N)},
            DtypeError,
            r"mask must be a bool tensor \(True = may attend\)",
        ),
        # a mask for another sequence length: which n came from which argument
        (
            {"mask": torch.ones(N, N + 1, dtype=torch.bool)},
            ShapeError,
            r"self_attention: mask has n=6 but x has n=5 \(mask: shape \(5, 6\), expected \(\*batch, n, n\)\)",
        ),
        # key padding for another sequence length
        (
            {"key_padding_mask": torch.ones(N + 2, dtype=torch.bool)},
            ShapeError,
            r"self_attention: key_padding_mask has n=7 but x has n=5",
        ),
        # dropout probability of 1 or more
        ({"dropout_p": 1.0}, ValueError, r"dropout_p must be in \[0, 1\), got dropout_p=1.0"),
        # negative dropout
        ({"dropout_p": -0.1}, ValueError, r"dropout_p must be in \[0, 1\), got dropout_p=-0.1"),
        # a non-bool flag is caught by beartype
        ({"causal": "yes"}, TypeError, r"self_attention: causal must be bool, got 'yes'"),
    ],
)
def test_bad_input_is_named(changes, error, message):
    with pytest.raises(error, match=message):
        call_with(**changes)


def test_a_mask_s_batch_must_broadcast_to_x_s():
    x, w_q, w_k, w_v = good()
    xb = x.expand(2, N, D)
    with pytest.raises(
        ShapeError,
        match=r"mask has batch=\(3,\), which does not broadcast to "
        r"x's batch=\(2,\)",
    ):
        F.self_attention(xb, w_q, w_k, w_v, mask=torch.ones(3, N, N, dtype=torch.bool))
    with pytest.raises(
        ShapeError,
        match=r"key_padding_mask has batch=\(3,\), which does not "
        r"broadcast to x's batch=\(2,\)",
    ):
        F.self_attention(xb, w_q, w_k, w_v, key_padding_mask=torch.ones(3, N, dtype=torch.bool))


def test_step_functions_are_checked_too():
    q = torch.randn(N, C)
    with pytest.raises(ShapeError, match=r"scores: k has c=3 but q has c=2"):
        F.scores(q, torch.randn(N, 3))
    with pytest.raises(ShapeError, match=r"context: v has s=4 but a has s=5"):
        F.context(torch.randn(N, N), torch.randn(4, C))
    with pytest.raises(ShapeError, match=r"weights: omega must have shape \(\*batch, n, s\)"):
        F.weights(torch.randn(N), 2)
    # n queries against s keys is cross-attention's Ω; causal needs a square one
    with pytest.raises(
        ShapeError, match=r"weights: causal needs a square omega \(n = s\), got n=5, s=4"
    ):
        F.weights(torch.randn(N, 4), 2, causal=True)
    with pytest.raises(ShapeError, match=r"weights: mask has s=5 but omega has s=4"):
        F.weights(torch.randn(N, 4), 2, mask=torch.ones(N, N, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"scaled_scores: c must be a positive integer, got c=0"):
        F.scaled_scores(torch.randn(N, N), 0)
    with pytest.raises(ValueError, match=r"scaled_scores: c must be a positive number .*c=-1.5"):
        F.scaled_scores(torch.randn(N, N), -1.5)  # a config's number (query-scale), not a width


def test_multi_head_errors_name_heads_and_widths():
    x, w_q, w_k, w_v = good()
    w_o = torch.randn(C, 4)
    with pytest.raises(ShapeError, match=r"c=2 \(the width of w_q\) is not divisible by heads=3"):
        F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=3)
    with pytest.raises(ShapeError, match=r"w_o has c=3 but w_q has c=2"):
        F.multi_head_attention(x, w_q, w_k, w_v, torch.randn(3, 4), heads=1)
    with pytest.raises(ValueError, match=r"heads must be a positive integer, got heads=0"):
        F.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=0)


@pytest.fixture
def checks_off():
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", False)


def test_checks_off_gives_identical_results(checks_off):
    x, w_q, w_k, w_v = good()
    jaxtyping.config.update("jaxtyping_disable", False)
    checked = F.self_attention(x, w_q, w_k, w_v, causal=True, return_weights=True)
    jaxtyping.config.update("jaxtyping_disable", True)
    unchecked = F.self_attention(x, w_q, w_k, w_v, causal=True, return_weights=True)
    assert torch.equal(checked[0], unchecked[0]) and torch.equal(checked[1], unchecked[1])
    # ...and they really are off: a dtype mismatch now reaches torch, which fails its own way.
    with pytest.raises(RuntimeError) as caught:
        F.self_attention(x.double(), w_q, w_k, w_v)
    assert not isinstance(caught.value, DtypeError)


def test_environment_variable_turns_checks_off():
    program = (
        "import torch; from attention import functional as F\n"
        "x = torch.ones(5, 3, dtype=torch.int64); w = torch.ones(3, 2, dtype=torch.int64)\n"
        "print(F.projection(x, w).dtype)\n"
    )
    env = {**os.environ, "JAXTYPING_DISABLE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "torch.int64"  # no DtypeError: the integer product went through


def test_a_signature_that_passed_does_not_let_a_different_one_through():
    # Checks remember signatures that passed (shapes, dtypes, devices, types); anything that
    # differs is checked again in full.
    x, w_q, w_k, w_v = good()
    F.self_attention(x, w_q, w_k, w_v)
    F.self_attention(x, w_q, w_k, w_v)  # remembered
    with pytest.raises(DtypeError, match=r"w_k has dtype torch.float64 but x has torch.float32"):
        F.self_attention(x, w_q, w_k.double(), w_v)
    with pytest.raises(ShapeError, match=r"w_v has c=3 but w_q has c=2"):
        F.self_attention(x, w_q, w_k, torch.randn(D, 3))
    with pytest.raises(TypeError, match=r"causal must be bool, got 1"):
        F.self_attention(x, w_q, w_k, w_v, causal=1)


def test_an_unknown_keyword_names_the_function():
    x, w_q, w_k, w_v = good()
    with pytest.raises(
        TypeError, match=r"^self_attention: got an unexpected keyword argument 'scale'"
    ):
        F.self_attention(x, w_q, w_k, w_v, scale=2.0)
