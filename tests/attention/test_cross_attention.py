"""Cross-attention: queries from X (n × d), keys and values from Y (s × d_y), n ≠ s and d ≠ d_y
throughout, against the reference written from Q = X W_q, K = Y W_k, V = Y W_v,
A = softmax(QKᵀ/√c), C = AV; the steps on n × s scores; the module; bad input."""

import math

import numpy as np
import pytest
import torch
from reference import cross_reference

from attention import CrossAttention, DtypeError, ShapeError
from attention import functional as F
from attention.grouped import grouped_cross_attention

# (batch, n, s, d, d_y, c): pairwise-distinct sizes, so that a swapped axis cannot pass
SHAPES = [
    ((), 5, 4, 3, 6, 2),  # unbatched
    ((2,), 3, 7, 4, 2, 5),  # more keys than queries
    ((2, 3), 6, 1, 2, 3, 4),  # one key
]


def make(batch, n, s, d, d_y, c, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, d, generator=g, dtype=dtype)
    y = torch.randn(*batch, s, d_y, generator=g, dtype=dtype)
    w_q = torch.randn(d, c, generator=g, dtype=dtype)
    w_k, w_v = (torch.randn(d_y, c, generator=g, dtype=dtype) for _ in range(2))
    return x, y, w_q, w_k, w_v


def reference(x, y, w_q, w_k, w_v, allowed=None):
    """cross_reference over the batch dimensions (allowed broadcast to (*batch, n, s))."""
    lead, n, s = x.shape[:-2], x.shape[-2], y.shape[-2]
    out, weights = np.zeros((*lead, n, w_q.shape[1])), np.zeros((*lead, n, s))
    for index in np.ndindex(*lead):
        mask = None if allowed is None else np.broadcast_to(allowed, (*lead, n, s))[index]
        out[index], weights[index] = cross_reference(
            x[index], y[index], w_q, w_k, w_v, allowed=mask
        )
    return out, weights


@pytest.mark.parametrize("return_weights", [False, True], ids=["fast", "explicit"])
@pytest.mark.parametrize(("batch", "n", "s", "d", "d_y", "c"), SHAPES)
def test_cross_attention_matches_the_reference(batch, n, s, d, d_y, c, return_weights):
    x, y, w_q, w_k, w_v = make(batch, n, s, d, d_y, c)
    expected_c, expected_a = reference(x, y, w_q, w_k, w_v)
    out = F.cross_attention(x, y, w_q, w_k, w_v, return_weights=return_weights)
    got_c = out[0] if return_weights else out
    assert got_c.shape == (*batch, n, c)
    np.testing.assert_allclose(got_c.numpy(), expected_c, rtol=0, atol=1e-12)
    if return_weights:
        assert out[1].shape == (*batch, n, s)
        np.testing.assert_allclose(out[1].numpy(), expected_a, rtol=0, atol=1e-12)


@pytest.mark.parametrize("return_weights", [False, True], ids=["fast", "explicit"])
def test_masks_of_n_queries_and_s_keys(return_weights):
    x, y, w_q, w_k, w_v = make((3,), 5, 4, 3, 6, 2)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(3, 5, 4, generator=g) > 0.3
    mask[0, 2] = False  # a query that may attend no key: a zero row
    exists = torch.tensor([[True, True, True, True], [True, False, True, False], [False] * 4])
    allowed = mask.numpy() & exists.numpy()[:, None, :]
    expected_c, expected_a = reference(x, y, w_q, w_k, w_v, allowed)
    out = F.cross_attention(
        x, y, w_q, w_k, w_v, mask=mask, key_padding_mask=exists, return_weights=return_weights
    )
    got_c = out[0] if return_weights else out
    np.testing.assert_allclose(got_c.numpy(), expected_c, rtol=0, atol=1e-12)
    assert torch.equal(got_c[0, 2], torch.zeros(2, dtype=torch.float64))
    assert torch.equal(got_c[2], torch.zeros(5, 2, dtype=torch.float64))  # no key at all


def test_with_y_equal_to_x_it_is_self_attention():
    x, _, w_q, w_k, w_v = make((2,), 5, 4, 3, 3, 2)
    torch.testing.assert_close(
        F.cross_attention(x, x, w_q, w_k, w_v), F.self_attention(x, w_q, w_k, w_v)
    )


