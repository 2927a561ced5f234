"""GroupedQueryAttention and RMSNorm in the book's Llama3Model and Qwen3Model: the same seed gives
the same parameters and logits, state_dicts load both ways, and the errors."""

import jaxtyping
import pytest
import torch
from llms_from_scratch import llama3, qwen3

from attention import DtypeError, GroupedQueryAttention, RMSNorm, ShapeError, compute_rope_params
from attention.grouped import grouped_query_attention

LLAMA = {
    "vocab_size": 100,
    "context_length": 32,
    "emb_dim": 64,
    "n_heads": 4,
    "n_layers": 2,
    "hidden_dim": 96,
    "n_kv_groups": 2,
    "rope_base": 500_000.0,
    "dtype": torch.float32,
    "rope_freq": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_context_length": 16,
    },
}
QWEN = {
    "vocab_size": 100,
    "context_length": 32,
    "emb_dim": 64,
    "n_heads": 4,
    "n_layers": 2,
    "hidden_dim": 96,
    "head_dim": 24,
    "qk_norm": True,
    "n_kv_groups": 2,
    "rope_base": 1e6,
    "dtype": torch.float32,
}


def build(book, cfg, ours, seed=0):
    """The book's model, with our classes swapped into its module while it is constructed."""
    model = book.Llama3Model if book is llama3 else book.Qwen3Model
    with pytest.MonkeyPatch.context() as patch:
        if ours:
            patch.setattr(book, "GroupedQueryAttention", GroupedQueryAttention)
            if book is qwen3:
                patch.setattr(book, "RMSNorm", RMSNorm)
        torch.manual_seed(seed)
        return model(dict(cfg))


# (the book's module, its configuration): one row per way the books construct the class
MODELS = [
    (llama3, LLAMA),  # d_in, d_out, num_heads, num_kv_groups, dtype
    (qwen3, QWEN),  # d_in, num_heads, head_dim, num_kv_groups, qk_norm, dtype
    (qwen3, {**QWEN, "head_dim": None, "qk_norm": False, "n_kv_groups": 1}),  # multi-query
    (qwen3, {**QWEN, "n_kv_groups": 4}),  # g = h
]
IDS = ["llama3", "qwen3", "qwen3-mqa", "qwen3-mha"]


@pytest.mark.parametrize(("book", "cfg"), MODELS, ids=IDS)
def test_same_seed_same_parameters_and_logits(book, cfg):
    theirs, ours = build(book, cfg, ours=False), build(book, cfg, ours=True)
    assert isinstance(ours.trf_blocks[0].att, GroupedQueryAttention)
    reference = theirs.state_dict()
    assert list(ours.state_dict()) == list(reference)  # names and creation order
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, reference[name]), name
    tokens = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), theirs(tokens))


@pytest.mark.parametrize(("book", "cfg"), MODELS[:2], ids=IDS[:2])
def test_state_dicts_load_both_ways(book, cfg):
    theirs, ours = build(book, cfg, ours=False, seed=3), build(book, cfg, ours=True, seed=4)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    tokens = torch.randint(0, 100, (3, 17), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), theirs(tokens))
    theirs.load_state_dict(build(book, cfg, ours=True, seed=5).state_dict(), strict=True)


@pytest.mark.parametrize(("book", "cfg"), MODELS[:2], ids=IDS[:2])
def test_gradients_equal_the_books(book, cfg):
    theirs, ours = build(book, cfg, ours=False), build(book, cfg, ours=True)
    tokens = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(6))
    theirs(tokens).logsumexp(-1).sum().backward()
    ours(tokens).logsumexp(-1).sum().backward()
    expected = dict(theirs.named_parameters())
    for name, parameter in ours.named_parameters():
        torch.testing.assert_close(parameter.grad, expected[name].grad, rtol=1e-4, atol=1e-5)


def pair(book_kwargs, seed=0):
    torch.manual_seed(seed)
    theirs = (llama3 if "d_out" in book_kwargs else qwen3).GroupedQueryAttention(**book_kwargs)
    torch.manual_seed(seed)
    return theirs, GroupedQueryAttention(**book_kwargs)


def test_any_book_mask():
    theirs, ours = pair(
        {"d_in": 12, "num_heads": 6, "num_kv_groups": 3, "head_dim": 4, "qk_norm": True}
    )
    x = torch.randn(2, 9, 12)
    cos, sin = compute_rope_params(4, context_length=16)
    blocked = torch.rand(9, 9, generator=torch.Generator().manual_seed(0)) > 0.6
    blocked.fill_diagonal_(False)  # every query keeps a key (the book's rows would be NaN)
    torch.testing.assert_close(ours(x, blocked, cos, sin), theirs(x, blocked, cos, sin))
    causal = torch.ones(9, 9, dtype=torch.bool).triu(1)  # the kernel's causal flag
    torch.testing.assert_close(ours(x, causal, cos, sin), theirs(x, causal, cos, sin))


