r"""What SymPy proves about the backward pass at symbolic sizes, each a `Fact` with its residual.

- `softmax_jacobian`: from the weights step, $\partial a_{m,p} / \partial \tilde\omega_{m,t}
  = a_{m,p}(\delta_{p,t} - a_{m,t})$ (the row's Jacobian diag(a) − a aᵀ), by `sympy.diff` of
  the softmax entry; the Kronecker deltas SymPy produces are summed out.
- `softmax_backward`: contracting the Jacobian with dA gives the entry of the matrix form
  dΩ̃ = A ∘ (dA − (A ∘ dA) J) that `backward_steps` prints.
- `rowsum_identity`: Σ_r a_{m,r} da_{m,r} = Σ_j dc_{m,j} c_{m,j}, from the dA and context steps
  by exchanging two finite sums (the identity FlashAttention's backward pass relies on).
"""

from __future__ import annotations

import sympy as sp
from sympy import Derivative, Eq, Indexed, KroneckerDelta, Piecewise, Sum, exp, sqrt

from . import _notation as N
from ._backward_steps import backward_steps
from ._facts import Fact
from ._steps import steps

__all__ = ["softmax_jacobian", "softmax_backward", "rowsum_identity", "backward_facts"]

#: A second key index, for the derivative with respect to ω̃_{m,t} (local to these facts).
t = sp.Symbol("t", integer=True, positive=True)


def _forward(name: str):
    (step,) = [s for s in steps() if s.name == name]
    return step


def _backward(output: str):
    (step,) = [s for s in backward_steps() if s.output == output]
    return step


def _sift(expr: sp.Expr) -> sp.Expr:
    """Sum out every Kronecker delta: Σ_{r=1}^{n} f(r) δ_{r,t} = f(t), since 1 ≤ t ≤ n.

    SymPy's `doit` returns Piecewise((f(t), t ≤ n), (0, True)); the index t is a token, so the
    first branch is the value.
    """

    def one(total: Sum) -> sp.Expr:
        value = total.doit()
        if isinstance(value, Piecewise):
            (picked, condition), (otherwise, _) = value.args
            if otherwise != 0 or not condition.free_symbols <= {N.n, t, N.p, N.m}:
                raise RuntimeError(f"unexpected delta sum {total} -> {value}")
            return picked
        return value

    return expr.replace(lambda e: isinstance(e, Sum) and e.has(KroneckerDelta), one)


def _weights_in_scaled_scores() -> sp.Expr:
    """a_{m,p} = exp(ω̃_{m,p}) / Σ_r exp(ω̃_{m,r}): the weights step with ω = √c ω̃."""
    omega, scaled = N.base("omega"), N.base("omegatilde")
    return _forward("weights").element.rhs.replace(
        lambda e: isinstance(e, Indexed) and e.base == omega,
        lambda e: sqrt(N.c) * scaled[e.indices],
    )


def softmax_jacobian() -> Fact:
    r"""$\partial a_{m,p} / \partial \tilde\omega_{m,t} = a_{m,p}(\delta_{p,t} - a_{m,t})$."""
    a, scaled = N.base("a"), N.base("omegatilde")
    m, p = N.m, N.p
    entry = _weights_in_scaled_scores()
    derivative = sp.diff(entry, scaled[m, t])
    summed = _sift(derivative)
    total = sp.fraction(entry)[1]
    in_weights = summed.xreplace(
        {exp(scaled[m, p]): a[m, p] * total, exp(scaled[m, t]): a[m, t] * total}
    )
    jacobian = a[m, p] * (KroneckerDelta(p, t) - a[m, t])
    lhs = Derivative(a[m, p], scaled[m, t])
    return Fact(
        name="softmax_jacobian",
        title="The Jacobian of a softmax row",
        statement=Eq(lhs, jacobian, evaluate=False),
        derivation=(
            Eq(a[m, p], entry, evaluate=False),
            Eq(lhs, derivative, evaluate=False),
            Eq(lhs, summed, evaluate=False),
            Eq(lhs, in_weights, evaluate=False),
        ),
        residual=sp.expand(in_weights - jacobian),
    )