def test_the_steps_take_n_queries_and_s_keys():
    x, y, w_q, w_k, w_v = make((2,), 5, 4, 3, 6, 2)
    q, k, v = F.projection(x, w_q), F.projection(y, w_k), F.projection(y, w_v)
    omega = F.scores(q, k)
    assert omega.shape == (2, 5, 4)
    a = F.weights(omega, 2)
    c = F.context(a, v)
    expected_c, expected_a = reference(x, y, w_q, w_k, w_v)
    np.testing.assert_allclose(F.scaled_scores(omega, 2).numpy(), omega.numpy() / math.sqrt(2))
    np.testing.assert_allclose(a.numpy(), expected_a, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c.numpy(), expected_c, rtol=0, atol=1e-12)
    padded = F.weights(
        omega, 2, key_padding_mask=torch.tensor([True, False, True, True]).expand(2, 4)
    )
    assert torch.equal(padded[..., 1], torch.zeros(2, 5, dtype=torch.float64))


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_fast_path_gradients_are_the_explicit_ones(scale):
    # the blockwise backward with s keys ≠ n queries (more rows than a block holds)
    x, y, w_q, w_k, w_v = make((2,), 300, 7, 3, 4, 5, seed=2)
    x, y = x * scale, y * scale
    exists = torch.rand(2, 7, generator=torch.Generator().manual_seed(3)) > 0.3
    upstream = torch.randn(2, 300, 5, dtype=torch.float64)

    def run(explicit):
        leaves = [t.clone().requires_grad_() for t in (x, y, w_q, w_k, w_v)]
        out = F.cross_attention(*leaves, key_padding_mask=exists, return_weights=explicit)
        out = out[0] if explicit else out
        return torch.autograd.grad(out, leaves, upstream)

    for got, expected in zip(run(False), run(True), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * expected.abs().max())


def test_a_nan_in_a_masked_key_or_a_blind_query_changes_nothing_else():
    x, y, w_q, w_k, w_v = make((), 5, 4, 3, 6, 2)
    exists = torch.tensor([True, True, False, True])
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[3] = False  # query 3 attends nothing
    x_bad, y_bad = x.clone(), y.clone()
    x_bad[3], y_bad[2] = math.nan, math.inf
    for explicit in (False, True):
        leaves = [t.clone().requires_grad_() for t in (x_bad, y_bad, w_q, w_k, w_v)]
        out = F.cross_attention(
            *leaves, mask=mask, key_padding_mask=exists, return_weights=explicit
        )
        out = out[0] if explicit else out
        clean = F.cross_attention(
            x, y, w_q, w_k, w_v, mask=mask, key_padding_mask=exists, return_weights=explicit
        )
        assert torch.equal(out.detach(), clean[0] if explicit else clean)
        grads = torch.autograd.grad(out.sum(), leaves)
        assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        # y of the wrong width: d_y is bound by y, the key weight disagrees
        ({"y": torch.randn(4, 5)}, ShapeError, r"^cross_attention: w_k has d_y=6 but y has d_y=5"),
        # w_v with the input width of X instead of Y's
        (
            {"w_v": torch.randn(3, 2)},
            ShapeError,
            r"^cross_attention: w_v has d_y=3 but y has d_y=6",
        ),
        # y as a vector
        (
            {"y": torch.randn(6)},
            ShapeError,
            r"^cross_attention: y must have shape \(\*batch, s, d_y\)",
        ),
        # batch dimensions of x and y disagree
        (
            {"y": torch.randn(2, 4, 6)},
            ShapeError,
            r"^cross_attention: y has batch=\(2,\) but x has batch=\(\)",
        ),
        # a mask over the queries' own sequence (n × n), not n × s
        (
            {"mask": torch.ones(5, 5, dtype=torch.bool)},
            ShapeError,
            r"^cross_attention: mask has s=5 but y has s=4",
        ),
        # key padding over the queries (n) instead of the keys (s)
        (
            {"key_padding_mask": torch.ones(5, dtype=torch.bool)},
            ShapeError,
            r"^cross_attention: key_padding_mask has s=5 but y has s=4",
        ),
        # an integer Y
        (
            {"y": torch.ones(4, 6, dtype=torch.int64)},
            DtypeError,
            r"^cross_attention: y must be a floating-point",
        ),
        # float64 Y with float32 X
        (
            {"y": torch.randn(4, 6, dtype=torch.float64)},
            DtypeError,
            r"^cross_attention: y has dtype torch.float64 but x has torch.float32",
        ),
        # Y on another device
        (
            {"y": torch.randn(4, 6, device="meta")},
            ValueError,
            r"^cross_attention: y is on meta but x is on cpu",
        ),
        # Y missing
        (
            {"y": None},
            TypeError,
            r"^cross_attention: y must be a torch.Tensor of shape \(\*batch, s, d_y\), got None",
        ),
        # a zero-length Y
        (
            {"y": torch.randn(0, 6)},
            ShapeError,
            r"^cross_attention: y has s=0; every dimension must be at least 1",
        ),
        # dropout of 1
        ({"dropout_p": 1.0}, ValueError, r"^cross_attention: dropout_p must be in \[0, 1\)"),
    ],
)
def test_bad_input_names_the_argument_and_the_letter(changes, error, message):
    x, y, w_q, w_k, w_v = make((), 5, 4, 3, 6, 2, dtype=torch.float32)
    arguments = {"x": x, "y": y, "w_q": w_q, "w_k": w_k, "w_v": w_v, **changes}
    positional = [arguments.pop(name) for name in ("x", "y", "w_q", "w_k", "w_v")]
    with pytest.raises(error, match=message):
        F.cross_attention(*positional, **arguments)


