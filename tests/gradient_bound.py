"""The gradients of multi-head attention through the fast or the explicit path, their error
against a float64 reference, and the bound on that error that float32 rounding implies
(`rounding_bound`; tests/attention/test_fused.py states it and derives it).

`rounding_bound` walks the steps both paths take, in float64: each intermediate quantity is a
`Bounded`, its exact value with a radius, what a float32 computation of it may be off by, entry
by entry, given what its operands may be off by and how often it is rounded. That is how
derive/conform derives its tolerances (`derive.conformance.evaluate.matrices`), with three
changes that its small scores never needed: a product's radius keeps the product of its
operands' radii (second order); the softmax turns a score's error into a weight's error through
exp itself, not its first-order expansion, since at large scores a score's error is 1 or more;
and where a row's softmax is saturated (one weight 1 to within u) the bound uses what rounding
to nearest gives besides u, that 1 + (what is below u) and 1 · x are exact, so that it holds
the gradients there to what they are, nearly 0, not to u of their parts.

`grouped_rounding_bound` is its sibling for the one fast path at the level of q, k, v (B, h, n,
c_h) (`attention._fused`, tests/attention/test_one_fast_path.py): the same walk (`walk_grouped`)
with grouped keys, softcap, ALiBi and sinks.
"""

import math
from dataclasses import dataclass

import torch
from reference_variants import band_matrix
from torch import Tensor

from attention import _fused
from attention import functional as F

EPSILON = torch.finfo(torch.float32).eps
#: exp's accuracy in units in the last place: SLEEF's expf behind torch.exp and torch.softmax
#: (1 ulp); the fused kernel's forward (`exp_u20`, 20 ulps).
EXP_ULPS, KERNEL_EXP_ULPS = 1, 20
#: Keys in one block of the fused kernel's forward: up to this many, its softmax is one pass
#: (no rescaling between blocks, which `rounding_bound` does not count).
KERNEL_KEYS = 512


@dataclass(frozen=True)
class Rounding:
    """A precision's rounding: `unit` u (a result is off by at most u of itself), `tiny` (what a
    result below the normal range may lose besides: flushed to zero, or among subnormals), and
    whether to use what rounding to nearest gives besides u (`near`): a result is no farther
    from the exact one than any float is, so a + b is within |b| of it (a is a float), and x·f
    within |1 − f||x| (x is a float): exact where the other term is 0 or the factor is 1."""

    unit: float
    tiny: float
    near: bool

    def gamma(self, k: int) -> float:
        """γ_k = k u / (1 − k u): the relative error of k roundings in a row (a sum of k + 1
        terms, a product of k + 1 factors)."""
        return k * self.unit / (1 - k * self.unit)


#: float32, as both paths compute; float64, as the reference does (u only).
FLOAT32 = Rounding(2.0**-24, 2.0**-126, near=True)
FLOAT64 = Rounding(2.0**-53, 2.0**-1022, near=False)


def gradients(tensors, upstream, options, dtype, explicit):
    """The gradients of `multi_head_attention` (or `self_attention`, given four tensors: X and
    the three weights) with respect to every tensor, in `dtype`, through the explicit path
    (`explicit`, which returning the weights selects) or the fast path."""
    leaves = [t.to(dtype).requires_grad_() for t in tensors]
    attend = F.multi_head_attention if len(tensors) == 5 else F.self_attention
    out = attend(*leaves, **options, return_weights=explicit)
    out = out[0] if explicit else out
    return torch.autograd.grad(out, leaves, upstream.to(dtype))


def error(got, reference):
    """The largest absolute difference over all the gradients."""
    return max((g.double() - r).abs().max().item() for g, r in zip(got, reference, strict=True))


