"""The backward-pass section of a derivation document, as blocks.

The equations come from `derive._backward_steps` (matrix forms and their SymPy-expanded entries)
and `derive._backward_facts` (the softmax Jacobian, its contraction, the rowsum identity), printed
by `derive._latex`; the words from `derive._prose`. A fact that SymPy did not reduce to zero is
never printed.
"""

from __future__ import annotations

import sympy as sp

from . import _notation as N
from . import _prose as P
from ._backward_facts import rowsum_identity, softmax_backward, softmax_jacobian
from ._backward_steps import GRADIENT_OF, backward_steps, multi_head_backward_steps
from ._blocks import Block, Display, Heading, Prose, Table
from ._facts import Fact
from ._latex import latex
from ._steps import Step

__all__ = ["backward"]


def _equation(eq: sp.Eq) -> str:
    return f"{latex(eq.lhs)} &= {latex(eq.rhs)}"


def _checked(fact: Fact) -> Fact:
    if not fact.holds:
        raise RuntimeError(f"fact {fact.name} does not hold: residual {fact.residual}")
    return fact


def _chain(fact: Fact) -> tuple[str, ...]:
    """The derivation, then the statement: ``&= rhs`` while the left-hand side stays the same."""
    _checked(fact)
    lines: list[str] = []
    previous: sp.Eq | None = None
    for eq in (*fact.derivation, fact.statement):
        if previous is not None and eq.lhs == previous.lhs:
            if eq.rhs != previous.rhs:
                lines.append(f"&= {latex(eq.rhs)}")
        else:
            lines.append(_equation(eq))
        previous = eq
    return tuple(lines)


def _shapes_table(chain: tuple[Step, ...]) -> Table:
    shapes: dict[str, tuple[sp.Expr, sp.Expr]] = {}
    for step in chain:
        shapes |= step.shapes
    rows = tuple(
        (
            f"${N.MATRIX_LETTERS[gradient]}$",
            rf"${latex(shapes[gradient][0])} \times {latex(shapes[gradient][1])}$",
            f"${N.MATRIX_LETTERS[of]}$",
        )
        for gradient, of in GRADIENT_OF.items()
    )
    return Table(("gradient", "shape", "gradient of $L$ with respect to"), rows)


def _displays(chain: tuple[Step, ...]) -> tuple[str, ...]:
    return tuple(line for s in chain for line in (_equation(s.matrix), _equation(s.element)))


def backward(*, causal: bool = False, heads: int = 1) -> list[Block]:
    """The section: shapes, each gradient step, the softmax's Jacobian, the rowsum identity,
    and (as asked) the causal mask and the multi-head variant."""
    chain = backward_steps()
    by_output = {step.output: step for step in chain}
    blocks: list[Block] = [
        Heading("The backward pass"),
        Prose(P.BACKWARD_INTRO),
        _shapes_table(chain),
        Heading("Through the context", 2),
        Prose(P.BACKWARD_STEP_TEXT["dA"]),
        Display(_displays((by_output["dA"], by_output["dV"]))),
        Heading("Through the softmax", 2),
        Prose(P.BACKWARD_STEP_TEXT["dOmega_scaled"]),
        Display(_chain(softmax_jacobian())),
        Display(_chain(softmax_backward())),
        Display(_displays((by_output["dOmega_scaled"],))),
        Prose(P.BACKWARD_STEP_TEXT["dOmega"]),
        Display(_displays((by_output["dOmega"],))),
        Heading("Through the scores", 2),
        Prose(P.BACKWARD_STEP_TEXT["dQ"]),
        Display(_displays((by_output["dQ"], by_output["dK"]))),
        Heading("To the weights and the inputs", 2),
        Prose(P.BACKWARD_STEP_TEXT["dW_q"]),
        Display(_displays(tuple(by_output[f"dW_{w}"] for w in "qkv"))),
        Prose(P.BACKWARD_STEP_TEXT["dX"]),
        Display(_displays((by_output["dX"],))),
        Heading("The rowsum identity", 2),
        Prose(P.BACKWARD_ROWSUM),
        Display(_chain(rowsum_identity())),
    ]
    if causal:
        element = by_output["dOmega_scaled"].element
        masked = element.rhs.xreplace({N.base("a")[N.m, N.p]: 0})
        line = rf"{latex(element.lhs)} &= {latex(masked)} \qquad (p > m)"
        blocks += [Prose(P.BACKWARD_CAUSAL), Display((line,))]
    if heads > 1:
        blocks += [
            Heading("Several heads", 2),
            Prose(P.BACKWARD_MULTI_HEAD),
            Display(_displays(multi_head_backward_steps())),
        ]
    blocks.append(Prose(P.BACKWARD_CHECKED))
    return blocks
