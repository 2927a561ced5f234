"""A variant's torch code, generated from its declaration (`derive.codegen`), compiled and run:
`torch_function` and `torch_module`.

The forward pass is every step's declared formula printed as torch code (`printer`); the
backward pass is every gradient derive derives (`derive.backward_steps`: each one's entry, checked
by numbers against the chain rule before it is used), printed the same way, and run as the
``backward`` of a ``torch.autograd.Function``. So what runs is what the document prints: a
formula changed in the declaration changes the code, and a gradient derive got wrong would be
caught by its check before it ran.

The generated code is a reference, not a kernel: each step is a whole matrix (n × n for the
scores), computed as declared. Hand-written twins stay worth writing where speed matters
(docs/twins.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import sympy as sp
import torch

from ..codegen.printer import python_name
from ..codegen.program import Program, forward_program, program, step_source
from ..graph import Entry, variant
from ..graph.fitting import check_given, explicit_sizes, not_its_own, with_relations
from ..graph.loading import load_variant
from ..notation import letters as L

__all__ = [
    "GeneratedFunction",
    "torch_function",
    "torch_module",
    "GeneratedModule",
    "compiled_scope",
]


def compiled_scope(source: str, label: str) -> dict[str, Any]:
    """The names generated `source` defines, run with torch and math in scope (`label` names it
    in tracebacks)."""
    scope: dict[str, Any] = {"torch": torch, "math": math}
    exec(compile(source, f"<derive: {label}>", "exec"), scope)  # noqa: S102 - our own code
    return scope


def _compiled(source: str, name: str, label: str) -> Any:
    return compiled_scope(source, f"{label} {name}")[name]


class _Generated(torch.autograd.Function):
    """The generated forward, and the derived gradients as its backward."""

    @staticmethod
    def forward(ctx: Any, function: GeneratedFunction, sizes: dict, *tensors: Any) -> Any:
        values = function._forward(*tensors, **function.forward_sizes(sizes))
        values |= dict(zip(function.inputs, tensors, strict=True))
        ctx.function, ctx.sizes, ctx.values = function, sizes, values
        ctx.shapes = [t.shape for t in tensors]
        return values[function.output]

    @staticmethod
    def backward(ctx: Any, *upstreams: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        (upstream,) = upstreams
        function = ctx.function
        at = {k: ctx.sizes[k] for k in function._program.backward_sizes}
        found = function._backward(upstream, ctx.values, **at)
        grads = []
        for letter, shape in zip(function.inputs, ctx.shapes, strict=True):
            gradient = found.get(letter)
            grads.append(None if gradient is None else gradient.sum_to_size(shape))
        return (None, None, *grads)


class GeneratedFunction:
    """A variant's forward pass generated from its declaration, with its derived backward.

    Called with the graph's inputs in order (``f(X, W_q, W_k, W_v)``; each a matrix, X and the
    matrices of a sequence also with leading batch axes) and the variant's own sizes and
    parameters by keyword (``h=2``, ``w=3``; their defaults otherwise), it returns C; its
    backward is the derived gradients' code. `steps` gives every step's value, computed by the
    same code and differentiable by autograd; `source` and `backward_source` are the code.

    Example:
        >>> import torch
        >>> f = torch_function("self-attention")
        >>> x, w = torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
        >>> tuple(f(x, w, w, w).shape)
        (5, 3)
    """

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.inputs, self.output = entry.graph.inputs, entry.graph.output
        self.source, self._forward_sizes = forward_program(entry)
        self._forward = _compiled(self.source, "forward", entry.name)

    @functools.cached_property
    def _program(self) -> Program:
        """Both passes: the backward's gradients derived and checked when first needed (a
        `DerivationError` then, where one fails its check), so that the forward pass alone
        never waits for them."""
        return program(self.entry)

    @functools.cached_property
    def _backward(self) -> Any:
        return _compiled(self.backward_source, "backward", self.entry.name)

    @property
    def backward_source(self) -> str:
        """The backward pass's code (derived and checked when first read)."""
        return self._program.backward_source

    @property
    def gradients(self) -> tuple[str, ...]:
        """The inputs the backward pass gives a gradient of."""
        return self._program.gradients

    @property
    def sizes(self) -> tuple[str, ...]:
        """The keyword sizes and parameters the two passes read."""
        return tuple(sorted({*self._forward_sizes, *self._program.backward_sizes}))

    def __repr__(self) -> str:
        return f"GeneratedFunction({self.entry.name!r}: {', '.join(self.inputs)} -> {self.output})"

    def size_values(self, tensors: tuple[Any, ...], given: Mapping[str, object]) -> dict[str, Any]:
        """The keyword sizes of the generated code: n, d, c (and every size an input's shape
        is) read off the tensors, the others given or their defaults; a ValueError naming the
        argument whose shape does not fit."""
        if len(tensors) != len(self.inputs):
            raise TypeError(
                f"{self.entry.name} takes {len(self.inputs)} matrices "
                f"({', '.join(self.inputs)}), got {len(tensors)}"
            )
        shapes = self.entry.graph.shapes
        read: dict[sp.Symbol, int] = {}
        for letter, tensor in zip(self.inputs, tensors, strict=True):
            if not isinstance(tensor, torch.Tensor) or tensor.dim() < 2:
                got = tuple(getattr(tensor, "shape", ())) or type(tensor).__name__
                raise ValueError(f"{letter} must be a matrix ({_shown(shapes[letter])}), got {got}")
            for size, got in zip(shapes[letter], tensor.shape[-2:], strict=True):
                if isinstance(size, sp.Symbol) and size not in read:
                    read[size] = int(got)
        names = {str(s.symbol) for s in (*self.entry.sizes, *self.entry.parameters)}
        given = dict(given) | {str(k): v for k, v in read.items() if str(k) in names}
        n, d, c = (read.get(symbol, 1) for symbol in (L.n, L.d, L.c))
        at = explicit_sizes(self.entry, n, d, c, given)
        at |= {k: v for k, v in read.items() if k not in at}
        for letter, tensor in zip(self.inputs, tensors, strict=True):
            want = tuple(int(sp.sympify(x).xreplace(at)) for x in shapes[letter])
            if tuple(tensor.shape[-2:]) != want:
                raise ValueError(
                    f"{letter} must be {_shown(shapes[letter])} = {want[0]} × {want[1]} "
                    f"for {self.entry.name} at these sizes, got {tuple(tensor.shape[-2:])}"
                )
        return {python_name(k): _number(v) for k, v in at.items()}

    def at(self, sizes: Mapping[sp.Symbol, object]) -> dict[str, Any]:
        """The keyword sizes of the generated code from sizes by symbol (an explicit graph's):
        every one of them, each pass reading those it uses."""
        return {python_name(k): _number(v) for k, v in sizes.items()}

    def apply(self, tensors: Iterable[Any], sizes: Mapping[str, Any]) -> Any:
        """C by the generated forward, with the derived backward, at keyword sizes as `at`
        gives them (no size read off the tensors)."""
        return _Generated.apply(self, dict(sizes), *tensors)

    def forward_sizes(self, sizes: Mapping[str, Any]) -> dict[str, Any]:
        return {k: sizes[k] for k in self._forward_sizes}

    def steps(self, *tensors: Any, **sizes: object) -> dict[str, Any]:
        """Every step's value (per-head ones as h × rows × cols), by the generated forward."""
        return self._forward(*tensors, **self.forward_sizes(self.size_values(tensors, sizes)))

    def __call__(self, *tensors: Any, **sizes: object) -> Any:
        at = self.size_values(tensors, sizes)
        return _Generated.apply(self, at, *tensors)


