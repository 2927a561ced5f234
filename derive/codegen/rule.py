"""A variant's rule on the scores, read off its declaration: the function f that its steps apply
to each scaled score ω̃_{m,p} before the softmax, with what it reads (the query's and the key's
positions, one learned number per head, the variant's parameters), and its derivatives,
printed as torch code. FlexAttention calls such a function a ``score_mod``; FlashAttention 4
takes its derivative, by hand, as ``score_mod_bwd``. Here both are derived.

A variant is a rule on the scores when every step of its graph is plain attention's (the
projections, the heads, the scores and their scale 1/√c, the context), but for:

- steps after the scaled scores that each read the previous scores at the same entry
  (ω̆_{m,p} = κ tanh(ω̃_{m,p} / κ), ω̇^{(ℓ)}_{m,p} = ω̃^{(ℓ)}_{m,p} − μ_{1,ℓ} (m − p), …), and
  the constants they read (Δ_{m,p} = m − p): composed into f;
- masks (a constant of 0 and −∞ added to the scores): kept apart, as the condition on (m, p)
  under which a key is read (FlexAttention's ``mask_mod``);
- the weights, as the softmax of the last scores, or of a function of each one
  (e^{g(ω_{m,p})} / Σ_r e^{g(ω_{m,r})}, Scalable-Softmax's g = s log n ω): g joins f.

Anything else (a norm of the queries, another normalisation of the weights) is not a rule on
the scores, and `score_rule` says which step is not. Positions: the book's indices count from 1,
FlexAttention's and `attention.mods`'s from 0, so m = q_idx + 1 and p = kv_idx + 1.

This layer prints text and imports no torch (`derive.bridge.score_mod` runs it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import sympy as sp
from sympy import Indexed
from sympy.printing.pytorch import TorchPrinter

from ..graph import DeclarationError, Entry
from ..graph.declaration import Declaration
from ..graph.registry import variant
from ..notation import letters as L
from ..notation.functions import Indicator, Sigmoid

__all__ = ["Rule", "SCORE", "Q_IDX", "KV_IDX", "PARAMETER", "score_rule", "rule_source"]

#: The symbols of the generated functions' arguments.
SCORE = sp.Symbol("score", real=True)
Q_IDX = sp.Symbol("q_idx", integer=True, nonnegative=True)
KV_IDX = sp.Symbol("kv_idx", integer=True, nonnegative=True)
PARAMETER = sp.Symbol("param", real=True)

#: The entries whose steps are plain attention's: a variant's step of the same name and the
#: same formula is not part of its rule.
_PLAIN = ("self-attention", "causal", "multi-head", "gqa")
#: The masks `attention.mods` has objects for, by the step that declares them: each object's
#: name and the size its one argument is (None: no argument). A window and chunks are causal
#: too (their conditions hold m ≥ p), as `attention.mods` states them with `Causal`.
MASKS = {
    "causal_mask": (("Causal", None),),
    "sliding_window_mask": (("Causal", None), ("Window", "w")),
    "chunked_mask": (("Causal", None), ("Chunked", "chi")),
}


@dataclass(frozen=True)
class Rule:
    """A variant's rule on the scores (see the module docstring). Every expression is in
    `SCORE`, `Q_IDX`, `KV_IDX` and, where the rule reads one number per head, `PARAMETER`;
    the variant's parameters and sizes are numbers already."""

    variant: str
    steps: tuple[str, ...]  # the declared steps it is made of, in order
    value: sp.Expr  # f(score, q_idx, kv_idx, param)
    derivative: sp.Expr  # ∂f/∂score
    parameter: str | None  # the letter of the per-head input it reads (ALiBi's "Mu"), if any
    parameter_derivative: sp.Expr | None  # ∂f/∂param
    mask: sp.Basic | None  # where key kv_idx may be read by query q_idx (None: every key)
    masks: tuple[tuple[str, int | None], ...]  # the masks as `attention.mods` objects
    heads: bool
    unmapped: tuple[str, ...] = ()  # the mask steps `attention.mods` has no object for
    shifts: bool = True  # f reads the positions through q_idx − kv_idx only (`_shifts`)
    #: The c of the factor 1/√c of q·k where the variant declares its own (a number of its
    #: config, c_q), None for the book's c_h (the head's width, given at the call).
    scaled_width: float | None = None

    @property
    def source(self) -> str:
        """The generated functions, as Python source (`rule_source`)."""
        return rule_source(self)


