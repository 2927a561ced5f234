"""RoPE: equal to the book's llama3/qwen3 functions, to the formulas written out, and its errors."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from llms_from_scratch import llama3, qwen3
from reference_variants import rope_reference

from attention import ShapeError, apply_rope, compute_rope_params
from attention.rope import rope_frequencies, rope_rotation, rotate_half

LLAMA_31 = {  # the book's LLAMA32_CONFIG_1B["rope_freq"], with a short original context
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_context_length": 8192,
}


@pytest.mark.parametrize(
    ("head_dim", "theta_base", "context_length"),
    [
        (64, 10_000, 4096),  # the defaults
        (16, 500_000.0, 100),  # Llama 3's base
        (128, 1_000_000.0, 40_960),  # Qwen 3's head and context
        (2, 10, 7),  # one pair
    ],
)
def test_tables_equal_the_books(head_dim, theta_base, context_length):
    cos, sin = compute_rope_params(head_dim, theta_base, context_length)
    for book in (qwen3.compute_rope_params, llama3.compute_rope_params):
        book_cos, book_sin = book(head_dim, theta_base, context_length)
        assert torch.equal(cos, book_cos) and torch.equal(sin, book_sin)
    assert cos.shape == (context_length, head_dim)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_llama_31_smoothing_equals_the_books(head_dim):
    ours = compute_rope_params(head_dim, 500_000.0, 8192, LLAMA_31)
    book = llama3.compute_rope_params(head_dim, 500_000.0, 8192, LLAMA_31)
    assert torch.equal(ours[0], book[0]) and torch.equal(ours[1], book[1])
    plain = compute_rope_params(head_dim, 500_000.0, 8192)
    assert not torch.equal(ours[0], plain[0])  # the smoothing changed something


def smoothed_reference(head_dim, base, config):
    """Llama 3.1's frequencies from its three cases, pair by pair, in float64."""
    length, factor = config["original_context_length"], config["factor"]
    low, high = config["low_freq_factor"], config["high_freq_factor"]
    out, cases = [], set()
    for i in range(head_dim // 2):
        theta = base ** (-2 * i / head_dim)
        wavelength = 2 * math.pi / theta
        if wavelength < length / high:
            out.append(theta), cases.add("fast")
        elif wavelength > length / low:
            out.append(theta / factor), cases.add("slow")
        else:
            s = (length / wavelength - low) / (high - low)
            out.append((1 - s) * theta / factor + s * theta), cases.add("between")
    return np.array(out), cases


def test_llama_31_smoothing_follows_its_three_cases():
    expected, cases = smoothed_reference(128, 500_000.0, LLAMA_31)
    assert cases == {"fast", "slow", "between"}  # the sizes reach every case
    got = rope_frequencies(128, 500_000.0, LLAMA_31, dtype=torch.float64)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-14)


@pytest.mark.parametrize("offset", [0, 3])
def test_apply_rope_rotates_each_pair_by_its_position(offset):
    x = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cos, sin = compute_rope_params(6, 100.0, 11, dtype=torch.float64)
    got = apply_rope(x, cos, sin, offset=offset)
    np.testing.assert_allclose(got.numpy(), rope_reference(x, 100.0, offset), rtol=0, atol=1e-13)


def test_apply_rope_equals_the_books_on_heads():
    x = torch.randn(2, 3, 10, 16, generator=torch.Generator().manual_seed(1))
    cos, sin = qwen3.compute_rope_params(16, 10_000, 32)
    assert torch.equal(apply_rope(x, cos, sin), qwen3.apply_rope(x, cos, sin))
    assert torch.equal(apply_rope(x, cos, sin), llama3.apply_rope(x, cos, sin))


def test_offset_continues_the_positions():
    x = torch.randn(4, 9, 8, generator=torch.Generator().manual_seed(2))
    cos, sin = compute_rope_params(8, 10_000, 9)
    whole = apply_rope(x, cos, sin)
    torch.testing.assert_close(apply_rope(x[:, 5:], cos, sin, offset=5), whole[:, 5:])
    assert not torch.allclose(apply_rope(x[:, 5:], cos, sin), whole[:, 5:])


