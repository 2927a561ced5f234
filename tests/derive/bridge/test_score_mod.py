"""A variant's rule on the scores generated from its declaration (`derive.score_mod`): as an
`attention.mods` modification on the fast path, the explicit path and flash, its values and
gradients (a learned number per head included) equal the hand-written modifications' and the
generated code's in float64; FlexAttention's forward with its score_mod and mask_mod equals
ours; its score_mod_bwd equals autograd's; a derivative derive got wrong is never given; what
is not a rule on the scores is refused by its step."""

import dataclasses
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import sympy as sp
import torch

import derive
from attention import _core, flash
from attention import mods as M
from attention.grouped import grouped_query_attention
from derive.bridge.score_mod import ScoreMod
from derive.codegen.rule import SCORE
from derive.graph.registry import unregister_variant

ROOT = Path(__file__).resolve().parents[3]
SSMAX = f"{ROOT}/docs/examples/scalable_softmax.py:SSMAX"
N, D = 7, 8


@dataclasses.dataclass(frozen=True)
class Case:
    """A rule, its sizes, and the same attention by hand: `attention`'s own keywords and
    modifications given the per-head number (None where the rule reads none)."""

    name: str
    values: dict
    heads: int
    groups: int
    learned: bool
    by_hand: Callable[[torch.Tensor | None], dict]


CASES = [
    Case("softcap", {"kappa": 2}, 1, 1, False, lambda _: {"softcap": 2.0}),
    # κ = 1: f = tanh(ω̃) is the very tensor the backward pass keeps (the masks must not write
    # into it)
    Case("causal+softcap", {"kappa": 1}, 1, 1, False, lambda _: {"causal": True, "softcap": 1.0}),
    Case("multi-head+softcap", {"kappa": 2}, 2, 2, False, lambda _: {"softcap": 2.0}),
    Case(
        "gqa+alibi+softcap",
        {"kappa": 3},
        4,
        2,
        True,
        lambda mu: {"causal": True, "softcap": 3.0, "alibi": mu},
    ),
    Case(  # two masks of the declaration merged into one step: both kept
        "chunked+sliding-window+softcap",
        {"chi": 4, "w": 3, "kappa": 2},
        1,
        1,
        False,
        lambda _: {"causal": True, "window": 3, "softcap": 2.0, "mods": (M.Chunked(4),)},
    ),
    Case(
        "causal+temperature-tuning",
        {"F": 2, "alpha": 0.5},
        1,
        1,
        False,
        lambda _: {"causal": True, "mods": (M.Temperature(2.0, 0.5),)},
    ),
    Case(
        "sliding-window+alibi",
        {"w": 3},
        1,
        1,
        True,
        lambda mu: {"causal": True, "window": 3, "alibi": mu},
    ),
    Case(
        "chunked+temperature-tuning",
        {"chi": 3, "F": 2, "alpha": 0.25},
        1,
        1,
        False,
        lambda _: {"causal": True, "mods": (M.Chunked(3), M.Temperature(2.0, 0.25))},
    ),
]


