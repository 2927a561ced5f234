"""Mamba-2's state-space dual layer (`attention.linear.ssd`): its recurrent, parallel (the
quadratic form with the semiseparable mask) and chunked forms give the same outputs, final
states and gradients, for every chunk size (uneven ones included) and from any initial state;
each against the layer written out in Mamba's own terms (the recurrence over h_t, p × d_state,
and Y = (L ∘ C Bᵀ)(diag(Δ) X) + D X with L_{t,i} = a_{i+1} ⋯ a_t); with a ≡ 1 and Δ ≡ 1 it is
causal linear attention; against transformers' own torch scan (`mamba2_chunk_scan`); the
mistakes of ports each far from it; and bad input named.

Tolerances: float64, where the forms differ only by the order of their sums: 1e-10 on numbers
of size about 1 (a factor 10⁵ over float64's rounding at these sizes); every mistake lands at
least 10⁻³ away. transformers' scan computes in float32 whatever its inputs: 2⁻¹⁸ of the
largest output there.
"""

import pytest
import torch

from attention import ShapeError
from attention import linear as L

BATCH, N, H, P, G, S = 2, 7, 4, 3, 2, 5  # batch, tokens, heads, head width, groups, d_state
TOL = dict(rtol=1e-10, atol=1e-10)


def inputs(seed=0, n=N, dtype=torch.float64):
    """x, Δ > 0, A < 0, B, C (two groups of two heads), D per head, an initial state."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)  # noqa: E731
    dt = torch.rand(BATCH, n, H, generator=gen, dtype=dtype) + 0.1
    A = -torch.rand(H, generator=gen, dtype=dtype) - 0.2
    return dict(
        x=draw(BATCH, n, H, P),
        dt=dt,
        A=A,
        B=draw(BATCH, n, G, S),
        C=draw(BATCH, n, G, S),
        D=draw(H),
        initial_state=draw(BATCH, H, P, S),
    )


def by_the_recurrence(x, dt, A, B, C, D=None, initial_state=None):
    """Mamba-2's recurrence as its paper writes it, head by head: h_t = e^{Δ_t A} h_{t−1} +
    Δ_t x_t B_tᵀ, y_t = h_t C_t + D x_t; head i reads group i // (h/g)."""
    batch, n, heads, p = x.shape
    shared = heads // B.shape[-2]
    h = (
        torch.zeros(batch, heads, p, B.shape[-1], dtype=x.dtype)
        if initial_state is None
        else initial_state
    )
    rows = []
    for t in range(n):
        b_t = B[:, t].repeat_interleave(shared, dim=1)  # (batch, heads, d_state)
        c_t = C[:, t].repeat_interleave(shared, dim=1)
        a_t = torch.exp(dt[:, t] * A)[..., None, None]
        h = a_t * h + (dt[:, t, :, None] * x[:, t])[..., None] * b_t[..., None, :]
        y = torch.einsum("bhpn,bhn->bhp", h, c_t)
        if D is not None:
            y = y + D[:, None] * x[:, t]
        rows.append(y)
    return torch.stack(rows, dim=1), h


def by_the_semiseparable_mask(x, dt, A, B, C, D=None):
    """Y = (L ∘ C Bᵀ)(diag(Δ) X) + D X, the mask written entry by entry: L_{t,i} =
    exp(A Σ_{r=i+1}^{t} Δ_r) = a_{i+1} ⋯ a_t for i ≤ t (1 on the diagonal), 0 above."""
    batch, n, heads, p = x.shape
    shared = heads // B.shape[-2]
    b, c = (t.repeat_interleave(shared, dim=2) for t in (B, C))  # (batch, n, heads, d_state)
    mask = torch.zeros(batch, heads, n, n, dtype=x.dtype)
    for t in range(n):
        for i in range(t + 1):
            mask[:, :, t, i] = torch.exp(A * dt[:, i + 1 : t + 1].sum(dim=1))
    scores = torch.einsum("bthn,bihn->bhti", c, b)
    y = torch.einsum("bhti,bihp->bthp", mask * scores, dt[..., None] * x)
    return y if D is None else y + D[:, None] * x


