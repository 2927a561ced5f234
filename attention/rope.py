"""Rotary position embeddings (RoPE), as the book's Llama 3 and Qwen 3 apply them.

Each head's query and key at position m (0-based; plus `offset` when decoding) is rotated pair
by pair: feature j is paired with feature j + c/2 (the book's "rotate half"), and the pair i
turns by the angle m·θ_i with

$$\\theta_i = \\beta^{-2i/c},\\qquad i = 0, \\dots, c/2 - 1,$$

β = `theta_base`. With x₁ = x[..., :c/2], x₂ = x[..., c/2:] and the angles repeated for both
halves (cos, sin: (positions, c)):

$$\\operatorname{rope}(x) = \\big[x_1 \\cos - x_2 \\sin \\;\\big|\\; x_2 \\cos + x_1 \\sin\\big]
  = x \\circ \\cos + (x R) \\circ \\sin,\\qquad x R = [-x_2 \\,|\\, x_1].$$

The same rotation at every position leaves q·k depending on the positions only through their
difference. Equal to the book's `llama3.compute_rope_params` / `qwen3.compute_rope_params` and
`apply_rope` (Llama 3.1's frequency smoothing included, through `freq_config`); checked at runtime
like `attention.functional`.

`freq_config` also takes linear position interpolation (Chen et al., 2023, "Extending Context
Window of Large Language Models via Positional Interpolation"; Hugging Face's ``"rope_type":
"linear"``): every frequency divided by the factor s, the positions m read as m/s. And it takes
YaRN's rope scaling (Peng et al., 2023, "YaRN: Efficient Context Window
Extension of Large Language Models", §3.2 to §3.4; GPT-OSS, DeepSeek V3, Qwen's long contexts),
with the keys of Hugging Face's ``rope_parameters`` (``"rope_type": "yarn"``, or recognised by
``beta_fast``): the pairs i whose index is past the correction range are divided by the factor s,
those before it kept, and a linear ramp in i blends them between; and cos and sin are multiplied
by the attention factor (0.1 ln s + 1 by default), so that every score is multiplied by its
square. The ramp runs over the pair index, as the paper's code and transformers'
(``_compute_yarn_parameters``) compute it, between the indices where a pair turns β_fast and
β_slow times over the original context L (the paper states the ramp in the number of turns
L/λ_i; both are 0 and 1 at the same ends).
"""

import math
import typing
from collections.abc import Mapping

import torch
from jaxtyping import Float
from torch import Tensor

from ._arguments import check_float_dtype, check_offset, check_positive
from ._checks import checked
from ._shapes import OwnDtype, ShapeError

__all__ = ["compute_rope_params", "rope_frequencies", "rotate_half", "apply_rope", "rope_rotation"]

#: A `freq_config`: Llama 3.1's numbers, or YaRN's (with its flag ``truncate`` and its
#: ``rope_type``).
FreqConfig = Mapping[str, float | bool | str | None]

#: The keys of Llama 3.1's `freq_config` (the book's `LLAMA32_CONFIG_1B["rope_freq"]`).
FREQ_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_context_length")
#: YaRN's keys (Hugging Face's ``rope_parameters`` of ``rope_type: "yarn"``): the two required,
#: then the optional ones with transformers' defaults (the attention factor's, None: from the
#: factor, `attention_factor`).
YARN_KEYS = ("factor", "original_max_position_embeddings")
YARN_DEFAULTS = {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": True,
    "attention_factor": None,
    "mscale": None,
    "mscale_all_dim": None,
}


def is_yarn(freq_config: FreqConfig | None) -> bool:
    """Whether `freq_config` is YaRN's: its ``rope_type`` says so, or it names none and has
    ``beta_fast``."""
    if freq_config is None:
        return False
    kind = freq_config.get("rope_type")
    return kind == "yarn" or (kind is None and "beta_fast" in freq_config)


def is_linear(freq_config: FreqConfig | None) -> bool:
    """Whether `freq_config` is linear position interpolation's (``"rope_type": "linear"``)."""
    return freq_config is not None and freq_config.get("rope_type") == "linear"