def test_without_mask_or_rope_it_is_the_functional_form():
    torch.manual_seed(0)
    module = GroupedQueryAttention(10, d_out=12, num_heads=6, num_kv_groups=2)
    x = torch.randn(3, 7, 10)
    weights = [module.W_query, module.W_key, module.W_value, module.out_proj]
    expected = grouped_query_attention(x, *(w.weight.T for w in weights), heads=6, groups=2)
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-6)
    theirs = llama3.GroupedQueryAttention(10, 12, 6, 2)
    theirs.load_state_dict(module.state_dict())
    no_mask = torch.zeros(7, 7, dtype=torch.bool)
    identity = torch.ones(7, 2), torch.zeros(7, 2)  # cos 1, sin 0: no rotation
    torch.testing.assert_close(module(x), theirs(x, no_mask, *identity))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [{}, {"bias": True}, {"qwen3_compatible": False}])
def test_rms_norm_equals_the_books(kwargs, dtype):
    torch.manual_seed(0)
    theirs, ours = qwen3.RMSNorm(6, **kwargs), RMSNorm(6, **kwargs)
    with torch.no_grad():
        for p in (*theirs.parameters(), *ours.parameters()):
            p.copy_(torch.linspace(0.5, 1.5, 6))
    x = torch.randn(2, 5, 6).to(dtype)
    assert torch.equal(ours(x), theirs(x))
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize(("book", "cfg"), MODELS[:2], ids=IDS[:2])
def test_the_books_bfloat16_configurations_run_unchanged(book, cfg):
    cfg = {**cfg, "dtype": torch.bfloat16}  # the books' defaults: cos, sin, gains stay float32
    theirs, ours = build(book, cfg, ours=False), build(book, cfg, ours=True)
    assert ours.cos.dtype == torch.float32 and ours.tok_emb.weight.dtype == torch.bfloat16
    tokens = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected = theirs(tokens)
        assert expected.dtype == torch.bfloat16
        # at most one bfloat16 step at 2 apart (the fused kernel sums in another order)
        torch.testing.assert_close(ours(tokens), expected, rtol=0, atol=2**-6)


def test_weights_and_x_still_share_one_dtype():
    module = GroupedQueryAttention(12, num_heads=4, num_kv_groups=2, head_dim=6)
    with pytest.raises(
        DtypeError,
        match=r"GroupedQueryAttention.forward: W_query.weight has dtype torch.float32 but x has torch.bfloat16",
    ):
        module(torch.randn(2, 7, 12, dtype=torch.bfloat16))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"d_in": 8, "num_heads": 6, "num_kv_groups": 4, "head_dim": 2},
            r"GroupedQueryAttention: num_heads=6 is not divisible by num_kv_groups=4",
        ),
        (
            {"d_in": 8, "d_out": 10, "num_heads": 4, "num_kv_groups": 2},
            r"GroupedQueryAttention: d_out=10 is not divisible by num_heads=4; each head needs width d_out / num_heads",
        ),
        (
            {"d_in": 10, "num_heads": 4, "num_kv_groups": 2},
            r"GroupedQueryAttention: d_in=10 is not divisible by num_heads=4",
        ),
        (
            {"d_in": 8, "d_out": 8, "head_dim": 2, "num_heads": 4, "num_kv_groups": 2},
            r"give d_out \(the book's llama3\) or head_dim \(its qwen3\), not both; got d_out=8, head_dim=2",
        ),
        (
            {"d_in": 8, "num_heads": 4, "num_kv_groups": 0},
            r"GroupedQueryAttention: num_kv_groups must be a positive integer, got num_kv_groups=0",
        ),
        (
            {"d_in": 8, "num_heads": 4, "num_kv_groups": 2, "qk_norm": 1},
            r"GroupedQueryAttention: qk_norm must be a bool, 'whole' or 'l2', got qk_norm=1",
        ),
    ],
)
def test_construction_errors_name_the_arguments(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        GroupedQueryAttention(**kwargs)


def test_positional_arguments_after_d_in_are_refused():
    with pytest.raises(TypeError):  # the two books order them differently: keywords only
        GroupedQueryAttention(8, 8, 4, 2)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda m, x, c, s: m(x, None, torch.cat([c, c[:, :2]], 1), torch.cat([s, s[:, :2]], 1)),
            ShapeError,
            r"GroupedQueryAttention.forward: cos and sin have c_r=8 columns but head_dim=6; they rotate at most",
        ),
        (
            lambda m, x, c, s: m(x, None, c[:5], s[:5]),
            ShapeError,
            r"GroupedQueryAttention.forward: cos and sin have n_ctx=5 positions but x has n=7 tokens",
        ),
        (
            lambda m, x, c, s: m(x, torch.ones(5, 5, dtype=torch.bool), c, s),
            ShapeError,
            r"GroupedQueryAttention.forward: blocked has n=5 but x has n=7",
        ),
        (
            lambda m, x, c, s: m(x, None, c, None),
            ValueError,
            r"GroupedQueryAttention.forward: give cos and sin together",
        ),
        (
            lambda m, x, c, s: m(x[..., :5], None, c, s),
            ShapeError,
            r"GroupedQueryAttention.forward: W_query.weight has d=12 but x has d=5",
        ),
        (
            lambda m, x, c, s: m(x, None, c, s[:, :4]),
            ShapeError,
            r"GroupedQueryAttention.forward: sin has c_r=4 but cos has c_r=6",
        ),
    ],
)
def test_forward_errors_name_both_sizes(call, error, message):
    module = GroupedQueryAttention(12, num_heads=4, num_kv_groups=2, head_dim=6)
    cos, sin = compute_rope_params(6, context_length=16)
    with pytest.raises(error, match=message):
        call(module, torch.randn(2, 7, 12), cos, sin)