def _refused(entry: Entry, why: str) -> DeclarationError:
    return DeclarationError(
        f"{entry.name} is not a rule on the scores (a score_mod): {why}; derive.score_mod takes "
        "a variant whose steps are plain attention's but for what it does to each scaled score "
        "(softcapping, ALiBi, temperature tuning, a softmax of a function of each score)"
    )


@functools.cache
def _plain() -> dict[str, tuple[sp.Basic, ...]]:
    found: dict[str, tuple[sp.Basic, ...]] = {}
    for name in _PLAIN:
        for step in variant(name).graph.declarations:
            found[step.name] = (*found.get(step.name, ()), step.element)
    return found


def _label(entry: Indexed) -> str:
    return entry.base.label.name


def _mask_condition(formula: sp.Basic) -> sp.Basic | None:
    """The condition of a mask's formula Piecewise((0, condition), (−∞, True)), or None."""
    if (
        isinstance(formula, sp.Piecewise)
        and len(formula.args) == 2
        and formula.args[0].expr == 0
        and formula.args[1].expr == -sp.oo
        and formula.args[1].cond == sp.true
    ):
        return formula.args[0].cond
    return None


def _softmax_exponent(rhs: sp.Expr, current: str) -> sp.Expr | None:
    """u where rhs is e^{u} / Σ_r e^{u with p → r} (the softmax of u over the keys), else
    None."""
    numerator, denominator = sp.fraction(rhs)
    if not isinstance(numerator, sp.exp) or not isinstance(denominator, sp.Sum):
        return None
    (index, low, high), *rest = denominator.limits
    if rest or low != 1 or high not in (L.n, L.s) or not isinstance(denominator.function, sp.exp):
        return None
    u = numerator.args[0]
    if sp.simplify(denominator.function.args[0] - u.xreplace({L.p: index})) != 0:
        return None
    if not any(_label(x) == current for x in u.atoms(Indexed)):
        return None
    return u


