"""Attention without the softmax (`attention.linear`): the recurrent, parallel and chunked forms of
linear attention, the delta rule and the gated delta rule give the same outputs, final states
and gradients, for every split of the sequence into chunks (uneven ones included) and from any
initial state; each form against the formulas written out on two tokens; generation token by
token; the mistakes of ports, each far from the rule; and bad input named.

Tolerances: float64 throughout, where the forms differ by the order of their sums: 1e-10 on
numbers of size about 1 leaves a factor of 10⁵ over float64's rounding at these sizes, and each
mutation lands at least 10⁻³ away.
"""

import pytest
import torch
import torch.nn.functional as F

from attention import ShapeError
from attention import linear as L

B, H, N, DK, DV = 2, 3, 7, 4, 5
TOL = dict(rtol=1e-10, atol=1e-10)


def inputs(seed=0, n=N, dtype=torch.float64):
    """q, k (unit rows, as Gated DeltaNet's), v, g ≤ 0, β ∈ (0, 1), an initial state."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)  # noqa: E731
    q, k, v = draw(B, H, n, DK), F.normalize(draw(B, H, n, DK), dim=-1), draw(B, H, n, DV)
    g = -torch.rand(B, H, n, generator=gen, dtype=dtype)
    beta = torch.rand(B, H, n, generator=gen, dtype=dtype)
    return q, k, v, g, beta, draw(B, H, DK, DV)


#: The rules: name -> (function, which of (g, β) it takes; "g_channel": a decay per key channel).
RULES = {
    "linear": (L.linear_attention, ()),
    "delta": (L.delta_rule, ("beta",)),
    "gated-delta": (L.gated_delta_rule, ("g", "beta")),
    "kimi-delta": (L.kimi_delta_rule, ("g_channel", "beta")),
}


def per_channel(g):
    """A log-decay per key channel from one per token: channel j's g_t times 0.5 + j/(d_k − 1),
    so that channels decay at different rates (and channel 0 at half the token's)."""
    return g[..., None] * torch.linspace(0.5, 1.5, DK, dtype=g.dtype)


#: The forms other than the recurrence: the n × n matrix, and chunks of C tokens (C = 1, an
#: uneven 2, 3 and 5, the whole sequence, more than it).
FORMS = [dict(parallel=True)] + [dict(chunk_size=c) for c in (1, 2, 3, 5, N, 16)]


def call(rule, q, k, v, g, beta, **options):
    function, takes = RULES[rule]
    extra = {"g": g, "beta": beta, "g_channel": per_channel(g)}
    return function(q, k, v, *(extra[name] for name in takes), **options)


@pytest.mark.parametrize("form", FORMS, ids=str)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("start", [False, True], ids=["from-zero", "from-a-state"])
def test_each_form_gives_the_recurrence_s_outputs_and_final_state(rule, form, start):
    q, k, v, g, beta, s0 = inputs()
    options = dict(initial_state=s0 if start else None, return_state=True)
    expected, expected_state = call(rule, q, k, v, g, beta, **options)
    got, state = call(rule, q, k, v, g, beta, **options, **form)
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(state, expected_state, **TOL)


@pytest.mark.parametrize("form", [dict(), *FORMS], ids=str)
@pytest.mark.parametrize("rule", RULES)
def test_each_form_against_the_formulas_on_two_tokens(rule, form):
    """S_1 = β_1 k_1 v_1ᵀ (linear: k_1 v_1ᵀ; decayed: α_1 S_0 first), and token 2's write
    u_2 = β_2 (v_2 − α_2 S_1ᵀ k_2), written out with a state S_0."""
    q, k, v, g, beta, s0 = inputs(seed=1, n=2)
    alpha = g.exp()[..., None] if rule == "gated-delta" else torch.ones_like(g)[..., None]
    if rule == "kimi-delta":  # diag(α_t): one decay per row of the state
        alpha = per_channel(g).exp()
    b = beta if rule != "linear" else torch.ones_like(beta)
    state = s0
    rows = []
    for t in range(2):
        state = alpha[..., t, :, None] * state
        u = v[..., t, :]
        if rule != "linear":
            u = b[..., t, None] * (u - torch.einsum("...k,...kv->...v", k[..., t, :], state))
        state = state + k[..., t, :, None] * u[..., None, :]
        rows.append(torch.einsum("...k,...kv->...v", q[..., t, :], state))
    got, final = call(rule, q, k, v, g, beta, initial_state=s0, return_state=True, **form)
    torch.testing.assert_close(got, torch.stack(rows, dim=-2), **TOL)
    torch.testing.assert_close(final, state, **TOL)


@pytest.mark.parametrize("form", [dict(parallel=True), dict(chunk_size=3)], ids=str)
@pytest.mark.parametrize("rule", RULES)
def test_gradients_of_every_input_equal_the_recurrence_s(rule, form):
    q, k, v, g, beta, s0 = inputs(seed=2)
    weights = torch.randn(
        B, H, N, DV, dtype=torch.float64, generator=torch.Generator().manual_seed(3)
    )

    def gradients(**options):
        tensors = [t.clone().requires_grad_() for t in (q, k, v, g, beta, s0)]
        out, state = call(
            rule, *tensors[:5], initial_state=tensors[5], return_state=True, **options
        )
        ((out * weights).sum() + state.square().sum()).backward()
        return [t.grad for t in tensors]

    expected = gradients()
    got = gradients(**form)
    used = {"linear": (0, 1, 2, 5), "delta": (0, 1, 2, 4, 5)}.get(rule, range(6))
    for index in used:
        torch.testing.assert_close(got[index], expected[index], **TOL)


@pytest.mark.parametrize("rule", RULES)
def test_generation_token_by_token_carries_the_state(rule):
    q, k, v, g, beta, _ = inputs(seed=4)
    whole = call(rule, q, k, v, g, beta, chunk_size=3)
    state, rows = None, []
    for t in range(N):
        part = lambda x, t=t: x[..., t : t + 1, :]  # noqa: E731
        row, state = call(
            rule,
            part(q),
            part(k),
            part(v),
            g[..., t : t + 1],
            beta[..., t : t + 1],
            initial_state=state,
            return_state=True,
        )
        rows.append(row)
    torch.testing.assert_close(torch.cat(rows, dim=-2), whole, **TOL)


def test_the_normalised_form_divides_by_the_running_sum_of_the_keys():
    q, k, v, *_ = inputs(seed=5)
    phi = lambda x: F.elu(x) + 1  # noqa: E731
    scores = (phi(q) @ phi(k).transpose(-2, -1)).tril()
    expected = (scores @ v) / scores.sum(-1, keepdim=True)
    for form in [dict(), *FORMS]:
        got = L.linear_attention(q, k, v, feature_map="elu+1", normalize=True, **form)
        torch.testing.assert_close(got, expected, **TOL)


def test_a_feature_map_is_applied_to_queries_and_keys_alike():
    q, k, v, *_ = inputs(seed=6)
    expected = ((F.relu(q) @ F.relu(k).transpose(-2, -1)).tril()) @ v
    for feature_map in ("relu", F.relu):
        got = L.linear_attention(q, k, v, feature_map=feature_map, chunk_size=2)
        torch.testing.assert_close(got, expected, **TOL)


def test_chunk_states_are_the_recurrence_s_state_at_each_chunk_s_end():
    q, k, v, g, beta, _ = inputs(seed=7)
    states = L.chunk_states(q, k, v, g, beta, chunk_size=3)
    assert states.shape == (3, B, H, DK, DV)  # chunks of 3, 3 and 1 tokens
    for index, end in enumerate((3, 6, 7)):
        _, expected = L.gated_delta_rule(
            q[..., :end, :],
            k[..., :end, :],
            v[..., :end, :],
            g[..., :end],
            beta[..., :end],
            return_state=True,
        )
        torch.testing.assert_close(states[index], expected, **TOL)


# ---------------------------------------------------------------------------------------------
# The mistakes of ports: each gives other numbers than the rule


def _mistaken(mistake, q, k, v, g, beta):
    """The recurrence with one port mistake (the issue's list)."""
    state = q.new_zeros(B, H, DK, DV)
    rows = []
    G = g.cumsum(-1)
    for t in range(N):
        if mistake == "decay-after-the-read":  # the prediction read from the undecayed state
            predicted = torch.einsum("...k,...kv->...v", k[..., t, :], state)
            state = g[..., t, None, None].exp() * state
        else:
            state = g[..., t, None, None].exp() * state
            predicted = torch.einsum("...k,...kv->...v", k[..., t, :], state)
        if mistake == "beta-on-the-keys-only":  # β scales the key written, not the prediction
            u = v[..., t, :] - beta[..., t, None] * predicted
        else:
            u = beta[..., t, None] * (v[..., t, :] - predicted)
        state = state + k[..., t, :, None] * u[..., None, :]
        rows.append(torch.einsum("...k,...kv->...v", q[..., t, :], state))
    if mistake == "inclusive-decay":  # the parallel form with γ_{t,i} = e^{G_t − G_{i−1}}
        exclusive = F.pad(G[..., :-1], (1, 0))
        gamma = (G[..., :, None] - exclusive[..., None, :]).exp().tril()
        system = (beta[..., :, None] * (k @ k.transpose(-2, -1)) * gamma).tril(-1)
        eye = torch.eye(N, dtype=q.dtype)
        u = torch.linalg.solve_triangular(eye + system, beta[..., None] * v, upper=False)
        return ((q @ k.transpose(-2, -1)) * gamma) @ u
    if mistake == "transposed-solve":
        gamma = (G[..., :, None] - G[..., None, :]).exp().tril()
        system = (beta[..., :, None] * (k @ k.transpose(-2, -1)) * gamma).tril(-1)
        eye = torch.eye(N, dtype=q.dtype)
        u = torch.linalg.solve_triangular(
            (eye + system).transpose(-2, -1), beta[..., None] * v, upper=True
        )
        return ((q @ k.transpose(-2, -1)) * gamma) @ u
    return torch.stack(rows, dim=-2)


@pytest.mark.parametrize(
    "mistake",
    ["decay-after-the-read", "beta-on-the-keys-only", "inclusive-decay", "transposed-solve"],
)
def test_a_port_mistake_is_far_from_every_form(mistake):
    q, k, v, g, beta, _ = inputs(seed=8)
    assert torch.allclose(_mistaken("none", q, k, v, g, beta), L.gated_delta_rule(q, k, v, g, beta))
    wrong = _mistaken(mistake, q, k, v, g, beta)
    for form in [dict(), *FORMS]:
        right = L.gated_delta_rule(q, k, v, g, beta, **form)
        assert float((wrong - right).abs().max()) > 1e-3, form


# ---------------------------------------------------------------------------------------------
# Precision and bad input


def test_half_precision_inputs_are_computed_in_float32_and_returned_in_their_dtype():
    q, k, v, g, beta, _ = inputs(seed=9, dtype=torch.float32)
    expected = L.gated_delta_rule(q, k, v, g, beta)
    low = [t.to(torch.bfloat16) for t in (q, k, v, g, beta)]
    got, state = L.gated_delta_rule(*low, chunk_size=4, return_state=True)
    assert got.dtype == torch.bfloat16 and state.dtype == torch.float32
    # generation goes on from the float32 state, with float32 gates beside bfloat16 tokens
    head = [t[..., :-1] if t.dim() == 3 else t[..., :-1, :] for t in low]
    _, before = L.gated_delta_rule(*head, chunk_size=4, return_state=True)
    tail = [t[..., -1:, :] for t in low[:3]]
    last = L.gated_delta_rule(*tail, g[..., -1:], beta[..., -1:], initial_state=before)
    assert last.dtype == torch.bfloat16 and last.shape == (B, H, 1, DV)
    assert float((last.float() - got[..., -1:, :].float()).abs().max()) < 0.05
    exact = L.gated_delta_rule(*[t.float() for t in low])
    torch.testing.assert_close(
        got.float(), exact, rtol=2**-7, atol=2**-7 * float(exact.abs().max())
    )
    assert float((got.float() - expected).abs().max()) < 0.1


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: {**a, "g": a["g"][..., :-1]}, "g has n=6 but q has n=7"),
        (lambda a: {**a, "k": a["k"][..., :-1]}, "d_k"),
        (lambda a: {**a, "beta": a["beta"][0]}, "beta"),
        (lambda a: {**a, "chunk_size": 0}, "chunk_size"),
        (lambda a: {**a, "chunk_size": 2, "parallel": True}, "parallel"),
        (lambda a: {**a, "initial_state": torch.zeros(B, H, DK, DV + 1).double()}, "d_v"),
    ],
)
def test_bad_input_is_named(change, message):
    q, k, v, g, beta, _ = inputs()
    arguments = change(dict(q=q, k=k, v=v, g=g, beta=beta))
    with pytest.raises((ShapeError, ValueError, TypeError), match=message):
        L.gated_delta_rule(**arguments)