@dataclass(frozen=True)
class Bounded:
    """An exact value (float64) and its radius: how far a computation of it may be."""

    value: Tensor
    radius: Tensor

    @property
    def big(self) -> Tensor:
        """The largest magnitude the computed value may have, entry by entry."""
        return self.value.abs() + self.radius

    @property
    def mT(self) -> "Bounded":
        return Bounded(self.value.mT, self.radius.mT)

    def view(self, *shape) -> "Bounded":
        return Bounded(self.value.reshape(shape), self.radius.reshape(shape))


def exact(t: Tensor) -> Bounded:
    """An input: float32, so exact in float64."""
    return Bounded(t.double(), torch.zeros_like(t, dtype=torch.float64))


def product(x: Bounded, y: Bounded, fl: Rounding) -> Bounded:
    """x y of depth k: |Δx||y| + |x||Δy| + |Δx||Δy| from the operands, and the product's own
    rounding γ_k |x̂||ŷ| over the computed operands (any order of summation, with or without
    fused multiply-adds), plus k underflows."""
    k = x.value.shape[-1]
    carried = x.radius @ y.value.abs() + x.value.abs() @ y.radius + x.radius @ y.radius
    return Bounded(x.value @ y.value, carried + fl.gamma(k) * (x.big @ y.big) + k * fl.tiny)


def scaled(x: Bounded, factor: float, fl: Rounding) -> Bounded:
    """factor · x: the factor rounded to the precision and the product rounded, 2u."""
    radius = abs(factor) * (x.radius + 2 * fl.unit * x.big) + fl.tiny
    return Bounded(factor * x.value, radius)


def total(terms: list[Bounded], fl: Rounding) -> Bounded:
    """A sum of a few terms: their radii, and u of the sum's magnitude for each addition."""
    value = sum(t.value for t in terms)
    radius = sum(t.radius for t in terms) + fl.gamma(len(terms) - 1) * sum(t.big for t in terms)
    return Bounded(value, radius)


def off_diagonal(weights: Tensor, values: Tensor | float = 1.0) -> Tensor:
    """Σ_{r≠m} weights_r values_{m,r} for each m of each row: weights (..., n), values
    (..., n, n) or a number -> (..., n)."""
    n = weights.shape[-1]
    others = weights.unsqueeze(-2) * (1 - torch.eye(n, dtype=weights.dtype))  # (..., m, r)
    return (others * values).sum(dim=-1)


