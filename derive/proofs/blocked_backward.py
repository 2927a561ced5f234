r"""The backward pass of FlashAttention, derived from the backward pass of the graph (Dao et al.,
*FlashAttention*, 2022, its appendix B; Dao, *FlashAttention-2*, 2023).

The forward pass keeps, of each row, its context and one number, the log-sum-exp L_m
(`derive.proofs.online_softmax.log_sum_exp`); the backward pass has neither A nor dA whole, and
works block by block:

- `recomputed_weights`: a_{m,p} = e^{ω̃_{m,p} − L_m}, from the declared weights: the softmax's
  denominator is e^{L_m}, so one exponential of a block's score gives its weight again;
- `gradient_with_rowsum`: the derived dω̃_{m,p} = a_{m,p} (ā_{m,p} − Σ_r a_{m,r} ā_{m,r}) with
  the rowsum identity put in, Σ_r a_{m,r} ā_{m,r} = D_m = Σ_j \bar{c}_{m,j} c_{m,j}: a number per
  row read off C and dC, before any block is seen;
- `accumulated`: each gradient that sums over rows of queries (dV, dK: blocks of B_r queries) or
  of keys (dQ: blocks of B_c keys) gathered block by block: the sum of the blocks 1 … t is the
  sum over the first t B rows (the invariant; at t = 0 an empty sum), and adding block t + 1
  gives it at t + 1, for a symbolic block t and size B. After the last block, the derived
  gradient;
- `cost`: what it holds (μ, ℓ and a row of O per query, against A's n² entries) and computes
  (the FLOPs of each sum of products, forward and backward, read off the declared and derived
  entries; the rescaling; the scores computed again in the backward pass).
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Sum, exp, log

from ..calculus import backward
from ..graph import Graph
from ..notation import letters as L
from . import online_softmax
from .fact import Fact
from .rowsum import rowsum_identity
from .softmax import one_head_without_mask, same_dummy, weights_element

__all__ = [
    "B_R",
    "recomputed_weights",
    "gradient_with_rowsum",
    "accumulated",
    "block_of",
    "cost",
    "shares",
]

#: B_r, the queries of a block (B_c, the keys of one: `online_softmax.BLOCK`).
B_R, _B_C = L.B_r, L.B_c
_t = sp.Symbol("t", integer=True, nonnegative=True)
#: L_m, the log-sum-exp of row m the forward pass kept; D_m = Σ_j \bar{c}_{m,j} c_{m,j}.
LSE_M, D = sp.IndexedBase("L")[L.m], sp.IndexedBase("D")[L.m]
#: The state of a row: its maximum, its sum and its output.
MU_L_O = (sp.Symbol("mu"), sp.Symbol("ell"), sp.Symbol("O"))


def _one_head(graph: Graph) -> None:
    one_head_without_mask(graph, "the blocked backward pass")


def _forward_lse(graph: Graph) -> sp.Expr:
    """L_m as the forward pass derived it from its running state (μ^{(T)} + log ℓ^{(T)}), at n
    keys: read off the online softmax, not off the declared weights."""
    found = online_softmax.log_sum_exp(graph)
    return found.derivation[-1].rhs.xreplace({online_softmax.T * online_softmax.BLOCK: L.n})


def recomputed_weights(graph: Graph, *, at: sp.Expr | None = None) -> Fact:
    """a_{m,p} = e^{ω̃_{m,p} − L_m}: the declared weights against the exponential of the score
    less the log-sum-exp the forward pass kept (`at`: another number in its place, a test's)."""
    _one_head(graph)
    weights, sources = weights_element(graph)
    numerator, denominator = sp.fraction(weights)
    lhs = L.base("a")[L.m, L.p]
    shifted = exp(sp.log(numerator) - log(denominator), evaluate=False)
    kept = _forward_lse(graph) if at is None else at
    return Fact(
        "recomputed_weights",
        "The weights again, from the log-sum-exp",
        (Eq(lhs, weights, evaluate=False), Eq(lhs, shifted, evaluate=False)),
        Eq(lhs, same_dummy(exp(L.base("omegatilde")[L.m, L.p] - kept), L.r), evaluate=False),
        sources,
        "the declared weights, their numerator and denominator written as exponentials of "
        "their logarithms, against the log-sum-exp of the forward pass",
    )


def gradient_with_rowsum(graph: Graph) -> Fact:
    """dω̃_{m,p} = a_{m,p} (ā_{m,p} − D_m), D_m = Σ_j \\bar{c}_{m,j} c_{m,j}: the derived
    gradient of the scaled scores with the rowsum identity put in (where it holds)."""
    _one_head(graph)
    (gradient,) = [g for g in backward(graph) if g.of == "Omega_scaled"]
    identity = rowsum_identity(graph)
    derived = gradient.element.rhs
    rowsum = identity.claim.lhs if identity.holds else sp.nan
    written = derived.xreplace({rowsum: identity.claim.rhs})
    weight = L.base("a")[L.m, L.p]
    claim = weight * (L.base("da")[L.m, L.p] - identity.claim.rhs)
    lhs = gradient.element.lhs
    return Fact(
        "gradient_with_rowsum",
        "The gradient of the scores, with D",
        (Eq(lhs, derived, evaluate=False), Eq(lhs, written, evaluate=False)),
        Eq(lhs, claim, evaluate=False),
        (gradient.output, *identity.sources),
        "the derived gradient of the scaled scores, the rowsum identity put in",
    )


def block_of(total: Sum, first: sp.Expr, last: sp.Expr) -> Sum:
    """The sum `total` taken over first … last only: one block's share."""
    ((variable, _, _),) = total.limits
    return Sum(total.function, (variable, first, last))


def _reference_share(letter: str) -> sp.Expr:
    """The term of a block's share as the backward pass computes it, from the recomputed weight
    e^{ω̃_{m,p} − L_m} and D_m: dV's, dK's or dQ's."""
    m, p, j = L.m, L.p, L.j
    weight = exp(L.base("omegatilde")[m, p] - LSE_M)
    score = weight * (L.base("da")[m, p] - D) / sp.sqrt(L.c)
    return {
        "V": weight * L.base("dctx")[m, j],
        "K": score * L.base("q")[m, j],
        "Q": score * L.base("k")[p, j],
    }[letter]


def _inlined(expr: sp.Expr, gradients: dict) -> sp.Expr:
    """Each derived intermediate gradient (dω, dω̃) replaced by its entry's formula."""
    for name in ("domega", "domegatilde"):
        (step,) = [g for g in gradients.values() if g.element.lhs.base == L.base(name)]
        rule = {step.element.lhs.base: step}
        expr = expr.replace(
            lambda e, rule=rule: isinstance(e, sp.Indexed) and e.base in rule,
            lambda e, rule=rule: rule[e.base].element.rhs.xreplace(
                dict(zip(rule[e.base].element.lhs.indices, e.indices, strict=True))
            ),
        )
    return expr


def accumulated(graph: Graph, letter: str, *, share: sp.Expr | None = None) -> Fact:
    """The gradient of `letter` (``"V"``, ``"K"``: summed over queries, blocks of B_r; ``"Q"``:
    over keys, blocks of B_c) gathered block by block, each block's share computed as the
    backward pass does (`share`: another term, a test's): the blocks 1 … t and block t + 1 are
    the sum over the first (t + 1) B rows, and with the recomputed weights and D put in (where
    `recomputed_weights` and `gradient_with_rowsum` hold), its term is the derived gradient's."""
    _one_head(graph)
    gradients = {g.of: g for g in backward(graph)}
    gradient = gradients[letter]
    ((variable, _, _),) = gradient.element.rhs.limits
    size = _B_C if variable == L.p else B_R
    term = _reference_share(letter) if share is None else share
    added = Sum(term, (variable, 1, _t * size)) + Sum(
        term, (variable, _t * size + 1, (_t + 1) * size)
    )
    facts = (recomputed_weights(graph), gradient_with_rowsum(graph))
    weight = exp(L.base("omegatilde")[L.m, L.p] - LSE_M)
    rowsum = Sum(L.base("a")[L.m, L.r] * L.base("da")[L.m, L.r], (L.r, 1, L.n))
    known = {weight: L.base("a")[L.m, L.p], D: rowsum} if all(f.holds for f in facts) else {}
    written = added.xreplace(known) if known else sp.nan
    joined = sp.simplify(written)  # adjacent sums over the same summand joined
    own = gradient.element.lhs  # after block t + 1, printed as a head's is: \bar{v}^{(t+1)}_{p,j}
    lhs = own.base[(_t + 1, *own.indices)]
    derived = _inlined(gradient.element.rhs, gradients)
    claim = Sum(derived.function, (variable, 1, (_t + 1) * size))
    return Fact(
        f"accumulated_d{letter}",
        f"The gradient of {letter}, block by block of "
        + ("keys" if variable == L.p else "queries"),
        (
            Eq(lhs, added, evaluate=False),
            Eq(lhs, written, evaluate=False),
            Eq(lhs, joined, evaluate=False),
        ),
        Eq(lhs, claim, evaluate=False),
        (gradient.output, "A"),
        "the blocks seen so far and the next one, the recomputed weights and D put in, adjacent "
        "sums joined",
    )


FLOPS, ENTRIES = sp.Function("FLOPs"), sp.Function("entries")


def _product_flops(element: sp.Eq, shape: tuple[sp.Expr, sp.Expr]) -> sp.Expr:
    """One multiply and one add per term of the sum that gives each entry (the count of
    ``torch.utils.flop_counter``): 2 · rows · columns · terms."""
    (total,) = element.rhs.atoms(Sum)
    ((_, low, high),) = total.limits
    return 2 * shape[0] * shape[1] * (high - low + 1)


def cost(graph: Graph) -> Fact:
    """entries(μ, ℓ, O) per block of keys against entries(A); the FLOPs of the forward pass
    (Ω and C), of the rescaling (a row of O and ℓ per row and block of B_c keys), of the
    backward pass (dV, dA, dQ, dK and D) and of the scores computed again."""
    _one_head(graph)
    gradients = {g.output: g for g in backward(graph)}
    shapes = graph.shapes

    def flops(letter: str) -> sp.Expr:
        if letter in gradients:
            return _product_flops(gradients[letter].element, shapes[gradients[letter].of])
        return _product_flops(graph.step(letter).element, shapes[letter])

    rows, width = shapes["C"]
    identity = rowsum_identity(graph)
    d_flops = _product_flops(sp.Eq(D, identity.claim.rhs), (rows, 1))
    name = lambda *words: sp.Symbol(r"\text{" + " ".join(words) + "}")  # noqa: E731
    lines = (
        Eq(ENTRIES(*MU_L_O), sp.expand(rows * (width + 2)), evaluate=False),
        Eq(ENTRIES(sp.Symbol("A")), shapes["A"][0] * shapes["A"][1], evaluate=False),
        Eq(FLOPS(name("forward")), sp.expand(flops("Omega") + flops("C")), evaluate=False),
        Eq(
            FLOPS(name("rescaling")),
            rows * (width + 1) * (sp.ceiling(L.n / _B_C) - 1),
            evaluate=False,
        ),
        Eq(
            FLOPS(name("backward")),
            sp.expand(sum(flops(x) for x in ("dV", "dA", "dQ", "dK")) + d_flops),
            evaluate=False,
        ),
        Eq(FLOPS(name("recomputed")), sp.expand(flops("Omega")), evaluate=False),
    )
    return Fact(
        "blocked_cost",
        "What the blocks cost",
        lines,
        lines[-1],
        ("Omega", "C", "dV", "dA", "dQ", "dK"),
        "the entries from the declared shapes; two FLOPs per term of each sum of products, "
        "read off the declared and derived entries",
    )


def _entry(expr: sp.Expr, at: dict, matrices: dict) -> float:
    """`expr` at the indices `at`, its sums done, each entry read off `matrices`."""
    done = expr.xreplace(at).doit()
    entries = {
        e: matrices[L.letter_of(e)][e.indices[0] - 1, e.indices[1] - 1]
        for e in done.atoms(sp.Indexed)
    }
    return float(done.xreplace(entries).evalf(30))


def shares(graph: Graph, matrices: dict, sizes: dict) -> dict[str, list]:
    """What each block adds to dQ (blocks of B_c keys), dK and dV (blocks of B_r queries): the
    derived gradient's sum taken over the block's rows only (`block_of`), evaluated on a check's
    explicit matrices (the forward steps, the derived gradients and dC, by letter).
    {"dQ_blocks": [(n × c) per block], "dK_blocks": [...], "dV_blocks": [...]}."""
    _one_head(graph)
    found = {}
    for gradient in backward(graph):
        if gradient.of not in ("Q", "K", "V"):
            continue
        total = gradient.element.rhs
        ((variable, _, high),) = total.limits
        size = sizes["B_c" if variable == L.p else "B_r"]
        last = int(high.xreplace({s: sizes[str(s)] for s in high.free_symbols}))
        rows, cols = matrices[gradient.of].shape
        row, col = gradient.element.lhs.indices
        found[f"{gradient.output}_blocks"] = [
            [
                [
                    _entry(
                        block_of(total, first, min(first + size - 1, last)),
                        {row: r + 1, col: k + 1},
                        matrices,
                    )
                    for k in range(cols)
                ]
                for r in range(rows)
            ]
            for first in range(1, last + 1, size)
        ]
    return found