def test_odd_head_dim_is_refused_with_rope_only():
    module = GroupedQueryAttention(9, num_heads=3, num_kv_groups=1)  # head_dim 3
    x = torch.randn(4, 9)
    assert module(x).shape == (4, 9)  # no RoPE: an odd head width is fine
    with pytest.raises(
        ShapeError,
        match=r"GroupedQueryAttention.forward: c_r \(the columns of cos and sin\)=3 is odd; RoPE rotates pairs",
    ):
        module(x, None, torch.ones(4, 3), torch.zeros(4, 3))


def test_narrower_tables_rotate_each_heads_first_features_only():
    """Partial RoPE (GPT-NeoX, Qwen 3.5): tables of c_r < head_dim columns rotate each head's
    first c_r features, as grouped_query_attention(rope_width=c_r) does; the others pass."""
    torch.manual_seed(0)
    module = GroupedQueryAttention(12, num_heads=2, num_kv_groups=1, head_dim=6).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    cos, sin = compute_rope_params(4, theta_base=100, context_length=5, dtype=torch.float64)
    w = {
        name: getattr(module, name).weight.mT
        for name in ("W_query", "W_key", "W_value", "out_proj")
    }
    expected = grouped_query_attention(
        x,
        w["W_query"],
        w["W_key"],
        w["W_value"],
        w["out_proj"],
        heads=2,
        groups=1,
        theta_base=100,
        rope_width=4,
    )
    torch.testing.assert_close(module(x, None, cos, sin), expected, rtol=0, atol=1e-12)
    whole = compute_rope_params(6, theta_base=100, context_length=5, dtype=torch.float64)
    assert (module(x, None, *whole) - expected).abs().max() > 1e-3


def test_checks_off_gives_the_same_numbers():
    module = GroupedQueryAttention(12, num_heads=4, num_kv_groups=2, head_dim=6, qk_norm=True)
    cos, sin = compute_rope_params(6, context_length=16)
    x, blocked = torch.randn(2, 7, 12), torch.ones(7, 7, dtype=torch.bool).triu(1)
    checked = module(x, blocked, cos, sin)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        assert torch.equal(module(x, blocked, cos, sin), checked)
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


@pytest.mark.slow
def test_compiled_modules_give_the_same_numbers_and_still_check():
    from attention import MultiHeadLatentAttention

    module = GroupedQueryAttention(12, num_heads=4, num_kv_groups=2, head_dim=6, qk_norm=True)
    latent = MultiHeadLatentAttention(12, 18, 0.0, 3)
    cos, sin = compute_rope_params(6, context_length=16)
    x, blocked = torch.randn(2, 7, 12), torch.ones(7, 7, dtype=torch.bool).triu(1)
    compiled = torch.compile(module, backend="eager")
    assert torch.equal(compiled(x, blocked, cos, sin), module(x, blocked, cos, sin))
    assert torch.equal(torch.compile(latent, backend="eager")(x), latent(x))
    with pytest.raises(
        ShapeError, match=r"GroupedQueryAttention.forward: W_query.weight has d=12 but x has d=5"
    ):
        compiled(torch.randn(2, 7, 5), blocked, cos, sin)


