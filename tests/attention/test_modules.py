"""The modules: faithful to the book's classes, checked at every forward, compilable."""

import pytest
import torch
import torch.nn as nn
from book import (
    INPUTS,
    BookCausalAttention,
    BookMultiHeadAttention,
    BookMultiHeadAttentionWrapper,
    BookSelfAttentionV1,
    BookSelfAttentionV2,
)

from attention import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
    ShapeError,
    copy_weights,
)

BATCH = torch.stack((INPUTS, INPUTS))

# (ours, the book's, constructor arguments, input): one row per class.
PAIRS = [
    (SelfAttentionV1, BookSelfAttentionV1, (3, 2), INPUTS),
    (SelfAttentionV2, BookSelfAttentionV2, (3, 2), INPUTS),
    (SelfAttentionV2, BookSelfAttentionV2, (3, 2, True), INPUTS),  # with qkv_bias
    (CausalAttention, BookCausalAttention, (3, 2, 6, 0.0), BATCH),
    (MultiHeadAttentionWrapper, BookMultiHeadAttentionWrapper, (3, 2, 6, 0.0, 2), BATCH),
    (MultiHeadAttention, BookMultiHeadAttention, (3, 4, 6, 0.0, 2), BATCH),
]
IDS = ["V1", "V2", "V2-bias", "causal", "wrapper", "multi-head"]