def _check_linear(freq_config: FreqConfig) -> None:
    """Position interpolation's freq_config: its factor, positive; no key it does not read."""
    _check_known(freq_config, "linear scaling's freq_config", ("factor",))
    _check_above_zero(freq_config, "linear scaling's freq_config", ("factor",))


def _check_keys(freq_config: FreqConfig, keys: tuple[str, ...], whose: str) -> None:
    """`keys` all in `freq_config`; a ValueError naming the missing ones otherwise."""
    missing = [key for key in keys if key not in freq_config]
    if missing:
        raise ValueError(
            f"compute_rope_params: {whose} needs the keys {', '.join(keys)}; "
            f"missing {', '.join(missing)}"
        )


#: Keys of Hugging Face's ``rope_parameters`` a scaling's freq_config may hold beside its own.
_ANY_SCALING = ("rope_type", "rope_theta", "partial_rotary_factor")


def _check_known(
    freq_config: FreqConfig, whose: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    """A scaling's freq_config: its `required` keys present, and no key but those, its
    `optional` ones and `_ANY_SCALING`; a ValueError naming them otherwise."""
    _check_keys(freq_config, required, whose)
    unknown = sorted(set(freq_config) - {*required, *optional, *_ANY_SCALING})
    if unknown:
        raise ValueError(
            f"compute_rope_params: {whose} has no key {', '.join(unknown)}; it takes "
            f"{', '.join((*required, *optional))}"
        )


def _check_above_zero(freq_config: FreqConfig, whose: str, keys: tuple[str, ...]) -> None:
    for key in keys:
        if not _number(freq_config, key) > 0:
            raise ValueError(
                f"compute_rope_params: {whose} needs {key} > 0, got {freq_config[key]}"
            )


def _check_yarn(freq_config: FreqConfig) -> None:
    _check_known(freq_config, "YaRN's freq_config", YARN_KEYS, tuple(YARN_DEFAULTS))
    fast, slow = _number(freq_config, "beta_fast"), _number(freq_config, "beta_slow")
    if not fast > slow > 0:
        raise ValueError(
            f"compute_rope_params: YaRN's freq_config needs beta_fast > beta_slow > 0, got "
            f"beta_fast={fast}, beta_slow={slow}"
        )
    _check_above_zero(freq_config, "YaRN's freq_config", YARN_KEYS)


def _number(freq_config: FreqConfig, key: str) -> float:
    """A number of `freq_config` (a flag as 0 or 1), YaRN's default where it is absent or None
    (transformers' reading)."""
    found = freq_config.get(key)
    found = YARN_DEFAULTS.get(key) if found is None else found
    return float(typing.cast(float, found))


def _mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's 0.1 · mscale · ln s + 1 (the paper's eq. 22, √(1/t)), 1 for s ≤ 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def attention_factor(freq_config: FreqConfig | None) -> float:
    """What YaRN multiplies cos and sin by: ``attention_factor`` where it is given, else
    0.1 ln s + 1 of the factor s, or with DeepSeek's ``mscale`` and ``mscale_all_dim`` the
    ratio of the two (1 where they are equal); 1 for other rotations."""
    if not is_yarn(freq_config):
        return 1.0
    assert freq_config is not None
    if freq_config.get("attention_factor") is not None:
        return _number(freq_config, "attention_factor")
    factor = _number(freq_config, "factor")
    if freq_config.get("mscale") and freq_config.get("mscale_all_dim"):
        mscale, every = _number(freq_config, "mscale"), _number(freq_config, "mscale_all_dim")
        return _mscale(factor, mscale) / _mscale(factor, every)
    return _mscale(factor)


def correction_range(width: int, theta_base: float, freq_config: FreqConfig):
    """(a, b): the pair indices where a pair of frequency β^{−2i/c} turns beta_fast and
    beta_slow times over the original context L, i = c ln(L / (2π β_·)) / (2 ln β); rounded
    outwards (floor, ceil) unless ``truncate`` is false; held within [0, c − 1]."""
    length = _number(freq_config, "original_max_position_embeddings")

    def index(turns: float) -> float:
        return width * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(theta_base))

    low, high = index(_number(freq_config, "beta_fast")), index(_number(freq_config, "beta_slow"))
    if _number(freq_config, "truncate"):
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, width - 1)