def score_rule(entry: Entry, values: Mapping[str, float] | None = None) -> Rule:
    """The rule on the scores of `entry` (see the module docstring), its parameters and sizes
    at `values` (by name: ``{"kappa": 30}``) or, for a parameter, its default; a
    DeclarationError naming the step where the variant is not a rule on the scores, or naming
    a size the rule reads and `values` does not give."""
    values = dict(values or {})
    declarations = entry.graph.declarations
    by_label = {_label(step.element.lhs): step for step in declarations}
    names = [step.name for step in declarations]
    weights = [i for i, step in enumerate(declarations) if _label(step.element.lhs) == "a"]
    if "scaled_scores" not in names or len(weights) != 1:
        raise _refused(entry, "it has no scaled scores followed by one step of weights A")
    start, end = names.index("scaled_scores"), weights[0]
    plain = _plain()
    for step in (*declarations[:start], *declarations[end + 1 :]):
        if step.element not in plain.get(step.name, ()):
            raise _refused(entry, f"its step {step.name} ({step.output}) is not plain attention's")
    own_scale = _own_scale(declarations[start], plain, values, entry)
    current = _label(declarations[start].element.lhs)
    value: sp.Expr = SCORE
    steps: list[str] = []
    conditions: list[sp.Basic] = []
    masks: list[str] = []
    parameter: list[str] = []
    heads = declarations[start].head

    def composed(expr: sp.Expr, step_name: str) -> sp.Expr:
        """expr with the current scores as `value`, constants put in, the per-head input as
        PARAMETER; a refusal for anything else it reads."""
        replaced: dict[sp.Basic, sp.Basic] = {}
        for read in expr.atoms(Indexed):
            label = _label(read)
            indices = read.indices[1:] if heads and len(read.indices) == 3 else read.indices
            if label == current:
                if tuple(indices) != (L.m, L.p):
                    raise _refused(entry, f"{step_name} reads {read}, not the same entry's score")
                replaced[read] = value
            elif label in by_label and by_label[label].constant:
                constant = by_label[label]
                formula = constant.element.rhs
                if _mask_condition(formula) is not None:
                    raise _refused(entry, f"{step_name} reads the mask {read} but adds no scores")
                at = dict(zip(constant.element.lhs.indices, read.indices, strict=True))
                replaced[read] = composed(formula.xreplace(at), constant.name)
                steps.append(constant.name)
            elif label not in by_label and tuple(read.indices) in ((1, L.ell), (1, 1)):
                if heads and read.indices[1] == 1:
                    raise _refused(
                        entry,
                        f"{step_name} reads {read}, one number shared by the heads: a score "
                        "rule's learned number is one per head",
                    )
                letter = L.BASES[label]
                if parameter and parameter[0] != letter:
                    raise _refused(
                        entry, f"{step_name} reads two learned inputs ({parameter[0]}, {letter})"
                    )
                parameter[:] = [letter]
                replaced[read] = PARAMETER
            else:
                raise _refused(entry, f"{step_name} reads {read}, not the scores of the same entry")
        return expr.xreplace(replaced)

    for step in declarations[start + 1 : end]:
        rhs = step.element.rhs
        reads = {_label(x) for x in rhs.atoms(Indexed)}
        if step.constant:  # a mask, or a constant a later step reads (ALiBi's distances)
            continue
        if current not in reads:
            raise _refused(
                entry, f"its step {step.name} ({step.output}) does not act on the scores"
            )
        mask = next(
            (
                by_label[label]
                for label in reads
                if label in by_label
                and by_label[label].constant
                and _mask_condition(by_label[label].element.rhs) is not None
            ),
            None,
        )
        if mask is not None:
            lhs = step.element.lhs
            score = next(x for x in rhs.atoms(Indexed) if _label(x) == current)
            mask_entry = next(x for x in rhs.atoms(Indexed) if x.base == mask.element.lhs.base)
            if sp.expand(rhs - score - mask_entry) != 0:
                raise _refused(entry, f"its step {step.name} does more than add the mask")
            conditions.append(_mask_condition(mask.element.rhs))
            masks.append(mask.name)
            current = _label(lhs)
            continue
        value = composed(rhs, step.name)
        steps.append(step.name)
        current = _label(step.element.lhs)
    weights = declarations[end]
    exponent = _softmax_exponent(weights.element.rhs, current)
    if exponent is None:
        raise _refused(entry, "its weights are not a softmax of its scores")
    if exponent != next(x for x in exponent.atoms(Indexed) if _label(x) == current):
        value = composed(exponent, weights.name)
        steps.append(weights.name)
    positions = {L.m: Q_IDX + 1, L.p: KV_IDX + 1}
    numbers = _numbers(entry, values)
    value = _numeric(value.xreplace(positions).xreplace(numbers))
    free = value.free_symbols - {SCORE, Q_IDX, KV_IDX, PARAMETER}
    if free:
        missing = ", ".join(sorted(str(x) for x in free))
        raise DeclarationError(
            f"{entry.name}'s rule on the scores reads {missing}, which a score_mod is not "
            f"given: give {missing} as a number (derive.score_mod({entry.name!r}, "
            f"{sorted(str(x) for x in free)[0]}=...))"
        )
    mask = None
    if conditions:
        mask = sp.simplify(sp.And(*conditions).xreplace(positions).xreplace(numbers))
        if mask.free_symbols - {Q_IDX, KV_IDX}:
            missing = sorted(str(x) for x in mask.free_symbols - {Q_IDX, KV_IDX})
            raise DeclarationError(
                f"{entry.name}'s mask reads {', '.join(missing)}, a size the mask_mod is not "
                f"given: give it as a number (derive.score_mod({entry.name!r}, {missing[0]}=...))"
            )
    by_name = {str(x): v for x, v in numbers.items()}
    parts = [part for name in masks for part in name.split("_and_")]  # a merged mask's parts
    unknown = tuple(name for name in parts if name not in MASKS)
    objects = {
        (kind, None if size is None else int(by_name[size]))
        for name in parts
        for kind, size in MASKS.get(name, ())
    }
    return Rule(
        entry.name,
        tuple(dict.fromkeys(steps)),
        value,
        _numeric(sp.diff(value, SCORE)),
        parameter[0] if parameter else None,
        _numeric(sp.diff(value, PARAMETER)) if parameter else None,
        mask,
        tuple(sorted(objects, key=str)),
        heads,
        unknown,
        _shifts(value),
        own_scale,
    )


