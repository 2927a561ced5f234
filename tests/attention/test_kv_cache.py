"""The key-value cache of `MultiHeadAttention` and `MultiHeadAttentionWithSWA`: faithful to the
book's classes (ch. 4's bonus material, restated in tests/book_generation.py), equal to full
attention token by token, and a drop-in for the book's GPT, whose generated tokens do not
change."""

import copy

import book_generation
import pytest
import torch
from book import BookMultiHeadAttention
from book_generation import (
    BookKVMultiHeadAttention,
    BookMultiHeadAttentionWithSWA,
    GPTModel,
    generate_text_simple_cached,
)

from attention import MultiHeadAttention, MultiHeadAttentionWithSWA, ShapeError
from attention import functional as F

D, D_OUT, HEADS, CONTEXT = 6, 8, 2, 24

# (ours, the book's, constructor arguments): one row per class and window
CLASSES = [
    (MultiHeadAttention, BookKVMultiHeadAttention, (D, D_OUT, CONTEXT, 0.0, HEADS)),
    (MultiHeadAttentionWithSWA, BookMultiHeadAttentionWithSWA, (D, D_OUT, 0.0, HEADS, False, 4)),
    (MultiHeadAttentionWithSWA, BookMultiHeadAttentionWithSWA, (D, D_OUT, 0.0, HEADS, True, 1)),
    (MultiHeadAttentionWithSWA, BookMultiHeadAttentionWithSWA, (D, D_OUT, 0.0, HEADS)),  # None
]
IDS = ["kv-cache", "swa-4", "swa-1-bias", "swa-none"]


def window_of(module):
    return getattr(module, "sliding_window_size", None)


@pytest.mark.parametrize(("ours", "book", "args"), CLASSES, ids=IDS)
def test_same_seed_same_parameters_buffers_and_attributes(ours, book, args):
    torch.manual_seed(123)
    reference = book(*args)
    torch.manual_seed(123)
    module = ours(*args)
    names = [name for name, _ in module.named_parameters()]
    assert names == [name for name, _ in reference.named_parameters()]  # names, creation order
    extra = {"mask"} if ours is MultiHeadAttention else set()  # chapter 3's, persistent in ours
    assert set(module.state_dict()) == set(reference.state_dict()) | extra
    for name, tensor in reference.state_dict().items():
        assert torch.equal(module.state_dict()[name], tensor), name
    for name in ("d_out", "num_heads", "head_dim", "ptr_current_pos", "cache_k", "cache_v"):
        assert getattr(module, name) == getattr(reference, name), name
    assert window_of(module) == window_of(reference)


@pytest.mark.parametrize(("ours", "book", "args"), CLASSES, ids=IDS)
def test_the_cache_and_every_output_match_the_books_class(ours, book, args):
    torch.manual_seed(7)
    reference = book(*args).eval()
    module = ours(*args).eval()
    module.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 11, D)
    for chunk in ([0, 5], [5, 6], [6, 7], [7, 10], [10, 11]):  # a prompt, tokens, a chunk
        part = x[:, chunk[0] : chunk[1]]
        torch.testing.assert_close(
            module(part, use_cache=True), reference(part, use_cache=True), rtol=0, atol=1e-6
        )
        torch.testing.assert_close(module.cache_k, reference.cache_k, rtol=0, atol=1e-6)
        torch.testing.assert_close(module.cache_v, reference.cache_v, rtol=0, atol=1e-6)
        assert module.ptr_current_pos == reference.ptr_current_pos == chunk[1]
    window = window_of(module)
    assert module.cache_k.shape == (2, 11 if window is None else min(11, window), HEADS, 4)
    module.reset_cache()
    assert (module.cache_k, module.cache_v, module.ptr_current_pos) == (None, None, 0)


@pytest.mark.parametrize(("ours", "book", "args"), CLASSES, ids=IDS)
def test_token_by_token_equals_full_causal_attention(ours, book, args):
    torch.manual_seed(11)
    module = ours(*args).eval()
    x = torch.randn(3, 20, D)
    full = module(x)  # the whole sequence, no cache: causal (within the window)
    window = window_of(module)
    expected = F.multi_head_attention(
        x,
        module.w_q,
        module.w_k,
        module.w_v,
        module.w_o,
        b_o=module.out_proj.bias,
        heads=HEADS,
        causal=True,
        window=window,
        b_q=module.W_query.bias,
        b_k=module.W_key.bias,
        b_v=module.W_value.bias,
    )
    torch.testing.assert_close(full, expected, rtol=0, atol=1e-6)
    module.reset_cache()
    rows = [module(x[:, t : t + 1], use_cache=True) for t in range(20)]
    torch.testing.assert_close(torch.cat(rows, dim=1), full, rtol=0, atol=1e-5)
    if window is not None:
        assert module.cache_k.shape[1] == window  # the memory stays O(w·c)
    assert not torch.allclose(full, module.__class__(*args).eval()(x))  # the weights matter