def _shown(shape: tuple) -> str:
    return " × ".join(str(x) for x in shape)


def _number(value: Any) -> int | float:
    value = sp.sympify(value)
    return int(value) if value.is_Integer else float(value)


@functools.cache
def _generated(name: str) -> GeneratedFunction:
    return GeneratedFunction(variant(name))


def torch_function(name: str) -> GeneratedFunction:
    """The torch code of a variant, generated from its declaration: forward from each step's
    formula, backward from the derived gradients (derived and checked when the backward pass
    first runs, so that the forward pass alone never waits for them). Made once per variant in
    a process.

    Args:
        name: a registered name, a combination (`"gqa+rope"`), or a user's
            `"path/to/file.py:NAME"` or `"module:NAME"` (loaded and registered first).

    Returns:
        The `GeneratedFunction`: called with the graph's inputs in order
            (``f(X, W_q, W_k, W_v)``) and the variant's own sizes by keyword, it returns C.

    Raises:
        ValueError: when a name is not registered or the parts do not combine.
        DeclarationError: when a user's spec does not load (`load_variant`).
        DerivationError: when a derived gradient fails its check by numbers (raised by the
            backward pass, or by reading `backward_source`).
    """
    entry = load_variant(name)
    return _generated(entry.name)


class GeneratedModule(torch.nn.Module):
    """A variant's generated code with its learnable matrices as parameters.

    Every input of the graph with no row or column per token is an ``nn.Parameter`` named by
    its letter (``module.W_q``, ``module.G_q``, ``module.Zeta``); ``forward`` takes the others
    (X; a second sequence Y; a given mask M, 0 or −∞) in the graph's order, each a matrix or a
    batch of them. The weights start as ``nn.Linear``'s do (uniform in ±1/√rows), a matrix of
    one row (a gain, a slope, a sink's logit) at 1. The variant's own sizes and parameters
    (``h=4``, ``kappa=50.0``) are fixed when the module is made; n is read off X at each call.

    Example:
        >>> import torch
        >>> module = torch_module("self-attention", d=8, c=4, dtype=torch.float64)
        >>> tuple(module.W_k.shape), tuple(module(torch.randn(5, 8, dtype=torch.float64)).shape)
        ((8, 4), (5, 4))
    """

    def __init__(self, name: str, *, d: int, c: int, dtype: Any = None, **own: Any) -> None:
        super().__init__()
        self.function = torch_function(name)
        entry = self.function.entry
        graph = entry.graph
        self.data = tuple(x for x in graph.inputs if _per_token(entry, x))
        self.weights = tuple(x for x in graph.inputs if x not in self.data)
        check_given(entry, own)
        unknown = set(own) - {str(x.symbol) for x in (*entry.sizes, *entry.parameters)}
        if unknown:
            raise ValueError(not_its_own(entry, sorted(unknown)[0]))
        sizes: dict = {L.d: d, L.c: c} | {
            x.symbol: own.get(str(x.symbol), x.default) for x in entry.sizes
        }
        sizes = with_relations(entry, sizes)
        for condition in entry.requires:
            if condition.holds(sizes) is False:
                raise ValueError(condition.message(sizes))
        self.own = dict(own)
        for letter in self.weights:
            rows, cols = (_int(sp.sympify(x).xreplace(sizes)) for x in graph.shapes[letter])
            if rows == 1:
                value = torch.ones(rows, cols, dtype=dtype)
            else:
                bound = 1 / math.sqrt(rows)
                value = torch.empty(rows, cols, dtype=dtype).uniform_(-bound, bound)
            self.register_parameter(letter, torch.nn.Parameter(value))

    def extra_repr(self) -> str:
        own = "".join(f", {k}={v}" for k, v in self.own.items())
        return f"{self.function.entry.name!r}: {', '.join(self.data)} -> C{own}"

    def forward(self, *data: Any) -> Any:
        if len(data) != len(self.data):
            raise TypeError(
                f"{self.function.entry.name} takes {', '.join(self.data)}, got {len(data)} tensors"
            )
        given = dict(zip(self.data, data, strict=True))
        tensors = [given[x] if x in given else getattr(self, x) for x in self.function.inputs]
        return self.function(*tensors, **self.own)