def _own_scale(
    step: Declaration,
    plain: dict[str, tuple[sp.Basic, ...]],
    values: Mapping[str, float],
    entry: Entry,
) -> float | None:
    """None where the scaled scores are plain attention's (ω/√c); where the variant scales them
    by a number of its own (ω/√c_q: its parameters, no entry), c_q at `values` (the factor's
    inverse square, exact); a refusal for anything else."""
    if step.element in plain.get(step.name, ()):
        return None
    reads = step.element.rhs.atoms(Indexed)
    plain_reads = {x for e in plain.get(step.name, ()) for x in e.rhs.atoms(Indexed)}
    if len(reads) == 1 and reads <= plain_reads:
        (omega,) = reads
        factor = sp.simplify(step.element.rhs / omega)
        number = factor.xreplace(_numbers(entry, values))
        if not factor.has(Indexed) and number.is_number and number.is_positive:
            return float(1 / number**2)
    raise _refused(entry, f"its step {step.name} ({step.output}) is not plain attention's")


def _shifts(value: sp.Expr) -> bool:
    """Whether f reads the positions only through q_idx − kv_idx (ALiBi's distance), so that it
    is the same counted from any first position: f(q + t, kv + t) = f(q, kv)."""
    t = sp.Symbol("t", integer=True)
    moved = value.xreplace({Q_IDX: Q_IDX + t, KV_IDX: KV_IDX + t})
    return sp.simplify(moved - value) == 0


