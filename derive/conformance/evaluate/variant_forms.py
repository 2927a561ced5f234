r"""The matrix expressions the variants' derived forms add, evaluated with their rounding bounds
(and the blocks of columns that split heads and groups).

`derive.conformance.evaluate.matrices.Evaluation` walks the forms of self-attention; the variants'
forms and gradients add a few more (`derive.calculus` derives them from the declarations):

- f applied to every entry (SymPy's ``ElementwiseApplyFunction``): RoPE's cos Φ and sin Φ,
  softcapping's tanh(Ω̃ / κ), the gate's σ(Γ); the error e of x becomes |f'(x)| e, plus the
  function's own few ulps (`rounding.apply`);
- a Hadamard power X^{∘k} (softcapping's gradient: 1 − tanh²);
- the rows' RMS normalisation and a diagonal matrix of gains (QK-norm): y = z / r,
  r = √(Σ_j z_j² / w + ε), whose error is e / r + |z| Σ_j |z_j| e_j / (w r³) carried, plus
  (w/2 + 3) u |y| of its own (the sum of squares, the root, the division);
- the softmax with a sink ζ in each row's denominator: the sink is one more score, whose
  weight is dropped;
- the sum of each group's heads, side by side (`GroupConcat`: the gradient of keys and values
  that h / g heads share);
- a matrix given by its entries (`Entries`), and a coefficient that reads an entry of a
  parameter (ALiBi's slope −μ_ℓ, per head), evaluated on grids (`elementwise`).
"""

from __future__ import annotations

from typing import Any

import sympy as sp
from sympy.matrices.expressions.applyfunc import ElementwiseApplyFunction

from ...notation import Diag, Entries, GroupConcat, RMSNorm, Softmax
from ...notation import letters as L
from .elementwise import concrete, entries_values
from .rounding import apply

__all__ = ["evaluate_variant_form", "coefficient", "columns"]


def evaluate_variant_form(evaluation: Any, expr: sp.MatrixExpr) -> tuple[Any, Any] | None:
    """(value, bound) of one of the expressions above, or None if `expr` is none of them."""
    for kind, evaluate in _KINDS:
        if isinstance(expr, kind):
            return evaluate(evaluation, expr)
    return None


def coefficient(evaluation: Any, expr: sp.Expr) -> tuple[Any, Any]:
    """A scalar coefficient (−μ_ℓ, 1/√c_h): a tensor (H, 1, 1) per head where it reads ℓ."""
    return entries_values(
        expr, (sp.S.One, sp.S.One), (1, 1), *_grid_inputs(evaluation), **_grid_rounding(evaluation)
    )


def columns(evaluation: Any, expr: sp.MatrixSlice) -> tuple[Any, Any]:
    """A block of columns (a head's Q^{(ℓ)}, a group's K^{(ℓ)}); one block per head where its
    bounds depend on ℓ."""
    torch = evaluation.torch
    value, bound = evaluation(expr.parent)
    (start, stop, _), (first, last, _) = expr.rowslice, expr.colslice
    per_head = L.ell in (sp.sympify(first) + sp.sympify(last)).free_symbols

    def cut(t: Any, head: int | None) -> Any:
        at = {L.ell: head} if head is not None else {}
        s, e, f, g = (
            concrete(sp.sympify(x).xreplace(at), evaluation.sizes)
            for x in (start, stop, first, last)
        )
        return t[..., s:e, f:g]

    if not per_head:
        return cut(value, None), None if bound is None else cut(bound, None)
    heads = range(1, evaluation.heads + 1)
    stack = lambda t: torch.cat([cut(t, head) for head in heads], dim=-3)  # noqa: E731
    return stack(value), None if bound is None else stack(bound)


def _grid_inputs(evaluation: Any) -> tuple:
    return evaluation.values, evaluation.sizes, evaluation.heads


def _grid_rounding(evaluation: Any) -> dict:
    bounds = evaluation.bounds if evaluation.rounding is not None else None
    return {"bounds": bounds, "unit": _unit(evaluation)}


def _unit(evaluation: Any) -> float:
    return 0.0 if evaluation.rounding is None else evaluation.rounding.store