def _yarn_frequencies(theta: Tensor, theta_base: float, freq_config: FreqConfig):
    """YaRN's frequencies: θ_i (1 − γ_i) + (θ_i / s) γ_i with the ramp
    γ_i = clamp((i − a) / (b − a), 0, 1) over the correction range (a, b)."""
    width = 2 * theta.shape[-1]
    low, high = correction_range(width, theta_base, freq_config)
    if low == high:  # transformers' guard against a range of one index
        high += 0.001
    index = torch.arange(theta.shape[-1], dtype=theta.dtype)
    ramp = ((index - low) / (high - low)).clamp(0, 1)
    return theta * (1 - ramp) + theta / _number(freq_config, "factor") * ramp


def even_width(where: str, name: str, width: int) -> None:
    if width % 2:
        raise ShapeError(
            f"{where}: {name}={width} is odd; RoPE rotates pairs of features (j, j + c/2), "
            f"so the width must be even"
        )


def _check_freq_config(freq_config: FreqConfig) -> None:
    _check_keys(freq_config, FREQ_KEYS, "freq_config")
    low, high = _number(freq_config, "low_freq_factor"), _number(freq_config, "high_freq_factor")
    if not high > low:
        raise ValueError(
            f"compute_rope_params: freq_config needs high_freq_factor > low_freq_factor, "
            f"got high_freq_factor={high}, low_freq_factor={low}"
        )


def _smoothed(theta: Tensor, freq_config: FreqConfig) -> Tensor:
    """Llama 3.1's frequencies: with wavelength λ_i = 2π/θ_i and L = original_context_length,
    θ_i/factor where λ_i > L/low_freq_factor (slow pairs), θ_i where λ_i < L/high_freq_factor
    (fast pairs), and between them (1 − s_i)·θ_i/factor + s_i·θ_i with
    s_i = (L/λ_i − low_freq_factor) / (high_freq_factor − low_freq_factor)."""
    length, factor = _number(freq_config, "original_context_length"), _number(freq_config, "factor")
    low, high = _number(freq_config, "low_freq_factor"), _number(freq_config, "high_freq_factor")
    wavelength = 2 * math.pi / theta
    s = (length / wavelength - low) / (high - low)
    between = (1 - s) * (theta / factor) + s * theta
    slow = torch.where(wavelength > length / low, theta / factor, theta)
    return torch.where((wavelength <= length / low) & (wavelength >= length / high), between, slow)


@checked
def rope_frequencies(
    head_dim: int,
    theta_base: float = 10_000,
    freq_config: FreqConfig | None = None,
    dtype: torch.dtype = torch.float32,
) -> Float[Tensor, " half"]:
    """The c/2 frequencies $\\theta_i = \\beta^{-2i/c}$, i = 0 … c/2 − 1 (smoothed as Llama 3.1's
    when `freq_config` is given, or as YaRN's when it is YaRN's: see the module docstring);
    computed in float64 for float64, else in float32.

    Args:
        head_dim: c, the width of a head; even.
        theta_base: β, the base of the frequencies.
        freq_config: Llama 3.1's smoothing (the keys factor, low_freq_factor, high_freq_factor,
            original_context_length), YaRN's scaling (Hugging Face's `rope_parameters`, with
            `"rope_type": "yarn"` or `beta_fast`) or linear position interpolation
            (`{"rope_type": "linear", "factor": s}`); None: the plain frequencies.
        dtype: the result's dtype, a floating-point one.

    Returns:
        θ, `(c/2,)`, in `dtype`.

    Raises:
        ValueError: when head_dim is not a positive int, theta_base is not positive, or
            freq_config lacks a key or holds a value out of its range.
        ShapeError: when head_dim is odd.
        TypeError: when dtype is not a floating-point torch.dtype.

    >>> rope_frequencies(4, theta_base=100)
    tensor([1.0000, 0.1000])
    """
    check_positive("rope_frequencies", head_dim=head_dim)
    check_float_dtype("rope_frequencies", dtype)
    even_width("rope_frequencies", "head_dim", head_dim)
    if not theta_base > 0:
        raise ValueError(f"rope_frequencies: theta_base must be positive, got {theta_base!r}")
    exact = torch.float64 if dtype == torch.float64 else torch.float32
    exponents = torch.arange(0, head_dim, 2, dtype=exact) / head_dim  # 2i / c
    theta = 1.0 / (theta_base**exponents)
    if is_yarn(freq_config):
        assert freq_config is not None
        _check_yarn(freq_config)
        theta = _yarn_frequencies(theta, theta_base, freq_config)
    elif is_linear(freq_config):  # position interpolation: every position divided by s
        assert freq_config is not None
        _check_linear(freq_config)
        theta = theta / _number(freq_config, "factor")
    elif freq_config is not None:
        _check_freq_config(freq_config)
        theta = _smoothed(theta, freq_config)
    return theta.to(dtype)