def _int(value: Any) -> int:
    value = sp.sympify(value)
    if not value.is_Integer:
        raise ValueError(f"a weight's size is {value}: give the sizes it reads")
    return int(value)


def _per_token(entry: Entry, letter: str) -> bool:
    """An input with a row or column per token (X, Y, a mask): data, not a weight."""
    rows, cols = entry.graph.shapes[letter]
    tokens = {L.n, L.s}
    return bool((sp.sympify(rows).free_symbols | sp.sympify(cols).free_symbols) & tokens)


def torch_module(name: str, *, d: int, c: int, dtype: Any = None, **own: Any) -> GeneratedModule:
    """A module of a variant's generated code, its learnable matrices as parameters.

    Args:
        name: a registered name, a combination (`"gqa+rope"`), or a user's
            `"path/to/file.py:NAME"` (as `torch_function` takes it).
        d: the width of X's rows.
        c: the width of Q's rows.
        dtype: the weights' dtype (None: torch's default).
        **own: the variant's own sizes and parameters by keyword (``h=4``, ``kappa=50.0``);
            their defaults otherwise. Fixed when the module is made.

    Returns:
        The `GeneratedModule`: its ``forward`` takes X (and the variant's other per-token
            inputs) and returns C, `(n, c)` for X `(n, d)` (with X's batch axes in front).

    Raises:
        ValueError: as `torch_function` raises it, or when a keyword is not the variant's own
            size or parameter, a value is outside its domain, or the sizes break a condition.
        DeclarationError: when a user's spec does not load (`load_variant`).
        DerivationError: when a derived gradient fails its check by numbers (raised by the
            first backward pass, as `torch_function`'s).
    """
    return GeneratedModule(name, d=d, c=c, dtype=dtype, **own)


@functools.cache
def _step(declaration: Any, shapes: tuple, sizes: frozenset) -> tuple[Any, tuple, tuple]:
    source, inputs, used = step_source(declaration, dict(shapes), sizes)
    return _compiled(source, "step", declaration.output), inputs, used


def step_function(
    declaration: Any, shapes: Mapping[str, Any], sizes: Iterable[sp.Symbol]
) -> tuple[Any, tuple[str, ...], tuple[str, ...]]:
    """One step's generated code compiled (`derive.codegen.program.step_source`): (the
    function, the letters it takes in order, the sizes it takes by keyword)."""
    letters = (declaration.output, *declaration.inputs)
    return _step(declaration, tuple((x, shapes[x]) for x in letters), frozenset(sizes))