def softmax(
    scores: Bounded, allowed: Tensor, exp_ulps: int, fl: Rounding
) -> tuple[Bounded, Tensor]:
    """(A, τ): A = softmax of each row over the allowed keys (a row with none: zeros, exactly,
    on every path), and τ (..., 1), what the sum of a row's exponentials may be above 1.

    The scores' errors e_r, with the rounding of the shift by the row's maximum and of exp,
    make the exponentials those of Ω̃ + δ, |δ_r| ≤ e_r, whose softmax P has, exactly,
        p_m / a_m = 1 / Σ_r a_r exp(δ_r − δ_m) ∈ [1 / (1 + T_m), 1 / (1 − L_m)],
        T_m = Σ_{r≠m} a_r (exp(e_r + e_m) − 1),  L_m = Σ_{r≠m} a_r (1 − exp(−e_r − e_m))
    (not a first-order expansion: at large scores e_r is 1 or more; and a weight near 1 moves
    by the others' weights only). Then the row's sum and the division (1/Σ, then a product):
    γ_{n+1} of the weight; with `fl.near`, less where one weight takes nearly all: the largest
    exponential is exp(0) = 1 exactly, the others' share μ = 1 − max p, and each addition is
    off by no more than its smaller operand (≤ μ Σ), so the sum by (n − 1) min(u, μ); the sum is
    1 exactly unless τ = n μ / (1 − μ) ≥ 2u (the float after 1), and 1/1 and x·1 are exact, so
    the division adds min(2u, τ). The pairs (m, r) cost n³ a head: small n only."""
    n = scores.value.shape[-1]
    s = scores.value.masked_fill(~allowed, -math.inf)
    live = allowed.any(dim=-1, keepdim=True)
    a = torch.where(live, torch.softmax(s, dim=-1), 0.0).nan_to_num(0.0)
    top = torch.where(live, s.amax(dim=-1, keepdim=True), 0.0)
    radius = torch.where(allowed, scores.radius, 0.0)
    largest = radius.amax(dim=-1, keepdim=True)  # the maximum found moves by at most this
    gap = torch.where(allowed, s - top, 0.0).abs()
    eta = 2 * exp_ulps * fl.unit  # exp's relative error, η ≤ ulps · 2u
    e = torch.where(allowed, radius + fl.unit * (gap + 2 * largest) + eta / (1 - eta), 0.0)
    pair = (e.unsqueeze(-1) + e.unsqueeze(-2)).clamp(max=700.0)  # e_m + e_r: (..., m, r)
    grown = off_diagonal(a, torch.expm1(pair))  # T_m
    shrunk = off_diagonal(a, -torch.expm1(-pair))  # L_m
    kept = a + off_diagonal(a, torch.exp(-pair))  # 1 − L_m, without the cancellation
    moved = a * torch.maximum(grown / (1 + grown), shrunk / kept.clamp(min=fl.tiny))
    moved = torch.where(allowed & live, moved, 0.0)
    spread = fl.gamma(n + 1)
    tau = torch.ones_like(top)
    if fl.near:
        # μ = 1 − p_w' for the key w' whose exponential is exp(0): the largest weight w unless
        # another score may reach its score, and then p_w' ≥ p_w / (1 + η) (exp(0) ≥ each)
        winner = a.argmax(dim=-1, keepdim=True)
        reach = (s.gather(-1, winner) - e.gather(-1, winner)).expand_as(s)
        rival = (allowed & (s + e >= reach)).scatter(-1, winner, False).any(-1, keepdim=True)
        held = (a - moved).gather(-1, winner) / torch.where(rival, 1 + eta, 1.0)
        share = (1 - held).clamp(0.0, 1.0)  # μ
        tau = torch.where(share < 0.5, n * (1 + fl.gamma(n)) * share / (1 - share), 1.0)
        sums = (n - 1) * (1 + fl.gamma(n)) * torch.clamp(share, max=fl.unit)
        spread = torch.clamp(sums + torch.clamp(tau, max=2 * fl.unit), max=spread)
    bound = moved + spread * (a + moved) + torch.where(allowed, 2 * fl.tiny, 0.0)
    return Bounded(a, bound), tau


def softmax_backward(a: Bounded, d_a: Bounded, tau: Tensor, fl: Rounding) -> Bounded:
    """dΩ̃ = A ∘ (dA − D), D = rowsum(A ∘ dA).

    From the operands, exactly (the second line needs no Σ a = 1),
        Δ(dΩ̃)_m = ΔA_m (dA_m − D) − Â_m Σ_r ΔA_r dA_r
                  + Â_m ((1 − Â_m) Δ(dA)_m − Σ_{r≠m} Â_r Δ(dA)_r),
    so a weight near 1 (a saturated row) passes on little of its dA's error. Its own rounding:
    γ_{n+4} Â_m (|dÂ_m| + Σ_r Â_r |dÂ_r|), n + 2 roundings in torch's kernel (the fast path,
    the explicit path without a mask), n + 4 through the explicit path's autograd of
    exp / Σ exp (dA_m / Σ; e_r / Σ / Σ · dA_r summed; their sum; times e_m). With `fl.near`:
    a product by a factor f within ζ of 1 (Â_r, e_r, 1/Σ: ζ ≤ |1 − a_r| + ρ_r + 3τ) is off by
    min(u, 2ζ) of itself; each addition of D by no more than all its terms but the largest;
    dA_m − D by u of itself."""
    n = a.value.shape[-1]
    rows = lambda t: t.sum(dim=-1, keepdim=True)  # noqa: E731
    along = rows(a.value * d_a.value)
    far = (1 - a.value).abs() + a.radius  # |1 − Â|
    shifted = rows(a.radius * d_a.value.abs())  # Σ_r |ΔA_r| |dA_r|
    passed = far * d_a.radius + off_diagonal(a.big * d_a.radius)  # |1 − Â_m| σ_m + Σ_{r≠m} Â_r σ_r
    carried = a.radius * (d_a.value - along).abs() + a.big * (shifted + passed)
    if fl.near:
        terms = a.big * d_a.big  # |Â_r dÂ_r|
        per_term = torch.clamp(2 * (far + 3 * tau), max=fl.unit)  # min(u, 2ζ)
        largest = terms.argmax(dim=-1, keepdim=True)
        rest = rows(terms.scatter(-1, largest, 0.0))  # all the terms but the largest
        sums = (n - 1) * (1 + fl.gamma(n)) * torch.minimum(fl.unit * rows(terms), rest)
        off_d = rows(3 * per_term / (1 - 3 * per_term) * terms) + sums  # D's own error
        difference = (d_a.value - along).abs() + shifted + passed + off_d + per_term * d_a.big
        own = a.big * (off_d + per_term * d_a.big + (fl.unit + 2 * per_term) * difference)
    else:
        own = fl.gamma(n + 4) * a.big * (d_a.big + rows(a.big * d_a.big))
    return Bounded(a.value * (d_a.value - along), carried + own + 3 * fl.tiny)


