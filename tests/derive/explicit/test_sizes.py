"""Bad sizes are refused with errors that name the argument and the value."""

import pytest

import derive
from derive.explicit.sizes import MAX_SIZE, check_size, check_sizes


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 0, "d": 3, "c": 2}, ValueError, r"n must be a positive int, got n=0"),  # zero
        ({"n": 5, "d": -1, "c": 2}, ValueError, r"d must be a positive int, got d=-1"),  # negative
        ({"n": 5, "d": 3, "c": 2.0}, TypeError, r"c must be a positive int, got 2\.0 \(float\)"),
        ({"n": True, "d": 3, "c": 2}, TypeError, r"n must be a positive int, got True \(bool\)"),
        ({"n": "5", "d": 3, "c": 2}, TypeError, r"n must be a positive int, got '5' \(str\)"),
        ({"n": 17, "d": 3, "c": 2}, ValueError, r"n=17 is over the limit of 16"),  # too large
    ],
)
def test_explicit_variant_refuses_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        derive.explicit_variant("self-attention", **kwargs)


@pytest.mark.parametrize(
    ("h", "error", "match"),
    [
        (3, ValueError, r"h=3 does not divide c=4"),
        (0, ValueError, r"h must be a positive int, got h=0"),
        (2.0, TypeError, r"h must be a positive int, got 2\.0 \(float\)"),
    ],
)
def test_a_variants_own_size_is_checked(h, error, match):
    with pytest.raises(error, match=match):
        derive.explicit_variant("multi-head", 5, 3, 4, h=h)


def test_limit_is_documented_constant():
    assert MAX_SIZE == 16
    assert check_size("n", MAX_SIZE) == 16
    with pytest.raises(ValueError, match=r"derive\.explicit\.MAX_SIZE"):
        check_size("n", MAX_SIZE + 1)


def test_numpy_integers_are_accepted():
    import numpy as np

    assert check_sizes(np.int64(5), 3, np.int32(4), 2) == (5, 3, 4, 2)


def test_a_mask_goes_to_a_variant_that_takes_one():
    with pytest.raises(ValueError, match=r"causal declares its own mask or none; a mask is given"):
        derive.explicit_variant("causal", 3, 2, 2, key_padding_mask=[True, False, True])
    with pytest.raises(ValueError, match=r"masked takes its mask as given: give mask= or"):
        derive.explicit_variant("masked", 3, 2, 2)
    causal = [[p <= m for p in range(3)] for m in range(3)]
    ea = derive.explicit_variant(
        "masked", 3, 2, 2, mask=causal, key_padding_mask=[1 > 0, 0 > 1, 1 > 0]
    )
    allowed = [[ea.A[m, p] != 0 for p in range(3)] for m in range(3)]
    assert allowed == [[True, False, False], [True, False, False], [True, False, True]]


@pytest.mark.parametrize(
    ("keyword", "mask", "match"),
    [
        ("mask", [True, False, True], r"mask must be booleans of shape \(3, 3\)"),  # one meaning
        ("mask", [[True, False, True]] * 2, r"mask must be booleans of shape \(3, 3\)"),
        ("mask", [[1, 0, 1]] * 3, r"mask must be booleans of shape \(3, 3\)"),  # ints
        ("key_padding_mask", [True, False], r"key_padding_mask must be booleans of shape \(3,\)"),
        ("key_padding_mask", [[True] * 3] * 3, r"key_padding_mask must be booleans of shape"),
    ],
)
def test_bad_masks_are_refused(keyword, mask, match):
    with pytest.raises(ValueError, match=match):
        derive.explicit_variant("masked", 3, 2, 2, **{keyword: mask})
