r"""Attention without the softmax, derived: the recurrent form of linear attention, of the delta
rule (DeltaNet) and of the gated delta rule (Gated DeltaNet) equals their parallel form and their
chunked form (the book's ch04/08_deltanet; Yang et al., *Parallelizing Linear Transformers with
the Delta Rule over Sequence Length*, 2024; *Gated Delta Networks*, 2025; `attention.linear`
computes the three forms).

Per head, token m reads o_{m,j'} = Σ_j q_{m,j} S^{(m)}_{j,j'} from the state S^{(m)} (c × c_v)
that each token writes:

    S^{(m)} = α_m S^{(m−1)} + k_m u_mᵀ,   u_m = β_m (v_m − α_m S^{(m−1)ᵀ} k_m)    (the delta rule)
    S^{(m)} = α_m S^{(m−1)} + k_m v_mᵀ                                           (linear attention)

with α_m = e^{g_m} (gated) or 1. Over a segment of tokens s + 1 … s + C that starts from a
state S^{(s)} = S_0 (s = 0 and S_0 = 0 for the whole sequence; a chunk's first token and the
state the chunks before it carried, for the chunked form), with G_m = Σ_{r = s+1}^{m} g_r and
γ_{m,p} = e^{G_m − G_p}, the invariant is

    S^{(m)}_{j,j'} = e^{G_m} S_{0 j,j'} + Σ_{p = s+1}^{m} γ_{m,p} k_{p,j} u_{p,j'}.

It holds at m = s (G_s = 0, an empty sum). `state` has SymPy prove, at symbolic c, s and m, that
the recurrence's step takes the invariant at m − 1 to the invariant at m; `written`, that the
recurrence's u_m is row m of the delta rule's unit lower-triangular system

    u_{m,j'} = β_m (v_{m,j'} − e^{G_m} Σ_j k_{m,j} S_{0 j,j'}
                    − Σ_{p = s+1}^{m−1} γ_{m,p} (Σ_j k_{m,j} k_{p,j}) u_{p,j'})

— (I + L) U = diag(β) (V − diag(e^G) K S_0), L strictly lower, L_{m,p} = β_m γ_{m,p} k_m · k_p —
and `output`, that o_m is the parallel form's row, e^{G_m} S_0ᵀ q_m + ((Q Kᵀ ∘ Γ ∘ M) U)_m. With
s = 0 and S_0 = 0 that is the parallel form. `carried` proves the chunked form: a chunk that
starts from the state the chunk before it ends with (the invariant at its last token, its own G
counted from its own start) gives the invariant of one unsplit segment, so any split into chunks
is the recurrence. `every_split` checks it at explicit sizes for every split of n tokens into
chunks, uneven ones included, with symbols for every entry (exact: with α a symbol, every form
is a polynomial), and `gradients` derives the parallel form's gradient at explicit sizes.

The rule is an argument (`Rule`): the mistakes of ports (the decay taken inclusive, the
triangular system transposed, β on the keys only) are rules too, and the tests see each fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import sympy as sp
from sympy import Eq, IndexedBase, Sum, exp

from ..notation import letters as L
from .fact import Fact

__all__ = [
    "Rule",
    "invariant",
    "predicted_by_state",
    "delta_write",
    "canonical",
    "RULES",
    "state",
    "written",
    "output",
    "carried",
    "every_split",
    "splits",
    "chunked_outputs",
    "recurrent_outputs",
    "gradients",
    "chunk_states",
    "as_linear_attention",
    "without_correction",
    "shares_the_state",
]

M, P, J, J2 = L.m, L.p, L.j, L.j2
#: c: the width of queries and keys; s: the tokens before the segment.
C = L.c
S = sp.Symbol("s", integer=True, nonnegative=True)
q, k, v = L.base("q"), L.base("k"), L.base("v")
u, g, beta, G = (IndexedBase(name, real=True) for name in ("u", "g", "beta", "G"))
#: SSD's step Δ_m (Mamba-2): the write is Δ_m v_m, the decay α_m = e^{Δ_m A}.
STEP = IndexedBase("Delta", positive=True)
STATE = IndexedBase("S", real=True)


def _initial(j: sp.Expr) -> sp.Expr:
    """S^{(s)}_{j,j'}: the state before the segment (S_0; 0 for the whole sequence)."""
    return STATE[S, j, J2]


class Rule(NamedTuple):
    """A rule of attention without the softmax: `gated` (a decay α_m = e^{g_m} on the state
    before each write), `delta` (the delta rule's write β_m (v_m − α_m S^{(m−1)ᵀ} k_m), or v_m
    as it is), `stepped` (SSD's write Δ_m v_m, each token's value scaled by its step; at
    explicit sizes the steps are the β symbols), `channel` (Kimi Delta Attention's decay per
    key channel: α_{m,j} = e^{g_{m,j}}, diag(α_m) on the state's rows, G_{m,j}), `title`;
    `inclusive` is a port's mistake: token p's own decay kept in γ_{m,p}."""

    name: str
    title: str
    gated: bool
    delta: bool
    inclusive: bool = False
    stepped: bool = False
    channel: bool = False


RULES = {
    "linear-attention": Rule("linear-attention", "linear attention", gated=False, delta=False),
    "deltanet": Rule("deltanet", "the delta rule", gated=False, delta=True),
    "gated-deltanet": Rule("gated-deltanet", "the gated delta rule", gated=True, delta=True),
    "ssd": Rule("ssd", "Mamba-2's state-space dual", gated=True, delta=False, stepped=True),
    "kda": Rule("kda", "Kimi Delta Attention", gated=True, delta=True, channel=True),
    "selective-scan": Rule(
        "selective-scan",
        "Mamba's selective scan",
        gated=True,
        delta=False,
        stepped=True,
        channel=True,
    ),
}


# ---------------------------------------------------------------------------------------------
# The invariant and the recurrence, at symbolic sizes


def _decay(m: sp.Expr, j: sp.Expr, rule: Rule) -> sp.Expr:
    """G_m, or G_{m,j} with a decay per key channel (row j of the state)."""
    return G[m, j] if rule.channel else G[m]


def _kept(m: sp.Expr, rule: Rule, j: sp.Expr = J) -> sp.Expr:
    """e^{G_m}: what is left at token m of the segment's initial state (1 ungated; e^{G_{m,j}}
    in row j with a decay per channel)."""
    return exp(_decay(m, j, rule)) if rule.gated else sp.S.One


def _gamma(m: sp.Expr, p: sp.Expr, rule: Rule, j: sp.Expr = J) -> sp.Expr:
    """γ_{m,p} = e^{G_m − G_p}, the decay from token p's write to token m (1 ungated; per
    channel γ_{m,p,j} = e^{G_{m,j} − G_{p,j}}; the mistake `inclusive`: e^{G_m − G_{p−1}}, token
    p's own α in it)."""
    if not rule.gated:
        return sp.S.One
    before = _decay(p - 1, j, rule) if rule.inclusive else _decay(p, j, rule)
    return exp(_decay(m, j, rule) - before)


def _dot(a: IndexedBase, m: sp.Expr, b: IndexedBase, p: sp.Expr) -> sp.Expr:
    return Sum(a[m, J] * b[p, J], (J, 1, C))


def _writes(p: sp.Expr, rule: Rule) -> sp.Expr:
    """What token p writes beside k_p: u_{p,j'} (the delta rule's), Δ_p v_{p,j'} (SSD's), or
    v_{p,j'}."""
    if rule.delta:
        return u[p, J2]
    return STEP[p] * v[p, J2] if rule.stepped else v[p, J2]


def invariant(m: sp.Expr, rule: Rule, j: sp.Expr = J) -> sp.Expr:
    """S^{(m)}_{j,j'} = e^{G_m} S_{0 j,j'} + Σ_{p = s+1}^{m} γ_{m,p} k_{p,j} u_{p,j'}."""
    written_by = Sum(_gamma(m, P, rule, j) * k[P, j] * _writes(P, rule), (P, S + 1, m))
    return _kept(m, rule, j) * _initial(j) + written_by


def _alpha(m: sp.Expr, rule: Rule, j: sp.Expr = J) -> sp.Expr:
    """α_m = e^{g_m} (1 ungated; α_{m,j} = e^{g_{m,j}} on row j with a decay per channel)."""
    if not rule.gated:
        return sp.S.One
    return exp(g[m, j]) if rule.channel else exp(g[m])


def predicted_by_state(m: sp.Expr, rule: Rule) -> sp.Expr:
    """(α_m S^{(m−1)ᵀ} k_m)_{j'}: what the decayed state predicts for token m's key, the state
    the invariant at m − 1 (per channel: Σ_j k_{m,j} α_{m,j} S^{(m−1)}_{j,j'})."""
    return Sum(k[m, J] * _alpha(m, rule, J) * invariant(m - 1, rule, J), (J, 1, C))


def delta_write(m: sp.Expr, predicted: sp.Expr) -> sp.Expr:
    """u_{m,j'} = β_m (v_{m,j'} − the prediction): the delta rule's write."""
    return beta[m] * (v[m, J2] - predicted)


def _cumulative(expr: sp.Expr, m: sp.Expr) -> sp.Expr:
    """G_{m−1} written as G_m − g_m (the cumulative sum's own step; G_{m−1,j} as
    G_{m,j} − g_{m,j} for every channel j)."""

    def step(entry: sp.Indexed) -> sp.Expr:
        rest = entry.indices[1:]
        return G[(m, *rest)] - g[(m, *rest)]

    return expr.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == G and e.indices[0] == m - 1, step
    )