def allowed_keys(n: int, batch: tuple, options: dict) -> Tensor:
    """(B, 1, n, n): True where query m may attend key p (causal, window, mask, key padding)."""
    allowed = torch.ones(n, n, dtype=torch.bool)
    if options.get("causal"):
        allowed = allowed.tril()
    if options.get("window") is not None:
        allowed = allowed.triu(diagonal=1 - options["window"])  # m − p < w
    if options.get("mask") is not None:
        allowed = allowed & options["mask"]
    if options.get("key_padding_mask") is not None:
        allowed = allowed & options["key_padding_mask"].unsqueeze(-2)  # (*b, n) -> (*b, 1, n)
    return allowed.expand(*batch, n, n).reshape(-1, 1, n, n)


def walk(tensors, upstream, options, fl: Rounding) -> list[Bounded]:
    """The gradients of `gradients(tensors, upstream, options)` step by step, each with what a
    computation in `fl`'s precision may be off by (tests/attention/test_fused.py's table)."""
    x, *weights = tensors
    *batch, n, d = x.shape
    heads = options.get("heads", 1)
    c = weights[0].shape[-1]
    width = c // heads
    rows = math.prod(batch) * n  # the rows X has, batch entries one after the other
    allowed = allowed_keys(n, tuple(batch), options)

    def split(t: Bounded) -> Bounded:  # (B·n, c) -> (B, h, n, c_h)
        def one(u: Tensor) -> Tensor:
            return u.reshape(-1, n, heads, width).transpose(1, 2)

        return Bounded(one(t.value), one(t.radius))

    def merge(t: Bounded) -> Bounded:  # (B, h, n, c_h) -> (B·n, c)
        def one(u: Tensor) -> Tensor:
            return u.transpose(1, 2).reshape(rows, c)

        return Bounded(one(t.value), one(t.radius))

    x_flat = exact(x.reshape(rows, d))
    w_q, w_k, w_v, *w_o = (exact(w) for w in weights)
    q, k, v = (split(product(x_flat, w, fl)) for w in (w_q, w_k, w_v))
    q_scaled = scaled(q, 1.0 / math.sqrt(width), fl)  # both paths scale Q before the product
    s = product(q_scaled, k.mT, fl)
    a, tau = softmax(s, allowed, EXP_ULPS, fl)  # the explicit path's, and the fast backward's
    d_out = exact(upstream.reshape(rows, -1))
    found = []
    if w_o:
        a_kernel, _ = softmax(s, allowed, KERNEL_EXP_ULPS, fl)  # the fused kernel's forward
        found.append(product(merge(product(a_kernel, v, fl)).mT, d_out, fl))  # dW_o = Cᵀ dY
        d_context = split(product(d_out, w_o[0].mT, fl))
    else:
        d_context = split(d_out)
    d_v = product(a.mT, d_context, fl)
    d_s = softmax_backward(a, product(d_context, v.mT, fl), tau, fl)
    d_q = merge(scaled(product(d_s, k, fl), 1.0 / math.sqrt(width), fl))
    d_k, d_v = merge(product(d_s.mT, q_scaled, fl)), merge(d_v)
    pairs = ((d_q, w_q), (d_k, w_k), (d_v, w_v))
    d_x = total([product(g, w.mT, fl) for g, w in pairs], fl).view(*x.shape)
    return [d_x, *(product(x_flat.mT, g, fl) for g, _ in pairs), *found]