def test_the_normalised_form_refuses_a_state_and_an_unknown_feature_map():
    q, k, v, *_ = inputs()
    with pytest.raises(ValueError, match="normalize=True takes no initial_state"):
        L.linear_attention(q, k, v, normalize=True, return_state=True)
    with pytest.raises(ValueError, match="feature_map must be one of"):
        L.linear_attention(q, k, v, feature_map="softmax")


def test_a_feature_map_that_changes_the_width_takes_no_state():
    q, k, v, *_ = inputs()
    both = lambda t: torch.cat([t.relu(), (-t).relu()], dim=-1)  # noqa: E731 - φ, twice as wide
    assert L.linear_attention(q, k, v, feature_map=both).shape == v.shape  # without a state: runs
    state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    for given in ({"return_state": True}, {"initial_state": state}):
        with pytest.raises(ShapeError, match=r"feature_map maps q's d_k=\d+ to \d+ features"):
            L.linear_attention(q, k, v, feature_map=both, **given)


def test_the_normalised_form_divides_before_returning_to_half_precision():
    """The running sum of φ(k) passes float16's largest number long before the ratio does:
    computed in float32 and divided there, the float16 outputs stay finite."""
    gen = torch.Generator().manual_seed(10)
    q, k = torch.randn(1, 2048, 64, generator=gen), torch.randn(1, 2048, 64, generator=gen)
    v = 1 + 0.01 * torch.randn(1, 2048, 8, generator=gen)
    exact = L.linear_attention(q, k, v, feature_map="elu+1", normalize=True, chunk_size=64)
    half = [t.half() for t in (q, k, v)]
    got = L.linear_attention(*half, feature_map="elu+1", normalize=True, chunk_size=64)
    assert got.dtype == torch.float16 and bool(got.isfinite().all())
    torch.testing.assert_close(got.float(), exact, rtol=2**-9, atol=2**-9)