@pytest.mark.parametrize(("ours", "book", "args", "x"), PAIRS, ids=IDS)
def test_same_seed_same_parameters_and_numbers(ours, book, args, x):
    torch.manual_seed(123)
    reference = book(*args)
    torch.manual_seed(123)
    module = ours(*args)
    assert list(module.state_dict()) == list(reference.state_dict())  # names and creation order
    for name, tensor in reference.state_dict().items():
        assert torch.equal(module.state_dict()[name], tensor), name
    torch.testing.assert_close(module(x), reference(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize(("ours", "book", "args", "x"), PAIRS, ids=IDS)
def test_book_state_dict_loads_unchanged(ours, book, args, x):
    torch.manual_seed(7)
    reference = book(*args)
    torch.manual_seed(8)  # different weights before loading
    module = ours(*args)
    module.load_state_dict(reference.state_dict(), strict=True)
    torch.testing.assert_close(module(x), reference(x), rtol=0, atol=1e-6)


# Printed in the book (ch. 3) for these seeds and INPUTS, to 4 decimals.
BOOK_PRINTED = [
    (
        SelfAttentionV1,
        (3, 2),
        789 - 666,
        INPUTS,  # seed 123
        [
            [0.2996, 0.8053],
            [0.3061, 0.8210],
            [0.3058, 0.8203],
            [0.2948, 0.7939],
            [0.2927, 0.7891],
            [0.2990, 0.8040],
        ],
    ),
    (
        SelfAttentionV2,
        (3, 2),
        789,
        INPUTS,
        [
            [-0.0739, 0.0713],
            [-0.0748, 0.0703],
            [-0.0749, 0.0702],
            [-0.0760, 0.0685],
            [-0.0763, 0.0679],
            [-0.0754, 0.0693],
        ],
    ),
    (
        CausalAttention,
        (3, 2, 6, 0.0),
        123,
        BATCH,
        [
            [-0.4519, 0.2216],
            [-0.5874, 0.0058],
            [-0.6300, -0.0632],
            [-0.5675, -0.0843],
            [-0.5526, -0.0981],
            [-0.5299, -0.1081],
        ],
    ),
    (
        MultiHeadAttention,
        (3, 2, 6, 0.0, 2),
        123,
        BATCH,
        [
            [0.3190, 0.4858],
            [0.2943, 0.3897],
            [0.2856, 0.3593],
            [0.2693, 0.3873],
            [0.2639, 0.3928],
            [0.2575, 0.4028],
        ],
    ),
]


@pytest.mark.parametrize(("cls", "args", "seed", "x", "printed"), BOOK_PRINTED)
def test_numbers_printed_in_the_book(cls, args, seed, x, printed):
    torch.manual_seed(seed)
    out = cls(*args)(x)
    first = out if out.dim() == 2 else out[0]
    torch.testing.assert_close(first, torch.tensor(printed), rtol=0, atol=6e-5)


def test_v1_equals_v2_after_copying_weights_both_ways():
    torch.manual_seed(0)
    v1, v2 = SelfAttentionV1(3, 2), SelfAttentionV2(3, 2)
    assert not torch.allclose(v1(INPUTS), v2(INPUTS))
    copy_weights(v2, v1)  # the book's exercise 3.1
    # x @ W and nn.Linear's x @ Wᵀᵀ may take different float32 kernels: a few ulps apart
    torch.testing.assert_close(v1(INPUTS), v2(INPUTS), rtol=0, atol=5e-7)
    assert torch.equal(v1.W_query, v2.W_query.weight.T)
    torch.manual_seed(1)
    v1 = SelfAttentionV1(3, 2)
    copy_weights(v1, v2)
    torch.testing.assert_close(v2(INPUTS), v1(INPUTS), rtol=0, atol=5e-7)


def test_seed_orientation_of_weights():
    v2 = SelfAttentionV2(3, 2)
    assert v2.w_q.shape == (3, 2) and v2.W_query.weight.shape == (2, 3)
    torch.testing.assert_close(INPUTS @ v2.w_q, v2.W_query(INPUTS))  # Q = X Wq
    v1 = SelfAttentionV1(3, 2)
    assert v1.w_k is v1.W_key


def test_copy_weights_refuses_to_drop_a_bias_and_mismatched_sizes():
    biased = SelfAttentionV2(3, 2, qkv_bias=True)
    with pytest.raises(ValueError, match=r"source has a W_query bias but the target has none"):
        copy_weights(biased, SelfAttentionV1(3, 2))
    with pytest.raises(
        ShapeError, match=r"source has \(d, c\)=\(3, 2\) but target has \(d, c\)=\(4, 2\)"
    ):
        copy_weights(SelfAttentionV1(3, 2), SelfAttentionV1(4, 2))
    copy_weights(SelfAttentionV1(3, 2), biased)  # no bias into a bias: zeros, the same function
    assert torch.equal(biased.W_query.bias, torch.zeros(2))


@pytest.mark.parametrize(
    ("module", "x", "message"),
    [
        # input width differs from the weights'
        (
            SelfAttentionV1(3, 2),
            torch.rand(6, 4),
            r"SelfAttentionV1.forward: W_query has d=3 but x has d=4",
        ),
        (
            SelfAttentionV2(3, 2),
            torch.rand(2, 6, 5),
            r"SelfAttentionV2.forward: W_query.weight has d=3 but x has d=5",
        ),
        # a 1-D input
        (SelfAttentionV2(3, 2), torch.rand(3), r"x must have shape \(\*batch, n, d\)"),
        # longer than the context
        (
            CausalAttention(3, 2, 6, 0.0),
            torch.rand(2, 7, 3),
            r"CausalAttention.forward: x has n=7 tokens but context_length=6",
        ),
        (
            MultiHeadAttention(3, 4, 5, 0.0, 2),
            torch.rand(1, 6, 3),
            r"MultiHeadAttention.forward: x has n=6 tokens but context_length=5",
        ),
    ],
)
def test_forward_names_the_offending_argument(module, x, message):
    with pytest.raises(ShapeError, match=message):
        module(x)


def test_weights_are_checked_against_the_input():
    sa = SelfAttentionV1(3, 2)
    sa(INPUTS)  # a good call first: its signature is remembered
    sa.W_key = nn.Parameter(torch.rand(3, 5))  # someone replaced a weight with the wrong c
    with pytest.raises(ShapeError, match=r"W_key has c=5 but W_query has c=2"):
        sa(INPUTS)
    mha = MultiHeadAttention(3, 4, 6, 0.0, 2)
    mha.out_proj = nn.Linear(2, 4)
    with pytest.raises(ShapeError, match=r"out_proj.weight has c=2 but W_query.weight has c=4"):
        mha(BATCH)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: MultiHeadAttention(3, 5, 6, 0.0, 2), r"d_out=5 is not divisible by num_heads=2"),
        (lambda: CausalAttention(3, 2, 6, 1.0), r"dropout must be in \[0, 1\), got dropout=1.0"),
        (lambda: CausalAttention(3, 2, 6, -0.5), r"dropout must be in \[0, 1\), got dropout=-0.5"),
        (
            lambda: MultiHeadAttention(3, 4, 6, 0.1, 0),
            r"num_heads must be a positive integer, got num_heads=0",
        ),
        (
            lambda: SelfAttentionV1(0, 2),
            r"SelfAttentionV1: d_in must be a positive integer, got d_in=0",
        ),
        (lambda: CausalAttention(3, 2, 2.5, 0.0), r"context_length must be a positive integer"),
    ],
)
def test_bad_constructor_arguments(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize(("ours", "book", "args", "x"), PAIRS, ids=IDS)
def test_torch_compile_gives_the_same_numbers_and_keeps_the_checks(ours, book, args, x):
    torch.manual_seed(3)
    module = ours(*args).eval()
    compiled = torch.compile(module)
    torch.testing.assert_close(compiled(x), module(x), rtol=0, atol=1e-6)
    wrong = torch.rand(*x.shape[:-1], 5)
    with pytest.raises(ShapeError, match=r"has d=3 but x has d=5|has d=5"):
        compiled(wrong)


def test_checked_and_unchecked_forward_are_identical():
    import jaxtyping

    torch.manual_seed(4)
    mha = MultiHeadAttention(3, 4, 6, 0.0, 2)
    checked = mha(BATCH)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        unchecked = mha(BATCH)
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    assert torch.equal(checked, unchecked)


def test_every_module_stays_compiled_when_several_are_used():
    # TorchDynamo keeps graphs per code object and gives up after 8 recompilations of one;
    # if the checked forwards shared one wrapper's code, the later classes would silently run
    # eagerly. Count the graphs each compiled module hands to its backend.
    graphs = {}

    def counting(name):
        def backend(graph_module, example_inputs):
            graphs[name] = graphs.get(name, 0) + 1
            return graph_module.forward

        return backend

    for index, (ours, _, args, x) in enumerate(PAIRS):
        module = ours(*args)
        compiled = torch.compile(module, backend=counting(f"{IDS[index]}"))
        compiled(x)
        with torch.no_grad():
            compiled(x)
        module.eval()
        compiled(x)
        with pytest.raises(ShapeError):
            compiled(torch.rand(*x.shape[:-1], 5))
    assert set(graphs) == set(IDS), graphs  # every class compiled something