def rounding_bound(tensors, upstream, options) -> tuple[list[Tensor], list[Tensor]]:
    """(the gradients, their radii) of `gradients(tensors, upstream, options)`, in the leaves'
    shapes: the float64 values, which must agree with the reference, and what a float32
    computation of each entry may be off from the float64 reference: its own rounding's radius
    plus the reference's (u = 2⁻⁵³; the magnitudes both are taken from are the reference's).

    Without W_o (four tensors), one head of width c and the upstream gradient is dC itself."""
    n = tensors[0].shape[-2]
    if n > KERNEL_KEYS:
        raise ValueError(f"rounding_bound: n={n} > {KERNEL_KEYS}, the fused kernel's key block")
    return radii_of(walk, tensors, upstream, options)


def radii_of(walker, tensors, upstream, options) -> tuple[list[Tensor], list[Tensor]]:
    """`walker`'s float64 values, and each entry's radius: the float32 walk's plus the float64
    reference's own (u = 2⁻⁵³)."""
    single, double = (walker(tensors, upstream, options, fl) for fl in (FLOAT32, FLOAT64))
    values = [g.value for g in single]
    return values, [f.radius + r.radius for f, r in zip(single, double, strict=True)]


def worst_ratio(got, reference, radii) -> float:
    """The largest |got − reference| / radius over every entry of every gradient (above 1: the
    bound is missed; an entry with a zero radius must be exact)."""
    worst = 0.0
    for g, r, radius in zip(got, reference, radii, strict=True):
        miss = (g.double() - r).abs()
        ratio = torch.where(miss > 0, miss / radius, 0.0)
        worst = max(worst, ratio.max().item())
    return worst


#: tanh's accuracy in units in the last place (SLEEF's tanhf behind torch.tanh, 1 ulp; "a few"
#: allowed for the scalar tail's libm).
TANH_ULPS = 4


def times(x: Bounded, y: Bounded, fl: Rounding) -> Bounded:
    """x ∘ y entry by entry: |Δx||y| + |x||Δy| + |Δx||Δy| from the operands, u |x̂||ŷ| its own."""
    carried = x.radius * y.value.abs() + x.value.abs() * y.radius + x.radius * y.radius
    return Bounded(x.value * y.value, carried + fl.unit * x.big * y.big + fl.tiny)


def positions(n: int, s: int, offset: int) -> Tensor:
    """(n, s): m + o − p, float64 (exact: small integers, in float32 too)."""
    queries = torch.arange(n, dtype=torch.float64) + offset
    return queries[:, None] - torch.arange(s, dtype=torch.float64)