def test_the_window_changes_the_result_and_none_is_causal():
    torch.manual_seed(3)
    swa = MultiHeadAttentionWithSWA(D, D_OUT, 0.0, HEADS, sliding_window_size=3).eval()
    mha = MultiHeadAttention(D, D_OUT, CONTEXT, 0.0, HEADS).eval()
    mha.load_state_dict(swa.state_dict(), strict=False)  # the same weights
    x = torch.randn(2, 9, D)
    assert not torch.allclose(swa(x), mha(x))
    torch.testing.assert_close(swa(x)[:, :3], mha(x)[:, :3], rtol=0, atol=1e-6)
    swa.sliding_window_size = None  # as the book's GPTModel sets it, layer by layer
    torch.testing.assert_close(swa(x), mha(x), rtol=0, atol=1e-6)


def test_state_dicts_of_both_book_classes_load():
    torch.manual_seed(5)
    chapter3, chapter4 = BookMultiHeadAttention(D, D_OUT, CONTEXT, 0.0, HEADS), None
    chapter4 = BookKVMultiHeadAttention(D, D_OUT, CONTEXT, 0.0, HEADS)
    assert "mask" in chapter3.state_dict() and "mask" not in chapter4.state_dict()
    x = torch.randn(2, 7, D)
    for book in (chapter3, chapter4):
        module = MultiHeadAttention(D, D_OUT, CONTEXT, 0.0, HEADS)
        module.load_state_dict(book.state_dict(), strict=True)
        torch.testing.assert_close(module(x), book(x), rtol=0, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"size mismatch for mask"):  # still checked if given
        MultiHeadAttention(D, D_OUT, CONTEXT + 1, 0.0, HEADS).load_state_dict(chapter3.state_dict())


def gpt_config(**changes):
    return {
        "vocab_size": 97,
        "context_length": 40,
        "emb_dim": 12,
        "n_heads": 3,
        "n_layers": 2,
        "drop_rate": 0.0,
        "qkv_bias": False,
        **changes,
    }


@pytest.fixture
def ours_in_the_gpt(monkeypatch):
    """The book's GPT building `attention`'s classes in place of its own."""
    monkeypatch.setattr(book_generation, "MultiHeadAttention", MultiHeadAttention)
    monkeypatch.setattr(book_generation, "MultiHeadAttentionWithSWA", MultiHeadAttentionWithSWA)


@pytest.mark.parametrize(
    "config",
    [
        gpt_config(),  # the KV-cache GPT
        gpt_config(sliding_window_size=5, sliding_window_stride=1),  # SWA, then regular
        gpt_config(sliding_window_size=3, sliding_window_stride=-1, qkv_bias=True),  # all SWA
    ],
    ids=["kv-cache", "swa-1:1", "swa-all"],
)
def test_the_books_gpt_generates_the_same_tokens_with_our_class(config, monkeypatch):
    torch.manual_seed(123)
    book_model = GPTModel(config)
    prompt = torch.randint(
        0, config["vocab_size"], (2, 4), generator=torch.Generator().manual_seed(0)
    )
    book_cached = generate_text_simple_cached(book_model, prompt, 30)
    book_uncached = generate_text_simple_cached(book_model, prompt, 30, use_cache=False)
    monkeypatch.setattr(book_generation, "MultiHeadAttention", MultiHeadAttention)
    monkeypatch.setattr(book_generation, "MultiHeadAttentionWithSWA", MultiHeadAttentionWithSWA)
    torch.manual_seed(123)
    model = GPTModel(config)  # the same seed: the same parameters
    kinds = {type(block.att) for block in model.trf_blocks}
    assert kinds <= {MultiHeadAttention, MultiHeadAttentionWithSWA}
    for (name, ours), theirs in zip(model.named_parameters(), book_model.parameters(), strict=True):
        assert torch.equal(ours, theirs), name
    cached = generate_text_simple_cached(model, prompt, 30)
    uncached = generate_text_simple_cached(model, prompt, 30, use_cache=False)
    assert torch.equal(cached, book_cached)
    assert torch.equal(uncached, book_uncached)
    assert torch.equal(cached, uncached)
    assert cached.shape == (2, 34) and len(set(cached[0, 4:].tolist())) > 1  # it did generate
    windows = [
        block.att.sliding_window_size
        for block in model.trf_blocks
        if isinstance(block.att, MultiHeadAttentionWithSWA)
    ]
    assert windows == [
        block.att.sliding_window_size
        for block in book_model.trf_blocks
        if hasattr(block.att, "sliding_window_size")
    ]


