"""Bad sizes are refused with errors that name the argument and the value."""

import pytest

import derive
from derive.explicit.sizes import check_size, check_sizes


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 0, "d": 3, "c": 2}, ValueError, r"n must be a positive int, got n=0"),  # zero
        ({"n": 5, "d": -1, "c": 2}, ValueError, r"d must be a positive int, got d=-1"),  # negative
        ({"n": 5, "d": 3, "c": 2.0}, TypeError, r"c must be a positive int, got 2\.0 \(float\)"),
        ({"n": True, "d": 3, "c": 2}, TypeError, r"n must be a positive int, got True \(bool\)"),
        ({"n": "5", "d": 3, "c": 2}, TypeError, r"n must be a positive int, got '5' \(str\)"),
        ({"n": 17, "d": 3, "c": 2}, ValueError, r"n=17 is over the limit of 16"),  # too large
        ({"n": 5, "d": 3, "c": 4, "heads": 3}, ValueError, r"heads must divide c: got heads=3"),
        ({"n": 5, "d": 3, "c": 4, "heads": 0}, ValueError, r"heads must be a positive int"),
    ],
)
def test_explicit_attention_refuses_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        derive.explicit_attention(**kwargs)


def test_limit_is_documented_constant():
    assert derive.MAX_SIZE == 16
    assert check_size("n", derive.MAX_SIZE) == 16
    with pytest.raises(ValueError, match=r"derive\.MAX_SIZE"):
        check_size("n", derive.MAX_SIZE + 1)


def test_numpy_integers_are_accepted():
    import numpy as np

    assert check_sizes(np.int64(5), 3, np.int32(4), 2) == (5, 3, 4, 2)


def test_causal_must_be_bool_and_combines_with_masks():
    with pytest.raises(TypeError, match=r"causal must be a bool, got 1"):
        derive.explicit_attention(3, 2, 2, causal=1)
    ea = derive.explicit_attention(3, 2, 2, causal=True, key_padding_mask=[True, False, True])
    assert ea.allowed == [[True, False, False], [True, False, False], [True, False, True]]


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
        derive.explicit_attention(3, 2, 2, **{keyword: mask})