@checked
def compute_rope_params(
    head_dim: int,
    theta_base: float = 10_000,
    context_length: int = 4096,
    freq_config: FreqConfig | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Float[Tensor, "n_ctx c"], Float[Tensor, "n_ctx c"]]:
    """(cos, sin) of the angles m·θ_i for positions m = 0 … context_length − 1, each pair's angle
    written twice (columns i and i + c/2): the book's `compute_rope_params` (llama3's signature;
    qwen3's is the same without `freq_config`).

    Computed in float32 (float64 when `dtype` is float64: then the frequencies are exact to
    float64, where the book's rounds them to float32), returned in `dtype`.

    Args:
        head_dim: c, the width of a head (or of its rotated part); even.
        theta_base: β, the base of the frequencies θ_i = β^(−2i/c).
        context_length: n_ctx, the positions the tables cover.
        freq_config: Llama 3.1's smoothing (the keys factor, low_freq_factor, high_freq_factor,
            original_context_length), YaRN's scaling (Hugging Face's `rope_parameters`, with
            `"rope_type": "yarn"` or `beta_fast`; cos and sin then carry its attention factor)
            or linear position interpolation (`{"rope_type": "linear", "factor": s}`); None: the
            plain frequencies.
        dtype: the tables' dtype, a floating-point one.

    Returns:
        (cos, sin), each `(context_length, head_dim)`.

    Raises:
        ValueError: when head_dim or context_length is not a positive int, theta_base is not
            positive, or freq_config lacks a key or holds a value out of its range.
        ShapeError: when head_dim is odd.
        TypeError: when dtype is not a floating-point torch.dtype.

    >>> cos, sin = compute_rope_params(head_dim=4, context_length=3)
    >>> cos.shape, sin[1]
    (torch.Size([3, 4]), tensor([0.8415, 0.0100, 0.8415, 0.0100]))
    """
    check_positive("compute_rope_params", head_dim=head_dim, context_length=context_length)
    check_float_dtype("compute_rope_params", dtype)
    even_width("compute_rope_params", "head_dim", head_dim)
    exact = torch.float64 if dtype == torch.float64 else torch.float32
    theta = rope_frequencies(head_dim, theta_base, freq_config, exact)  # not rounded to dtype
    positions = torch.arange(context_length, dtype=exact)
    angles = positions[:, None] * theta.to(exact)[None, :]  # (n_ctx, 1) · (1, c/2) -> (n_ctx, c/2)
    angles = torch.cat([angles, angles], dim=1)  # pair i at columns i and i + c/2 -> (n_ctx, c)
    factor = attention_factor(freq_config)  # YaRN's; 1 otherwise
    if factor == 1.0:
        return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)
    return (torch.cos(angles) * factor).to(dtype), (torch.sin(angles) * factor).to(dtype)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # [x1 | x2] -> [-x2 | x1]


def rotate(x: Tensor, cos: Tensor, sin: Tensor, offset: int = 0) -> Tensor:
    """Unchecked RoPE (the modules call it after their own checks): x (..., n, c), cos and sin
    (..., ≥ offset + n, r) with r ≤ c: the first r features rotated (partial RoPE, Qwen 3.5's
    `partial_rotary_factor`), the others passed through; computed in the promoted dtype of x and
    the tables, returned in x's."""
    n, rotated = x.shape[-2], cos.shape[-1]
    cos, sin = cos[..., offset : offset + n, :], sin[..., offset : offset + n, :]  # -> (n, r)
    if rotated == x.shape[-1]:
        return (x * cos + _rotate_half(x) * sin).to(x.dtype)
    part = x[..., :rotated]
    turned = (part * cos + _rotate_half(part) * sin).to(x.dtype)
    return torch.cat([turned, x[..., rotated:]], dim=-1)