@given(shift=st.integers(0, 40), m=st.integers(0, 20), p=st.integers(0, 20))
def test_scores_depend_on_the_distance_only(shift, m, p):
    g = torch.Generator().manual_seed(3)
    q, k = (
        torch.randn(1, 8, dtype=torch.float64, generator=g),
        torch.randn(1, 8, generator=g, dtype=torch.float64),
    )
    cos, sin = compute_rope_params(8, 10_000, 64, dtype=torch.float64)
    before = apply_rope(q, cos, sin, offset=m) @ apply_rope(k, cos, sin, offset=p).T
    after = apply_rope(q, cos, sin, offset=m + shift) @ apply_rope(k, cos, sin, offset=p + shift).T
    torch.testing.assert_close(before, after, rtol=1e-12, atol=1e-12)


def test_float64_tables_are_exact_where_the_books_round_frequencies_to_float32():
    cos, _ = compute_rope_params(64, 10_000, 4096, dtype=torch.float64)
    positions = np.arange(4096)[:, None]
    exact = np.cos(positions * 10_000.0 ** (-np.arange(0, 64, 2) / 64))
    np.testing.assert_allclose(cos[:, :32].numpy(), exact, rtol=0, atol=1e-11)
    book_cos, _ = qwen3.compute_rope_params(64, 10_000, 4096, dtype=torch.float64)
    assert 1e-6 < (book_cos - cos).abs().max() < 1e-3  # the book's float32 frequencies


def test_rotate_half_is_x_times_r():
    x = torch.randn(3, 6, dtype=torch.float64)
    r = torch.zeros(6, 6, dtype=torch.float64)
    for j in range(6):  # R_{j', j} = δ_{j', j − c/2} − δ_{j', j + c/2}
        for j2 in range(6):
            r[j2, j] = (j2 == j - 3) - (j2 == j + 3)
    assert torch.equal(rotate_half(x), x @ r)


def test_odd_head_dim_names_the_argument_and_size():
    with pytest.raises(
        ShapeError, match=r"compute_rope_params: head_dim=7 is odd; RoPE rotates pairs"
    ):
        compute_rope_params(7)
    cos, sin = torch.ones(4, 5), torch.ones(4, 5)
    with pytest.raises(
        ShapeError, match=r"apply_rope: c_r \(the columns of cos and sin\)=5 is odd"
    ):
        apply_rope(torch.ones(3, 5), cos, sin)
    with pytest.raises(
        ShapeError, match=r"apply_rope: cos and sin have c_r=6 columns but x has c=4"
    ):
        apply_rope(torch.ones(3, 4), torch.ones(4, 6), torch.ones(4, 6))
    with pytest.raises(
        ShapeError,
        match=r"rope_rotation: rotated must be an int from 1 to the width c = 4, got rotated=6",
    ):
        rope_rotation(torch.ones(3, 4), rotated=6)


def test_narrower_tables_rotate_the_first_features_only():
    """Partial RoPE: tables of c_r = 4 columns rotate features 1 … 4 as RoPE of width 4, and
    pass features 5, 6 on unchanged; rope_rotation(rotated=4) is the same."""
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    cos, sin = compute_rope_params(4, theta_base=100, context_length=5, dtype=torch.float64)
    turned = apply_rope(x, cos, sin)
    assert torch.equal(turned[..., 4:], x[..., 4:])
    torch.testing.assert_close(turned[..., :4], apply_rope(x[..., :4], cos, sin), rtol=0, atol=0)
    torch.testing.assert_close(
        rope_rotation(x, theta_base=100, rotated=4), turned, rtol=0, atol=1e-15
    )
    assert (turned[..., :4] - x[..., :4]).abs().max() > 0.1


def test_short_tables_name_both_sizes():
    cos, sin = compute_rope_params(4, context_length=6)
    with pytest.raises(
        ShapeError,
        match=r"apply_rope: cos and sin have n_ctx=6 positions but x needs offset \+ n = 2 \+ 5 = 7",
    ):
        apply_rope(torch.ones(5, 4), cos, sin, offset=2)
    apply_rope(torch.ones(4, 4), cos, sin, offset=2)  # 2 + 4 = 6 positions: enough