def _numbers(entry: Entry, values: Mapping[str, float]) -> dict[sp.Symbol, sp.Expr]:
    """Each parameter at its given value or its default, each size at its given value."""
    known = {str(x.symbol): x.symbol for x in (*entry.parameters, *entry.sizes)}
    known |= {str(x): x for x in (L.n, L.s, L.c, L.d, L.h, L.c_h, L.g)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise DeclarationError(
            f"{entry.name} has no parameter or size {unknown[0]!r} (its own: "
            f"{', '.join(sorted(str(x.symbol) for x in (*entry.parameters, *entry.sizes)))})"
        )
    numbers: dict[sp.Symbol, sp.Expr] = {x.symbol: x.default for x in entry.parameters}
    numbers |= {known[name]: sp.nsimplify(given) for name, given in values.items()}
    sized = {x: sp.sympify(v).xreplace(numbers) for x, v in numbers.items()}  # a default that
    # reads a given size (1/log n)
    return {x: _numeric(v) for x, v in sized.items()}


def _numeric(expr: sp.Expr) -> sp.Expr:
    """expr with each number that is not a rational (√2, log 3, π) as a float of 17 digits:
    the generated code then needs no math module."""
    return expr.replace(
        lambda e: e.is_number and not e.is_Rational and not e.is_Float and e.is_finite,
        lambda e: sp.Float(e.evalf(17), 17),
    )


class _Printer(TorchPrinter):
    """SymPy's torch printer, with derive's own functions."""

    def _print_Sigmoid(self, expr: Sigmoid) -> str:
        return f"torch.sigmoid({self._print(expr.args[0])})"

    def _print_Indicator(self, expr: Indicator) -> str:
        return f"({self._print(expr.args[0])})"

    def _print_Pow(self, expr: sp.Pow) -> str:
        if expr.exp == 2:  # a product, not torch.pow's general power
            return f"torch.square({self._print(expr.base)})"
        return super()._print_Pow(expr)

    def _print_floor(self, expr: sp.floor) -> str:
        # ⌊u / k⌋ as torch's floor division, exact where u is an integer (a position): not
        # ⌊(1/k) u⌋, whose rounded 1/k can fall below a multiple of k
        numerator, denominator = sp.fraction(sp.together(sp.expand(expr.args[0])))
        if denominator.is_Integer and denominator > 1:
            return f'torch.div({self._print(numerator)}, {denominator}, rounding_mode="floor")'
        return f"torch.floor({self._print(expr.args[0])})"

    def _print_Heaviside(self, expr: sp.Heaviside) -> str:  # θ(0) = 0, as torch's relu
        return f"torch.heaviside({self._print(expr.args[0])}, torch.zeros_like(score))"


def _printed(expr: sp.Basic) -> str:
    code = _Printer({"strict": True}).doprint(expr)
    return code


def _function(name: str, arguments: str, expr: sp.Basic, doc: str) -> list[str]:
    code = _printed(expr)
    if expr.is_number:  # a number: a tensor of the score's shape
        code = f"torch.full_like(score, {code})"
    return [f"def {name}({arguments}):", f'    """{doc}"""', f"    return {code}", ""]


def _needs(expr: sp.Basic, reps: dict[sp.Symbol, sp.Basic]) -> list[sp.Symbol]:
    """The common subexpressions `expr` reads, directly or through one another, in order."""
    found: set[sp.Symbol] = set()
    todo = [expr]
    while todo:
        for symbol in todo.pop().free_symbols:
            if symbol in reps and symbol not in found:
                found.add(symbol)
                todo.append(reps[symbol])
    return [x for x in reps if x in found]


def _result(expr: sp.Basic) -> str:
    return _printed(expr) if not expr.is_number else repr(float(expr))


#: The functions whose in-place form the passes use (a tensor of their own overwritten).
_IN_PLACE = {
    sp.tanh: "tanh",
    sp.exp: "exp",
    sp.log: "log",
    sp.sin: "sin",
    sp.cos: "cos",
    sp.Abs: "abs",
    sp.sign: "sign",
    Sigmoid: "sigmoid",
}


@dataclass
class _InPlace:
    """Prints an expression of the passes so that each operation writes into a tensor the code
    owns where it can (``torch.mul(score, 0.02).tanh_()``, ``t0.square_().mul_(-1.0).add_(1.0)``)
    rather than allocating one tensor per operation: the blocks of scores are large, and an
    allocation and a pass over memory per operation is what separates generated code from
    hand-written. A tensor the code owns: one it made, or a variable of `spent` (read once,
    and by nothing after: what the forward pass handed to the backward pass). It writes into
    one only where the result has its shape (a score's, or the same positions and heads)."""

    spent: set[sp.Symbol]
    shapes: dict[sp.Symbol, frozenset]

    def shape(self, expr: sp.Basic) -> frozenset:
        found: set = set()
        for symbol in expr.free_symbols:
            found |= self.shapes.get(symbol, frozenset({symbol}))
        return frozenset(found)

    def covers(self, a: sp.Basic, b: sp.Basic) -> bool:
        """Whether a tensor computed from `a` has the shape of one computed from `a` and `b`."""
        mine = self.shape(a)
        return SCORE in mine or mine >= self.shape(b)

    def code(self, expr: sp.Basic) -> str:
        return self.emit(expr)[0]

    def emit(self, expr: sp.Basic) -> tuple[str, bool]:
        """(its code, whether that is a tensor the code owns)."""
        if expr.is_number:
            return repr(float(expr)), False
        if isinstance(expr, sp.Symbol):
            return str(expr), expr in self.spent
        if type(expr) in _IN_PLACE:
            code, owned = self.emit(expr.args[0])
            name = _IN_PLACE[type(expr)]
            return (f"{code}.{name}_()" if owned else f"torch.{name}({code})"), True
        if isinstance(expr, sp.Pow) and expr.exp == 2:
            code, owned = self.emit(expr.base)
            return (f"{code}.square_()" if owned else f"torch.square({code})"), True
        if isinstance(expr, sp.Add | sp.Mul):
            return self.combined(expr)
        return _printed(expr), True

    def combined(self, expr: sp.Add | sp.Mul) -> tuple[str, bool]:
        """A sum or a product, accumulated into the first owned term of its whole shape."""
        numbers = [x for x in expr.args if x.is_number]
        terms = [x for x in expr.args if not x.is_number]
        method, operator = ("add_", "+") if isinstance(expr, sp.Add) else ("mul_", "*")
        emitted = [(x, *self.emit(x)) for x in terms]
        at = next(
            (i for i, (x, _, owned) in enumerate(emitted) if owned and self.covers(x, expr)), None
        )
        if at is None:
            first, *rest = emitted
            code = f"({first[1]} {operator} {rest[0][1]})" if rest else first[1]
            rest = rest[1:]
            owned = bool(len(emitted) > 1)
        else:
            code, rest, owned = emitted[at][1], emitted[:at] + emitted[at + 1 :], True
        for _, other, _ in rest:
            code = f"{code}.{method}({other})" if owned else f"({code} {operator} {other})"
            owned = True
        number = sp.Add(*numbers) if isinstance(expr, sp.Add) else sp.Mul(*numbers)
        if numbers and number != (0 if isinstance(expr, sp.Add) else 1):
            value = repr(float(number))
            code = f"{code}.{method}({value})" if owned else f"torch.{method[:-1]}({code}, {value})"
            owned = True
        return code, owned


def _passes(rule: Rule) -> list[str]:
    """``forward`` and ``backward`` for a path that differentiates by hand: the subexpressions
    f and its derivatives share (SymPy's `cse`) are computed once in the forward pass and
    handed to the backward pass (what ``forward`` returns beside f is what ``backward`` takes),
    so that the backward pass does not compute again what the forward pass did
    (tanh(ω̃/κ) for softcapping: f = κ t, ∂f/∂ω̃ = 1 − t²). A derivative that is a number is
    returned as one (the path skips a product by 1), and ∂f/∂param as None where there is no
    param."""
    wanted = [rule.value, rule.derivative]
    if rule.parameter_derivative is not None:
        wanted.append(rule.parameter_derivative)
    pairs, reduced = sp.cse(wanted, symbols=sp.numbered_symbols("t"), optimizations="basic")
    reps = dict(pairs)
    ahead = _needs(reduced[0], reps)
    behind = [x for x in _needs(sp.Tuple(*reduced[1:]), reps) if x not in ahead]
    read = set().union(*(reps[x].free_symbols for x in behind), sp.Tuple(*reduced[1:]).free_symbols)
    arguments = [SCORE, Q_IDX, KV_IDX, PARAMETER]
    saved = [x for x in (*ahead, *arguments) if x in read]
    names = ", ".join(str(x) for x in saved)
    kept = f"({names},)" if saved else "()"
    shapes: dict[sp.Symbol, frozenset] = {x: frozenset({x}) for x in arguments}
    for x, expr in reps.items():
        shapes[x] = frozenset().union(*(shapes[y] for y in expr.free_symbols))
    forward = [reps[x] for x in ahead] + [reduced[0]]
    backward = [reps[x] for x in behind] + list(reduced[1:])
    ahead_once = _once(forward, set(ahead) - set(saved))
    behind_once = _once(backward, {*saved, *behind} - set(arguments))
    ahead_printer, behind_printer = _InPlace(ahead_once, shapes), _InPlace(behind_once, shapes)
    along = behind_printer.code(reduced[2]) if len(reduced) > 2 else "None"
    derivative = behind_printer.code(reduced[1])
    value = ahead_printer.code(reduced[0])
    if isinstance(reduced[0], sp.Symbol) and (reduced[0] in saved or reduced[0] in arguments):
        value = f"torch.clone({value})"  # f is what the backward takes (or an input): the
        # path's masks write −∞ into f in place, and must not write into that
    return [
        "def forward(score, q_idx, kv_idx, param):",
        '    """f, and what the backward pass takes."""',
        *(f"    {x} = {ahead_printer.code(reps[x])}" for x in ahead),
        f"    return {value}, {kept}",
        "",
        f"def backward({names}):",
        '    """(df/dscore, df/dparam or None) from what the forward pass kept."""',
        *(f"    {x} = {behind_printer.code(reps[x])}" for x in behind),
        f"    return {derivative}, {along}",
        "",
    ]


def _once(exprs: list[sp.Basic], candidates: set[sp.Symbol]) -> set[sp.Symbol]:
    """The candidates read exactly once in all of `exprs` (so that the read may overwrite)."""
    counts: dict[sp.Symbol, int] = {}
    for expr in exprs:
        for node in sp.preorder_traversal(expr):
            if node in candidates:
                counts[node] = counts.get(node, 0) + 1
    return {x for x, k in counts.items() if k == 1}


def rule_source(rule: Rule) -> str:
    """The generated functions of `rule`, as a Python module's source (``torch`` in scope):
    ``value``, ``derivative`` (∂f/∂score), and where the rule reads one number per head,
    ``parameter_derivative`` (∂f/∂param), all of (score, q_idx, kv_idx, param); ``mask`` of
    (q_idx, kv_idx) where the variant masks; ``forward`` and ``backward``, the same sharing
    their work (`_passes`)."""
    arguments = "score, q_idx, kv_idx, param"
    lines = [
        f'"""{rule.variant}: the rule on the scores, generated by derive from its declaration',
        f'({", ".join(rule.steps) or "no step"})."""',
        "",
        *_function("value", arguments, rule.value, "f: the score after the rule."),
        *_function("derivative", arguments, rule.derivative, "df/dscore, derived."),
    ]
    if rule.parameter_derivative is not None:
        lines += _function(
            "parameter_derivative",
            arguments,
            rule.parameter_derivative,
            f"df/d{rule.parameter}, derived.",
        )
    lines += _passes(rule)
    if rule.mask is not None:
        lines += [
            "def mask(q_idx, kv_idx):",
            '    """Where query q_idx may read key kv_idx."""',
            f"    return {_printed(rule.mask)}",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"
