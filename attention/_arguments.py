"""Checks of the arguments that are not tensors: sizes, rates, flags, windows. Each raises a
ValueError (TypeError for a flag) that names the function, the argument and the value."""

__all__ = [
    "check_positive",
    "check_float_dtype",
    "check_window",
    "check_probability",
    "check_flag",
    "check_heads",
    "check_cap",
    "check_alibi",
    "check_per_head",
    "check_offset",
    "check_finite",
]

import math

#: The largest size an argument may have (a tensor's dimension is a signed 64-bit integer).
_LARGEST = 2**62


def check_positive(where: str, **sizes: int) -> None:
    """Each size must be an int (not a bool) of at least 1; ValueError naming it otherwise."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name} must be a positive integer, got {name}={value!r}")
        if value > _LARGEST:  # no tensor has that many entries, and 1/√c would overflow
            raise ValueError(
                f"{where}: {name} is too large, a number of {len(str(value))} "
                f"digits (at most 2**62)"
            )


def check_float_dtype(where: str, dtype: object) -> None:
    """A dtype to compute or store in: None or a real floating-point torch.dtype (float16,
    bfloat16, float32, float64); TypeError naming it otherwise (an integer, bool or complex one)."""
    import torch

    if dtype is None:
        return
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"{where}: dtype must be a floating-point torch.dtype (float32, float64, bfloat16, "
            f"float16), got dtype={dtype!r}"
        )


def check_window(where: str, name: str, window: object, causal: bool = True) -> None:
    """A window must be None or a positive int (not a bool), and needs causal; ValueError."""
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(
            f"{where}: {name} must be a positive integer or None, got {name}={window!r}"
        )
    if not causal:
        raise ValueError(
            f"{where}: {name}={window} needs causal=True (query m attends key p iff 0 ≤ m − p < w)"
        )


def check_offset(where: str, offset: object, *, name: str = "offset") -> None:
    """A position offset (the tokens before these, after a cache), the argument `name`: an
    integer (a Python int, a NumPy integer, a 0-d integer tensor; not a bool), TypeError naming
    it otherwise; at least 0, ValueError otherwise."""
    import operator

    try:
        if isinstance(offset, bool):
            raise TypeError
        value = operator.index(offset)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{where}: {name} must be an int, got {name}={offset!r}") from None
    if value < 0:
        raise ValueError(f"{where}: {name} must be a non-negative int, got {name}={offset!r}")


def check_finite(where: str, name: str, value: object) -> None:
    """A finite number (not a bool); ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: {name} must be a finite number, got {name}={value!r}")


def check_probability(where: str, **rates: float) -> None:
    """Each rate (a dropout probability) must be a number in [0, 1); ValueError otherwise."""
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
            raise ValueError(f"{where}: {name} must be in [0, 1), got {name}={value!r}")


def check_flag(where: str, **flags: bool) -> None:
    """Each flag must be a bool (`qkv_bias='no'` would otherwise create biases); TypeError."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{where}: {name} must be a bool, got {name}={value!r}")


def check_heads(where: str, num_heads: int, name: str = "d_out", **width: int) -> None:
    """ValueError unless num_heads divides the width given as `name=` (each head gets
    width / num_heads columns): ``check_heads(where, num_heads, d_out=d_out)``."""
    total = width[name]
    if total % num_heads:
        raise ValueError(
            f"{where}: {name}={total} is not divisible by num_heads={num_heads}; "
            f"each head needs width {name} / num_heads"
        )


def check_cap(where: str, name: str, value: object) -> None:
    """A cap (softcapping's), or a query scale's `query_pre_attn_scalar`: None or a positive
    finite number (not a bool); ValueError."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{where}: {name} must be a positive number or None, got {name}={value!r}")


def check_per_head(where: str, name: str, value: object, heads: int, what: str) -> None:
    """A tensor of one number per head (`what`: "slope", "sink"), or None: shape (heads,), float;
    ShapeError or TypeError naming it."""
    from torch import Tensor

    from ._shapes import ShapeError

    if value is None:
        return
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{where}: {name} must be a tensor of one {what} per head, got {type(value).__name__}"
        )
    if value.shape != (heads,):
        raise ShapeError(
            f"{where}: {name} has shape {tuple(value.shape)} but there are heads={heads}; "
            f"give one {what} per head"
        )
    if not value.is_floating_point():
        raise TypeError(f"{where}: {name} must be a float tensor, got dtype {value.dtype}")


def check_gate(where: str, w_g: object, b_g: object) -> None:
    """The output gate's bias needs its weight: ValueError for b_g without w_g."""
    if b_g is not None and w_g is None:
        raise ValueError(f"{where}: b_g is the bias of the output gate; give w_g with it")


def check_alibi(where: str, alibi: object, heads: int, causal: bool = True) -> None:
    """ALiBi's argument: False, True (the default slopes) or one slope per head, a float
    tensor of shape (heads,); with causal attention only (the bias −μ (m − p) of a key p ≤ m).
    ValueError, or ShapeError for slopes of another shape."""
    from torch import Tensor  # the argument checks import nothing heavy until a tensor comes

    if alibi is False:
        return
    if isinstance(alibi, Tensor):
        check_per_head(where, "alibi", alibi, heads, "slope")
    elif alibi is not True:
        raise TypeError(f"{where}: alibi must be a bool or a tensor of slopes, got alibi={alibi!r}")
    if not causal:
        raise ValueError(
            f"{where}: alibi needs causal=True (the bias −μ_ℓ (m − p) of ALiBi is for the keys "
            f"p ≤ m)"
        )