def test_a_chunk_longer_than_the_sequence_is_the_sequence():
    q, k, v, g, beta, _ = inputs(seed=11)
    whole = L.gated_delta_rule(q, k, v, g, beta, chunk_size=N)
    torch.testing.assert_close(L.gated_delta_rule(q, k, v, g, beta, chunk_size=10**6), whole)


def test_kimi_delta_attention_with_every_channel_alike_is_the_gated_delta_rule():
    q, k, v, g, beta, s0 = inputs(seed=11)
    alike = g[..., None].expand(*g.shape, DK)
    for form in (dict(), dict(chunk_size=3), dict(parallel=True)):
        got = L.kimi_delta_rule(q, k, v, alike, beta, initial_state=s0, **form)
        expected = L.gated_delta_rule(q, k, v, g, beta, initial_state=s0, **form)
        torch.testing.assert_close(got, expected, **TOL)
    apart = L.kimi_delta_rule(q, k, v, per_channel(g), beta, initial_state=s0)
    assert (apart - expected).abs().max() > 1e-3  # channels that decay apart: another rule


@pytest.mark.parametrize("form", ["recurrent", "chunk"])
def test_kimi_delta_attention_is_transformers_torch_kda(form):
    """transformers' Kimi Linear fallbacks (`recurrent_kimi_delta_attention`,
    `chunk_kimi_delta_attention`) take (b, n, h, ·) and scale q by 1/√d_k themselves; they compute
    in float32: 2⁻¹⁸ of the largest output."""
    from transformers.models.kimi_linear import modeling_kimi_linear as kimi

    q, k, v, g, beta, s0 = inputs(seed=12, dtype=torch.float32)
    gc = per_channel(g)
    t = lambda x: x.transpose(1, 2)  # noqa: E731  (b, n, h, ·), theirs
    run = getattr(kimi, f"{form}_kimi_delta_attention")
    theirs, state = run(
        t(q), t(k), t(v), g=t(gc), beta=t(beta), initial_state=s0, output_final_state=True
    )
    ours, our_state = L.kimi_delta_rule(
        q / DK**0.5, k, v, gc, beta, initial_state=s0, return_state=True, chunk_size=3
    )
    bound = 2**-18 * theirs.abs().max()
    torch.testing.assert_close(ours, t(theirs), rtol=0, atol=bound)
    torch.testing.assert_close(our_state, state, rtol=0, atol=2**-18 * state.abs().max())