def _apart(total: Sum, taken: set) -> Sum:
    """`total` with each index that `taken` also uses renamed (a prime added until free): a sum
    moved into a product or another sum must not capture their index (Σ_j a_j Σ_j b_j is not
    Σ_j a_j b_j)."""
    for index, *_ in total.limits:
        if index in taken:
            fresh = index
            while fresh in taken or fresh in total.free_symbols:
                fresh = sp.Symbol(fresh.name + "'", **fresh.assumptions0)
            total = total.xreplace({index: fresh})
    return total


def canonical(expr: sp.Expr) -> sp.Expr:
    """A form in which equal sums are equal expressions: every sum's summand expanded (its
    exponentials joined) and split term by term, nested sums and products of sums made one sum
    over all their indices (in order), the factors free of them taken out."""
    expr = sp.expand(expr)
    if isinstance(expr, sp.Add):
        return sp.Add(*(canonical(term) for term in expr.args))
    if isinstance(expr, sp.Mul) and any(isinstance(f, Sum) for f in expr.args):
        inner = next(f for f in expr.args if isinstance(f, Sum))
        rest = expr / inner
        inner = _apart(inner, rest.free_symbols)
        return canonical(Sum(rest * inner.function, *inner.limits))
    if not isinstance(expr, Sum):
        return expr
    function, limits = canonical(expr.function), list(expr.limits)
    if isinstance(function, sp.Add):
        return sp.Add(*(canonical(Sum(term, *limits)) for term in function.args))
    inner = None
    if isinstance(function, Sum):
        inner = function
    elif isinstance(function, sp.Mul):
        inner = next((f for f in function.args if isinstance(f, Sum)), None)
    if inner is not None:  # Σ_a (f Σ_b h) = Σ_{a,b} f h
        rest = function / inner
        inner = _apart(inner, rest.free_symbols | {limit[0] for limit in limits})
        return canonical(Sum(rest * inner.function, *inner.limits, *limits))
    indices = {limit[0] for limit in limits}
    factors = function.args if isinstance(function, sp.Mul) else (function,)
    free = sp.Mul(*(f for f in factors if not (f.free_symbols & indices)))
    bound = sp.Mul(*(f for f in factors if f.free_symbols & indices))
    return free * Sum(bound, *sorted(limits, key=lambda limit: str(limit[0])))