def test_shape_mismatches_name_the_letter_and_both_sizes():
    cos, sin = compute_rope_params(6, context_length=8)
    with pytest.raises(
        ShapeError, match=r"apply_rope: cos and sin have c_r=6 columns but x has c=4"
    ):
        apply_rope(torch.ones(5, 4), cos, sin)
    with pytest.raises(ShapeError, match=r"apply_rope: sin has c_r=4 but cos has c_r=6"):
        apply_rope(torch.ones(5, 6), cos, sin[:, :4])
    with pytest.raises(ShapeError, match=r"apply_rope: sin has n_ctx=7 but cos has n_ctx=8"):
        apply_rope(torch.ones(5, 6), cos, sin[:7])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"offset": -1}, r"apply_rope: offset must be a non-negative int, got offset=-1"),
        ({"offset": 1.5}, r"apply_rope: offset must be int, got 1.5"),
    ],
)
def test_bad_offsets(kwargs, message):
    cos, sin = compute_rope_params(4, context_length=8)
    with pytest.raises((ValueError, TypeError), match=message):
        apply_rope(torch.ones(3, 4), cos, sin, **kwargs)


def test_bad_freq_config_names_what_is_missing():
    with pytest.raises(ValueError, match=r"freq_config needs the keys .*; missing factor"):
        compute_rope_params(8, freq_config={k: v for k, v in LLAMA_31.items() if k != "factor"})
    with pytest.raises(
        ValueError,
        match=r"high_freq_factor > low_freq_factor, got high_freq_factor=1.0, low_freq_factor=1.0",
    ):
        compute_rope_params(8, freq_config={**LLAMA_31, "high_freq_factor": 1.0})


def test_checks_off_gives_the_same_numbers_and_skips_the_checks():
    import jaxtyping

    x = torch.randn(2, 5, 4)
    cos, sin = compute_rope_params(4, context_length=8)
    checked = apply_rope(x, cos, sin)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        assert torch.equal(apply_rope(x, cos, sin), checked)
        with pytest.raises(RuntimeError):  # torch's broadcasting error, not our ShapeError
            apply_rope(x, cos, sin[:, :2])  # sin narrower than cos
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


def test_float32_tables_with_bfloat16_x_compute_in_float32_as_the_books():
    x = torch.randn(2, 3, 10, 16).to(torch.bfloat16)
    cos, sin = qwen3.compute_rope_params(16, 10_000, 32)  # float32, as the models keep them
    got = apply_rope(x, cos, sin)
    assert got.dtype == torch.bfloat16 and torch.equal(got, qwen3.apply_rope(x, cos, sin))


def test_interleaved_rotation_turns_neighbouring_pairs():
    """rope_rotation(interleaved=True): features (2i, 2i + 1) turn by pair i's angle m θ_i,
    written out here pair by pair; the same numbers as the book's rotation of the features
    listed [0, 2, …, 1, 3, …] (attention.rope.interleaved_order)."""
    from attention.rope import interleaved_order

    x = torch.randn(2, 5, 6, dtype=torch.float64)
    got = rope_rotation(x, theta_base=100, interleaved=True)
    theta = rope_frequencies(6, theta_base=100, dtype=torch.float64)
    for m in range(5):
        for i in range(3):
            a, b = x[..., m, 2 * i], x[..., m, 2 * i + 1]
            c, s = math.cos(m * theta[i]), math.sin(m * theta[i])
            torch.testing.assert_close(got[..., m, 2 * i], a * c - b * s, rtol=0, atol=1e-14)
            torch.testing.assert_close(got[..., m, 2 * i + 1], b * c + a * s, rtol=0, atol=1e-14)
    order = interleaved_order(6, 6)
    book = rope_rotation(x[..., order], theta_base=100)
    torch.testing.assert_close(book, got[..., order], rtol=0, atol=1e-14)
    partial = rope_rotation(x, theta_base=100, rotated=4, interleaved=True)
    assert torch.equal(partial[..., 4:], x[..., 4:])
    assert (partial - got).abs().max() > 1e-3  # the first four turn by the angles of width 4


