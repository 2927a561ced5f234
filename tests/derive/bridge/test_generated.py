"""The torch code generated from a declaration (`derive.torch_function`, `derive.torch_module`):
for every registered variant, its forward equals the hand-written twins' (`attention`'s
functions, step by step as `derive check` runs them) and its backward, the derived gradients,
equals autograd's through those twins, in float64; batches, a module, bad input; and a formula
changed in the declaration changes what runs."""

import dataclasses
import random

import pytest
import sympy as sp
import torch

import derive
from derive.bridge.check import draw_sizes, explicit_of
from derive.bridge.evaluate import constant_of, dyadic, torch_values
from derive.bridge.generated import GeneratedFunction
from derive.notation import letters as L

#: Every variant the registry holds (a new one is in this table by registering it).
VARIANTS = derive.variants()


def _additive(allowed: torch.Tensor) -> torch.Tensor:
    """A mask as the declaration holds it: 0 where a query may attend, −∞ elsewhere."""
    return torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))


def _against_the_twins(name: str, seed: int) -> tuple[float, float]:
    """The largest differences of C and of every input's gradient between the generated code
    and the twins (autograd through them), at sizes and inputs drawn with `seed`."""
    entry = derive.variant(name)
    function = derive.torch_function(name)
    sizes = draw_sizes(entry, random.Random(seed), {})
    explicit = explicit_of(entry, sizes, seed)
    inputs = dyadic(explicit, seed)
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    expected = torch_values(explicit, leaves)[entry.graph.output]
    upstream = torch.randn(
        expected.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )
    expected.backward(upstream)
    given = dict(inputs)
    if "M" in function.inputs:
        given["M"] = _additive(constant_of(explicit, "M"))
    tensors = [given[x].clone().requires_grad_(x in leaves) for x in function.inputs]
    own = {k: v for k, v in sizes.items() if k not in ("n", "d", "c")}
    got = function(*tensors, **own)
    got.backward(upstream)
    values = float((got - expected).detach().abs().max())
    gradients = 0.0
    for letter, tensor in zip(function.inputs, tensors, strict=True):
        if letter not in leaves:
            continue
        want = leaves[letter].grad
        want = torch.zeros_like(tensor) if want is None else want
        have = torch.zeros_like(tensor) if tensor.grad is None else tensor.grad
        gradients = max(gradients, float((have - want).abs().max()))
    return values, gradients


@pytest.mark.parametrize("name", VARIANTS)
def test_the_generated_code_computes_what_the_twins_compute(name):
    values, gradients = _against_the_twins(name, seed=3)
    assert values <= 1e-12, f"{name}: C differs by {values}"
    assert gradients <= 1e-10, f"{name}: a gradient differs by {gradients}"


@pytest.mark.parametrize("name", ["gqa+sinks+rope", "gqa+sliding-window+softcap+rope", "mla"])
def test_groups_heads_and_batches(name):
    """Groups of keys (g = 2 of h = 4), and leading batch axes: each sequence of a batch is the
    sequence alone, and the derived backward equals autograd through the generated forward."""
    own = {"h": 4, "g": 2} if "gqa" in name else {"h": 4, "d_u": 3}
    function = derive.torch_function(name)
    entry = function.entry
    from derive.graph.fitting import explicit_sizes

    at = explicit_sizes(entry, 6, 5, 8, own)
    generator = torch.Generator().manual_seed(0)
    weights = [
        torch.randn(
            *(int(sp.sympify(x).xreplace(at)) for x in entry.graph.shapes[letter]),
            dtype=torch.float64,
            generator=generator,
        )
        for letter in function.inputs[1:]
    ]
    x = torch.randn(3, 6, 5, dtype=torch.float64, generator=generator)
    batch = function(x, *weights, **own)
    assert batch.shape == (3, 6, 8)
    assert torch.allclose(batch[1], function(x[1], *weights, **own), atol=1e-13, rtol=0)
    leaves = [t.clone().requires_grad_() for t in (x, *weights)]
    twins = [t.clone().requires_grad_() for t in (x, *weights)]
    upstream = torch.randn(batch.shape, dtype=torch.float64, generator=generator)
    function(*leaves, **own).backward(upstream)
    function.steps(*twins, **own)[function.output].backward(upstream)
    for mine, autograd in zip(leaves, twins, strict=True):
        assert mine.grad.shape == mine.shape
        assert torch.allclose(mine.grad, autograd.grad, atol=1e-11, rtol=0)


def test_the_source_is_the_declaration_printed():
    """The forward reads as the steps do: one contraction per product, the softmax over the
    keys, the mask from the indices; the backward as the printed gradients do."""
    function = derive.torch_function("causal")
    source = function.source
    assert 'Q = torch.einsum("...mi,...ij->...mj", X, W_q)' in source
    assert "torch.softmax(Omega_masked, dim=-1)" in source
    assert ">=" in source and "float('-inf')" in source  # M = 0 where m ≥ p, −∞ elsewhere
    assert "for " not in source  # no loop over entries
    backward = function.backward_source
    assert backward.startswith("def backward(dC, values, *, c):")
    assert 'dV = torch.einsum("...mp,...mj->...pj", A, dC)' in backward


