r"""The online softmax, derived: a row of the context C computed block of keys by block of keys,
never holding the row's weights (the forward pass of FlashAttention; Milakov and Gimelshein,
*Online normalizer calculation for softmax*, 2018; Dao et al., *FlashAttention*, 2022).

Row m's scaled scores ω̃_{m,p} are read in blocks of B_c keys; block t holds the keys
(t − 1) B_c + 1 … t B_c. After block t the state is a running maximum μ^{(t)}, a running sum
ℓ^{(t)} and a running output o^{(t)}_j, each block updating them as

    ℓ^{(t+1)} = e^{μ^{(t)} − μ^{(t+1)}} ℓ^{(t)} + Σ_{p in block t+1} e^{ω̃_{m,p} − μ^{(t+1)}}
    o^{(t+1)}_j = e^{μ^{(t)} − μ^{(t+1)}} o^{(t)}_j
                  + Σ_{p in block t+1} e^{ω̃_{m,p} − μ^{(t+1)}} v_{p,j}

from ℓ^{(0)} = o^{(0)}_j = 0, μ^{(t+1)} the larger of μ^{(t)} and the block's largest score.
The invariant: ℓ^{(t)} = Σ_{p ≤ tB} e^{ω̃_{m,p} − μ^{(t)}} and o^{(t)}_j = Σ_{p ≤ tB}
e^{ω̃_{m,p} − μ^{(t)}} v_{p,j}, the sums over the keys seen so far. It holds at t = 0 (empty
sums), and `step` has SymPy prove that the update of the invariant's values is the invariant at
t + 1, for a symbolic block t and size B_c and any μ^{(t)}, μ^{(t+1)}: the maximum keeps every
exponential at most 1 (no overflow), the algebra does not need it. After the last block T
(n = T B_c), `context` and `log_sum_exp` derive o^{(T)}_j / ℓ^{(T)} = c_{m,j}, the softmax-
weighted sum of the values, and μ^{(T)} + log ℓ^{(T)} = log Σ_p e^{ω̃_{m,p}}, the row's
log-sum-exp (what the backward pass keeps). `every_split` runs the updates at an explicit n for
every split of the keys into blocks, blocks of unequal sizes included, with symbolic scores,
values and maxima, and checks o/ℓ entry by entry.

Each update is a function (`sum_update`, `output_update`) that the proofs take as an argument:
a test changes one (drops the rescaling factor, or reads the block's exponentials at μ^{(t)})
and sees the proof fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import sympy as sp
from sympy import Eq, Sum, exp, log

from ..graph import Graph
from ..notation import letters as L
from .fact import Fact
from .softmax import one_head_without_mask, same_dummy, weights_element

__all__ = [
    "BLOCK",
    "T",
    "MU",
    "MU_T",
    "LSE",
    "sum_update",
    "output_update",
    "seen_sum",
    "seen_output",
    "step",
    "context",
    "log_sum_exp",
    "every_split",
    "states",
    "BlockState",
    "block_states",
    "normal",
    "Update",
    "composed_context",
]

#: B_c, the keys of a block; t, a block; T, the blocks of a row (n = T B_c).
BLOCK = L.B_c
T = sp.Symbol("T", integer=True, positive=True)
_t = sp.Symbol("t", integer=True, nonnegative=True)
#: μ^{(t)} and μ^{(t+1)}: the running maximum before and after block t + 1; μ^{(T)}, after the
#: last block.
MU = (sp.Symbol("mu^(t)", real=True), sp.Symbol("mu^(t+1)", real=True))
MU_T = sp.Symbol("mu^(T)", real=True)
#: L_m, the log-sum-exp of row m: what the forward pass keeps for the backward.
LSE = sp.Symbol("L_m", real=True)

_p, _r = L.p, L.r

#: An update: (previous, μ^{(t)}, μ^{(t+1)}, the block's first key, its last key) -> the next.
Update = Callable[..., sp.Expr]


def _score(p: sp.Expr, base: sp.IndexedBase | None = None) -> sp.Expr:
    return (L.base("omegatilde") if base is None else base)[L.m, p]


def _value(p: sp.Expr) -> sp.Expr:
    return L.base("v")[p, L.j]


def sum_update(
    previous: sp.Expr, mu: sp.Expr, mu_next: sp.Expr, first: sp.Expr, last: sp.Expr, p: sp.Expr = _p
) -> sp.Expr:
    """ℓ^{(t+1)} = e^{μ^{(t)} − μ^{(t+1)}} ℓ^{(t)} + Σ_{p = first … last} e^{ω̃_{m,p} −
    μ^{(t+1)}}."""
    return exp(mu - mu_next) * previous + Sum(exp(_score(p) - mu_next), (p, first, last))


def output_update(
    previous: sp.Expr, mu: sp.Expr, mu_next: sp.Expr, first: sp.Expr, last: sp.Expr, p: sp.Expr = _p
) -> sp.Expr:
    """o^{(t+1)}_j = e^{μ^{(t)} − μ^{(t+1)}} o^{(t)}_j + Σ_p e^{ω̃_{m,p} − μ^{(t+1)}} v_{p,j}."""
    block = Sum(exp(_score(p) - mu_next) * _value(p), (p, first, last))
    return exp(mu - mu_next) * previous + block


def seen_sum(mu: sp.Expr, keys: sp.Expr, base: sp.IndexedBase | None = None) -> sp.Expr:
    """Σ_{p = 1 … keys} e^{ω̃_{m,p} − μ}: the invariant's ℓ (over the scores `base`, ω̃ by
    default)."""
    return Sum(exp(_score(_p, base) - mu), (_p, 1, keys))


def seen_output(mu: sp.Expr, keys: sp.Expr, base: sp.IndexedBase | None = None) -> sp.Expr:
    """Σ_{p = 1 … keys} e^{ω̃_{m,p} − μ} v_{p,j}: the invariant's o_j."""
    return Sum(exp(_score(_p, base) - mu) * _value(_p), (_p, 1, keys))