def test_past_context_length_says_so_and_keeps_the_cache():
    torch.manual_seed(0)
    module = MultiHeadAttention(D, D_OUT, 6, 0.0, HEADS).eval()
    module(torch.randn(1, 4, D), use_cache=True)
    before = module.cache_k.clone(), module.ptr_current_pos
    with pytest.raises(
        ShapeError,
        match=r"^MultiHeadAttention.forward: use_cache=True past context_length=6: "
        r"the cache holds 4 tokens and x adds n=3; call reset_cache\(\)",
    ):
        module(torch.randn(1, 3, D), use_cache=True)
    assert torch.equal(module.cache_k, before[0]) and module.ptr_current_pos == before[1]
    module(torch.randn(1, 2, D), use_cache=True)  # exactly up to context_length: fine
    assert module.ptr_current_pos == 6


@pytest.mark.parametrize("cls", [MultiHeadAttention, MultiHeadAttentionWithSWA])
def test_bad_calls_with_the_cache_are_named_and_change_nothing(cls):
    args = (D, D_OUT, CONTEXT, 0.0, HEADS) if cls is MultiHeadAttention else (D, D_OUT, 0.0, HEADS)
    module = cls(*args).eval()
    module.reset_cache()  # on a fresh module: harmless
    assert (module.cache_k, module.ptr_current_pos) == (None, 0)
    where = cls.__name__ + ".forward"
    module(torch.randn(2, 3, D), use_cache=True)
    before = module.cache_k.clone()
    with pytest.raises(
        ShapeError,
        match=rf"^{where}: x has batch=\(3,\) but cache_k has batch=\(2,\); call reset_cache\(\)",
    ):
        module(torch.randn(3, 1, D), use_cache=True)
    with pytest.raises(
        ValueError,
        match=rf"^{where}: use_cache=True takes no mask, key_padding_mask or return_weights, got key_padding_mask",
    ):
        module(
            torch.randn(2, 1, D),
            use_cache=True,
            key_padding_mask=torch.ones(2, 1, dtype=torch.bool),
        )
    with pytest.raises(ValueError, match=r"got mask, return_weights$"):
        module(
            torch.randn(2, 1, D),
            use_cache=True,
            mask=torch.ones(2, 1, 1, dtype=torch.bool),
            return_weights=True,
        )
    with pytest.raises(ShapeError, match=rf"^{where}: W_query.weight has d=6 but x has d=5"):
        module(torch.randn(2, 1, 5), use_cache=True)
    with pytest.raises(TypeError, match=rf"^{where}: use_cache must be bool, got 1"):
        module(torch.randn(2, 1, D), use_cache=1)
    assert torch.equal(module.cache_k, before) and module.ptr_current_pos == 3
    with pytest.raises(ShapeError, match=r"cache_k has batch"):  # an unbatched x is a new batch
        module(torch.randn(1, D), use_cache=True)


@pytest.mark.parametrize(
    ("size", "error", "message"),
    [
        (0, ValueError, r"got sliding_window_size=0"),
        (-2, ValueError, r"got sliding_window_size=-2"),
        (True, ValueError, r"got sliding_window_size=True"),  # a bool is not a size
        (2.0, ValueError, r"got sliding_window_size=2.0"),
        ("4", ValueError, r"got sliding_window_size='4'"),
    ],
)
def test_a_bad_window_is_refused_at_construction_and_at_forward(size, error, message):
    expected = "sliding_window_size must be a positive integer or None, " + message
    with pytest.raises(error, match=r"^MultiHeadAttentionWithSWA: " + expected):
        MultiHeadAttentionWithSWA(D, D_OUT, 0.0, HEADS, sliding_window_size=size)
    module = MultiHeadAttentionWithSWA(D, D_OUT, 0.0, HEADS, sliding_window_size=2)
    module.sliding_window_size = size  # set later, as the book's GPTModel does
    with pytest.raises(error, match=r"^MultiHeadAttentionWithSWA.forward: " + expected):
        module(torch.randn(1, 3, D))


@pytest.mark.parametrize(("ours", "book", "args"), CLASSES[:2], ids=IDS[:2])
def test_torch_compile_with_and_without_the_cache(ours, book, args):
    torch.manual_seed(4)
    module = ours(*args).eval()
    twin = copy.deepcopy(module)
    # the cache's length changes at every step, and with it the graph: a graph per call (Dynamo
    # recompiles, then falls back to running the frame eagerly); aot_eager keeps the test short
    compiled = torch.compile(module, backend="aot_eager")
    x = torch.randn(2, 9, D)
    torch.testing.assert_close(compiled(x), twin(x), rtol=0, atol=1e-6)
    for chunk in ((0, 4), (4, 5), (5, 6), (6, 9)):
        part = x[:, chunk[0] : chunk[1]]
        torch.testing.assert_close(
            compiled(part, use_cache=True), twin(part, use_cache=True), rtol=0, atol=1e-6
        )
    assert module.ptr_current_pos == twin.ptr_current_pos == 9
    torch.testing.assert_close(module.cache_k, twin.cache_k)
    with pytest.raises(ShapeError, match=r"has d=6 but x has d=5"):
        compiled(torch.randn(2, 1, 5), use_cache=True)