def _fact(name: str, title: str, lhs, values, claim, how: str) -> Fact:
    return Fact(
        name,
        title,
        tuple(Eq(lhs, value, evaluate=False) for value in values),
        Eq(lhs, claim, evaluate=False),
        ("O",),
        how,
    )


def written(rule: Rule) -> Fact:
    """The recurrence's write at token m, from the invariant at m − 1, is row m of the delta
    rule's triangular system (for linear attention: v_m itself)."""
    m = M
    predicted = _cumulative(predicted_by_state(m, rule), m)
    if not rule.delta:
        value = _writes(m, rule)
        return _fact(
            f"{rule.name}_written",
            "What token m writes",
            u[m, J2],
            (value,),
            value,
            "the token writes v_m scaled by its step Δ_m"
            if rule.stepped
            else "linear attention writes v_m as it is",
        )
    recurrence = delta_write(m, predicted)
    if rule.channel:  # the decays inside the sums over the channels
        initial = Sum(k[m, J] * _kept(m, rule) * _initial(J), (J, 1, C))
        coupled = Sum(k[m, J] * k[P, J] * _gamma(m, P, rule), (J, 1, C))
    else:
        initial = _kept(m, rule) * Sum(k[m, J] * _initial(J), (J, 1, C))
        coupled = _gamma(m, P, rule) * Sum(k[m, J] * k[P, J], (J, 1, C))
    system = beta[m] * (v[m, J2] - initial - Sum(coupled * u[P, J2], (P, S + 1, m - 1)))
    return _fact(
        f"{rule.name}_written",
        "What token m writes: a row of a triangular system",
        u[m, J2],
        (recurrence, canonical(recurrence)),
        canonical(system),
        "the invariant at token m − 1 put into the write, G_{m−1} = G_m − g_m, the "
        "exponentials joined, the factors free of the sums' indices taken out",
    )