def softcapped(scores: Bounded, cap: float, fl: Rounding) -> tuple[Bounded, Bounded]:
    """(cap · tanh(ω̃ / cap), tanh(ω̃ / cap)). The quotient: the cap rounded to the precision and
    the division (or a product by its rounded reciprocal), γ_3. tanh moves by |Δy| times its
    largest slope over [y − Δy, y + Δy], sech²(max(0, |y| − Δy)) ≤ 1 (mean value), and is off by
    TANH_ULPS ulps (≤ 2u each) of itself. The product by the rounded cap: 2u."""
    y = scores.value / cap
    dy = scores.radius / cap + fl.gamma(3) * scores.big / cap
    slope = torch.cosh((y.abs() - dy).clamp(min=0.0).clamp(max=300.0)) ** -2
    t = torch.tanh(y)
    dt = dy * slope
    dt = dt + 2 * TANH_ULPS * fl.unit * (t.abs() + dt) + fl.tiny
    t_b = Bounded(t, dt)
    return Bounded(cap * t, cap * dt + 2 * fl.unit * cap * t_b.big + fl.tiny), t_b


def cap_slope(t: Bounded, fl: Rounding) -> Bounded:
    """1 − t² from t = tanh(ω̃/cap): t̂² (off by Δt (2|t| + Δt) and u of itself), then 1 − t̂²
    (u of the result)."""
    square = t.value.square()
    d_square = t.radius * (2 * t.value.abs() + t.radius)
    d_square = d_square + fl.unit * (square + d_square)
    f = 1 - square
    return Bounded(f, d_square + fl.unit * (f.abs() + d_square) + fl.tiny)