def softmax_backward() -> Fact:
    r"""$d\tilde\omega_{m,t} = \sum_p da_{m,p}\, \partial a_{m,p} / \partial \tilde\omega_{m,t}
    = a_{m,t}(da_{m,t} - \sum_p a_{m,p} da_{m,p})$: the entry of dΩ̃ = A ∘ (dA − (A ∘ dA) J)."""
    da, dscaled = N.base("da"), N.base("domegatilde")
    m, p, r = N.m, N.p, N.r
    jacobian = softmax_jacobian().statement.rhs
    chain = Sum(da[m, p] * jacobian, (p, 1, N.n))
    terms = sp.expand(da[m, p] * jacobian)
    split = sp.Add(
        *[
            coefficient * Sum(rest, (p, 1, N.n))  # -Σ_p f, not Σ_p -f
            for coefficient, rest in (term.as_coeff_Mul() for term in sp.Add.make_args(terms))
        ]
    )
    contracted = sp.factor_terms(_sift(split))
    # t -> p and the dummy p -> r: the seed's names for the entry of the matrix form
    renamed = contracted.xreplace({p: r}).xreplace({t: p})
    matrix_form = _backward("dOmega_scaled").element.rhs
    return Fact(
        name="softmax_backward",
        title="Through the softmax: the Jacobian applied to dA",
        statement=Eq(dscaled[m, p], renamed, evaluate=False),
        derivation=(
            Eq(dscaled[m, t], chain, evaluate=False),
            Eq(dscaled[m, t], split, evaluate=False),
            Eq(dscaled[m, t], contracted, evaluate=False),
        ),
        residual=sp.expand(renamed - matrix_form),
    )


def _inside(expr: sp.Expr) -> sp.Expr:
    """Move factors into the sums they multiply: f Σ_j g = Σ_j f g (f free of j)."""

    def move(product: sp.Mul) -> sp.Expr:
        sums = [f for f in product.args if isinstance(f, Sum)]
        if len(sums) != 1:
            return product
        (total,) = sums
        rest = sp.Mul(*[f for f in product.args if f is not total])
        return Sum(_inside(rest * total.function), *total.limits)

    return expr.replace(lambda e: isinstance(e, sp.Mul) and e.has(Sum), move)


def _canonical(expr: sp.Expr) -> sp.Expr:
    """Nested sums as one sum over sorted limits (finite sums over fixed ranges commute)."""
    while isinstance(expr, Sum) and isinstance(expr.function, Sum):
        expr = Sum(expr.function.function, *expr.function.limits, *expr.limits)
    if isinstance(expr, Sum):
        return Sum(expr.function, *sorted(expr.limits, key=lambda limit: str(limit[0])))
    return expr


def rowsum_identity() -> Fact:
    r"""$\sum_r a_{m,r}\, da_{m,r} = \sum_j dc_{m,j}\, c_{m,j}$, from the dA and context steps."""
    a, dc, ctx = N.base("a"), N.base("dctx"), N.base("ctx")
    m, p, r, j = N.m, N.p, N.r, N.j
    da_entry = _backward("dA").element.rhs.xreplace({p: r})  # da_{m,r} = Σ_j dc_{m,j} v_{r,j}
    context = _forward("context").element.rhs  # c_{m,j} = Σ_p a_{m,p} v_{p,j}
    context = context.xreplace({p: r})
    left = Sum(a[m, r] * N.base("da")[m, r], (r, 1, N.n))
    substituted = Sum(a[m, r] * da_entry, (r, 1, N.n))
    inner = _inside(substituted)  # Σ_r Σ_j a_{m,r} dc_{m,j} v_{r,j}
    exchanged = Sum(inner.function, (r, 1, N.n), (j, 1, N.c))  # Σ_j Σ_r, the same finite sum
    right = Sum(dc[m, j] * context, (j, 1, N.c))
    statement = Eq(left, Sum(dc[m, j] * ctx[m, j], (j, 1, N.c)), evaluate=False)
    residual = sp.expand(_canonical(inner) - _canonical(_inside(right)))
    return Fact(
        name="rowsum_identity",
        title="The row sums of the softmax backward pass",
        statement=statement,
        derivation=(
            Eq(left, substituted, evaluate=False),
            Eq(left, inner, evaluate=False),
            Eq(left, exchanged, evaluate=False),
            Eq(left, right, evaluate=False),
        ),
        residual=residual,
    )


def backward_facts() -> tuple[Fact, ...]:
    """The facts the backward section of a document states, in order."""
    return (softmax_jacobian(), softmax_backward(), rowsum_identity())