def test_g_equal_h_without_rope_is_our_multi_head_attention():
    from attention import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(10, 12, 16, 0.0, num_heads=4).eval()
    gqa = GroupedQueryAttention(10, d_out=12, num_heads=4, num_kv_groups=4)
    with torch.no_grad():
        mha.out_proj.bias.zero_()  # the books' grouped-query classes have no output bias
    gqa.load_state_dict({k: v for k, v in mha.state_dict().items() if k in gqa.state_dict()})
    x = torch.randn(3, 9, 10)
    causal = torch.ones(9, 9, dtype=torch.bool).triu(1)
    torch.testing.assert_close(gqa(x, causal), mha(x), rtol=0, atol=1e-6)


def test_freq_config_is_the_books_llama_3_2_rope():
    """grouped_query_attention(freq_config=) is the module called with Llama 3.2's tables
    (compute_rope_params with the book's freq_config, in float64; the book's own rounds the
    frequencies to float32, within 1e-6 of these), and differs from plain RoPE."""
    config = {
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_context_length": 64,
    }
    torch.manual_seed(0)
    module = GroupedQueryAttention(32, num_heads=2, num_kv_groups=1, head_dim=16).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    cos, sin = compute_rope_params(16, 500_000, 6, freq_config=config, dtype=torch.float64)
    book = llama3.compute_rope_params(16, 500_000, 6, freq_config=config, dtype=torch.float64)
    torch.testing.assert_close(book, (cos, sin), rtol=0, atol=1e-6)
    names = ("W_query", "W_key", "W_value", "out_proj")
    w = [getattr(module, name).weight.mT for name in names]
    got = grouped_query_attention(x, *w, heads=2, groups=1, theta_base=500_000, freq_config=config)
    torch.testing.assert_close(got, module(x, None, cos, sin), rtol=0, atol=1e-12)
    plain = grouped_query_attention(x, *w, heads=2, groups=1, theta_base=500_000)
    assert (plain - got).abs().max() > 1e-3


def test_qk_norm_whole_is_the_book_s_olmo_3():
    """qk_norm="whole": RMSNorm(num_heads·head_dim) on the rows of Q and RMSNorm(num_kv_groups·
    head_dim) on those of K, before the heads are split (the book's OLMo 3), against the
    formula written out; with random gains it differs from the per-head norm of Qwen 3."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from reference_variants import gqa_reference

    torch.manual_seed(0)
    module = GroupedQueryAttention(
        12, num_heads=4, num_kv_groups=2, head_dim=4, qk_norm="whole", dtype=torch.float64
    )
    assert (module.q_norm.scale.shape, module.k_norm.scale.shape) == ((16,), (8,))
    with torch.no_grad():
        module.q_norm.scale.uniform_(0.5, 2.0)
        module.k_norm.scale.uniform_(0.5, 2.0)
    x = torch.randn(5, 12, dtype=torch.float64)
    cos, sin = compute_rope_params(4, theta_base=100, context_length=5, dtype=torch.float64)
    blocked = torch.ones(5, 5, dtype=torch.bool).triu(1)
    w = {
        name: getattr(module, name).weight.mT
        for name in ("W_query", "W_key", "W_value", "out_proj")
    }
    expected = gqa_reference(
        x.detach(),
        *(w[k].detach() for k in ("W_query", "W_key", "W_value")),
        w["out_proj"].detach(),
        heads=4,
        groups=2,
        causal=True,
        theta_base=100,
        q_gain=module.q_norm.scale.detach(),
        k_gain=module.k_norm.scale.detach(),
    )
    got = module(x, blocked, cos, sin).detach().numpy()
    assert abs(got - expected).max() < 1e-12
    per_head = GroupedQueryAttention(
        12, num_heads=4, num_kv_groups=2, head_dim=4, qk_norm=True, dtype=torch.float64
    )
    per_head.load_state_dict(
        {k: v for k, v in module.state_dict().items() if "norm" not in k}, strict=False
    )
    with torch.no_grad():  # gains of ones on both: what differs is which features are normalised
        module.q_norm.scale.fill_(1.0)
        module.k_norm.scale.fill_(1.0)
    whole = module(x, blocked, cos, sin).detach().numpy()
    assert abs(per_head(x, blocked, cos, sin).detach().numpy() - whole).max() > 1e-3
