"""The book's letters, created once and shared; one letter, one meaning."""

import pytest
import sympy as sp

from derive.notation import latex
from derive.notation import letters as L


def test_entries_are_one_based_and_shared():
    x = L.entries("x", 5, 3)
    assert x.shape == (5, 3)
    assert x[0, 0] == L.base("x")[1, 1]
    assert x[4, 2] == L.base("x")[5, 3]
    assert L.entries("x", 5, 3) is x  # the same symbols on every call (gradients reuse them)


def test_context_entries_are_z_and_never_the_width_c():
    z = L.entries("ctx", 2, 2)
    assert L.c not in z.free_symbols
    assert latex(z[0, 1]) == "z_{1,2}"
    assert latex(L.c) == "c"


def test_gradients_carry_a_bar_never_a_d():
    assert latex(L.base("dwq")[L.i, L.j]) == r"(\bar{W}_q)_{i,j}"
    assert latex(L.base("dctx")[L.m, L.j]) == r"\bar{z}_{m,j}"
    assert latex(L.base("domegatilde")[L.m, L.p]) == r"\bar{\tilde{\omega}}_{m,p}"
    assert latex(L.matrix_symbol("dW_q", L.d, L.c)) == r"\bar{W}_q"
    assert all(not tex.startswith("d") for tex in L.MATRIX_LATEX.values())


def test_the_shift_is_lambda_and_t_is_a_token():
    assert latex(L.lam) == r"\lambda"
    assert L.t.is_integer and L.t.is_positive
    assert not L.lam.is_integer


def test_head_entries_carry_the_head_first():
    omega = L.head_entries("omega", 2, 3, 3)
    assert omega[0, 1] == L.base("omega")[2, 1, 2]
    assert L.letter_of(omega[0, 1]) == "Omega_l"


def test_sizes_are_positive_integers():
    for size in L.SIZES:
        assert size.is_integer and size.is_positive
    assert sp.sqrt(L.c).is_positive


def test_unknown_letter_is_refused():
    with pytest.raises(ValueError, match=r"unknown entry letter 'xi'"):
        L.base("xi")


def test_reading_order_sorts_indices_numerically():
    x = L.base("x")
    assert sorted([x[1, 10], x[1, 2]], key=L.reading_key) == [x[1, 2], x[1, 10]]