def normal(expr: sp.Expr) -> sp.Expr:
    """e^{a − b} as e^a e^{−b}, and every factor free of a sum's index taken out of it."""

    def pulled(total: Sum) -> sp.Expr:
        return sp.factor_terms(Sum(sp.expand(total.function, power_exp=True), *total.limits))

    expanded = sp.expand(expr, power_exp=True)
    return expanded.replace(lambda e: isinstance(e, Sum), pulled)


def step(
    update: Update = sum_update, seen: Callable = seen_sum, *, name: str | None = None
) -> Fact:
    """The invariant carried from block t to block t + 1 (`update` and `seen`: the sum's, by
    default, or the output's; `name`, another invariant of ℓ's, such as a sink's)."""
    mu, mu_next = MU
    name = name or ("ell" if seen is seen_sum else "o")
    lhs = sp.Symbol("o^(t+1)_j" if name == "o" else "ell^(t+1)")
    before = seen(mu, _t * BLOCK)
    updated = update(before, mu, mu_next, _t * BLOCK + 1, (_t + 1) * BLOCK)
    written = normal(updated)
    combined = sp.simplify(written)  # adjacent sums over the same summand joined
    claim = seen(mu_next, (_t + 1) * BLOCK)
    return Fact(
        f"online_{name}_step",
        "The running "
        + ("output" if name == "o" else "sum")
        + " after one more block"
        + (", with a sink" if name == "sink" else ""),
        tuple(Eq(lhs, value, evaluate=False) for value in (updated, written, combined)),
        Eq(lhs, claim, evaluate=False),
        ("A", "C"),
        "the invariant at block t put into the update, exponentials split, the factors free "
        "of p taken out of the sums, and the sums over adjacent keys joined",
    )


def composed_context(graph: Graph, weights: sp.Expr) -> sp.Expr:
    """The graph's c_{m,j} with `weights` (a formula of a_{m,p}) put in for each weight."""
    a = L.base("a")
    return graph.step("C").element.rhs.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == a,
        lambda e: weights.xreplace(dict(zip((L.m, L.p), e.indices, strict=True))),
    )