def _inputs(case: Case, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    kw = {"dtype": torch.float64, "generator": generator}
    width, kv = 4 * case.heads, 4 * case.groups
    x = torch.randn(2, N, D, **kw)
    w_q, w_k, w_v = (torch.randn(D, c, **kw) / 2 for c in (width, kv, kv))
    mu = torch.rand(case.heads, **kw) if case.learned else None
    return x, w_q, w_k, w_v, mu


def _leaves(*tensors):
    return [None if t is None else t.clone().requires_grad_() for t in tensors]


def _gradients(c: torch.Tensor, leaves: list, seed: int = 1) -> list[torch.Tensor]:
    upstream = torch.randn(c.shape, dtype=c.dtype, generator=torch.Generator().manual_seed(seed))
    wanted = [t for t in leaves if t is not None]
    return list(torch.autograd.grad(c, wanted, upstream))


def _run(case: Case, keywords: Callable, tensors) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x, *leaves = _leaves(*tensors)
    w_q, w_k, w_v, mu = leaves
    c = grouped_query_attention(
        x, w_q, w_k, w_v, None, heads=case.heads, groups=case.groups, **keywords(mu)
    )
    return c, _gradients(c, leaves)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_rule_on_the_fast_path_is_attention_by_hand(case: Case) -> None:
    """C and the gradients of W_q, W_k, W_v and the per-head number: the generated rule as a
    modification against `attention`'s hand-written modifications, on the fast path."""
    rule = derive.score_mod(case.name, **case.values)
    tensors = _inputs(case)
    got, got_grads = _run(case, lambda mu: {"mods": rule.mods(mu)}, tensors)
    want, want_grads = _run(case, case.by_hand, tensors)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert len(got_grads) == len(want_grads) == 3 + case.learned
    for have, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_rule_is_the_generated_code_of_its_declaration(case: Case) -> None:
    """The fast path with the rule against the variant's whole generated code (its forward
    from the declaration, its backward the derived gradients), C and every gradient."""
    rule = derive.score_mod(case.name, **case.values)
    x, w_q, w_k, w_v, mu = _inputs(case)
    got, got_grads = _run(case, lambda m: {"mods": rule.mods(m)}, (x, w_q, w_k, w_v, mu))
    function = derive.torch_function(case.name)
    heads = {"h": case.heads, "g": case.groups}
    own = dict(case.values) | {k: v for k, v in heads.items() if k in function.sizes}
    given = {"X": x, "W_q": w_q, "W_k": w_k, "W_v": w_v}
    if mu is not None:
        given["Mu"] = mu[None, :]
    if "W_o" in function.inputs:
        given["W_o"] = torch.eye(4 * case.heads, dtype=torch.float64)
    leaves = {k: v.clone().requires_grad_() for k, v in given.items()}
    want = function(*(leaves[k] for k in function.inputs), **own)
    names = ["W_q", "W_k", "W_v", *(["Mu"] if mu is not None else [])]
    want_grads = _gradients(want, [leaves[k] for k in names])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for have, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(have.reshape(expected.shape), expected, rtol=1e-9, atol=1e-11)


def _heads(case: Case, tensors) -> tuple[torch.Tensor, ...]:
    """Q (2, h, n, c_h), K and V (2, g, n, c_h)."""
    x, w_q, w_k, w_v, _ = tensors
    return (
        _core.split_heads(x @ w_q, case.heads),
        _core.split_heads(x @ w_k, case.groups),
        _core.split_heads(x @ w_v, case.groups),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_explicit_path_and_the_fast_path_agree(case: Case) -> None:
    """The explicit path (A wanted: the rule's `scores` under autograd) and the fast path (its
    derived `backward`) give the same C and the same gradients of Q, K, V and the number."""
    rule = derive.score_mod(case.name, **case.values)
    tensors = _inputs(case)
    results = []
    for weights in (True, False):
        q, k, v = _leaves(*_heads(case, tensors))
        (mu,) = _leaves(tensors[-1])
        c = _core.attend(q, k, v, scale=0.5, heads=True, mods=rule.mods(mu), return_weights=weights)
        c = c[0] if weights else c
        results.append((c, _gradients(c, [q, k, v, mu])))
    (explicit, explicit_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, explicit, rtol=1e-10, atol=1e-12)
    for have, expected in zip(fast_grads, explicit_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-9, atol=1e-11)


FLASH = {  # flash's own keywords for the masks (it takes no mask object but chunks)
    "causal+softcap": {"causal": True},
    "causal+temperature-tuning": {"causal": True},
    "sliding-window+alibi": {"causal": True, "window": 3},
    "chunked+temperature-tuning": {"causal": True, "mods": (M.Chunked(3),)},
    "softcap": {},
    "chunked+sliding-window+softcap": {"causal": True, "window": 3, "mods": (M.Chunked(4),)},
}


@pytest.mark.parametrize("name", sorted(FLASH))
def test_the_rule_runs_in_flash(name: str) -> None:
    """FlashAttention's blocked forward and backward with the rule (one head, constants) equal
    the fast path's C and gradients of Q, K, V."""
    case = next(case for case in CASES if case.name == name)
    rule = derive.score_mod(case.name, **case.values)
    tensors = _inputs(dataclasses.replace(case, heads=1, groups=1))
    q, k, v = (t[:, 0] for t in _heads(dataclasses.replace(case, heads=1, groups=1), tensors))
    mu = None if tensors[-1] is None else tensors[-1][:1]
    leaves = _leaves(q, k, v)
    fast = _core.attend(*leaves, scale=0.5, heads=False, mods=rule.mods(mu))
    upstream = torch.randn(fast.shape, dtype=torch.float64)
    want = torch.autograd.grad(fast, leaves, upstream)
    own = dict(FLASH[name])
    own["mods"] = (*own.get("mods", ()), rule.modification(mu))
    options = {"block_rows": 3, "block_keys": 2, "scale": 0.5, **own}
    c = flash.flash_attention(q, k, v, **options)
    got = flash.flash_gradients(q, k, v, upstream, **options)
    torch.testing.assert_close(c, fast.detach(), rtol=1e-10, atol=1e-12)
    for have, expected in zip((got.dQ, got.dK, got.dV), want, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-9, atol=1e-11)


def test_flexattention_with_the_generated_score_mod_and_mask_mod_is_ours() -> None:
    """FlexAttention compiled on this CPU (float32: its CPU kernels take no float64), with the
    rule's score_mod (a learned slope per head read as param[h]) and its mask_mod as the block
    mask, against our fast path with the rule, and against the hand-written modifications in
    float64."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    case = next(case for case in CASES if case.name == "gqa+alibi+softcap")
    rule = derive.score_mod(case.name, **case.values)
    generator = torch.Generator().manual_seed(3)
    n, width = 40, 8
    q = torch.randn(1, case.heads, n, width, generator=generator)
    k, v = (torch.randn(1, case.groups, n, width, generator=generator) for _ in range(2))
    mu = torch.rand(case.heads, generator=generator)
    block_mask = create_block_mask(rule.mask_mod, None, None, n, n, device="cpu")
    flex = torch.compile(flex_attention)(
        q, k, v, score_mod=rule.score_mod(mu), block_mask=block_mask, enable_gqa=True
    )
    scale = 1 / math.sqrt(width)
    ours = _core.attend(q, k, v, scale=scale, heads=True, mods=rule.mods(mu))
    torch.testing.assert_close(flex, ours, rtol=1e-5, atol=1e-5)
    by_hand = M.modifications(causal=True, softcap=3.0, alibi=mu.double())
    exact = _core.attend(q.double(), k.double(), v.double(), scale=scale, heads=True, mods=by_hand)
    torch.testing.assert_close(flex.double(), exact, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_score_mod_bwd_is_autograd_through_score_mod(case: Case) -> None:
    """score_mod_bwd(grad, score, b, h, q_idx, kv_idx) = grad · ∂score_mod/∂score, at every
    entry of a grid of scores, heads and positions (float64)."""
    rule = derive.score_mod(case.name, **case.values)
    generator = torch.Generator().manual_seed(4)
    mu = torch.rand(case.heads, dtype=torch.float64, generator=generator)
    param = mu if case.learned else None
    shape = (case.heads, N, N)
    score = (torch.randn(shape, dtype=torch.float64, generator=generator) * 4).requires_grad_()
    h = torch.arange(case.heads)[:, None, None]
    q_idx, kv_idx = torch.arange(N)[:, None], torch.arange(N)[None, :]
    grad = torch.randn(shape, dtype=torch.float64, generator=generator)
    out = rule.score_mod(param)(score, 0, h, q_idx, kv_idx)
    (want,) = torch.autograd.grad(out, score, grad)
    got = rule.score_mod_bwd(param)(grad, score.detach(), 0, h, q_idx, kv_idx)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_a_users_rule_scalable_softmax_with_its_learned_scale() -> None:
    """Scalable-Softmax as declared in docs/examples (its weights the softmax of s log n ω̃):
    a rule on the scores once n is given, s its learned number; on the fast path equal to its
    hand-written twin, C and the gradients of the weights and of s."""
    rule = derive.score_mod(SSMAX, n=N)
    assert rule.rule.parameter == "S"

    def by_hand(x, w_q, w_k, w_v, s):  # softmax(s log n ω̃) V, as the example's twin
        scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(w_q.shape[1])
        return (s * math.log(N) * scores).softmax(-1) @ (x @ w_v)

    generator = torch.Generator().manual_seed(5)
    x = torch.randn(N, D, dtype=torch.float64, generator=generator)
    weights = [torch.randn(D, 3, dtype=torch.float64, generator=generator) for _ in range(3)]
    s = torch.tensor([0.8], dtype=torch.float64)
    leaves = _leaves(*weights, s)
    got = grouped_query_attention(x, *leaves[:3], None, mods=rule.mods(leaves[3]))
    twin_leaves = _leaves(*weights, s)
    want = by_hand(x, *twin_leaves)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for have, expected in zip(_gradients(got, leaves), _gradients(want, twin_leaves), strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-9, atol=1e-11)


def test_generation_with_a_cache_that_drops_keys_counts_positions_from_the_start() -> None:
    """Temperature tuning reads the query's position itself: decoding token by token with a
    window (the cache keeps its last w keys) gives the rows of the whole sequence's attention,
    as the hand-written `Temperature` does (`moved`)."""
    from attention.grouped import grouped_decode_step

    rule = derive.score_mod("causal+temperature-tuning", F=2, alpha=0.5)
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(10, D, dtype=torch.float64, generator=generator)
    w_q, w_k, w_v = (torch.randn(D, 8, dtype=torch.float64, generator=generator) for _ in "qkv")
    options = {"heads": 2, "window": 3, "mods": (rule.modification(),)}
    whole = grouped_query_attention(x, w_q, w_k, w_v, None, causal=True, **options)
    rows, cache = grouped_decode_step(x[:4], w_q, w_k, w_v, **options)
    decoded = [rows]
    for m in range(4, 10):
        row, cache = grouped_decode_step(x[m : m + 1], w_q, w_k, w_v, None, cache, **options)
        decoded.append(row)
    torch.testing.assert_close(torch.cat(decoded), whole, rtol=1e-10, atol=1e-12)


def test_a_mask_attention_mods_has_no_object_for_is_refused_not_dropped() -> None:
    """A user's mask step (causal, and every query reads the first two keys): not one of
    `attention.mods`' masks, so `mods()` refuses by the step's name, and `mask_mod` is its
    condition."""
    from derive import declare
    from derive.declare import m, mask, n, p

    prefix = declare.step(
        "prefix_mask",
        sp.Eq(mask[m, p], sp.Piecewise((0, (m >= p) | (p <= 2)), (-sp.oo, True))),
        shape=(n, n),
        title="The causal mask with a prefix",
    )
    user = declare.variant(
        "prefix-causal", title="Causal attention with a prefix", base="causal", replaces=[prefix]
    )
    derive.register_variant(user)
    try:
        rule = derive.score_mod("prefix-causal+softcap")
        with pytest.raises(ValueError, match=r"mask \(prefix_mask\) has no attention.mods"):
            rule.mods()
        q_idx, kv_idx = torch.arange(5)[:, None], torch.arange(5)[None, :]
        assert rule.mask_mod is not None
        allowed = rule.mask_mod(0, 0, q_idx, kv_idx)
        assert torch.equal(allowed, (q_idx >= kv_idx) | (kv_idx <= 1))
    finally:
        unregister_variant("prefix-causal")


def test_a_parameter_whose_default_reads_a_size_takes_the_size_given() -> None:
    """A user's rule, softmax(b ω̃) with b's default 1/log n: given n, b is the number 1/log n
    (the default read n, and the rule asked for n though it was given)."""
    from derive import declare
    from derive.declare import a, m, n, omega_tilde, p, r

    b = sp.Symbol("b", positive=True)
    weights = declare.step(
        "tempered_weights",
        sp.Eq(
            a[m, p],
            sp.exp(b * omega_tilde[m, p]) / sp.Sum(sp.exp(b * omega_tilde[m, r]), (r, 1, n)),
        ),
        shape=(n, n),
        title="Attention weights, tempered by b",
    )
    user = declare.variant(
        "tempered-by-length",
        title="Attention tempered by the row's length",
        replaces=[weights],
        parameters={b: 1 / sp.log(n)},
    )
    derive.register_variant(user)
    try:
        rule = derive.score_mod("tempered-by-length", n=8).rule
        assert float(rule.value / SCORE) == pytest.approx(1 / math.log(8), rel=1e-15)
    finally:
        unregister_variant("tempered-by-length")


def test_a_changed_declaration_changes_the_rule() -> None:
    """The cap read off the declaration: the rule at κ = 2 is not the hand-written κ = 3."""
    rule = derive.score_mod("causal+softcap", kappa=2)
    case = next(case for case in CASES if case.name == "causal+softcap")
    tensors = _inputs(case)
    got, _ = _run(case, lambda mu: {"mods": rule.mods(mu)}, tensors)
    want, _ = _run(case, lambda _: {"causal": True, "softcap": 3.0}, tensors)
    assert (got - want).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("causal+softcap", 1 + sp.tanh(SCORE / 50) ** 2),  # tanh' written as 1 + tanh²
        ("causal+temperature-tuning", sp.Integer(1)),  # τ_m forgotten: 1 below F = 8192 only
    ],
)
def test_a_wrong_derivative_is_never_given(name: str, wrong: sp.Expr) -> None:
    """A rule whose derivative is not f's is refused when made, the derivative named, though
    the error shows only at positions past the rule's own scale."""
    rule = derive.score_mod(name).rule
    with pytest.raises(derive.DerivationError, match="df/dscore"):
        ScoreMod(dataclasses.replace(rule, derivative=wrong))


@pytest.mark.parametrize(
    ("name", "values", "message"),
    [
        ("qk-norm", {}, "its step rms_norm"),
        ("sinks", {}, "weights are not a softmax"),
        ("sliding-window+alibi", {}, r"reads w.*w=\.\.\."),
        (SSMAX, {}, r"reads n.*n=\.\.\."),
        ("softcap", {"cap": 3}, "no parameter or size 'cap'.*kappa"),
    ],
)
def test_what_is_not_a_rule_is_refused_by_name(name: str, values: dict, message: str) -> None:
    with pytest.raises(derive.DeclarationError, match=message):
        derive.score_mod(name, **values)


def test_a_missing_or_misshapen_number_per_head_is_named() -> None:
    rule = derive.score_mod("gqa+alibi+softcap")
    with pytest.raises(ValueError, match=r"reads Mu, one number per head: give param="):
        rule.mods()
    with pytest.raises(ValueError, match=r"param \(Mu\) must be .* shape \(h,\), got \(2, 2\)"):
        rule.score_mod(torch.ones(2, 2))
    with pytest.raises(ValueError, match="reads no learned number"):
        derive.score_mod("softcap").modification(torch.ones(1))


#: The rules on the scores the registry declares, and the same by `attention.mods`' objects.
ORDERED = {
    "temperature-tuning": ({"F": 2, "alpha": 0.5}, lambda _: (M.Temperature(2.0, 0.5),)),
    "softcap": ({"kappa": 2}, lambda _: (M.Softcap(2.0),)),
    "clamp": ({"gamma": sp.Rational(7, 10)}, lambda _: (M.Clamp(0.7),)),
    "alibi": ({}, lambda mu: (M.ALiBi(mu),)),
}


@pytest.mark.parametrize(
    "names",
    [
        ("softcap", "alibi"),
        ("alibi", "temperature-tuning"),
        ("softcap", "temperature-tuning"),
        ("alibi", "softcap", "temperature-tuning"),
        ("clamp", "softcap"),
        ("alibi", "clamp", "temperature-tuning"),
    ],
    ids="+".join,
)
def test_derive_composes_the_rules_in_the_order_attention_applies_them(names) -> None:
    """Derive's ranks (where each step goes in a combination) and `attention.mods`' stages
    (where each object acts) are read from one table (`attention.mods.SCORE_RULES`): a combination's
    rule, composed in derive's order, gives the numbers of the objects applied in attention's
    (temperature, the cap and ALiBi do not commute)."""
    name = "gqa+" + "+".join(names)
    values = {k: v for n in names for k, v in ORDERED[n][0].items()}
    rule = derive.score_mod(name, **values)
    case = Case(name, values, 4, 2, "alibi" in names, lambda _: {})
    objects = lambda mu: {  # noqa: E731
        "mods": (M.Causal(), *(o for n in names for o in ORDERED[n][1](mu)))
    }
    tensors = _inputs(case)
    got, got_grads = _run(case, lambda mu: {"mods": rule.mods(mu)}, tensors)
    want, want_grads = _run(case, objects, tensors)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for have, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-9, atol=1e-11)


def test_every_rule_on_the_scores_acts_where_derive_ranks_it() -> None:
    """Read from the two sides, not a list: conform's table of `attention.mods` kinds to the
    registry's variants (the registry's own ``mods=`` objects, then the keywords' kinds) gives,
    for every kind that changes the scores or is a sink, its stage and its variant's rank; the
    two orders are one. (The masks are left out: a −∞ commutes with every rule.)"""
    from derive.conformance.read.ours import _rows
    from derive.graph.registry import declared

    kinds = [
        (kind, name)
        for kind, (name, _) in _rows().items()
        if kind.sink or kind.scores is not M.Modification.scores
    ]
    assert {"softcap", "clamp", "alibi", "temperature-tuning", "sinks"} <= {n for _, n in kinds}
    by_stage = [name for _, name in sorted(kinds, key=lambda pair: pair[0].stage)]
    by_rank = [name for _, name in sorted(kinds, key=lambda pair: declared(pair[1]).rank)]
    assert by_stage == by_rank


def test_the_order_is_declared_once_and_both_sides_read_it() -> None:
    """`attention.mods.SCORE_RULES` is the one statement of where each rule on the scores
    acts: every built-in object that changes the scores or is a sink has its row's stage, and
    its variant the rank derive reads from the same row; derive reads the table as a file, so
    resolving a combination of the rules loads neither attention nor torch."""
    from derive.conformance.read.ours import _rows
    from derive.graph.order import FIRST, score_rank, score_rules
    from derive.graph.registry import declared

    by_stage = [name for name, _ in sorted(M.SCORE_RULES, key=lambda row: row[1])]
    assert list(score_rules()) == by_stage
    read = 0
    for kind, (name, _) in _rows().items():
        if kind.sink or kind.scores is not M.Modification.scores:
            assert kind.stage == dict(M.SCORE_RULES)[name], (kind, name)
            assert declared(name).rank == score_rank(name) == FIRST + by_stage.index(name)
            read += 1
    assert read >= len(by_stage) - 1  # every rule (the query scale acts on q, not a block)
    probe = (
        "import sys, derive; derive.variant('gqa+temperature-tuning+softcap+alibi+sinks'); "
        "print(sorted({'attention', 'torch'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_scale_of_the_variant_s_own_is_given_with_the_rule() -> None:
    """Gemma 2 27B's kind (query-scale: the scores over √c_q, c_q = 144 for heads of width 4
    here): the rule's mods() carry that scale (`QueryScale`) and equal the keywords that say
    it, values and gradients; `.scale` is the factor FlexAttention takes. Without it, the
    book's 1/√c_h: no scale of the rule's, and the numbers differ."""
    rule = derive.score_mod("gqa+query-scale+softcap", c_q=144, kappa=2)
    assert rule.scale == pytest.approx(1 / 12)
    assert derive.score_mod("gqa+softcap", kappa=2).scale is None
    case = Case("gqa+query-scale+softcap", {"c_q": 144, "kappa": 2}, 4, 2, False, lambda _: {})
    tensors = _inputs(case)
    got, got_grads = _run(case, lambda _: {"mods": rule.mods()}, tensors)
    keywords = {"causal": True, "softcap": 2.0, "query_pre_attn_scalar": 144.0}
    want, want_grads = _run(case, lambda _: keywords, tensors)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for have, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-9, atol=1e-11)
    plain, _ = _run(case, lambda _: {"causal": True, "softcap": 2.0}, tensors)
    assert (plain - got).abs().max() > 1e-3
