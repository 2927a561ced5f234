"""Masked positions have no influence: NaN and ±inf at a key no query may attend change no other
output, on both paths and through grouped-query attention; at a position that neither attends nor
is attended, they change nothing, gradients included."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from attention import CausalAttention, GroupedQueryAttention, MultiHeadAttention
from attention import functional as F
from attention.grouped import grouped_query_attention

POISONS = [math.nan, math.inf, -math.inf]


@st.composite
def masked_calls(draw, isolate):
    """Inputs with masks; with `isolate`, the keys no query attends do not attend either."""
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2), label="batch"))
    n, d = draw(st.integers(2, 7), label="n"), draw(st.integers(1, 5), label="d")
    heads = draw(st.integers(1, 3), label="heads")
    c = heads * draw(st.integers(1, 2), label="c_h")
    causal = draw(st.booleans(), label="causal")
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16), label="seed"))
    exists = torch.rand(*batch, n, generator=g) > 0.4  # key padding: the tokens that exist
    mask = torch.rand(*batch, n, n, generator=g) > 0.2 if draw(st.booleans()) else None
    if isolate:  # the missing tokens are not queries either
        rows = exists.unsqueeze(-1).expand(*batch, n, n)  # (*batch, n) -> (*batch, n, n)
        mask = rows if mask is None else mask & rows
    x = torch.randn(*batch, n, d, generator=g, dtype=torch.float64)
    weights = [torch.randn(d, c, generator=g, dtype=torch.float64) for _ in range(3)]
    w_o = torch.randn(c, c, generator=g, dtype=torch.float64)
    options = {"heads": heads, "causal": causal, "mask": mask, "key_padding_mask": exists}
    poison = draw(st.sampled_from(POISONS), label="poison")
    explicit = draw(st.booleans(), label="explicit path")
    return x, [*weights, w_o], options, poison, explicit


def allowed(options, n):
    """The combined mask, True where query m may attend key p: (*batch, n, n)."""
    result = options["key_padding_mask"].unsqueeze(-2)  # (*batch, n) -> (*batch, 1, n)
    if options["mask"] is not None:
        result = result & options["mask"]
    if options["causal"]:
        result = result & torch.ones(n, n, dtype=torch.bool).tril()
    return result.expand(*options["key_padding_mask"].shape[:-1], n, n)


def run(x, weights, options, explicit, upstream=None):
    leaves = [t.clone().requires_grad_() for t in (x, *weights)]
    out = F.multi_head_attention(*leaves, **options, return_weights=explicit)
    out = out[0] if explicit else out
    if upstream is None:
        return out.detach(), None
    return out.detach(), torch.autograd.grad(out, leaves, upstream)


@given(masked_calls(isolate=False))
def test_keys_no_query_attends_change_no_other_row(call):
    x, weights, options, poison, explicit = call
    n = x.shape[-2]
    unattended = ~allowed(options, n).any(dim=-2)  # (*batch, n): keys no query may attend
    poisoned = x.masked_fill(unattended.unsqueeze(-1), poison)
    clean_out, _ = run(x, weights, options, explicit)
    out, _ = run(poisoned, weights, options, explicit)
    # a poisoned position still reads its own x as a query, unless it attends nothing at all
    blind = ~allowed(options, n).any(dim=-1)
    kept = ~unattended | blind  # (*batch, n): the rows that must not change
    assert torch.equal(out[kept], clean_out[kept])
    assert torch.isfinite(out[kept]).all()


@given(masked_calls(isolate=True))
def test_positions_that_neither_attend_nor_are_attended_change_nothing(call):
    x, weights, options, poison, explicit = call
    n = x.shape[-2]
    isolated = ~allowed(options, n).any(dim=-2) & ~allowed(options, n).any(dim=-1)
    poisoned = x.masked_fill(isolated.unsqueeze(-1), poison)
    upstream = torch.randn(*x.shape[:-1], weights[-1].shape[-1], dtype=x.dtype)
    clean_out, clean_grads = run(x, weights, options, explicit, upstream)
    out, grads = run(poisoned, weights, options, explicit, upstream)
    assert torch.equal(out, clean_out)
    for got, expected in zip(grads, clean_grads, strict=True):
        assert torch.isfinite(got).all()
        assert torch.equal(got, expected)
    assert torch.equal(grads[0][isolated], torch.zeros_like(grads[0][isolated]))


def test_a_nan_in_a_padded_token_leaves_the_modules_other_rows_alone():
    # The case: NaN in a masked-out key turned every row into NaN, through both paths.
    torch.manual_seed(0)
    x = torch.rand(2, 6, 3)
    exists = torch.tensor([[True] * 6, [True, True, True, True, False, False]])
    poisoned = x.clone()
    poisoned[1, 4:] = math.nan
    for module in (CausalAttention(3, 4, 6, 0.0), MultiHeadAttention(3, 4, 6, 0.0, 2)):
        for return_weights in (False, True):
            clean = module(x, key_padding_mask=exists, return_weights=return_weights)
            out = module(poisoned, key_padding_mask=exists, return_weights=return_weights)
            clean, out = (t[0] if return_weights else t for t in (clean, out))
            # causal: the padded tokens are the last ones, so every other row is untouched
            assert torch.equal(out[:, :4], clean[:, :4]), type(module).__name__
            assert torch.equal(out[0], clean[0])


def run_grouped(x, weights, options):
    """grouped_query_attention with the call's masks as its one mask, its heads in one group
    (g = 1) when the heads' count allows no other divisor."""
    w_q, w_k, w_v, w_o = weights
    heads, width = options["heads"], w_q.shape[-1] // options["heads"]
    mask = allowed({**options, "causal": False}, x.shape[-2])
    return grouped_query_attention(
        x,
        w_q,
        w_k[:, :width],
        w_v[:, :width],
        w_o,
        heads=heads,
        groups=1,
        causal=options["causal"],
        mask=mask,
    )


@given(masked_calls(isolate=False))
def test_grouped_query_attention_s_unattended_keys_change_no_other_row(call):
    x, weights, options, poison, _ = call
    n = x.shape[-2]
    unattended = ~allowed(options, n).any(dim=-2)
    poisoned = x.masked_fill(unattended.unsqueeze(-1), poison)
    clean_out, out = run_grouped(x, weights, options), run_grouped(poisoned, weights, options)
    blind = ~allowed(options, n).any(dim=-1)
    kept = ~unattended | blind
    assert torch.equal(out[kept], clean_out[kept])
    assert torch.isfinite(out[kept]).all()


def test_a_nan_in_a_padded_token_leaves_the_grouped_module_s_other_rows_alone():
    torch.manual_seed(1)
    module = GroupedQueryAttention(4, num_heads=2, num_kv_groups=1, head_dim=2).double()
    x = torch.rand(2, 6, 4, dtype=torch.float64)
    blocked = ~F.causal_mask(6)
    blocked[:, 4:] = True  # the books' mask: the last two tokens are padding, no row reads them
    poisoned = x.clone()
    poisoned[1, 4:] = math.nan
    out, clean = module(poisoned, blocked), module(x, blocked)
    assert torch.equal(out[:, :4], clean[:, :4]) and torch.equal(out[0], clean[0])
    assert torch.isnan(out[1, 4:]).all()  # their own rows read their own NaN queries