def _row(graph: Graph) -> tuple[sp.Expr, sp.Expr, tuple[str, ...]]:
    """c_{m,j} with the graph's weights put in, and the weights' denominator, at n = T B_c (row m
    of one head without a mask: the online softmax of a masked or multi-head graph is not
    derived here); and the declarations read."""
    one_head_without_mask(graph, "the online softmax")
    weights, sources = weights_element(graph)
    context = graph.step("C")
    composed = composed_context(graph, weights)
    at = {L.n: T * BLOCK}
    denominator = sp.fraction(weights)[1].xreplace(at)
    return composed.xreplace(at), same_dummy(denominator, _p), (*sources, context.output)


def context(graph: Graph) -> Fact:
    """o^{(T)}_j / ℓ^{(T)} = c_{m,j} after the last block, c_{m,j} the graph's own (its context
    with its weights put in)."""
    mu, keys = MU_T, T * BLOCK
    ratio = seen_output(mu, keys) / seen_sum(mu, keys)
    derived = sp.simplify(normal(ratio))
    composed, _, sources = _row(graph)
    claim = sp.simplify(same_dummy(normal(composed), _p))
    lhs = sp.Symbol("o^(T)_j") / sp.Symbol("ell^(T)")
    return Fact(
        "online_context",
        "After the last block, the context",
        (Eq(lhs, ratio, evaluate=False), Eq(lhs, derived, evaluate=False)),
        Eq(lhs, claim, evaluate=False),
        sources,
        "the invariant at the last block; e^{-μ} taken out of both sums, and cancelled",
    )


def log_sum_exp(graph: Graph) -> Fact:
    """μ^{(T)} + log ℓ^{(T)} = log Σ_p e^{ω̃_{m,p}}, the log of the denominator of the graph's
    weights: the row's log-sum-exp L_m."""
    mu, keys = MU_T, T * BLOCK
    total = mu + log(seen_sum(mu, keys))
    pulled = mu + log(normal(seen_sum(mu, keys)))
    derived = sp.expand_log(pulled, force=True)  # the sum of exponentials is positive
    _, denominator, sources = _row(graph)
    return Fact(
        "online_log_sum_exp",
        "After the last block, the log-sum-exp",
        (Eq(LSE, total, evaluate=False), Eq(LSE, derived, evaluate=False)),
        Eq(LSE, log(denominator), evaluate=False),
        sources[:1],
        "e^{-μ} taken out of the sum, and the logarithm of the product split",
    )


def _splits(n: int) -> Iterator[tuple[int, ...]]:
    """Every split of 1 … n into consecutive blocks, as the blocks' sizes."""
    if n == 0:
        yield ()
        return
    for first in range(1, n + 1):
        for rest in _splits(n - first):
            yield (first, *rest)


def every_split(n: int, sum_rule: Update = sum_update, output_rule: Update = output_update) -> dict:
    """{blocks' sizes: o/ℓ − c_{m,j}, simplified} for every split of n keys, the updates run
    with a symbol for each running maximum (any values: the identity does not need them to be
    the maxima); every value 0 when the online softmax is the softmax."""
    found = {}
    for sizes in _splits(n):
        ell, out, first = sp.S.Zero, sp.S.Zero, 1
        mus = sp.symbols(f"mu_1:{len(sizes) + 1}", real=True)
        previous = sp.S.Zero
        for mu, size in zip(mus, sizes, strict=True):
            last = first + size - 1
            ell = sum_rule(ell, previous, mu, first, last).doit()
            out = output_rule(out, previous, mu, first, last).doit()
            previous, first = mu, last + 1
        weights = [exp(_score(p)) for p in range(1, n + 1)]
        softmax = sum(w * _value(p) for p, w in enumerate(weights, 1)) / sum(weights)
        found[sizes] = sp.simplify(out / ell - softmax)
    return found


def _evaluated(expr: sp.Expr, row: int, table: dict) -> float:
    return float(expr.xreplace({L.m: row}).doit().xreplace(table).evalf(30))