#: The forms other than the recurrence: the n × n matrix, and chunks of C tokens.
FORMS = [dict(parallel=True)] + [dict(chunk_size=c) for c in (1, 2, 3, 5, N, 16)]


def call(values, *, state=True, skip=True, **options):
    x, dt, A, B, C = (values[name] for name in ("x", "dt", "A", "B", "C"))
    return L.ssd(
        x,
        dt,
        A,
        B,
        C,
        D=values["D"] if skip else None,
        initial_state=values["initial_state"] if state else None,
        return_state=True,
        **options,
    )


@pytest.mark.parametrize("form", [dict(), *FORMS], ids=str)
@pytest.mark.parametrize("start", [False, True], ids=["from-zero", "from-a-state"])
def test_each_form_is_mamba_s_recurrence(form, start):
    values = inputs()
    got, state = call(values, state=start, **form)
    expected, expected_state = by_the_recurrence(
        *(values[name] for name in ("x", "dt", "A", "B", "C", "D")),
        initial_state=values["initial_state"] if start else None,
    )
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(state, expected_state, **TOL)


@pytest.mark.parametrize("form", [dict(), *FORMS], ids=str)
def test_each_form_is_the_quadratic_form_with_the_semiseparable_mask(form):
    values = inputs(seed=1)
    got, _ = call(values, state=False, **form)
    expected = by_the_semiseparable_mask(*(values[k] for k in ("x", "dt", "A", "B", "C", "D")))
    torch.testing.assert_close(got, expected, **TOL)