def state(rule: Rule) -> Fact:
    """The recurrence takes the invariant at token m − 1 to the invariant at token m."""
    m = M
    before = _cumulative(invariant(m - 1, rule), m)
    stepped = _alpha(m, rule, J) * before + k[m, J] * _writes(m, rule)
    after = invariant(m, rule)
    return _fact(
        f"{rule.name}_state",
        "The state after one more token",
        STATE[m, J, J2],
        (stepped, canonical(stepped)),
        canonical(_split_last(after, m)),
        "the invariant at token m − 1 put into the recurrence, G_{m−1} = G_m − g_m, the "
        "exponentials joined; the invariant's sum split at its last token, p = m",
    )


def _split_last(expr: sp.Expr, m: sp.Expr) -> sp.Expr:
    """Each sum over p up to m written as the sum up to m − 1 plus its term at p = m."""

    def split(total: Sum) -> sp.Expr:
        (index, first, last), *rest = total.limits
        if index != P or last != m or rest:
            return total
        return Sum(total.function, (P, first, m - 1)) + total.function.xreplace({P: m})

    return expr.replace(lambda e: isinstance(e, Sum), split)


def output(rule: Rule) -> Fact:
    """o_{m,j'} = Σ_j q_{m,j} S^{(m)}_{j,j'}: the parallel form's row, e^{G_m} (S_0ᵀ q_m)_{j'} +
    Σ_{p ≤ m} γ_{m,p} (q_m · k_p) u_{p,j'}."""
    m = M
    read = Sum(q[m, J] * invariant(m, rule), (J, 1, C))
    if rule.channel:  # Σ_j q_{m,j} e^{G_{m,j}} S_0 + Σ_p (Σ_j q_{m,j} k_{p,j} γ_{m,p,j}) u_p
        parallel = Sum(q[m, J] * _kept(m, rule) * _initial(J), (J, 1, C)) + Sum(
            Sum(q[m, J] * k[P, J] * _gamma(m, P, rule), (J, 1, C)) * _writes(P, rule),
            (P, S + 1, m),
        )
    else:
        parallel = _kept(m, rule) * Sum(q[m, J] * _initial(J), (J, 1, C)) + Sum(
            _gamma(m, P, rule) * _dot(q, m, k, P) * _writes(P, rule), (P, S + 1, m)
        )
    return _fact(
        f"{rule.name}_output",
        "What token m reads: the parallel form's row",
        sp.Symbol("o_{m,j'}"),
        (read, canonical(read)),
        canonical(parallel),
        "the invariant at token m put into the read, the sums over j and p exchanged",
    )


