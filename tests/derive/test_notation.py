"""The seed's letters, created once and shared."""

import sympy as sp

from derive import _notation as N


def test_entries_are_one_based_and_shared():
    x = N.entries("x", 5, 3)
    assert x.shape == (5, 3)
    assert x[0, 0] == N.base("x")[1, 1]
    assert x[4, 2] == N.base("x")[5, 3]
    assert N.entries("x", 5, 3) is x  # the same symbols on every call (gradients reuse them)


def test_context_entries_do_not_collide_with_the_size_c():
    ctx = N.entries("ctx", 2, 2)
    assert N.c not in ctx.free_symbols
    assert ctx.xreplace({N.c: 7}) == ctx


def test_head_entries_carry_the_head_first():
    omega = N.head_entries("omega", 2, 3, 3)
    assert omega[0, 1] == N.base("omega")[2, 1, 2]


def test_sizes_are_positive_integers():
    for size in (N.n, N.d, N.c, N.h, N.c_h):
        assert size.is_integer and size.is_positive
    assert sp.sqrt(N.c).is_positive


def test_unknown_letter_is_refused():
    import pytest

    with pytest.raises(ValueError, match=r"unknown entry letter 'z'"):
        N.base("z")