def _applied(evaluation: Any, expr: ElementwiseApplyFunction) -> tuple[Any, Any]:
    (z,), body = expr.function.variables, expr.function.expr
    if body.args != (z,):
        raise NotImplementedError(f"no evaluation for the entrywise function {expr.function}")
    value, bound = evaluation(expr.expr)
    result, error = apply(
        type(body), value, 0 * value if bound is None else bound, _unit(evaluation)
    )
    rounding = evaluation.rounding
    table = isinstance(expr.expr, sp.MatrixSymbol) and str(expr.expr.name) in L.CONSTANT_LETTERS
    if rounding is not None and rounding.tables and table:  # cos Φ, sin Φ rounded as a table
        error = error + rounding.tables * result.abs()
    return result, error


def _power(evaluation: Any, expr: sp.HadamardPower) -> tuple[Any, Any]:
    value, bound = evaluation(expr.base)
    k = float(expr.exp)
    result = value**k
    if bound is None:
        return result, None
    return result, k * value.abs() ** (k - 1) * bound + _unit(evaluation) * result.abs()


def _rms_norm(evaluation: Any, expr: RMSNorm) -> tuple[Any, Any]:
    torch = evaluation.torch
    z, error = evaluation(expr.arg)
    eps = float(sp.sympify(expr.args[1]).xreplace(_numbers(evaluation.sizes)))
    width = z.shape[-1]
    r = torch.sqrt((z**2).mean(-1, keepdim=True) + eps)
    y = z / r
    if error is None:
        return y, None
    carried = error / r + z.abs() * (z.abs() * error).sum(-1, keepdim=True) / (width * r**3)
    return y, carried + (width / 2 + 3) * _unit(evaluation) * y.abs()


def _diag(evaluation: Any, expr: Diag) -> tuple[Any, Any]:
    torch = evaluation.torch
    value, bound = evaluation(expr.row)
    square = lambda t: torch.diag_embed(t.squeeze(-2))  # noqa: E731 - (…, 1, w) -> (…, w, w)
    return square(value), None if bound is None else square(bound)


def _softmax_with_sink(evaluation: Any, expr: Softmax) -> tuple[Any, Any]:
    torch = evaluation.torch
    scores, bound = evaluation(expr.arg)
    sink, sink_bound = coefficient(evaluation, expr.sink)
    column = lambda t: torch.as_tensor(t).double().expand(*scores.shape[:-1], 1)  # noqa: E731
    widened = torch.cat([scores, column(sink)], dim=-1)
    widened_bound = None if bound is None else torch.cat([bound, column(sink_bound)], dim=-1)
    weights, weights_bound = evaluation.softmax(widened, widened_bound)
    return weights[..., :-1], None if weights_bound is None else weights_bound[..., :-1]


def _group_concat(evaluation: Any, expr: GroupConcat) -> tuple[Any, Any]:
    torch = evaluation.torch
    value, bound = evaluation(expr.block)
    groups = concrete(expr.count, evaluation.sizes)
    values, bounds = [], []
    for nu in range(1, groups + 1):
        first, last = (
            concrete(sp.sympify(x).xreplace({L.nu: nu}), evaluation.sizes)
            for x in (expr.first, expr.last)
        )
        heads = slice(first - 1, last)
        values.append(value[..., heads, :, :].sum(-3))
        if bound is not None and evaluation.rounding is not None:
            spread = value[..., heads, :, :].abs().sum(-3)
            gamma = evaluation.rounding.gamma(last - first + 1)
            bounds.append(bound[..., heads, :, :].sum(-3) + gamma * spread)
    join = lambda parts: torch.cat(parts, dim=-1).unsqueeze(-3)  # noqa: E731
    return join(values), join(bounds) if bounds else None


def _entries(evaluation: Any, expr: Entries) -> tuple[Any, Any]:
    shape = (expr.args[2], expr.args[3])
    inputs, rounding = _grid_inputs(evaluation), _grid_rounding(evaluation)
    value, bound = entries_values(expr.entry, tuple(expr.indices), shape, *inputs, **rounding)
    return value, bound if evaluation.rounding is not None else None


def _numbers(sizes: dict) -> dict:
    return {symbol: sp.sympify(value) for symbol, value in sizes.items()}


_KINDS = (
    (ElementwiseApplyFunction, _applied),
    (sp.HadamardPower, _power),
    (RMSNorm, _rms_norm),
    (Diag, _diag),
    (GroupConcat, _group_concat),
    (Entries, _entries),
    (Softmax, _softmax_with_sink),
)