# ---------------------------------------------------------------------------------------------
# The module


def module_reference(module, x, y):
    """Each head by cross_reference on its columns, side by side, then out_proj."""
    heads, c_h = module.num_heads, module.head_dim
    w_q, w_k, w_v = (t.detach().double() for t in (module.w_q, module.w_k, module.w_v))
    out = np.zeros((*x.shape[:-1], heads * c_h))
    for index in np.ndindex(*x.shape[:-2]):
        for h in range(heads):
            columns = slice(h * c_h, (h + 1) * c_h)
            out[index][:, columns] = cross_reference(
                x[index], y[index], w_q[:, columns], w_k[:, columns], w_v[:, columns]
            )[0]
    w_o, b_o = module.out_proj.weight.detach().double().numpy(), module.out_proj.bias.detach()
    return out @ w_o.T + b_o.double().numpy()


@pytest.mark.parametrize("heads", [1, 2])
def test_the_module_is_its_heads_and_out_proj(heads):
    torch.manual_seed(0)
    module = CrossAttention(d_in=3, d_kv=5, d_out=4, num_heads=heads).double()
    x, y = torch.randn(2, 6, 3, dtype=torch.float64), torch.randn(2, 7, 5, dtype=torch.float64)
    np.testing.assert_allclose(
        module(x, y).detach().numpy(), module_reference(module, x, y), rtol=0, atol=1e-12
    )
    c, a = module(x, y, return_weights=True)
    assert a.shape == (2, heads, 6, 7)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, heads, 6, dtype=torch.float64))
    if heads == 1:  # one head: out_proj after cross_attention with the module's weights
        inner = F.cross_attention(x, y, module.w_q, module.w_k, module.w_v)
        torch.testing.assert_close(c, module.out_proj(inner))