def carried(rule: Rule) -> Fact:
    """A chunk of tokens t + 1 … that starts from the state the chunk before it ends with, at
    its last token t (the invariant from s), its own decays counted from t: its state is the
    invariant from s, unsplit. So any split into chunks gives the recurrence."""
    t, m = sp.Symbol("t", integer=True), M
    ended = invariant(t, rule)  # the state carried, at the chunk before's last token
    # the next chunk's own cumulative decays G'_m = G_m − G_t: its initial state kept by
    # e^{G'_m}, its own writes from token t + 1 decayed by e^{G'_m − G'_p} = γ_{m,p}
    decayed = exp(_decay(m, J, rule) - _decay(t, J, rule)) if rule.gated else sp.S.One
    own = Sum(_gamma(m, P, rule) * k[P, J] * _writes(P, rule), (P, t + 1, m))
    restarted = decayed * ended + own
    pieces = Sum(_gamma(m, P, rule) * k[P, J] * _writes(P, rule), (P, S + 1, t)) + own
    claim = _kept(m, rule) * _initial(J) + pieces
    return _fact(
        f"{rule.name}_carried",
        "The state carried from one chunk to the next",
        STATE[m, J, J2],
        (restarted, canonical(restarted)),
        canonical(claim),
        "the state at the chunk before's last token t decayed by the new chunk's e^{G_m − G_t} "
        "and its own writes added; the sum up to m split at t",
    )


def as_linear_attention() -> Fact:
    """SSD without decay and with unit steps (a_m = e^{Δ_m A} ≡ 1, Δ_m ≡ 1) reads what causal
    linear attention without a feature map reads: its parallel form's row, G ≡ 0 and Δ ≡ 1 put
    in, is linear attention's."""
    ssd, plain = RULES["ssd"], RULES["linear-attention"]
    row = output(ssd).claim.rhs
    undecayed = row.replace(lambda e: isinstance(e, sp.Indexed) and e.base == G, lambda e: 0)
    unit = undecayed.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == STEP, lambda e: sp.S.One
    )
    return _fact(
        "ssd_as_linear_attention",
        "Without decay and with unit steps, SSD is causal linear attention",
        sp.Symbol("o_{m,j'}"),
        (row, unit, canonical(unit)),
        output(plain).claim.rhs,
        "G ≡ 0 (every a_m = 1) and Δ ≡ 1 put into SSD's row",
    )


def without_correction() -> Fact:
    """SSD's write is the gated delta rule's with no correction: the delta rule's write
    β_m (v_m − ε α_m S^{(m−1)ᵀ} k_m), built by `delta_write` with its prediction scaled by a
    strength ε (ε = 1: the gated delta rule's), taken at ε = 0 and β_m = Δ_m, is Δ_m v_m
    (`shares_the_state`: the two rules then keep the same state)."""
    m = M
    predicted = _cumulative(predicted_by_state(m, RULES["gated-deltanet"]), m)
    strength = sp.Symbol("epsilon", nonnegative=True)  # the correction's strength
    write = delta_write(m, strength * predicted)  # ε = 1: the gated delta rule's write
    taken = sp.expand(write).xreplace({strength: 0})
    return _fact(
        "ssd_without_correction",
        "SSD is the gated delta rule without the correction",
        u[m, J2],
        (write, taken, taken.xreplace({beta[m]: STEP[m]})),
        _writes(m, RULES["ssd"]),
        "the gated delta rule's write (`delta_write`) with its correction scaled by ε; the "
        "second line at ε = 0, the third with the strength β_m taken as the step Δ_m",
    )


def shares_the_state() -> Fact:
    """The gated delta rule's state step, every write u_p taken as SSD's Δ_p v_p, is SSD's state
    step: the decay and the state are the two rules' same, only the write differs."""
    gated, ssd = RULES["gated-deltanet"], RULES["ssd"]
    step = state(gated).derivation[0].rhs
    written = step.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == u,
        lambda e: STEP[e.indices[0]] * v[e.indices[0], e.indices[1]],
    )
    return _fact(
        "ssd_shares_the_state",
        "SSD keeps the gated delta rule's state",
        STATE[M, J, J2],
        (step, written, canonical(written)),
        canonical(state(ssd).derivation[0].rhs),
        "the gated delta rule's recurrence on the invariant at token m − 1; the second line "
        "with every written u_p taken as Δ_p v_p, SSD's write",
    )