@checked
def rotate_half(x: Float[Tensor, "*batch n c"]) -> Float[Tensor, "*batch n c"]:
    """$x R = [-x_2 \\,|\\, x_1]$: the halves swapped, the new first half negated (R is the c×c
    matrix with $R_{j', j} = \\delta_{j', j - c/2} - \\delta_{j', j + c/2}$).

    Args:
        x: `(*batch, n, c)`, c even.

    Returns:
        x R, `(*batch, n, c)`.

    Raises:
        ShapeError: when c is odd.

    >>> rotate_half(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    tensor([[-3., -4.,  1.,  2.]])
    """
    even_width("rotate_half", "c", x.shape[-1])
    return _rotate_half(x)


@checked
def apply_rope(
    x: Float[Tensor, "*batch n c"],
    cos: OwnDtype[Float[Tensor, "n_ctx c_r"]],
    sin: OwnDtype[Float[Tensor, "n_ctx c_r"]],
    offset: int = 0,
) -> Float[Tensor, "*batch n c"]:
    """Rotate each row of x by its position: row m (0-based) by the angles of position
    offset + m, $x \\circ \\cos + (x R) \\circ \\sin$ (see the module docstring). The book's
    `apply_rope(x, cos, sin)` is offset 0 on `(b, h, n, c_h)`.

    Args:
        x: queries or keys, `(*batch, n, c)` (per head: c = c_h).
        cos: the cosines from `compute_rope_params`, `(n_ctx, c)` with n_ctx ≥ offset + n, or
            `(n_ctx, c_r)` with an even c_r < c to rotate only the first c_r features (partial
            RoPE: GPT-NeoX, Qwen 3.5); in any float dtype (float32 tables with bfloat16 x, as
            the book's models have them).
        sin: the sines, of cos's shape.
        offset: the position of x's first row: the tokens before it, when a block of new
            tokens follows cached ones.

    Returns:
        The rotated x, `(*batch, n, c)`, computed in the promoted dtype of x and the tables,
            returned in x's.

    Raises:
        ShapeError: when cos and sin have more columns than x, an odd number of them, fewer
            than offset + n rows, or shapes that differ.
        ValueError: when offset is negative.
        TypeError: when offset is not an int.
        DtypeError: when x, cos or sin is not a float tensor.

    >>> cos, sin = compute_rope_params(head_dim=2, theta_base=10_000, context_length=8)
    >>> apply_rope(torch.tensor([[1.0, 0.0]]), cos, sin, offset=1)  # (cos 1, sin 1)
    tensor([[0.5403, 0.8415]])
    """
    n, width = x.shape[-2], x.shape[-1]
    if cos.shape[-1] > width:
        raise ShapeError(
            f"apply_rope: cos and sin have c_r={cos.shape[-1]} columns but x has c={width}; "
            "they rotate at most x's features"
        )
    even_width("apply_rope", "c_r (the columns of cos and sin)", cos.shape[-1])
    check_offset("apply_rope", offset)
    if cos.shape[0] < offset + n:
        raise ShapeError(
            f"apply_rope: cos and sin have n_ctx={cos.shape[0]} positions but x needs "
            f"offset + n = {offset} + {n} = {offset + n}; compute them with a larger "
            f"context_length"
        )
    return rotate(x, cos, sin, offset)