def test_a_changed_formula_changes_what_runs():
    """The scores divided by c instead of √c: the generated code computes the changed formula
    (against the original's, C differs; against the changed scaling by hand, it agrees)."""
    entry = derive.variant("self-attention")
    omega = L.base("omega")
    changed = entry.graph.replace("Omega_scaled", omega[L.m, L.p] / L.c)
    function = GeneratedFunction(dataclasses.replace(entry, graph=changed, name="changed"))
    generator = torch.Generator().manual_seed(1)
    x, w_q, w_k, w_v = (
        torch.randn(*s, dtype=torch.float64, generator=generator)
        for s in ((4, 3), (3, 5), (3, 5), (3, 5))
    )
    got = function(x, w_q, w_k, w_v)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    assert torch.allclose(got, torch.softmax(q @ k.T / 5, dim=-1) @ v, atol=1e-13, rtol=0)
    original = derive.torch_function("self-attention")(x, w_q, w_k, w_v)
    assert not torch.allclose(got, original, atol=1e-6)


def test_the_forward_pass_runs_before_any_gradient_is_derived(monkeypatch):
    """The forward pass is the declaration's formulas alone: a function whose gradients cannot
    be derived still runs forward (what `derive check --forward-only` runs), and refuses its
    backward pass by name when it is first run."""
    from derive.explicit import checked

    def refused(*_):
        raise derive.DerivationError("print the gradient dQ", "a test's refusal")

    monkeypatch.setattr(checked, "checked_backward", refused)
    entry = derive.variant("self-attention")
    function = GeneratedFunction(dataclasses.replace(entry, name="forward alone"))
    x, w = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    x.requires_grad_()
    out = function(x, w, w, w)
    q = x.detach() @ w
    expected = torch.softmax(q @ q.T / 5**0.5, dim=-1) @ q
    assert torch.allclose(out.detach(), expected, atol=1e-13, rtol=0)
    with pytest.raises(derive.DerivationError, match="print the gradient dQ"):
        out.sum().backward()


def test_float32_scores_do_not_overflow():
    """Scores in the thousands: the softmax as printed stays finite (e^{1000} would not)."""
    function = derive.torch_function("causal")
    x = torch.full((4, 2), 30.0)
    w = torch.eye(2) * 30
    assert torch.isfinite(function(x, w, w, w)).all()


def test_a_row_with_no_key_has_weights_zero():
    """A given mask that leaves a query no key: its context is 0 (derive's convention), not
    NaN, and so is its gradient."""
    function = derive.torch_function("masked")
    generator = torch.Generator().manual_seed(2)
    x, w = (
        torch.randn(3, 2, dtype=torch.float64, generator=generator),
        torch.eye(2, dtype=torch.float64),
    )
    allowed = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    leaf = x.clone().requires_grad_()
    c = function(leaf, w, w, w, _additive(allowed))
    assert torch.equal(c[1], torch.zeros(2, dtype=torch.float64))
    c.sum().backward()
    assert torch.isfinite(leaf.grad).all()


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda f, x, w: f(x, w, w), "takes 4 matrices (X, W_q, W_k, W_v), got 3"),
        (lambda f, x, w: f(x, w, w, torch.zeros(3, 3)), "W_v must be d × c = 4 × 2"),
        (lambda f, x, w: f(x, w, w, torch.zeros(4)), "W_v must be a matrix (d × c), got (4,)"),
        (lambda f, x, w: f(x, w, w, w, h=2), "has no size 'h'"),
    ],
)
def test_bad_input_names_the_argument_and_the_dimension(call, words):
    function = derive.torch_function("self-attention")
    x, w = torch.zeros(5, 4), torch.zeros(4, 2)
    with pytest.raises((ValueError, TypeError)) as error:
        call(function, x, w)
    assert words in str(error.value)


def test_a_module_holds_the_weights_and_runs_the_generated_code():
    """torch_module: the weights by their letters (gains at 1), X by the call; its output and
    gradients are the generated function's on the same weights."""
    torch.manual_seed(0)
    module = derive.torch_module("gqa+qk-norm+rope", d=6, c=8, h=4, g=2, dtype=torch.float64)
    assert module.data == ("X",)
    assert dict((k, tuple(v.shape)) for k, v in module.named_parameters()) == {
        "W_q": (6, 8),
        "W_k": (6, 4),
        "W_v": (6, 4),
        "G_q": (1, 2),
        "G_k": (1, 2),
        "W_o": (8, 8),
    }
    assert torch.equal(module.G_q, torch.ones(1, 2, dtype=torch.float64))
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    out = module(x)
    weights = [getattr(module, letter) for letter in module.function.inputs[1:]]
    assert torch.equal(out, module.function(x, *weights, h=4, g=2))
    out.square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_a_module_refuses_sizes_that_do_not_fit():
    with pytest.raises(ValueError, match="h=3 does not divide c=8"):
        derive.torch_module("multi-head", d=4, c=8, h=3)
    with pytest.raises(ValueError, match="has no size 'w'"):
        derive.torch_module("causal", d=4, c=8, w=2)