# ---------------------------------------------------------------------------------------------
# Explicit sizes: every split into chunks, and the gradients


def splits(n: int) -> Iterator[tuple[int, ...]]:
    """Every split of tokens 1 … n into consecutive chunks, as the chunks' sizes."""
    if n == 0:
        yield ()
        return
    for first in range(1, n + 1):
        for rest in splits(n - first):
            yield (first, *rest)


class Symbols(NamedTuple):
    """Explicit entries: Q, K (n × c), V (n × c_v), the decays α_m (positive symbols, e^{g_m};
    with a decay per channel, α_m is a tuple of c symbols α_{m,j}) and the strengths β_m."""

    Q: sp.Matrix
    K: sp.Matrix
    V: sp.Matrix
    alpha: tuple
    beta: tuple[sp.Symbol, ...]


def explicit(n: int, c: int, c_v: int, *, channel: bool = False) -> Symbols:
    def matrix(name: str, cols: int) -> sp.Matrix:
        return sp.Matrix(n, cols, lambda a, b: sp.Symbol(f"{name}_{a + 1}{b + 1}", real=True))

    if channel:
        alpha = tuple(
            tuple(sp.Symbol(f"alpha_{m + 1}{j + 1}", positive=True) for j in range(c))
            for m in range(n)
        )
    else:
        alpha = sp.symbols(f"alpha_1:{n + 1}", positive=True)
    strengths = sp.symbols(f"beta_1:{n + 1}", positive=True)
    return Symbols(matrix("q", c), matrix("k", c), matrix("v", c_v), alpha, strengths)


def recurrent_outputs(x: Symbols, rule: Rule) -> sp.Matrix:
    """The recurrence, token by token, from S = 0: the outputs (n × c_v)."""
    n, c_v = x.V.shape
    state = sp.zeros(x.K.shape[1], c_v)
    rows = []
    for m in range(n):
        if rule.channel:  # diag(α_m): each row of the state its own decay
            state = sp.diag(*x.alpha[m]) * state
        elif rule.gated:
            state = x.alpha[m] * state
        k_m, v_m = x.K[m, :].T, x.V[m, :].T
        write = x.beta[m] * (v_m - state.T * k_m) if rule.delta else v_m
        if rule.stepped:
            write = x.beta[m] * v_m
        state = state + k_m * write.T
        rows.append((state.T * x.Q[m, :].T).T)
    return sp.Matrix.vstack(*rows).applyfunc(sp.expand)


#: A chunk's rule: (Q, K, V, α, β of the chunk, its initial state, the rule) -> (outputs, state).
ChunkRule = Callable[..., tuple[sp.Matrix, sp.Matrix]]


def chunk(
    Q: sp.Matrix, K: sp.Matrix, V: sp.Matrix, alpha, strengths, start: sp.Matrix, rule: Rule
) -> tuple[sp.Matrix, sp.Matrix]:
    """One chunk of the chunked form (`attention.linear.chunked`), written out: Γ ∘ M, the
    triangular system solved by forward substitution, the outputs and the state after it."""
    if rule.channel:
        return _chunk_per_channel(Q, K, V, alpha, strengths, start, rule)
    size = Q.shape[0]

    def decay(m: int, p: int) -> sp.Expr:  # γ_{m,p}: the α of tokens p + 1 … m
        if not rule.gated:
            return sp.S.One
        first = p if rule.inclusive else p + 1
        return sp.Mul(*alpha[first : m + 1])

    kept = [decay(m, -1) for m in range(size)]  # e^{G_m}, from the chunk's start
    gamma = sp.Matrix(size, size, lambda m, p: decay(m, p) if p <= m else 0)
    if rule.delta:
        system = sp.Matrix(
            size,
            size,
            lambda m, p: strengths[m] * gamma[m, p] * (K[m, :] * K[p, :].T)[0] if p < m else 0,
        )
        right = sp.diag(*strengths) * (V - sp.diag(*kept) * K * start)
        written = (sp.eye(size) + system).lower_triangular_solve(right)
    else:
        written = sp.diag(*strengths) * V if rule.stepped else V
    scores = (Q * K.T).multiply_elementwise(gamma)
    outputs = sp.diag(*kept) * Q * start + scores * written
    last = [decay(size - 1, p) for p in range(size)]  # e^{G_C − G_p}
    after = kept[-1] * start + (sp.diag(*last) * K).T * written
    return outputs, after