@checked
def rope_rotation(
    x: Float[Tensor, "*batch n c"],
    *,
    theta_base: float = 10_000,
    rotated: int | None = None,
    interleaved: bool = False,
    freq_config: FreqConfig | None = None,
) -> Float[Tensor, "*batch n c"]:
    """Rotate each row of x by its position 0 … n − 1 with the book's tables at x's width and
    length: ``apply_rope(x, *compute_rope_params(c, theta_base, n))`` (the twin of the step
    `apply_rope` of `derive`, whose angles and rotation are declared, not given).

    Args:
        x: queries or keys, `(*batch, n, c)`.
        theta_base: β, the base of the frequencies.
        rotated: rotate only the first `rotated` features (even), with the tables of that width,
            and pass the others on (partial RoPE); None: all c (then c must be even).
        interleaved: pair feature 2i with 2i + 1 (0-based; the RoPE paper's, GPT-J's and GLM's
            layout), each pair turning by the angle the book's layout gives the pair
            (i, i + c/2); False: the book's pairs (i, i + c/2).
        freq_config: Llama 3.1's or YaRN's frequencies (`compute_rope_params`); None: the plain
            ones.

    Returns:
        The rotated x, `(*batch, n, c)`, in x's dtype.

    Raises:
        ShapeError: when the rotated width is odd, or rotated is not an int from 1 to c.
        ValueError: when theta_base is not positive, or freq_config lacks a key or holds a
            value out of its range.

    >>> rope_rotation(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))  # position 1: (cos 1, sin 1)
    tensor([[1.0000, 0.0000],
            [0.5403, 0.8415]])
    >>> rope_rotation(torch.tensor([[1.0, 0.0, 5.0], [1.0, 0.0, 5.0]]), rotated=2)
    tensor([[1.0000, 0.0000, 5.0000],
            [0.5403, 0.8415, 5.0000]])
    """
    n, width = x.shape[-2], x.shape[-1]
    turned = check_rotated("rope_rotation", width, rotated, "rotated")
    cos, sin = compute_rope_params(
        turned, theta_base=theta_base, context_length=n, freq_config=freq_config, dtype=x.dtype
    )
    if not interleaved:
        return rotate(x, cos, sin)
    half = turned // 2
    cos, sin = (t[:, :half].repeat_interleave(2, dim=-1) for t in (cos, sin))  # (n, r): a a b b
    part = x[..., :turned]
    pairs = part.unflatten(-1, (half, 2))  # (..., r/2, 2): the neighbours (2i, 2i + 1)
    swapped = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # x R
    return torch.cat([part * cos + swapped * sin, x[..., turned:]], dim=-1).to(x.dtype)


def interleaved_order(width: int, rotated: int) -> list[int]:
    """The features of a head listed so that the book's pairs (i, i + r/2) are the interleaved
    pairs (2i, 2i + 1) of the first r: [0, 2, …, r − 2, 1, 3, …, r − 1, r, …, width − 1]
    (0-based). Rotating x[..., order] the book's way is rotating x the interleaved way, the
    features listed in that order: a score, a sum over the features of q and k listed alike,
    is the same."""
    return [*range(0, rotated, 2), *range(1, rotated, 2), *range(rotated, width)]


def check_tables(where: str, tables: str, rotated: int, positions: int, width: tuple, n: int):
    """RoPE's tables for a call: their `rotated` columns (c_r) even and at most a head's width
    (`width`: (its name, its value)), their `positions` (n_ctx) at least the call's n tokens.
    `tables` names them in the errors ("cos and sin")."""
    name, value = width
    if rotated > value:
        raise ShapeError(
            f"{where}: {tables} have c_r={rotated} columns but {name}={value}; they rotate at "
            f"most a head's features"
        )
    even_width(where, f"c_r (the columns of {tables})", rotated)
    if positions < n:
        raise ShapeError(
            f"{where}: {tables} have n_ctx={positions} positions but x has n={n} tokens; "
            f"compute them with a larger context_length"
        )


def check_rotated(
    where: str, width: int, rotated: int | None, name: str, width_name: str = "c"
) -> int:
    """The rotated width (`width`, named `width_name`, where `rotated`, the argument `name`, is
    None), even and at most `width`."""
    if rotated is None:
        even_width(where, width_name, width)
        return width
    if isinstance(rotated, bool) or not isinstance(rotated, int) or not 0 < rotated <= width:
        raise ShapeError(
            f"{where}: {name} must be an int from 1 to the width {width_name} = {width}, got "
            f"{name}={rotated!r}"
        )
    even_width(where, name, rotated)
    return rotated
