r"""What SymPy derives about rotary position embeddings: the score depends on p − m only.

From the declarations (the rotated queries and keys put into the score, the rotation and the
angles put in), at symbolic sizes:

1. the sums over j' of the rotation are summed out (its Kronecker deltas), each under the half of
   the range of j where it is not zero;
2. the sum over j is split where the rotation changes sign (j ≤ c/2, j > c/2) and the second
   half counted from 1, so that the pair (j, j + c/2) is one term;
3. the angles put in (the same θ_j for j and j + c/2) and each coefficient of a product
   q_{·} k_{·} simplified by `sympy.trigsimp`: cos a cos b + sin a sin b = cos(a − b), ….

What is left reads the positions only through (m − p) θ_j: checked by SymPy (the angles do not
change when m and p are both moved by τ). With every angle 0 the score is the unrotated one.

Partial RoPE (`partial-rope`, its angles and rotation read c_r) is derived the same way on its
first c_r features, split at c_r/2; the features c_r + 1 … c_h are a third range, where the
rotation and the angles are 0 and the score's terms q_{m,j} k_{p,j} read no position. The
width is written c_r + e (e ≥ 0 features not rotated) while the ranges decide, so that
j + c_r/2 ≤ c_h is known.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Indexed, Piecewise, Sum

from ..calculus import inline, under_ranges
from ..graph import Declaration, Graph
from ..notation import letters as L
from .fact import Fact

__all__ = ["relative_position", "zero_angles", "THETA", "scores_step"]

#: θ_j, the frequency of the pair (j, j + c/2): β^{−2(j−1)/c}.
THETA = sp.IndexedBase("theta", positive=True)
_TAU = sp.Symbol("tau", integer=True)
#: The features a partial rotation leaves (c_h − c_r), while the ranges decide.
_SPARE = sp.Symbol("e", integer=True, nonnegative=True)


def scores_step(graph: Graph) -> Declaration:
    """The step that computes the scores (one head's, where the graph has heads)."""
    (step,) = [s for s in graph.declarations if s.name == "scores"]
    return step


def _rotation_summed(expr: sp.Expr, ranges: dict) -> sp.Expr:
    """Each Σ_{j'} of the rotation summed out (its deltas), decided under `ranges`."""
    return expr.replace(
        lambda e: isinstance(e, Sum) and e.variables == (L.j2,),
        lambda e: under_ranges(e.doit(), ranges),
    )


def _rotated_width(graph: Graph, width: sp.Expr) -> sp.Expr:
    """c_r where the angles read it (partial RoPE), else the whole width."""
    return L.c_r if L.c_r in graph.step("Phi").element.rhs.free_symbols else width


def _decided(summand: sp.Expr, ranges: dict) -> sp.Expr:
    """The summand with the conditions the ranges decide decided, the rotation summed out."""
    return under_ranges(_rotation_summed(under_ranges(summand, ranges), ranges), ranges)


def _angles(graph: Graph) -> set[str]:
    """Φ and the constant steps its formula reads, and theirs (YaRN's ramp ξ and its ends),
    inlined together."""
    found, todo = set(), ["Phi"]
    while todo:
        letter = todo.pop()
        found.add(letter)
        step = graph.step(letter)
        todo += [x for x in step.inputs if graph.producer(x) is not None and x not in found]
    return found


def _interleaved(graph: Graph) -> bool:
    """True where the rotation pairs neighbouring features (its cases read j mod 2)."""
    return graph.step("R").element.rhs.has(sp.Mod)


def _halves(
    summand: sp.Expr, width: sp.Expr, rotated: sp.Expr, interleaved: bool = False
) -> tuple[sp.Expr, sp.Expr]:
    """The summand of Σ_{j=1}^{w} split at r/2 and r (r the rotated width), each part decided,
    the second counted from 1 (interleaved pairs: its odd terms j = 2i − 1 and its even terms
    j = 2i, i = 1 … r/2, written with j for i); and the part past r (0 where every feature is
    rotated)."""
    half = rotated / 2
    ranges = {L.m: (1, L.n), L.p: (1, L.n)}
    spare = {} if rotated == width else {width: rotated + _SPARE}
    back = {_SPARE: width - rotated}
    summand = summand.xreplace(spare)
    low = {**ranges, L.j: (sp.S.One, half)}
    high = {**ranges, L.j: (half + 1, rotated)}
    if interleaved:
        first = _decided(summand.xreplace({L.j: 2 * L.j - 1}), low)
        second = _decided(summand.xreplace({L.j: 2 * L.j}), low)
    else:
        first = _decided(summand, low)
        second = _decided(summand, high).xreplace({L.j: L.j + half})
    if rotated == width:
        return first + second, sp.S.Zero
    rest = {**ranges, L.j: (rotated + 1, rotated + _SPARE)}
    return (first + second).xreplace(back), _decided(summand, rest).xreplace(back)


def _position(angle: sp.Expr, frequency: sp.Expr) -> sp.Expr:
    """An angle divided by its pair's frequency: m − 1 where the angle is (m − 1) times that
    frequency (its own, at position 1: m = p = 2), or times one of its cases where the ranges
    have split the score by them (Llama 3.1's frequencies); a feature whose frequency is
    another keeps the ratio, and its pair no longer turns as one."""
    own = angle.xreplace({L.m: 2, L.p: 2})
    if own == 0:
        return sp.S.Zero
    cases = {a.expr for a in frequency.args} if isinstance(frequency, Piecewise) else set()
    if own != frequency and own not in cases and sp.expand(own - frequency) != 0:
        return angle / frequency
    return sp.factor(angle / own)


def _theta(expr: sp.Expr, frequency: sp.Expr) -> sp.Expr:
    """Each angle written (its position) θ_j, θ_j the frequency of pair j."""
    return expr.replace(
        lambda e: isinstance(e, sp.cos | sp.sin),
        lambda e: type(e)(_position(e.args[0], frequency) * THETA[L.j]),
    )


def _pairs(expr: sp.Expr) -> sp.Expr:
    """Each coefficient of a product of entries simplified by `sympy.trigsimp`, then the terms
    gathered by their angle."""
    groups: dict[sp.Expr, sp.Expr] = {}
    for term in sp.Add.make_args(sp.expand(expr)):
        entries = sp.Mul(*[f for f in sp.Mul.make_args(term) if isinstance(f, Indexed)])
        groups[entries] = groups.get(entries, 0) + term / entries
    simplified = sp.Add(*[entries * sp.trigsimp(c) for entries, c in groups.items()])
    simplified = simplified.replace(
        lambda e: isinstance(e, sp.cos | sp.sin), lambda e: type(e)(sp.factor(e.args[0]))
    )
    by_angle: dict[sp.Expr, sp.Expr] = {}
    for term in sp.Add.make_args(sp.expand(simplified, deep=False)):
        trig = sp.Mul(*[f for f in sp.Mul.make_args(term) if isinstance(f, sp.cos | sp.sin)])
        by_angle[trig] = by_angle.get(trig, 0) + term / trig
    return sp.Add(*[sp.Mul(total, trig, evaluate=False) for trig, total in by_angle.items()])


def _relative(expr: sp.Expr) -> bool:
    """True when every angle stays the same with m and p both moved by τ."""
    angles = [e.args[0] for e in expr.atoms(sp.cos, sp.sin)]
    moved = {L.m: L.m + _TAU, L.p: L.p + _TAU}
    return bool(angles) and all(sp.simplify(a.xreplace(moved) - a) == 0 for a in angles)


def relative_position(graph: Graph) -> Fact:
    r"""$\omega_{m,p}$ of rotated queries and keys, derived down to a sum over the pairs
    $(j, j + c/2)$ whose angles are $(m - p)\theta_j$."""
    step = scores_step(graph)
    suffix = "_l" if step.head else ""
    width = L.c_h if step.head else L.c
    rotated = _rotated_width(graph, width)
    lhs = step.element.lhs
    rotations = {"Q_rot" + suffix, "K_rot" + suffix, "R"}
    composed = inline(step.element.rhs, graph, rotations)
    ((j, _, _),) = composed.limits
    interleaved = _interleaved(graph)
    halves, rest = _halves(composed.function, width, rotated, interleaved)
    decided = {L.m: (1, L.n), L.p: (1, L.n), L.j: (sp.S.One, rotated / 2)}
    first = {L.j: 2 * L.j - 1} if interleaved else {}  # the pair's first feature
    constants = _angles(graph)
    phi = inline(graph.step("Phi").element.rhs, graph, constants)
    phi = phi.xreplace(first).xreplace({L.m: 2})
    angles = _theta(
        under_ranges(inline(halves, graph, constants), decided), under_ranges(phi, decided)
    )
    paired = _pairs(angles)
    unrotated = {L.m: (1, L.n), L.p: (1, L.n), L.j: (rotated + 1, width)}
    plain = sp.factor(under_ranges(inline(rest, graph, constants), unrotated))
    tail = Sum(plain, (j, rotated + 1, width)) if rest != 0 else sp.S.Zero
    pairs = (j, 1, rotated / 2)
    if interleaved:  # its subscripts 2j − 1 print wide: a sum per angle, on lines of their own
        last = sp.Add(*[Sum(term, pairs) for term in sp.Add.make_args(paired)]) + tail
    else:
        last = Sum(paired, pairs) + tail
    holds = _relative(paired) and not plain.has(sp.cos, sp.sin)  # the rest: no position
    partial = rotated != width
    # the rotation shown by its letter first where its cases put in are too wide to print
    by_letter = partial or interleaved
    shown = inline(step.element.rhs, graph, rotations - {"R"}) if by_letter else composed
    past = Sum(rest, (j, rotated + 1, width)) if partial else 0
    split = Sum(halves, (j, 1, rotated / 2)) + past
    lines = (
        Eq(lhs, shown, evaluate=False),
        Eq(lhs, split, evaluate=False),
        Eq(lhs, last, evaluate=False),
    )
    claim = Eq(lhs, last if holds else sp.nan, evaluate=False)
    sources = (step.output, *sorted(rotations), "Phi")
    name = "relative_position"
    how = "the sum split at c/2"
    if graph.step("Phi").element.rhs.has(L.eta):  # Llama 3.1's frequencies, in cases
        name, how = "smoothed_relative_position", "each angle divided by its frequency"
    elif interleaved:
        name, how = "interleaved_relative_position", "the sum split into its odd and even terms"
    elif partial:
        name, how = "partial_relative_position", "the sum split at c_r/2 and c_r"
    return Fact(
        name,
        "The score depends on $p - m$ only",
        lines,
        claim,
        sources,
        "the rotation and the angles put into the score, the deltas summed out under the index "
        f"ranges, {how} and sympy.trigsimp on each pair",
    )


def zero_angles(graph: Graph, base: Graph) -> Fact:
    """With every angle 0 (φ = 0), the rotated score is the score of `base`."""
    step = scores_step(graph)
    suffix = "_l" if step.head else ""
    rotations = {"Q_rot" + suffix, "K_rot" + suffix}
    composed = inline(step.element.rhs, graph, rotations)
    phi = L.base("phi")
    still = composed.replace(lambda e: isinstance(e, Indexed) and e.base == phi, lambda e: 0)
    theirs = scores_step(base).element.rhs
    lhs = step.element.lhs
    lines = (Eq(lhs, composed, evaluate=False), Eq(lhs, still, evaluate=False))
    claim = Eq(lhs, theirs if still == theirs else sp.nan, evaluate=False)
    return Fact(
        "zero_angles",
        "With every angle 0",
        lines,
        claim,
        (step.output, *rotations),
        "the rotations put into the score, every angle set to 0",
    )