def _chunk_per_channel(
    Q: sp.Matrix, K: sp.Matrix, V: sp.Matrix, alpha, strengths, start: sp.Matrix, rule: Rule
) -> tuple[sp.Matrix, sp.Matrix]:
    """`chunk` with a decay per key channel (Kimi Delta Attention, Mamba's selective scan):
    γ_{m,p,j} the α_{·,j} of tokens p + 1 … m, inside every product over the channels."""
    size, c = Q.shape

    def decay(m: int, p: int, j: int) -> sp.Expr:
        first = p if rule.inclusive else p + 1
        return sp.Mul(*(alpha[r][j] for r in range(first, m + 1)))

    def mixed(A: sp.Matrix, B: sp.Matrix, m: int, p: int) -> sp.Expr:
        return sp.Add(*(A[m, j] * B[p, j] * decay(m, p, j) for j in range(c)))

    kept = sp.Matrix(size, c, lambda m, j: decay(m, -1, j))  # e^{G_{m,j}}
    system = sp.Matrix(size, size, lambda m, p: strengths[m] * mixed(K, K, m, p) if p < m else 0)
    right = sp.diag(*strengths) * (V - K.multiply_elementwise(kept) * start)
    if rule.delta:
        written = (sp.eye(size) + system).lower_triangular_solve(right)
    else:  # each value as it is, or scaled by its step (Mamba's selective scan)
        written = sp.diag(*strengths) * V if rule.stepped else V
    scores = sp.Matrix(size, size, lambda m, p: mixed(Q, K, m, p) if p <= m else 0)
    outputs = Q.multiply_elementwise(kept) * start + scores * written
    last = sp.Matrix(size, c, lambda p, j: decay(size - 1, p, j))  # e^{G_{C,j} − G_{p,j}}
    after = sp.diag(*kept.row(size - 1)) * start + K.multiply_elementwise(last).T * written
    return outputs, after


def chunked_outputs(x: Symbols, sizes: tuple[int, ...], rule: Rule, form: ChunkRule = chunk):
    """The chunked form over chunks of the given sizes, from S = 0: the outputs (n × c_v)."""
    state = sp.zeros(x.K.shape[1], x.V.shape[1])
    rows, first = [], 0
    for size in sizes:
        part = slice(first, first + size)
        out, state = form(
            x.Q[part, :], x.K[part, :], x.V[part, :], x.alpha[part], x.beta[part], state, rule
        )
        rows.append(out)
        first += size
    return sp.Matrix.vstack(*rows).applyfunc(sp.expand)


def every_split(n: int, rule: Rule, *, c: int = 2, c_v: int = 1, form: ChunkRule = chunk) -> dict:
    """{chunks' sizes: the chunked outputs minus the recurrence's, expanded} for every split of
    n tokens (the parallel form is the split into one chunk); every value the zero matrix when
    the chunked form is the recurrence. The recurrence is always the correct one; `rule` and
    `form` choose the chunked form's (a mistake's, for the tests)."""
    x = explicit(n, c, c_v, channel=rule.channel)
    right = RULES[rule.name] if rule.name in RULES else rule._replace(inclusive=False)
    expected = recurrent_outputs(x, right._replace(inclusive=False))
    return {
        sizes: (chunked_outputs(x, sizes, rule, form) - expected).applyfunc(sp.expand)
        for sizes in splits(n)
    }