def walk_grouped(tensors, upstream, options, fl: Rounding) -> list[Bounded]:
    """The gradients of the one fast path (`attention._fused._sweep`) with respect to q, k, v
    (and the sinks σ, ALiBi's slopes μ where given), step by step as it takes them, each with
    what a computation in `fl`'s precision may be off by. q (B, h, n, c_h) in g groups of keys
    k, v (B, g, s, c_h); options as `attention._core.attend` takes them (scale, causal, window,
    offset, allowed, softcap, slopes, sinks), the slopes and sinks float32 numbers.

    Its steps: Q̃ = scale · q (2u); ω̃ = Q̃ Kᵀ (depth c_h); softcap (`softcapped`); ALiBi
    ω̃ − μ (m + o − p) (the product's rounding u |μ (m + o − p)|, the sum's u); the softmax over
    the allowed keys and the sink's logit as one more key (always allowed, its value exact), whose
    exp(0) = 1 for the row's largest is the same argument (`softmax`); dV = Aᵀ dC and dK = dΩ̃ᵀ Q̃
    over the h/g heads of a group and their rows together (depth h/g · n); dA = dC Vᵀ;
    dΩ̃' = A ∘ (dA − rowsum(A ∘ dA)) over the keys (`softmax_backward`: its error terms need no
    Σ a = 1, and the sink's column, dA = 0, adds nothing); dμ = −Σ dΩ̃' (m + o − p) over the
    batch, rows and keys (one sum of depth B n s); dσ = −Σ a_σ rowsum(A ∘ dA) over the batch and
    rows (rowsum depth s, then depth B n); dΩ̃ = dΩ̃' ∘ (1 − tanh²) (`cap_slope`, `times`);
    dQ = scale · dΩ̃ K (depth s, then 2u). One block of rows (the sums over rows would take one
    more rounding per block): n at most `_fused._plan`'s rows."""
    q, k, v = tensors
    batch, heads, n, width = q.shape
    groups, keys = k.shape[1], k.shape[2]
    r = heads // groups
    window = options.get("window")
    reach = None if window is None else window - 1  # keys a row reads before its own
    if _fused.plan(batch * groups, n, keys, reach, r)[1] < n:
        raise ValueError(f"walk_grouped: n={n} takes more than one block of rows")
    band = band_matrix(
        n,
        keys,
        causal=bool(options.get("causal")),
        window=options.get("window"),
        offset=options.get("offset", 0),
    )
    allowed = torch.from_numpy(band).expand(batch, heads, n, keys)
    if options.get("allowed") is not None:
        allowed = allowed & options["allowed"].unsqueeze(1)  # (B, 1 or n, s) -> (B, 1, ·, s)

    def per_head(t: Tensor) -> Bounded:  # (B, g, s, c) -> (B, h, s, c): head ℓ, group ℓ // r
        return exact(t.repeat_interleave(r, dim=1))

    def stacked(t: Bounded) -> Bounded:  # (B, h, n, ·) -> (B, g, r·n, ·): a group's rows
        return t.view(batch, groups, r * n, t.value.shape[-1])

    k_h, v_h = per_head(k), per_head(v)
    q_scaled = scaled(exact(q), options["scale"], fl)
    s = product(q_scaled, k_h.mT, fl)
    t = None
    if options.get("softcap") is not None:
        s, t = softcapped(s, options["softcap"], fl)
    slopes = options.get("slopes")
    gaps = positions(n, keys, options.get("offset", 0))
    if slopes is not None:
        bias = -slopes.double()[:, None, None] * gaps  # (h, n, s)
        bias = bias.expand(batch, heads, n, keys)
        s = total([s, Bounded(bias, fl.unit * bias.abs())], fl)
    sinks = options.get("sinks")
    if sinks is not None:
        column = sinks.double()[:, None, None].expand(batch, heads, n, 1)
        s = Bounded(
            torch.cat([s.value, column], -1), torch.cat([s.radius, torch.zeros_like(column)], -1)
        )
        allowed = torch.cat([allowed, torch.ones(batch, heads, n, 1, dtype=torch.bool)], -1)
    a_all, tau = softmax(s, allowed.expand(s.value.shape), EXP_ULPS, fl)
    a = Bounded(a_all.value[..., :keys], a_all.radius[..., :keys])
    d_out = exact(upstream)
    d_v = product(stacked(a).mT, stacked(d_out), fl)  # (B, g, s, c)
    d_a = product(d_out, v_h.mT, fl)
    d_s = softmax_backward(a, d_a, tau, fl)
    found = []
    if sinks is not None:
        along = product(a.view(batch, heads, n, 1, keys), d_a.view(batch, heads, n, keys, 1), fl)
        sink_weight = Bounded(a_all.value[..., keys], a_all.radius[..., keys])

        def rows_of(u: Tensor, shape: tuple) -> Tensor:  # (B, h, n) -> (h, ·, ·), B·n entries
            return u.reshape(batch, heads, n).transpose(0, 1).reshape(heads, *shape)

        row, column = (1, batch * n), (batch * n, 1)
        weights = Bounded(rows_of(sink_weight.value, row), rows_of(sink_weight.radius, row))
        sums = Bounded(rows_of(along.value, column), rows_of(along.radius, column))
        d_sink = product(weights, sums, fl)
        found.append(Bounded(-d_sink.value.reshape(heads), d_sink.radius.reshape(heads)))
    if slopes is not None:
        entries = batch * n * keys
        flat = Bounded(
            d_s.value.transpose(0, 1).reshape(heads, 1, entries),
            d_s.radius.transpose(0, 1).reshape(heads, 1, entries),
        )
        distance = exact(gaps.expand(batch, n, keys).reshape(1, entries, 1))
        d_slope = product(flat, distance, fl)
        found.append(Bounded(-d_slope.value.reshape(heads), d_slope.radius.reshape(heads)))
    if t is not None:
        d_s = times(d_s, cap_slope(t, fl), fl)
    d_q = scaled(product(d_s, k_h, fl), options["scale"], fl)
    d_k = product(stacked(d_s).mT, stacked(q_scaled), fl)
    return [d_q, d_k, d_v, *found]


def grouped_rounding_bound(tensors, upstream, options) -> tuple[list[Tensor], list[Tensor]]:
    """(the gradients, their radii) of the one fast path, as `rounding_bound` for
    `walk_grouped`: the float64 values, and what a float32 computation of each entry may be off
    from the float64 reference (its own radius plus the reference's, u = 2⁻⁵³)."""
    return radii_of(walk_grouped, tensors, upstream, options)