@pytest.mark.parametrize("form", [dict(), *FORMS[:3]], ids=str)
def test_with_heads_each_head_is_linear_attention_on_its_block_then_projected(form):
    """linear_self_attention with h heads: head ℓ's block of c_h columns of Q, K and V, the
    queries scaled by 1/√c_h, its causal (Q_ℓ K_ℓᵀ ∘ M) V_ℓ written out here, the heads side by
    side, then W_o."""
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(B, N, 5, generator=gen, dtype=torch.float64)
    w_q, w_k, w_v = (torch.randn(5, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    w_o = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    heads = []
    for ell in range(3):
        block = slice(2 * ell, 2 * ell + 2)
        scores = q[..., block] @ k[..., block].transpose(-2, -1) / 2**0.5
        heads.append(scores.tril() @ v[..., block])
    expected = torch.cat(heads, dim=-1) @ w_o
    got = L.linear_self_attention(x, w_q, w_k, w_v, w_o, heads=3, **form)
    torch.testing.assert_close(got, expected, **TOL)
    one = L.linear_self_attention(x, w_q, w_k, w_v, **form)  # one head: scaled by 1/√c, no W_o
    causal = (q @ k.transpose(-2, -1) / 6**0.5).tril() @ v
    torch.testing.assert_close(one, causal, **TOL)


@pytest.mark.parametrize("form", [dict(), *FORMS[:3]], ids=str)
def test_with_groups_each_key_and_value_head_is_read_by_its_query_heads(form):
    """groups g: K and V have g heads of c_h columns, head ℓ of the h query heads reading
    group ⌊ℓ g / h⌋ (consecutive query heads share one), written out here."""
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(B, N, 5, generator=gen, dtype=torch.float64)
    w_q = torch.randn(5, 8, generator=gen, dtype=torch.float64)  # 4 heads of 2
    w_k, w_v = (torch.randn(5, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    w_o = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    heads = []
    for ell in range(4):
        group = slice(2 * (ell // 2), 2 * (ell // 2) + 2)
        scores = q[..., 2 * ell : 2 * ell + 2] @ k[..., group].transpose(-2, -1) / 2**0.5
        heads.append(scores.tril() @ v[..., group])
    expected = torch.cat(heads, dim=-1) @ w_o
    got = L.linear_self_attention(x, w_q, w_k, w_v, w_o, heads=4, groups=2, **form)
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"heads": 4}, r"c \(the width of w_q\)=6 is not divisible by heads=4"),
        ({"heads": 0}, "heads"),
        (
            {"w_v": torch.zeros(5, 9, dtype=torch.float64), "w_o": torch.zeros(9, 4).double()},
            r"c_v \(the width of w_v\)=9 is not divisible by heads=2",
        ),
        ({"w_o": torch.zeros(5, 4, dtype=torch.float64)}, r"w_o has c_o=5 rows, expected 6"),
        ({"heads": 3, "groups": 2}, "heads=3 is not divisible by groups=2"),
        ({"groups": 1}, r"w_k has c_k=6 columns, expected 3 \(groups=1 of c_h=3"),
    ],
)
def test_heads_that_do_not_fit_the_weights_are_named(change, message):
    w = torch.zeros(5, 6, dtype=torch.float64)
    arguments = {"w_q": w, "w_k": w, "w_v": w, "w_o": torch.zeros(6, 4, dtype=torch.float64)}
    arguments |= {"heads": 2, **change}
    with pytest.raises((ShapeError, ValueError), match=message):
        L.linear_self_attention(torch.zeros(N, 5, dtype=torch.float64), **arguments)