def gradients(n: int, rule: Rule, *, c: int = 2, c_v: int = 1) -> dict[str, sp.Matrix]:
    """The gradient of L = Σ o̅_{m,j'} o_{m,j'} (o̅ the outputs' gradient, symbols) with respect
    to Q, K, V, α and β, derived by SymPy from the parallel form (one chunk of n tokens) at
    explicit sizes: {"dQ", "dK", "dV", "dalpha", "dbeta"} with the symbols of `explicit` and
    ``obar_{m}{j'}``; with a decay per channel, dalpha is n × c."""
    x = explicit(n, c, c_v, channel=rule.channel)
    out = chunked_outputs(x, (n,), rule)
    bar = sp.Matrix(n, c_v, lambda a, b: sp.Symbol(f"obar_{a + 1}{b + 1}", real=True))
    loss = sum((bar[a, b] * out[a, b] for a in range(n) for b in range(c_v)), sp.S.Zero)
    derivative = lambda matrix: matrix.applyfunc(lambda e: sp.diff(loss, e))  # noqa: E731
    return {
        "dQ": derivative(x.Q),
        "dK": derivative(x.K),
        "dV": derivative(x.V),
        "dalpha": sp.Matrix([[sp.diff(loss, a) for a in row] for row in x.alpha])
        if rule.channel
        else sp.Matrix([[sp.diff(loss, a) for a in x.alpha]]),
        "dbeta": sp.Matrix([[sp.diff(loss, b) for b in x.beta]]),
    }


# ---------------------------------------------------------------------------------------------
# The state after each chunk, at explicit sizes, for a page


def chunk_states(graph, sizes: dict) -> list:
    """S^{(t)} after each chunk of B_c tokens (2 unless the sizes give B_c), at the explicit
    `sizes` of `graph` (linear attention's, or a delta rule's read), written out from the
    invariant with S^{(0)} = 0: s_{j,j'} = Σ_{p ≤ t B_c} γ_{tB_c,p} k_{p,j} u_{p,j'} (γ = 1 and
    u = v where the graph has no decays and no written values), each entry lit up with the keys
    and values it has seen (`derive.proofs.online_softmax.BlockState`)."""
    from .online_softmax import BlockState

    n, c = (int(sizes[symbol]) for symbol in (L.n, L.c))
    size = int(sizes.get(L.B_c, 2))
    values = L.base("uwritten") if "U_written" in graph.inputs else v
    step = L.base("deltastep") if "Delta_step" in graph.inputs else None

    def written(p: int, j2: int) -> sp.Expr:  # SSD's u_{p,j'} = Δ_p v_{p,j'}, in its graph
        return values[p, j2] if step is None else step[p, 1] * v[p, j2]

    def read(p: int) -> tuple[sp.Expr, ...]:  # what token p's write shows on the page
        return (values[p, 1],) if step is None else (v[p, 1], step[p, 1])

    decay = L.base("gammadecay") if "Gamma_decay" in graph.inputs else None
    logs = L.base("glog") if "G_log" in graph.inputs else None  # KDA's, per key channel

    def decayed(last: int, p: int, j: int) -> sp.Expr:  # from token p's write to token last
        if logs is not None:
            return sp.exp(logs[last, j] - logs[p, j])
        return 1 if decay is None else decay[last, p]

    state = L.base("sstate")
    found = []
    for t, stop in enumerate(range(size, n + size, size), 1):
        last = min(stop, n)
        tokens = range(1, last + 1)

        def entry(j: int, j2: int, last: int = last, tokens: range = tokens) -> sp.Expr:
            return sp.Add(*(decayed(last, p, j) * k[p, j] * written(p, j2) for p in tokens))

        formulas = sp.Matrix(c, c, lambda j, j2: entry(j + 1, j2 + 1))
        entries = sp.Matrix(c, c, lambda j, j2, t=t: state[t, j + 1, j2 + 1])
        seen = tuple(x for p in tokens for x in (*(k[p, j] for j in range(1, c + 1)), *read(p)))
        where = f"after chunk {t} (tokens 1 to {last})"
        found.append(BlockState(rf"S^{{({t})}}", f"the state {where}", entries, formulas, seen))
    return found
