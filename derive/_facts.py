"""What SymPy proves about the steps: each fact is derived from the step objects, not stated.

A `Fact` carries the statement to print, the intermediate equations of its derivation, and a
residual that SymPy reduced to zero (so ``fact.holds`` is a computed result, and a changed
formula in `derive._steps` makes a fact fail, not silently stay true):

- `rows_sum_to_one`: Σ_p a_{m,p} = 1, from the weights step (plain or causal).
- `shift_invariance`: adding t to every score of a row leaves a_{m,p} unchanged.
- `score_variance`: q·k has mean 0 and variance c when the components are independent with mean
  0 and variance 1: the reason for dividing by √c.
- `operation_count` and `flop_count`: counted on the matrix expression of C composed from the
  steps (five matrix products and one transpose; 6ndc + 4n²c FLOPs for the single head).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy import Eq, Indexed, MatMul, MatrixExpr, Sum, Transpose

from . import _notation as N
from ._steps import Concat, steps

__all__ = [
    "Fact",
    "rows_sum_to_one",
    "shift_invariance",
    "score_variance",
    "composed_expression",
    "operation_count",
    "flop_count",
    "facts",
]


@dataclass(frozen=True)
class Fact:
    """A statement, its derivation (equations in order) and the residual SymPy reduced to 0."""

    name: str
    title: str
    statement: Eq
    derivation: tuple[Eq, ...]
    residual: sp.Expr

    @property
    def holds(self) -> bool:
        """True when the residual is exactly zero."""
        return self.residual == 0

    def _repr_latex_(self) -> str:
        from ._latex import latex

        return "$$" + latex(self.statement) + "$$"


def _weights_element(causal: bool) -> sp.Expr:
    (weights,) = [s for s in steps(causal=causal) if s.name == "weights"]
    return weights.element.rhs


def _rename_dummies(expr: sp.Expr, index: sp.Symbol) -> sp.Expr:
    """Give every sum the same dummy index: Σ_p f(p) and Σ_r f(r) are the same number."""
    return expr.replace(
        lambda e: isinstance(e, Sum),
        lambda s: s.change_index(s.variables[0], s.variables[0], index),
    )


def rows_sum_to_one(*, causal: bool = False) -> Fact:
    r"""$\sum_{p=1}^{n} a_{m,p} = 1$ for every row m, from the weights step.

    Causal: the terms with p > m are 0 (the Piecewise), the others run over p = 1 … m.
    """
    element = _weights_element(causal)
    if causal:
        # Piecewise((a, p <= m), (0, True)): summing over p = 1..n keeps p = 1..m.
        (value, _), _ = element.args
        total = Sum(value, (N.p, 1, N.m))
    else:
        total = Sum(element, (N.p, 1, N.n))
    factored = sp.factor_terms(total)
    renamed = _rename_dummies(factored, N.r)
    residual = sp.simplify(renamed - 1)
    return Fact(
        name="rows_sum_to_one",
        title="Every row of $A$ sums to 1",
        statement=Eq(Sum(N.base("a")[N.m, N.p], (N.p, 1, N.n)), 1, evaluate=False),
        derivation=(Eq(Sum(N.base("a")[N.m, N.p], (N.p, 1, N.n)), factored, evaluate=False),),
        residual=residual,
    )


def shift_invariance() -> Fact:
    r"""$\mathrm{softmax}$ ignores a constant added to a row: ω_{m,p} → ω_{m,p} + t leaves
    a_{m,p} unchanged ($e^{t/\sqrt{c}}$ cancels between numerator and denominator)."""
    t = sp.Symbol("t", real=True)
    element = _weights_element(False)
    omega = N.base("omega")
    shifted = element.replace(lambda e: isinstance(e, Indexed) and e.base == omega, lambda e: e + t)
    residual = sp.simplify(shifted - element)
    expanded = sp.expand(shifted)  # exp((t + w)/sqrt(c)) -> exp(t/sqrt(c)) exp(w/sqrt(c))
    return Fact(
        name="shift_invariance",
        title="Softmax is unchanged by adding a constant to a row",
        statement=Eq(shifted, element, evaluate=False),
        derivation=(
            Eq(shifted, expanded, evaluate=False),
            Eq(expanded, sp.factor_terms(expanded), evaluate=False),
        ),
        residual=residual,
    )


def score_variance(width: int | None = None) -> Fact:
    r"""If the $q_j$, $k_j$ are independent with mean 0 and variance 1, then
    $\mathrm{E}[q\cdot k] = 0$ and $\mathrm{Var}(q\cdot k) = c$.

    Generic c: for one pair, the moments give Var(q_j k_j) = E[q_j²]E[k_j²] − (E[q_j]E[k_j])²
    with E[q_j] = 0, E[q_j²] = 1; the c products are uncorrelated, so the variances add:
    Σ_{j=1}^{c} 1 = c. With a concrete `width`, `sympy.stats` computes the variance of
    Σ_j q_j k_j for standard normal q_j, k_j directly (seconds past width 4).
    """
    size = N.c if width is None else sp.Integer(width)
    mu_q, mu_k = sp.symbols("mu_q mu_k", real=True)
    var_q, var_k = sp.symbols("sigma_q^2 sigma_k^2", positive=True)
    # E[(q k)^2] = E[q^2] E[k^2] by independence; E[q^2] = sigma^2 + mu^2.
    pair = (var_q + mu_q**2) * (var_k + mu_k**2) - (mu_q * mu_k) ** 2
    unit = {mu_q: 0, mu_k: 0, var_q: 1, var_k: 1}
    pair_variance = pair.xreplace(unit)
    # Cov(q_j k_j, q_j' k_j') = E[q_j]E[k_j]E[q_j']E[k_j'] - (mu_q mu_k)^2 = 0 for j != j'.
    covariance = (mu_q * mu_k) ** 2 - (mu_q * mu_k) ** 2
    total = Sum(pair_variance, (N.j, 1, size)).doit() + covariance
    if width is not None:
        from sympy.stats import Normal, variance

        qs = [Normal(f"q_{index}", 0, 1) for index in range(1, width + 1)]
        ks = [Normal(f"k_{index}", 0, 1) for index in range(1, width + 1)]
        total = sp.simplify(variance(sum(q * k for q, k in zip(qs, ks, strict=True))))
    q, k = sp.IndexedBase("q", real=True), sp.IndexedBase("k", real=True)
    var = sp.Function("Var")
    dot = Sum(q[N.j] * k[N.j], (N.j, 1, size))
    return Fact(
        name="score_variance",
        title=r"The variance of $q \cdot k$ grows like $c$, hence the scaling by $1/\sqrt{c}$",
        statement=Eq(var(dot), size, evaluate=False),
        derivation=(
            Eq(var(q[N.j] * k[N.j]), pair, evaluate=False),
            Eq(var(q[N.j] * k[N.j]), pair_variance, evaluate=False),
            Eq(var(dot), Sum(pair_variance, (N.j, 1, size)), evaluate=False),
        ),
        residual=sp.simplify(total - size),
    )


def composed_expression(*, heads: bool = False) -> MatrixExpr:
    """C as one matrix expression in X and the weights, composed from the steps' matrix-level
    equations (each step's output symbol replaced by its right-hand side, no simplification)."""
    chain = steps(heads=heads)
    definitions = {step.matrix.lhs: step.matrix.rhs for step in chain}
    if heads:  # the split step shows Q; K and V split the same way
        for letter in "KV":
            whole = N.matrix_symbol(letter, N.n, N.c)
            head = N.matrix_symbol(f"{letter}_l", N.n, N.c_h)
            definitions[head] = whole[:, (N.ell - 1) * N.c_h : N.ell * N.c_h]
    expr = definitions[chain[-1].matrix.lhs]
    for _ in chain:  # each pass resolves one level; the chain is at most len(chain) deep
        expr = expr.xreplace(definitions)
    return expr


def _walk(expr: sp.Basic, heads: sp.Expr, visit, seen: set | None = None) -> None:
    """Visit each distinct matrix sub-expression once, with how many times it is computed.

    A sub-expression that appears twice is computed once (Q feeds every head). Inside the
    concatenation of heads, a sub-expression that depends on the head index l is computed once
    per head (`heads` times); one that does not (X W_q, sliced by every head) once.
    """
    seen = set() if seen is None else seen
    if expr in seen:
        return
    seen.add(expr)
    per_head = heads != 1 and N.ell in expr.free_symbols
    visit(expr, heads if per_head else sp.S.One)
    inner = expr.args[1] if isinstance(expr, Concat) else heads
    for arg in expr.args:
        if isinstance(arg, MatrixExpr):
            _walk(arg, inner, visit, seen)


def _matrix_args(product: MatMul) -> list[MatrixExpr]:
    return [arg for arg in product.args if isinstance(arg, MatrixExpr)]


def operation_count(*, heads: bool = False) -> dict[str, int | sp.Expr]:
    """Matrix products and transposes in the composed expression of C.

    A product of k matrices counts k − 1; a scalar factor (1/√c) is not a matrix product; the
    split into heads is slicing. A shared sub-expression counts once; per-head operations inside
    the concatenation count once per head (the result is then in terms of h).
    """
    counts: dict[str, sp.Expr] = {"matrix products": sp.S.Zero, "transposes": sp.S.Zero}

    def visit(expr: sp.Basic, multiplier: sp.Expr) -> None:
        if isinstance(expr, MatMul):
            counts["matrix products"] += multiplier * (len(_matrix_args(expr)) - 1)
        elif isinstance(expr, Transpose):
            counts["transposes"] += multiplier

    _walk(composed_expression(heads=heads), sp.S.One, visit)
    return {key: int(value) if value.is_Integer else value for key, value in counts.items()}


def flop_count(*, heads: bool = False) -> sp.Expr:
    """FLOPs of the matrix products in C, as `torch.utils.flop_counter` counts them.

    A product of an (a × b) and a (b × e) matrix costs 2abe (one multiply and one add per term).
    Single head: 3·2ndc (projections) + 2n²c (scores) + 2n²c (context) = 6ndc + 4n²c. The
    scaling, the softmax and the transpose are not matrix products and are not counted (torch's
    counter does not count them either). Multi-head: h heads of width c_h = c/h each, plus the
    output projection 2nc²; written in n, d, c.
    """
    total = sp.S.Zero

    def visit(expr: sp.Basic, multiplier: sp.Expr) -> None:
        nonlocal total
        if isinstance(expr, MatMul):
            factors = _matrix_args(expr)
            rows = factors[0].shape[0]
            for left, right in zip(factors, factors[1:], strict=False):
                total += multiplier * 2 * rows * left.shape[1] * right.shape[1]

    _walk(composed_expression(heads=heads), sp.S.One, visit)
    return sp.expand(total.xreplace({N.c_h: N.c / N.h}))


def facts() -> tuple[Fact, ...]:
    """The facts a derivation document states, in order."""
    return (rows_sum_to_one(), shift_invariance(), score_variance())