def test_the_module_layout_and_checks():
    module = CrossAttention(3, 5, 4, dropout=0.1, num_heads=2, qkv_bias=True)
    assert list(module.state_dict()) == [
        "W_query.weight",
        "W_query.bias",
        "W_key.weight",
        "W_key.bias",
        "W_value.weight",
        "W_value.bias",
        "out_proj.weight",
        "out_proj.bias",
    ]
    assert module.W_key.weight.shape == (4, 5) and module.w_k.shape == (5, 4)
    x, y = torch.randn(6, 3), torch.randn(7, 5)
    with pytest.raises(
        ShapeError, match=r"^CrossAttention.forward: W_key.weight has d_y=5 but y has d_y=3"
    ):
        module(x, torch.randn(7, 3))
    with pytest.raises(
        ShapeError, match=r"^CrossAttention.forward: W_query.weight has d=3 but x has d=5"
    ):
        module(torch.randn(6, 5), y)
    with pytest.raises(
        ShapeError, match=r"^CrossAttention.forward: key_padding_mask has s=6 but y has s=7"
    ):
        module(x, y, key_padding_mask=torch.ones(6, dtype=torch.bool))
    module.eval()
    torch.manual_seed(1)
    assert torch.equal(module(x, y), module(x, y))  # eval: no dropout
    module.train()
    assert not torch.equal(module(x, y), module(x, y))  # dropout on the weights


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: CrossAttention(3, 0, 4),
            ValueError,
            r"^CrossAttention: d_kv must be a positive integer, got d_kv=0",
        ),
        (
            lambda: CrossAttention(3, 5, 5, num_heads=2),
            ValueError,
            r"^CrossAttention: d_out=5 is not divisible by num_heads=2",
        ),
        (
            lambda: CrossAttention(3, 5, 4, dropout=1.0),
            ValueError,
            r"^CrossAttention: dropout must be in \[0, 1\)",
        ),
        (
            lambda: CrossAttention(3, 5, 4, qkv_bias=1),
            TypeError,
            r"^CrossAttention: qkv_bias must be a bool, got qkv_bias=1",
        ),
    ],
)
def test_bad_constructor_arguments(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_torch_compile_gives_the_same_numbers_and_keeps_the_checks():
    torch.manual_seed(2)
    module = CrossAttention(3, 5, 4, num_heads=2).eval()
    compiled = torch.compile(module)
    x, y = torch.randn(2, 6, 3), torch.randn(2, 7, 5)
    torch.testing.assert_close(compiled(x, y), module(x, y), rtol=0, atol=1e-6)
    with pytest.raises(ShapeError, match=r"W_key.weight has d_y=5 but y has d_y=4"):
        compiled(x, torch.randn(2, 7, 4))


# grouped_cross_attention: h query heads on g groups of keys and values read from Y ----------


@pytest.mark.parametrize(("heads", "groups"), [(1, 1), (4, 4), (4, 2), (4, 1)])
def test_grouped_cross_attention_is_each_head_s_cross_attention(heads, groups):
    """Head ℓ is `cross_attention` on its block of W_q and its group's block of W_k and W_v;
    the heads side by side, times W_o."""
    g = torch.Generator().manual_seed(3)
    n, s, d, d_y, c_h = 5, 3, 4, 6, 2
    x = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    y = torch.randn(2, s, d_y, generator=g, dtype=torch.float64)
    w_q = torch.randn(d, heads * c_h, generator=g, dtype=torch.float64)
    w_k, w_v = (torch.randn(d_y, groups * c_h, generator=g, dtype=torch.float64) for _ in "kv")
    w_o = torch.randn(heads * c_h, 7, generator=g, dtype=torch.float64)
    got = grouped_cross_attention(x, y, w_q, w_k, w_v, w_o, heads=heads, groups=groups)
    blocks = []
    for head in range(heads):
        group = head * groups // heads
        q_cols, kv_cols = slice(head * c_h, (head + 1) * c_h), slice(group * c_h, (group + 1) * c_h)
        blocks.append(F.cross_attention(x, y, w_q[:, q_cols], w_k[:, kv_cols], w_v[:, kv_cols]))
    torch.testing.assert_close(got, torch.cat(blocks, dim=-1) @ w_o, rtol=0, atol=1e-12)


def test_grouped_cross_attention_with_qk_norm_and_a_mask_of_n_by_s():
    x, y, w_q, w_k, w_v = make((), 4, 3, 5, 6, 4)
    gain = torch.linspace(0.5, 1.5, 2, dtype=torch.float64)
    allowed = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    got = grouped_cross_attention(
        x, y, w_q, w_k, w_v, heads=2, q_gain=gain, k_gain=gain, eps=0.0, mask=allowed
    )

    def rms(t):
        return t / t.pow(2).mean(-1, keepdim=True).sqrt() * gain

    heads = []
    for head in range(2):
        cols = slice(2 * head, 2 * head + 2)
        q, k, v = rms(x @ w_q[:, cols]), rms(y @ w_k[:, cols]), y @ w_v[:, cols]
        scores = (q @ k.T / math.sqrt(2)).masked_fill(~allowed, -math.inf)
        heads.append(scores.softmax(-1) @ v)
    torch.testing.assert_close(got, torch.cat(heads, dim=-1), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"w_k": torch.zeros(5, 4)}, "w_k"),
        ({"heads": 3}, "heads=3"),
    ],
    ids=["w_k rows are not d_y", "heads do not divide c"],
)
def test_grouped_cross_attention_names_a_bad_argument(keywords, message):
    x, y, w_q, w_k, w_v = make((), 4, 3, 5, 6, 4)
    given = {"w_k": w_k, **keywords}
    heads = given.pop("heads", 2)
    with pytest.raises((ShapeError, ValueError), match=message):
        grouped_cross_attention(x, y, w_q, given["w_k"].double(), w_v, heads=heads)
