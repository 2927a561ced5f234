"""One declared equation printed as torch code: an entry's formula becomes tensor operations on
whole matrices, with no Python loop over entries.

Each index of the formula (m, p, j, ℓ, …) names an axis. An entry x_{m,i} is the tensor X read
with the axes (m, i); a per-head entry q^{(ℓ)}_{m,j} is the tensor Q_l of shape (h, n, c_h) read
with (ℓ, m, j); an index that is an expression (a head's block of columns, (ℓ − 1) c_h + j, or a
group's, c_h ⌊g(ℓ − 1)/h⌋ + j) gathers with index tensors computed from the axes' ranges. A sum
over an index is a contraction (``torch.einsum``) of its factors; sums and products of terms
with other axes broadcast; a condition on indices (a mask's m ≥ p, a window, the limits of a
sum that read another index) becomes a boolean tensor of the axes it reads and ``torch.where``
or a factor of the contraction. The softmax as declared (e^{x_p} / Σ_r e^{x_r}) is printed as
``torch.softmax`` over its axis: the same numbers, without overflow. Every other function is
SymPy's to torch's (exp, log, sqrt, tanh, σ, ⌊·⌋, the Kronecker δ, Iverson's bracket).

Every tensor may carry leading batch axes (``...`` in each contraction), so one generated
function serves a matrix and a batch of them. The sizes and parameters (n, c_h, ε, the window
w) are keyword arguments of the generated function, printed by SymPy's Python printer.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import sympy as sp
from sympy import Indexed
from sympy.printing.pycode import PythonCodePrinter

from ..graph import DeclarationError
from ..notation import letters as L
from ..notation.functions import Indicator, Sigmoid

__all__ = ["Printed", "Printer", "python_name", "equation_lines"]

Shape = tuple[sp.Expr, sp.Expr]

#: SymPy's functions of one argument and the torch function that computes them.
_FUNCTIONS: dict[type, str] = {
    sp.exp: "torch.exp",
    sp.log: "torch.log",
    sp.sin: "torch.sin",
    sp.cos: "torch.cos",
    sp.tan: "torch.tan",
    sp.tanh: "torch.tanh",
    sp.sinh: "torch.sinh",
    sp.cosh: "torch.cosh",
    sp.atan: "torch.atan",
    sp.Abs: "torch.abs",
    sp.sign: "torch.sign",
    sp.floor: "torch.floor",
    sp.ceiling: "torch.ceil",
    sp.erf: "torch.erf",
    Sigmoid: "torch.sigmoid",
}

_RELATIONS = {sp.Ge: ">=", sp.Gt: ">", sp.Le: "<=", sp.Lt: "<", sp.Eq: "==", sp.Ne: "!="}


def python_name(symbol: sp.Symbol) -> str:
    """A size's or parameter's name in generated code: its SymPy name, with anything that is
    not a letter, a digit or _ written as _ (``j'`` -> ``j_``; ``L_0`` stays)."""
    name = re.sub(r"\W", "_", symbol.name)
    return name if name.isidentifier() else f"_{name}"


@dataclass(frozen=True)
class Printed:
    """A value of the generated code: a Python expression, and the index each of its trailing
    axes runs over (none for a number)."""

    code: str
    axes: tuple[sp.Symbol, ...] = ()
    number: bool = False  # a Python number (not a tensor with no axes: an entry of a 1 × 1)

    @property
    def scalar(self) -> bool:
        return not self.axes


@dataclass
class Printer:
    """Prints the equations of one generated function, each into lines of Python.

    Attributes:
        shapes: letter -> (rows, cols) of every matrix the equations read or write (a per-head
            letter's one head's; its tensor is (h, rows, cols)).
        heads: the size the first index of a per-head entry runs over (h).
        lines: the code printed so far; `ranges`, the index tensors it has made, by size.
    """

    shapes: Mapping[str, Shape]
    sizes: frozenset[sp.Symbol] = frozenset(L.SIZES)
    heads: sp.Expr = L.h
    lines: list[str] = field(default_factory=list)
    ranges: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    _order: tuple[sp.Symbol, ...] = ()
    _fresh: int = 0
    _letters: dict[sp.Symbol, str] = field(default_factory=dict)

    # -- the equation ----------------------------------------------------------------------

    def equation(self, equation: sp.Eq, *, variable: str) -> None:
        """Print `variable` = the matrix whose entries `equation` declares."""
        lhs, rhs = equation.lhs, equation.rhs
        if not isinstance(lhs, Indexed):
            raise DeclarationError(f"{variable}: the left side {lhs} is not one entry")
        ranges = _ranges(equation, self._shape, self.heads, self.sizes)
        self._order = tuple(i for i in lhs.indices if isinstance(i, sp.Symbol))
        self._letters = {}
        self._memo: dict = {}
        value = self.value(rhs, ranges)
        if not rhs.has(Indexed) and value.axes:  # a constant step: numbers of the indices
            value = Printed(self.fresh(f"({value.code}).to(X0.dtype)"), value.axes)
        shape = self._tensor_shape(L.letter_of(lhs))
        plain = [isinstance(i, sp.Symbol) for i in lhs.indices]
        if all(plain) and len(set(lhs.indices)) == len(lhs.indices):
            missing = [a for a in value.axes if a not in lhs.indices]
            if missing:
                raise DeclarationError(
                    f"{variable}: its formula reads the index {missing[0]}, which is neither an "
                    "index of its entry nor summed over"
                )
            aligned = self.aligned(value, tuple(lhs.indices))
            if len(value.axes) < len(lhs.indices):
                sizes = ", ".join(self.size(x) for x in shape)
                aligned = f"{_tensor(aligned, value)}.expand(*batch, {sizes})"
            self._assign(variable, aligned)
            return
        # an entry at an expression of indices (a block of columns, a row of one): scattered
        index_axes: list[sp.Symbol] = []
        for index in lhs.indices:
            for symbol in sorted(sp.sympify(index).free_symbols & set(ranges), key=str):
                if symbol not in index_axes:
                    index_axes.append(symbol)
        sizes = ", ".join(self.size(x) for x in shape)
        positions = [self.index_tensor(i, ranges, tuple(index_axes)) for i in lhs.indices]
        result = self.aligned(value, tuple(index_axes))
        if len(value.axes) < len(index_axes):
            full = ", ".join(self.size(ranges[a]) for a in index_axes)
            result = f"{_tensor(result, value)}.expand(*batch, {full})"
        self.lines.append(f"{variable} = X0.new_zeros(*batch, {sizes})")
        self.lines.append(f"{variable}[(..., {', '.join(positions)})] = {result}")

    def _assign(self, variable: str, code: str) -> None:
        """`variable` = `code`; a temporary made by the line before renamed to it instead."""
        last = self.lines[-1] if self.lines else ""
        if re.fullmatch(r"t\d+", code) and last.startswith(f"{code} = "):
            self.lines[-1] = f"{variable} = {last.removeprefix(f'{code} = ')}"
            self._memo = {k: v for k, v in self._memo.items() if v.code != code}
            return
        self.lines.append(f"{variable} = {code}")

    def _shape(self, letter: str) -> Shape:
        key = letter.removeprefix("d") if L.is_gradient(letter) else letter
        if key not in self.shapes:
            raise DeclarationError(f"no shape for {letter}")
        return self.shapes[key]

    def _tensor_shape(self, letter: str) -> tuple[sp.Expr, ...]:
        rows, cols = self._shape(letter)
        return (self.heads, rows, cols) if letter.endswith("_l") else (rows, cols)

    # -- sizes and names ---------------------------------------------------------------------

    def size(self, expr: sp.Expr) -> str:
        """A number of the sizes as Python (``c_h``, ``math.sqrt(c)``)."""
        expr = sp.sympify(expr)
        names = {s: sp.Symbol(python_name(s)) for s in expr.free_symbols}
        self.used |= {str(name) for name in names.values()}
        return _SizePrinter({"fully_qualified_modules": True}).doprint(expr.xreplace(names))

    def union(self, *groups: tuple[sp.Symbol, ...]) -> tuple[sp.Symbol, ...]:
        """Every axis of the groups, those of the equation's entry first, in its order (so
        that its value needs no reordering at the end)."""
        found: tuple[sp.Symbol, ...] = ()
        for group in groups:
            found = _union(found, group)
        first = tuple(a for a in self._order if a in found)
        return first + tuple(a for a in found if a not in first)

    def fresh(self, code: str) -> str:
        """Bind `code` to a new variable and return its name (a name is returned as it is)."""
        if code.isidentifier():
            return code
        self._fresh += 1
        name = f"t{self._fresh}"
        self.lines.append(f"{name} = {code}")
        return name

    def letter(self, symbol: sp.Symbol) -> str:
        """The letter of an index in a contraction's subscripts (its own where it is one)."""
        if symbol not in self._letters:
            taken = set(self._letters.values())
            own = symbol.name if symbol.name in string.ascii_lowercase else ""
            self._letters[symbol] = (
                own
                if own and own not in taken
                else next(
                    x for x in string.ascii_lowercase if x not in taken and x not in _OWN_LETTERS
                )
            )
        return self._letters[symbol]

    def subscripts(self, axes: tuple[sp.Symbol, ...]) -> str:
        return "..." + "".join(self.letter(a) for a in axes)

    def index_range(self, size: sp.Expr) -> str:
        """The tensor 1 … size of an index (made once per size in a function)."""
        key = self.size(size)
        if key not in self.ranges:
            name = f"range_{len(self.ranges) + 1}"
            self.lines.append(
                f"{name} = torch.arange(1, {key} + 1, device=X0.device, dtype=X0.dtype)"
            )
            self.ranges[key] = name
        return self.ranges[key]

    # -- shapes of values ----------------------------------------------------------------

    def aligned(self, value: Printed, axes: tuple[sp.Symbol, ...]) -> str:
        """`value` with its axes in the order of `axes`, size 1 where it has none."""
        if value.scalar:
            return value.code
        mine = tuple(a for a in axes if a in value.axes)
        code = value.code
        if mine != value.axes:
            spec = f"{self.subscripts(value.axes)}->{self.subscripts(mine)}"
            code = f'torch.einsum("{spec}", {code})'
        if len(mine) == len(axes):
            return code
        picks = ", ".join(":" if a in value.axes else "None" for a in axes)
        return f"{code}[..., {picks}]"

    # -- expressions ---------------------------------------------------------------------

    def value(self, expr: sp.Expr, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        """`expr` as a value of the axes of the indices it reads."""
        expr = sp.sympify(expr)
        indices = expr.free_symbols & set(ranges)
        if not indices and not expr.has(Indexed):
            return Printed(self.size(expr), number=True)
        key = (expr, tuple(sorted(((s, ranges[s]) for s in indices), key=str)))
        if key in self._memo:
            return self._memo[key]
        found = self._value(expr, ranges)
        self._memo[key] = found
        return found

    def _value(self, expr: sp.Expr, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        if isinstance(expr, Indexed):
            return self.entry(expr, ranges)
        if isinstance(expr, sp.Symbol):
            return Printed(self.index_range(ranges[expr]), (expr,))
        if isinstance(expr, sp.Sum):
            return self.total(expr, ranges)
        if isinstance(expr, sp.Product):
            return self.repeated(expr, ranges)
        if isinstance(expr, sp.Heaviside):
            inner = self.value(expr.args[0], ranges)
            at = expr.args[1] if len(expr.args) > 1 else sp.S.Half
            code = f"torch.heaviside({_tensor(inner.code, inner)}, X0.new_tensor({self.size(at)}))"
            return Printed(self.fresh(code), inner.axes)
        if isinstance(expr, sp.Add):
            numbers = [
                a for a in expr.args if not (a.free_symbols & set(ranges)) and not a.has(Indexed)
            ]
            terms = [self.value(a, ranges) for a in expr.args if a not in numbers]
            if numbers:
                terms.append(Printed(self.size(sp.Add(*numbers)), number=True))
            return self.combined(terms, " + ")
        if isinstance(expr, sp.Mul):
            return self.product(expr, ranges)
        if isinstance(expr, sp.Pow):
            return self.power(expr, ranges)
        if isinstance(expr, sp.Piecewise):
            return self.piecewise(expr, ranges)
        if isinstance(expr, sp.KroneckerDelta):
            condition = self.value(sp.Eq(*expr.args, evaluate=False), ranges)
            return Printed(f"({condition.code}).to(X0.dtype)", condition.axes)
        if isinstance(expr, Indicator):
            condition = self.value(expr.args[0], ranges)
            return Printed(f"({condition.code}).to(X0.dtype)", condition.axes)
        if isinstance(expr, tuple(_RELATIONS)):
            sides = [self.value(side, ranges) for side in expr.args]
            return self.combined(sides, f" {_RELATIONS[type(expr)]} ")
        if isinstance(expr, (sp.And, sp.Or)):
            joined = " & " if isinstance(expr, sp.And) else " | "
            return self.combined([self.value(a, ranges) for a in expr.args], joined)
        if isinstance(expr, sp.Not):
            inner = self.value(expr.args[0], ranges)
            return Printed(f"~({inner.code})", inner.axes)
        if isinstance(expr, (sp.Max, sp.Min)):
            function = "torch.maximum" if isinstance(expr, sp.Max) else "torch.minimum"
            found = self.value(expr.args[0], ranges)
            for other in expr.args[1:]:
                found = self._call2(function, found, self.value(other, ranges))
            return found
        if isinstance(expr, sp.Mod):
            return self._call2("torch.remainder", *(self.value(a, ranges) for a in expr.args))
        if type(expr) in _FUNCTIONS and len(expr.args) == 1:
            inner = self.value(expr.args[0], ranges)
            code = _tensor(inner.code, inner)
            return Printed(self.fresh(f"{_FUNCTIONS[type(expr)]}({code})"), inner.axes)
        raise DeclarationError(
            f"derive cannot print {type(expr).__name__} ({expr}) as torch code; the functions it "
            f"prints: {', '.join(sorted(f.__name__ for f in _FUNCTIONS))}, Piecewise, Max, Min, "
            "Mod, KroneckerDelta, and sums, products and powers"
        )

    def _call2(self, function: str, a: Printed, b: Printed) -> Printed:
        axes = self.union(a.axes, b.axes)
        first, second = self.aligned(a, axes), self.aligned(b, axes)
        if a.number and b.number:
            return Printed(f"{function}(X0.new_tensor({first}), X0.new_tensor({second}))")
        return Printed(self.fresh(f"{function}({_tensor(first, a)}, {_tensor(second, b)})"), axes)

    def combined(self, parts: list[Printed], operator: str) -> Printed:
        """Terms joined by `operator` (+, a comparison, & or |), broadcast to every axis they
        read."""
        axes = self.union(*(part.axes for part in parts))
        code = operator.join(_paren(self.aligned(part, axes)) for part in parts)
        number = all(part.number for part in parts)
        return Printed(code if number else self.fresh(code), axes, number)

    def product(self, expr: sp.Mul, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        softmax = self.softmax(expr, ranges)
        if softmax is not None:
            return softmax
        numbers = [
            f for f in expr.args if not (f.free_symbols & set(ranges)) and not f.has(Indexed)
        ]
        rest = [f for f in expr.args if f not in numbers]
        if numbers and rest:
            number = Printed(self.size(sp.Mul(*numbers)), number=True)
            found = self.value(sp.Mul(*rest), ranges)
            code = f"{_paren(number.code)} * {_paren(found.code)}"
            return Printed(self.fresh(code), found.axes)
        numerator, denominator = [], []
        for factor in expr.args:
            base, exponent = factor.as_base_exp()
            if exponent.is_number and exponent.is_negative and not base.is_number:
                denominator.append(base ** (-exponent))
            else:
                numerator.append(factor)
        numerator.sort(key=_reading)
        top = self.contraction([self.value(f, ranges) for f in numerator], summed=())
        if not denominator:
            return top
        bottom = self.contraction([self.value(f, ranges) for f in denominator], summed=())
        axes = self.union(top.axes, bottom.axes)
        code = f"{_paren(self.aligned(top, axes))} / {_paren(self.aligned(bottom, axes))}"
        number = top.number and bottom.number
        return Printed(code if number else self.fresh(code), axes, number)

    def contraction(self, factors: list[Printed], summed: tuple[sp.Symbol, ...]) -> Printed:
        """The product of `factors`, summed over the axes `summed`: one ``torch.einsum`` of the
        tensors, the numbers multiplied after."""
        numbers = [f.code for f in factors if f.number]
        tensors = [f for f in factors if not f.number]
        axes = self.union(*(tensor.axes for tensor in tensors))
        kept = tuple(a for a in axes if a not in summed)
        if not tensors:
            code = " * ".join(_paren(n) for n in numbers) or "1"
            return Printed(code, number=all(f.number for f in factors))
        if len(tensors) == 1 and tensors[0].axes == kept:
            code = tensors[0].code
        elif not summed:  # a product entry by entry: broadcast
            code = " * ".join(_paren(self.aligned(t, kept)) for t in tensors)
        else:
            spec = ",".join(self.subscripts(t.axes) for t in tensors)
            arguments = ", ".join(t.code for t in tensors)
            code = f'torch.einsum("{spec}->{self.subscripts(kept)}", {arguments})'
        if numbers:
            code = " * ".join(_paren(n) for n in numbers) + f" * {_paren(code)}"
        return Printed(self.fresh(code), kept)

    def total(self, expr: sp.Sum, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        """Σ over one or more indices: a contraction of the summand's factors; limits that read
        another index (a group's heads: ℓ from h(ν − 1)/g + 1 to hν/g) as a factor of 0 and 1."""
        inner = dict(ranges)
        conditions = []
        summand_indices = _natural(expr.function, self._shape, self.heads)
        for symbol, low, high in expr.limits:
            bounded = (low.free_symbols | high.free_symbols) & set(ranges)
            if low == 1 and not bounded:
                inner[symbol] = high
                continue
            if symbol not in summand_indices:
                raise DeclarationError(f"the sum over {symbol} from {low} to {high}: no range")
            inner[symbol] = summand_indices[symbol]
            conditions.append(sp.And(sp.Ge(symbol, low), sp.Le(symbol, high)))
        summed = tuple(symbol for symbol, _, _ in expr.limits)
        function = expr.function
        factors = list(function.args) if isinstance(function, sp.Mul) else [function]
        if any(f.as_base_exp()[1].is_negative for f in factors if not f.is_number):
            factors = [function]  # a quotient: printed whole, then summed
        printed = [self.value(f, inner) for f in sorted(factors, key=_reading)]
        printed += [self.value(Indicator(c), inner) for c in conditions]
        for symbol in summed:  # an index the summand does not read: Σ counts its terms
            if not any(symbol in p.axes for p in printed):
                printed.append(Printed(self.size(inner[symbol])))
        return self.contraction(printed, summed)

    def repeated(self, expr: sp.Product, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        """∏ over one or more indices: the factor over each index's whole range, 1 where the
        limits (which may read other indices: ∏_{t=p+1}^{m-1}) leave it out, multiplied along
        the index's axis."""
        inner = dict(ranges)
        conditions = []
        natural = _natural(expr.function, self._shape, self.heads)
        for symbol, low, high in expr.limits:
            bounded = (low.free_symbols | high.free_symbols) & set(ranges)
            if low == 1 and not bounded:
                inner[symbol] = high
                continue
            if symbol not in natural:
                raise DeclarationError(f"the product over {symbol} from {low} to {high}: no range")
            inner[symbol] = natural[symbol]
            conditions.append(sp.And(sp.Ge(symbol, low), sp.Le(symbol, high)))
        factor = self.value(expr.function, inner)
        axes = factor.axes
        if conditions:
            when = self.value(sp.And(*conditions), inner)
            axes = self.union(factor.axes, when.axes)
            kept = _tensor(self.aligned(factor, axes), factor)
            code = f"torch.where({self.aligned(when, axes)}, {kept}, 1)"
            factor = Printed(self.fresh(code), axes)
        for symbol, _, _ in expr.limits:
            if symbol in factor.axes:
                dim = factor.axes.index(symbol) - len(factor.axes)
                kept = tuple(a for a in factor.axes if a != symbol)
                factor = Printed(self.fresh(f"{factor.code}.prod(dim={dim})"), kept)
            else:  # a factor that does not read the index: its power
                count = self.size(inner[symbol])
                factor = Printed(
                    self.fresh(f"{_paren(factor.code)} ** {_paren(count)}"), factor.axes
                )
        return factor

    def power(self, expr: sp.Pow, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        base, exponent = expr.args
        printed = self.value(base, ranges)
        if exponent == sp.S.Half:
            return Printed(
                self.fresh(f"torch.sqrt({_tensor(printed.code, printed)})"), printed.axes
            )
        if exponent == -sp.S.Half:
            return Printed(
                self.fresh(f"torch.rsqrt({_tensor(printed.code, printed)})"), printed.axes
            )
        if exponent == -1:
            return Printed(self.fresh(f"1 / {_paren(printed.code)}"), printed.axes)
        power = self.value(exponent, ranges)
        axes = self.union(printed.axes, power.axes)
        code = f"{_paren(self.aligned(printed, axes))} ** {_paren(self.aligned(power, axes))}"
        return Printed(self.fresh(code), axes)

    def piecewise(self, expr: sp.Piecewise, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        """Pieces from the last (the otherwise) to the first, each a ``torch.where``."""
        *pieces, (otherwise, last) = expr.args
        if last != sp.true:
            raise DeclarationError(f"a Piecewise with no 'otherwise' piece: {expr}")
        found = self.value(otherwise, ranges)
        for value, condition in reversed(pieces):
            chosen, when = self.value(value, ranges), self.value(condition, ranges)
            axes = self.union(when.axes, chosen.axes, found.axes)
            first = self.aligned(chosen, axes)
            if chosen.number and found.number:
                first = f"X0.new_tensor({first})"
            code = f"torch.where({self.aligned(when, axes)}, {first}, {self.aligned(found, axes)})"
            found = Printed(self.fresh(code), axes)
        return found

    def softmax(self, expr: sp.Mul, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed | None:
        """e^{x_p} / Σ_r e^{x_r} over the whole range of r, as ``torch.softmax``."""
        if len(expr.args) != 2:
            return None
        powers = [a for a in expr.args if isinstance(a, sp.Pow) and a.exp == -1]
        exps = [a for a in expr.args if isinstance(a, sp.exp)]
        if len(powers) != 1 or len(exps) != 1 or not isinstance(powers[0].base, sp.Sum):
            return None
        total = powers[0].base
        if len(total.limits) != 1 or not isinstance(total.function, sp.exp):
            return None
        r, low, high = total.limits[0]
        score = exps[0].args[0]
        over = [s for s in score.free_symbols & set(ranges) if s not in total.function.free_symbols]
        if low != 1 or len(over) != 1 or ranges.get(over[0]) != high:
            return None
        if total.function.args[0].xreplace({r: over[0]}) != score:
            return None
        printed = self.value(score, ranges)
        if over[0] not in printed.axes:
            return None
        dim = printed.axes.index(over[0]) - len(printed.axes)
        # a row with no key left (every score −∞) is 0/0: its weights are 0, as derive's
        # explicit values and attention.functional.weights have them
        code = f"torch.softmax({printed.code}, dim={dim}).nan_to_num(nan=0.0)"
        return Printed(self.fresh(code), printed.axes)

    # -- entries ------------------------------------------------------------------------

    def entry(self, entry: Indexed, ranges: Mapping[sp.Symbol, sp.Expr]) -> Printed:
        """x_{m,i} as the tensor X with axes (m, i); an entry at other indices gathered."""
        letter = L.letter_of(entry)
        variable = letter
        indices = tuple(entry.indices)
        if all(isinstance(i, sp.Symbol) and i in ranges for i in indices) and len(
            set(indices)
        ) == len(indices):
            return Printed(variable, indices)
        if all((isinstance(i, sp.Symbol) and i in ranges) or i.is_Integer for i in indices):
            symbols = [i for i in indices if isinstance(i, sp.Symbol)]
            if len(set(symbols)) == len(symbols):
                picks = ", ".join(
                    ":" if isinstance(i, sp.Symbol) else str(int(i) - 1) for i in indices
                )
                return Printed(self.fresh(f"{variable}[..., {picks}]"), tuple(symbols))
        axes: list[sp.Symbol] = []
        for index in indices:
            for symbol in sorted(sp.sympify(index).free_symbols & set(ranges), key=str):
                if symbol not in axes:
                    axes.append(symbol)
        positions = [self.index_tensor(i, ranges, tuple(axes)) for i in indices]
        return Printed(self.fresh(f"{variable}[(..., {', '.join(positions)})]"), tuple(axes))

    def index_tensor(
        self, index: sp.Expr, ranges: Mapping[sp.Symbol, sp.Expr], axes: tuple[sp.Symbol, ...]
    ) -> str:
        """The 0-based positions an index expression takes over `axes`, as an int64 tensor
        shaped for them (a number where it reads no axis)."""
        index = sp.sympify(index)
        if not index.free_symbols & set(ranges):
            return f"int({self.size(index)}) - 1"
        printed = self.value(index, ranges)
        code = self.aligned(printed, axes)
        return self.fresh(f"(({code}) - 1).long()")


#: Letters a contraction gives only to the index of that name (m, p, j, ...).
_OWN_LETTERS = set("mpjirlt")


def _tensor(code: str, value: Printed) -> str:
    """`code` as a tensor: a value with no axes (a number, or one entry of a 1 × 1 matrix) made
    one of the inputs' dtype and device."""
    return f"X0.new_tensor({code})" if value.number else code


def _reading(factor: sp.Expr) -> tuple:
    """Factors in the book's reading order (x_{m,i} before w_{i,j}), then the rest."""
    return (0, L.reading_key(factor)) if isinstance(factor, Indexed) else (1, ())


def _paren(code: str) -> str:
    """`code` in parentheses unless it is a name, a number or a call."""
    if re.fullmatch(r"[\w.]+", code) or re.fullmatch(r"[\w.]+\([^()]*\)", code):
        return code
    return f"({code})"


def _union(a: tuple[sp.Symbol, ...], b: tuple[sp.Symbol, ...]) -> tuple[sp.Symbol, ...]:
    return a + tuple(x for x in b if x not in a)


def _natural(
    expr: sp.Expr, shape: Callable[[str], Shape], heads: sp.Expr
) -> dict[sp.Symbol, sp.Expr]:
    """Each index that an entry of `expr` reads at its own position, and the size of that
    position (ℓ of q^{(ℓ)}_{m,j}: h; m: n; j: c_h)."""
    found: dict[sp.Symbol, sp.Expr] = {}
    for entry in sorted(sp.sympify(expr).atoms(Indexed), key=L.reading_key):
        letter = L.letter_of(entry)
        sizes = (heads, *shape(letter)) if letter.endswith("_l") else tuple(shape(letter))
        for index, size in zip(entry.indices, sizes, strict=True):
            if isinstance(index, sp.Symbol):
                found.setdefault(index, size)
    return found


def _ranges(
    equation: sp.Eq, shape: Callable[[str], Shape], heads: sp.Expr, sizes: frozenset[sp.Symbol]
) -> dict[sp.Symbol, sp.Expr]:
    """The range of every free index of an equation: where an entry reads it at its own
    position, that position's size; an index found only inside an expression of the entry it
    declares (ν of c_h (ν − 1) + j), the size of that position over the stride it steps by."""
    found = _natural(equation, shape, heads)
    lhs = equation.lhs
    letter = L.letter_of(lhs)
    extent = (heads, *shape(letter)) if letter.endswith("_l") else tuple(shape(letter))
    for index, size in zip(lhs.indices, extent, strict=True):
        unknown = [s for s in sp.sympify(index).free_symbols if s not in found and s not in sizes]
        for symbol in unknown:
            stride = sp.sympify(index).coeff(symbol)
            if stride == 0:
                stride = sp.expand(index).coeff(symbol)
            found[symbol] = sp.simplify(size / stride)
    return found


def equation_lines(
    equations: list[tuple[str, sp.Eq]], shapes: Mapping[str, Shape]
) -> tuple[list[str], Printer]:
    """Print each (variable, equation) in order into one list of lines."""
    printer = Printer(shapes)
    for variable, equation in equations:
        printer.lines.append(f"# {variable}")
        printer.equation(equation, variable=variable)
    return printer.lines, printer


class _SizePrinter(PythonCodePrinter):
    """SymPy's Python printer, with Iverson's bracket (a condition on an index: YaRN's attention
    factor on the rotated features of a partial rotation) as the condition itself, a bool that
    multiplies as 0 or 1 (a tensor's where the index is a range)."""

    def _print_Indicator(self, expr: Indicator) -> str:
        return f"({self._print(expr.args[0])})"