def test_without_decay_and_with_unit_steps_it_is_causal_linear_attention():
    """a ≡ 1 (A = 0) and Δ ≡ 1: the state adds x_t B_tᵀ and is read by C_t, causal linear
    attention with queries C, keys B, values x, no feature map and no scale."""
    values = inputs(seed=2)
    values["A"] = torch.zeros(H, dtype=torch.float64)
    values["dt"] = torch.ones(BATCH, N, H, dtype=torch.float64)
    got, _ = call(values, state=False, skip=False)
    heads = lambda t: t.repeat_interleave(H // G, dim=2).transpose(1, 2)  # noqa: E731
    expected = L.linear_attention(
        heads(values["C"]), heads(values["B"]), values["x"].transpose(1, 2)
    )
    assert isinstance(expected, torch.Tensor)
    torch.testing.assert_close(got, expected.transpose(1, 2), **TOL)
    values["A"] = -torch.full((H,), 0.1, dtype=torch.float64)  # a decay: no longer that
    assert not torch.allclose(call(values, state=False, skip=False)[0], got, atol=1e-3)


@pytest.mark.parametrize("form", [dict(parallel=True), dict(chunk_size=3)], ids=str)
def test_gradients_of_every_input_equal_the_recurrence_s(form):
    values = inputs(seed=3)
    weights = torch.randn(BATCH, N, H, P, dtype=torch.float64, generator=torch.Generator())

    def gradients(**options):
        leaves = {name: t.clone().requires_grad_() for name, t in values.items()}
        out, state = call(leaves, **options)
        ((out * weights).sum() + state.square().sum()).backward()
        return {name: t.grad for name, t in leaves.items()}

    expected = gradients()
    for name, grad in gradients(**form).items():
        assert grad is not None and grad.abs().max() > 0, name
        torch.testing.assert_close(grad, expected[name], **TOL, msg=name)


def test_generation_token_by_token_carries_the_state():
    values = inputs(seed=4)
    whole, final = call(values, chunk_size=3)
    state, rows = values["initial_state"], []
    for t in range(N):
        step = {k: v[:, t : t + 1] for k, v in values.items() if k not in ("A", "D")}
        step |= dict(A=values["A"], D=values["D"], initial_state=state)
        row, state = call(step)
        rows.append(row)
    torch.testing.assert_close(torch.cat(rows, dim=1), whole, **TOL)
    torch.testing.assert_close(state, final, **TOL)


def test_a_skip_per_channel_is_added_channel_by_channel():
    values = inputs(seed=5)
    per_channel = torch.randn(H, P, dtype=torch.float64)
    without, _ = call(values, skip=False)
    got = L.ssd(
        *(values[k] for k in ("x", "dt", "A", "B", "C")),
        D=per_channel,
        initial_state=values["initial_state"],
    )
    torch.testing.assert_close(got, without + per_channel * values["x"], **TOL)


def test_half_precision_inputs_are_computed_in_float32_and_returned_in_their_dtype():
    values = inputs(seed=6, dtype=torch.float32)
    half = {k: v.to(torch.bfloat16) if k in ("x", "B", "C") else v for k, v in values.items()}
    got, state = call(half, chunk_size=3)
    assert got.dtype == torch.bfloat16 and state.dtype == torch.float32
    rounded = {k: v.to(torch.float32) for k, v in half.items()}
    torch.testing.assert_close(got.float(), call(rounded)[0], rtol=2**-7, atol=2**-7)


# ---------------------------------------------------------------------------------------------
# The mistakes of ports: each gives other numbers than the layer.


def _mistakes():
    return {
        "A's sign": lambda x, dt, A, B, C, D: L.ssd(x, dt, -A, B, C, D=D),
        "B and C swapped": lambda x, dt, A, B, C, D: L.ssd(x, dt, A, C, B, D=D),
        "the D skip missing": lambda x, dt, A, B, C, D: L.ssd(x, dt, A, B, C),
        "Δ on the decay only": lambda x, dt, A, B, C, D: (
            L.ssd(x / dt[..., None], dt, A, B, C, D=D) + D[:, None] * (x - x / dt[..., None])
        ),
        "Δ without softplus": lambda x, dt, A, B, C, D: L.ssd(
            x, torch.log(torch.expm1(dt)), A, B, C, D=D
        ),
        "the mask's product off by one": _inclusive,
    }


def _inclusive(x, dt, A, B, C, D):
    """The mask with token i's own a_i in L_{t,i} (e^{A Σ_{r=i}^{t} Δ_r}): off by one."""
    batch, n, heads, p = x.shape
    shared = heads // B.shape[-2]
    b, c = (t.repeat_interleave(shared, dim=2) for t in (B, C))
    mask = torch.zeros(batch, heads, n, n, dtype=x.dtype)
    for t in range(n):
        for i in range(t + 1):
            mask[:, :, t, i] = torch.exp(A * dt[:, i : t + 1].sum(dim=1))
    scores = torch.einsum("bthn,bihn->bhti", c, b)
    return torch.einsum("bhti,bihp->bthp", mask * scores, dt[..., None] * x) + D[:, None] * x


@pytest.mark.parametrize("mistake", list(_mistakes()))
def test_each_port_mistake_is_far_from_the_layer(mistake):
    values = inputs(seed=7)
    arguments = [values[k] for k in ("x", "dt", "A", "B", "C", "D")]
    right = L.ssd(*arguments[:5], D=arguments[5])
    wrong = _mistakes()[mistake](*arguments)
    assert (wrong - right).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------
# Bad input, named


def test_groups_that_do_not_divide_the_heads_are_named():
    values = inputs()
    three = torch.randn(BATCH, N, 3, S, dtype=torch.float64)
    with pytest.raises(ShapeError, match=r"ssd: B and C have g=3 groups.*h=4 heads"):
        L.ssd(values["x"], values["dt"], values["A"], three, three)


def test_a_skip_of_the_wrong_width_is_named():
    values = inputs()
    with pytest.raises(ShapeError, match=r"ssd: D has shape \(5,\), expected \(h\) or \(h, p\)"):
        L.ssd(*(values[k] for k in ("x", "dt", "A", "B", "C")), D=torch.ones(H + 1))


@pytest.mark.parametrize("bad", [0, -2])
def test_a_chunk_size_below_one_is_named(bad):
    values = inputs()
    with pytest.raises(ValueError, match=rf"ssd.*chunk_size.*{bad}"):
        L.ssd(*(values[k] for k in ("x", "dt", "A", "B", "C")), chunk_size=bad)


# ---------------------------------------------------------------------------------------------
# transformers' own torch scan


def test_it_is_transformers_torch_scan():
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    values = inputs(seed=8, dtype=torch.float32)
    arguments = [values[k] for k in ("x", "dt", "A", "B", "C")]
    theirs, their_state = mamba2_chunk_scan(
        *arguments,
        chunk_size=3,
        D=values["D"],
        initial_states=values["initial_state"],
        return_final_states=True,
    )
    ours, state = call(values, chunk_size=4)
    bound = 2**-18 * theirs.abs().max()
    torch.testing.assert_close(ours, theirs, rtol=0, atol=bound)
    torch.testing.assert_close(state, their_state, rtol=0, atol=2**-18 * state.abs().max())
    assert (call(values, skip=False)[0] - theirs).abs().max() > 100 * bound  # it can fail


# ---------------------------------------------------------------------------------------------
# Mamba's selective scan (Mamba-1): a decay per channel and state entry


def scan_inputs(seed=20, n=N, e=5, state=4, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)  # noqa: E731
    return dict(
        x=draw(BATCH, n, e),
        dt=torch.rand(BATCH, n, e, generator=gen, dtype=dtype) + 0.1,
        A=-torch.rand(e, state, generator=gen, dtype=dtype) - 0.2,
        B=draw(BATCH, n, state),
        C=draw(BATCH, n, state),
        D=draw(e),
        initial_state=draw(BATCH, e, state),
    )


def scanned(values, *, state=True, **options):
    return L.selective_scan(
        *(values[k] for k in ("x", "dt", "A", "B", "C")),
        D=values["D"],
        initial_state=values["initial_state"] if state else None,
        return_state=True,
        **options,
    )


def by_mamba_s_recurrence(x, dt, A, B, C, D, initial_state):
    """h_t = e^{Δ_t A} ∘ h_{t−1} + (Δ_t x_t) B_t per channel (e × d_state), y_t = h_t C_t + D x_t."""
    h, rows = initial_state, []
    for t in range(x.shape[1]):
        h = (
            torch.exp(dt[:, t, :, None] * A) * h
            + (dt[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        )
        rows.append((h @ C[:, t, :, None]).squeeze(-1) + D * x[:, t])
    return torch.stack(rows, dim=1), h


@pytest.mark.parametrize("form", [dict(), *FORMS], ids=str)
def test_each_form_of_the_selective_scan_is_mamba_s_recurrence(form):
    values = scan_inputs()
    got, state = scanned(values, **form)
    expected, expected_state = by_mamba_s_recurrence(
        *(values[k] for k in ("x", "dt", "A", "B", "C", "D", "initial_state"))
    )
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(state, expected_state, **TOL)


@pytest.mark.parametrize("form", [dict(parallel=True), dict(chunk_size=3)], ids=str)
def test_gradients_of_the_selective_scan_equal_the_recurrence_s(form):
    values = scan_inputs(seed=21)
    weights = torch.randn(BATCH, N, 5, dtype=torch.float64, generator=torch.Generator())

    def gradients(**options):
        leaves = {name: t.clone().requires_grad_() for name, t in values.items()}
        out, state = scanned(leaves, **options)
        ((out * weights).sum() + state.square().sum()).backward()
        return {name: t.grad for name, t in leaves.items()}

    expected = gradients()
    for name, grad in gradients(**form).items():
        assert grad is not None and grad.abs().max() > 0, name
        torch.testing.assert_close(grad, expected[name], **TOL, msg=name)


def test_the_selective_scan_is_transformers_torch_scan():
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    values = scan_inputs(seed=22, dtype=torch.float32)
    x, dt, A, B, C, D = (values[k] for k in ("x", "dt", "A", "B", "C", "D"))
    t = lambda u: u.transpose(1, 2)  # noqa: E731  (b, ·, n), theirs
    theirs, their_state = mamba_selective_scan(
        t(x), t(dt), A, t(B), t(C), D=D, return_last_state=True
    )
    ours, state = scanned(values, state=False, chunk_size=4)
    bound = 2**-18 * theirs.abs().max()
    torch.testing.assert_close(ours, t(theirs), rtol=0, atol=bound)
    torch.testing.assert_close(state, their_state, rtol=0, atol=2**-18 * state.abs().max())
    shared = L.selective_scan(x, dt, A[:1].expand_as(A), B, C, D=D)  # one rate for every channel
    assert (shared - t(theirs)).abs().max() > 100 * bound