#: YaRN's rope_parameters as transformers reads them: GPT-OSS's (range not rounded), a default
#: one (rounded), DeepSeek V3's (its mscale ratio: factor 1), one with its attention factor given,
#: and a partial rotation.
YARN = [
    {"factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
    {"factor": 4.0},
    {"factor": 40.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    {"factor": 8.0, "attention_factor": 1.25, "beta_slow": 2.0},
    {"factor": 16.0, "partial_rotary_factor": 0.5},
]


@pytest.mark.parametrize("params", YARN)
@pytest.mark.parametrize("head_dim", [16, 64])
def test_yarn_equals_transformers(params, head_dim):
    """rope_frequencies and the tables' attention factor against transformers'
    _compute_yarn_parameters, and the tables against GPT-OSS's rotary embedding (cos and sin
    times the factor)."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    read = {"rope_type": "yarn", "rope_theta": 150_000.0, "original_max_position_embeddings": 4096}
    config = transformers.GptOssConfig(
        head_dim=head_dim,
        num_attention_heads=4,
        hidden_size=4 * head_dim,
        max_position_embeddings=131_072,
        rope_parameters=read | params,
    )
    expected, factor = ROPE_INIT_FUNCTIONS["yarn"](config)
    rotated = int(head_dim * params.get("partial_rotary_factor", 1.0))
    freq_config = {k: v for k, v in (read | params).items() if k != "rope_theta"}
    ours = rope_frequencies(rotated, 150_000.0, freq_config, torch.float64)
    assert torch.allclose(ours, expected.double(), rtol=1e-6, atol=0)  # theirs: float32
    plain = rope_frequencies(rotated, 150_000.0, dtype=torch.float64)
    assert not torch.allclose(ours, plain)  # the scaling changed something
    cos, sin = compute_rope_params(rotated, 150_000.0, 16, freq_config)
    if rotated == head_dim:  # GPT-OSS's own embedding rotates the whole head
        x, positions = torch.zeros(1, 16, 1), torch.arange(16)[None]
        their_cos, their_sin = GptOssRotaryEmbedding(config)(x, positions)
        half = rotated // 2  # GPT-OSS keeps one copy of each pair's angle
        assert torch.allclose(cos[:, :half], their_cos[0], atol=1e-6)
        assert torch.allclose(sin[:, :half], their_sin[0], atol=1e-6)
    plain_cos, _ = compute_rope_params(rotated, 150_000.0, 16)
    assert cos[0, 0] == pytest.approx(factor) and plain_cos[0, 0] == 1.0


def test_bad_yarn_config_names_the_key():
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    with pytest.raises(ValueError, match=r"YaRN's freq_config needs the keys .*; missing factor"):
        compute_rope_params(8, freq_config={k: v for k, v in yarn.items() if k != "factor"})
    with pytest.raises(
        ValueError, match=r"beta_fast > beta_slow > 0, got beta_fast=1.0, beta_slow=1.0"
    ):
        compute_rope_params(8, freq_config={**yarn, "beta_fast": 1, "beta_slow": 1})
    with pytest.raises(ValueError, match=r"has no key low_freq_factor"):
        compute_rope_params(8, freq_config={**yarn, "low_freq_factor": 1.0})
    with pytest.raises(ValueError, match=r"needs factor > 0, got -2"):
        compute_rope_params(8, freq_config={**yarn, "factor": -2})


def test_linear_scaling_divides_every_frequency_and_names_a_bad_config():
    linear = {"rope_type": "linear", "factor": 4.0}
    plain = compute_rope_params(8, context_length=9, dtype=torch.float64)
    scaled = compute_rope_params(8, context_length=9, freq_config=linear, dtype=torch.float64)
    # position m at factor 4 is position m/4 unscaled: rows 0, 4, 8 are plain rows 0, 1, 2
    for cos_or_sin in (0, 1):
        torch.testing.assert_close(scaled[cos_or_sin][::4], plain[cos_or_sin][:3], rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"linear scaling's freq_config needs the keys factor"):
        compute_rope_params(8, freq_config={"rope_type": "linear"})
    with pytest.raises(ValueError, match=r"linear scaling's freq_config has no key beta_fast"):
        compute_rope_params(8, freq_config={**linear, "beta_fast": 32.0})
    with pytest.raises(ValueError, match=r"linear scaling's freq_config needs factor > 0, got 0"):
        compute_rope_params(8, freq_config={**linear, "factor": 0})