def states(graph: Graph, matrices: dict, sizes: dict) -> dict[str, list]:
    """The state after each block of B_c keys, from the invariant: μ^{(t)} the largest score of
    the keys seen, ℓ^{(t)} = `seen_sum` and o^{(t)}_j = `seen_output` evaluated on the scaled
    scores and the values in `matrices` (a check's explicit matrices, by letter), the last block
    shorter where B_c does not divide the keys. {"mu": [(n × 1) per block], "ell": [...],
    "o": [(n × c) per block]}, as floats."""
    _row(graph)  # one head, no mask: the graph the invariant is derived for
    omega, values = matrices["Omega_scaled"], matrices["V"]
    n, keys = omega.shape
    table = {L.base("omegatilde")[m + 1, p + 1]: omega[m, p] for m in range(n) for p in range(keys)}
    table |= {
        L.base("v")[p + 1, j + 1]: values[p, j] for p in range(keys) for j in range(values.shape[1])
    }
    found: dict[str, list] = {"mu": [], "ell": [], "o": []}
    for stop in range(sizes["B_c"], keys + sizes["B_c"], sizes["B_c"]):
        seen = min(stop, keys)
        mu = [sp.Max(*omega[m, :seen]) for m in range(n)]
        found["mu"].append([[float(value)] for value in mu])
        found["ell"].append([[_evaluated(seen_sum(mu[m], seen), m + 1, table)] for m in range(n)])
        found["o"].append(
            [
                [
                    _evaluated(seen_output(mu[m], seen).xreplace({L.j: j + 1}), m + 1, table)
                    for j in range(values.shape[1])
                ]
                for m in range(n)
            ]
        )
    return found


class BlockState(NamedTuple):
    """One matrix of the state after block t at explicit sizes, for a page: its letter
    (LaTeX), what it is, its entries, each entry's formula in the scores and values, and what
    else each entry has seen (the keys of the blocks so far, k_{p,i} for p ≤ t B_c)."""

    letter: str
    role: str
    entries: sp.Matrix
    formulas: sp.Matrix
    seen: tuple[tuple[sp.Indexed, ...], ...]


def block_states(graph: Graph, sizes: dict[sp.Symbol, int]) -> list[BlockState]:
    """μ^{(t)}, ℓ^{(t)} and O^{(t)} after each block t of B_c keys, at the explicit `sizes` (n,
    c, B_c), written out from the invariant: μ^{(t)}_m the largest of ω̃_{m,1} … ω̃_{m,tB_c},
    ℓ^{(t)}_m = Σ_{p ≤ t B_c} e^{ω̃_{m,p} − μ^{(t)}_m} and o^{(t)}_{m,j} its sum with v_{p,j}
    (the last block shorter where B_c does not divide n)."""
    _row(graph)  # one head, no mask
    n, c, block = (int(sizes[symbol]) for symbol in (L.n, L.c, BLOCK))
    mu, ell, out = (L.base(name) for name in ("mustate", "ellstate", "ostate"))
    omega, key = L.base("omegatilde"), L.base("k")
    found = []
    for t, stop in enumerate(range(block, n + block, block), 1):
        keys = range(1, min(stop, n) + 1)
        seen = tuple(key[p, i] for p in keys for i in range(1, c + 1))
        where = f"after block {t} (keys 1 to {keys[-1]})"

        def written(invariant: sp.Expr, m: int, j: int = 1, t: int = t) -> sp.Expr:
            """The invariant's sum at row m (and column j), μ^{(t)} its entry, written out."""
            return invariant.xreplace({MU_T: mu[t, m, 1]}).xreplace({L.m: m, L.j: j}).doit()

        rows = range(1, n + 1)
        maxima = sp.Matrix([[sp.Max(*(omega[m, p] for p in keys), evaluate=False)] for m in rows])
        sums = sp.Matrix([[written(seen_sum(MU_T, keys[-1]), m)] for m in rows])
        outputs = sp.Matrix(
            [[written(seen_output(MU_T, keys[-1]), m, j) for j in range(1, c + 1)] for m in rows]
        )
        for base, letter, role, formulas in (
            (mu, rf"\mu^{{({t})}}", f"running maximum {where}", maxima),
            (ell, rf"\ell^{{({t})}}", f"running sum {where}", sums),
            (out, rf"O^{{({t})}}", f"running output {where}", outputs),
        ):
            entries = sp.Matrix(
                formulas.rows, formulas.cols, lambda m, j, base=base, t=t: base[t, m + 1, j + 1]
            )
            found.append(BlockState(letter, role, entries, formulas, seen))
    return found
