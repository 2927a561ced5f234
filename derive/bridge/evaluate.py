"""The one torch evaluator: a graph at explicit sizes, computed step by step by each step's twin.

Each step of an `ExplicitGraph` is computed by its twin (`Declaration.twin`; by default the
function of `attention.functional` that has the step's name), given the matrices the step reads
and the options its twin names (`derive.graph.twins`): per head where the step is a head's, each
head's block of columns read as the split declares it. A step that computes nothing (a mask, the
split into heads, the concatenation) is not called: a mask's numbers are the declaration's, and
a block of columns is read off the tensor it is a block of. Nothing here names a step: what a
step needs, its declaration says.

`resolve` finds a twin (a dotted name, imported, or a callable); a twin that does not exist or
returns the wrong shape is a `DeclarationError` naming the step.
"""

from __future__ import annotations

import importlib
from typing import Any

import sympy as sp
import torch

from ..explicit.forward import ExplicitGraph
from ..explicit.instantiate import key_of
from ..graph import DeclarationError
from ..graph.twins import Built, Callee, Given, step_twin, twin_letters
from ..notation import letters as L

__all__ = [
    "resolve",
    "torch_values",
    "number",
    "Reader",
    "constant_of",
    "callee_name",
    "dyadic",
    "called",
]


def callee_name(callee: Callee) -> str:
    """How messages and rows name a twin: its dotted name, or its function's name."""
    return callee if isinstance(callee, str) else getattr(callee, "__name__", repr(callee))


def resolve(callee: Callee, where: str) -> Any:
    """The function (or class) a twin names; `where` says whose twin it is in the error."""
    if callable(callee):
        return callee
    module, _, name = str(callee).rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name, None) if module else None
    except ImportError as error:
        raise DeclarationError(f"{where}: twin {callee!r} cannot be imported ({error})") from None
    if found is None or not callable(found):
        raise DeclarationError(f"{where}: twin {callee!r} does not exist")
    return found


def number(value: object) -> object:
    """A size or parameter as torch takes it: an int, else a float."""
    sympified = sp.sympify(value)
    return int(sympified) if sympified.is_Integer else float(sympified)


def constant_of(explicit: ExplicitGraph, letter: str) -> Any:
    """The numbers of a constant step: a mask's (0 or −∞) as booleans, True where a query may
    attend; any other's (a user's distances m − p) as float64."""
    base = L.base(L.name_of(letter))
    entries = {e: v for e, v in explicit.instance.folded.items() if e.base == base}
    if not entries:
        raise DeclarationError(f"the constant {letter} has no numbers at these sizes")
    rows = max(int(e.indices[0]) for e in entries)
    cols = max(int(e.indices[1]) for e in entries)
    if not all(v == 0 or v == -sp.oo for v in entries.values()):
        numbers = torch.zeros(rows, cols, dtype=torch.float64)
        for entry, value in entries.items():
            numbers[int(entry.indices[0]) - 1, int(entry.indices[1]) - 1] = float(value)
        return numbers
    allowed = torch.zeros(rows, cols, dtype=torch.bool)
    for entry, value in entries.items():
        allowed[int(entry.indices[0]) - 1, int(entry.indices[1]) - 1] = bool(value == 0)
    return allowed


class Reader:
    """The tensors of one explicit graph, by letter and head: computed steps by their key; a
    step that copies (the split into heads, a group's block, the concatenation) read as its
    declaration says; a matrix declared with one row handed over as a vector; a mask as
    booleans."""

    def __init__(self, explicit: ExplicitGraph, values: dict[str, Any]) -> None:
        self.explicit, self.values = explicit, values

    def __call__(self, letter: str, head: int | None = None) -> Any:
        if letter in L.CONSTANT_LETTERS:  # a mask: its twin's booleans, or the declared ones
            return (
                self.values[letter] if letter in self.values else constant_of(self.explicit, letter)
            )
        value = self._tensor(letter, head)
        rows = self.explicit.graph.shapes.get(letter, (None,))[0]
        return value.reshape(-1) if rows == 1 and value.shape[-2] == 1 else value

    def _tensor(self, letter: str, head: int | None) -> Any:
        key = key_of(letter, head) if letter.endswith("_l") else letter
        if key in self.values:
            return self.values[key]
        step = self.explicit.graph.step(letter)
        lhs_column, rhs = step.element.lhs.indices[-1], step.element.rhs
        if not letter.endswith("_l") and L.ell in sp.sympify(lhs_column).free_symbols:
            source = L.letter_of(rhs)
            blocks = [self._tensor(source, h) for h in range(1, self.explicit.heads + 1)]
            return torch.cat(blocks, dim=-1)
        if not isinstance(rhs, sp.Indexed):  # a step folded at these sizes: its twin computes it
            shape = _shape(self.explicit, step.shapes[letter])
            self.values[key] = _call(step, head, self, shape)
            return self.values[key]
        source = L.letter_of(rhs)
        if tuple(rhs.indices[-2:]) == tuple(step.element.lhs.indices[-2:]):
            return self._tensor(source, head)  # a copy
        column = rhs.indices[-1]  # a block of columns: (ℓ − 1) c_h + j, or a group's block
        at = {L.ell: head or 1, L.j: 1} | self.explicit.sizes
        start = int(sp.sympify(column).xreplace(at)) - 1
        width = int(sp.sympify(step.shapes[letter][1]).xreplace(self.explicit.sizes))
        return self._tensor(source, None)[..., start : start + width]

    def option(self, value: Any, head: int | None = None) -> object:  # Any: see _exact
        """A twin's option: a size or parameter at these sizes, a matrix by its letter (a mask
        as booleans, a row as a vector; masks by their letters, joined), one entry of a matrix
        (``μ_{1,ℓ}``: head ℓ's, as a 0-d tensor, so that a gradient reaches the matrix), a dict
        of (name, value) pairs (Llama 3.1's ``freq_config``), or the value itself."""
        if isinstance(value, Given):
            return value.value
        if isinstance(value, sp.Indexed):
            at = {L.ell: head or 1} | self.explicit.sizes
            rows = [int(sp.sympify(index).xreplace(at)) - 1 for index in value.indices]
            matrix = self._tensor(L.letter_of(value), None)
            return matrix[rows[0], rows[1]]
        if isinstance(value, sp.Basic) and not isinstance(value, sp.Symbol):
            return number(sp.sympify(value).xreplace(self.explicit.sizes))
        if isinstance(value, sp.Symbol):
            return number(self.explicit.sizes[value])
        if isinstance(value, str):
            return self(value, head)
        if isinstance(value, tuple) and value and all(x in L.CONSTANT_LETTERS for x in value):
            allowed = self(value[0], head)  # masks joined: a key allowed by each of them
            for letter in value[1:]:
                allowed = allowed & self(letter, head)
            return allowed
        if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
            return {name: self.option(v, head) for name, v in value}  # freq_config={...}
        if isinstance(value, Built):  # an object made at these sizes: a modification
            factory = resolve(value.factory, f"option {value!r}")
            return factory(*(self.option(a, head) for a in value.arguments))
        if isinstance(value, tuple) and value and all(isinstance(v, Built) for v in value):
            return tuple(self.option(v, head) for v in value)  # mods=(Chunked(χ), …)
        return value


def _shape(explicit: ExplicitGraph, shape: tuple) -> tuple[int, ...]:
    return tuple(int(sp.sympify(x).xreplace(explicit.sizes)) for x in shape)


def _every_head(read: Reader, letter: str) -> Any:
    """A matrix computed per head, every head's stacked: (h, rows, cols)."""
    if not letter.endswith("_l"):
        return read(letter)
    heads = read.explicit.heads
    return torch.stack([read(letter, h if heads > 1 else None) for h in range(1, heads + 1)])


def _generated(declaration, head: int | None, read: Reader, expected: tuple) -> Any:
    """A step with no twin, computed by the code generated from its formula
    (`derive.codegen`): every head's at once, head `head`'s returned."""
    from ..codegen.printer import python_name
    from .generated import step_function

    explicit = read.explicit
    function, letters, sizes = step_function(declaration, explicit.graph.shapes, explicit.sizes)
    arguments = []
    for letter in letters:
        if letter in L.CONSTANT_LETTERS:
            value = read(letter)
            if value.dtype == torch.bool:  # a mask as its twin's booleans: 0 or −∞ again
                value = torch.zeros(value.shape, dtype=torch.float64).masked_fill(
                    ~value, float("-inf")
                )
            arguments.append(value)
        elif letter.endswith("_l"):
            arguments.append(_every_head(read, letter))
        else:
            arguments.append(read._tensor(letter, None))
    names = {python_name(k): number(v) for k, v in explicit.sizes.items()}
    value = function(*arguments, **{name: names[name] for name in sizes})
    if declaration.head:
        value = value[(head or 1) - 1]
    if tuple(value.shape) != tuple(expected):
        raise DeclarationError(
            f"step {declaration.output}: its generated code returned shape "
            f"{tuple(value.shape)}, the declaration says {tuple(expected)}"
        )
    return value


def _has_twin(declaration) -> bool:
    """True where a step says how torch computes it: its own twin, or a function of
    `attention.functional` with its name."""
    if declaration.twin is not None:
        return True
    import attention.functional

    return callable(getattr(attention.functional, declaration.name, None))


def _call(declaration, head: int | None, read: Reader, expected: tuple) -> Any:
    """The declaration's twin on what it reads (head `head`'s; every head's, stacked, for a
    step that reads every head, whose twin returns every head's output); its shape
    checked. A step with no twin is computed by its generated code."""
    if not _has_twin(declaration):
        return _generated(declaration, head, read, expected)
    twin = step_twin(declaration)
    where = f"step {declaration.output} ({declaration.name})"
    function = resolve(twin.function, where)
    letters = twin_letters(declaration, twin)
    if declaration.across:
        arguments = [_every_head(read, letter) for letter in letters]
        expected = (read.explicit.heads, *expected)
    else:
        arguments = [read(letter, head) for letter in letters]
    options = {key: read.option(value, head) for key, value in twin.options}
    try:
        value = function(*arguments, **options)
    except Exception as error:  # noqa: BLE001 - the twin's own failure, named
        raise DeclarationError(
            f"{where}: twin {called(twin.function, letters, arguments)} "
            f"failed: {type(error).__name__}: {error}"
        ) from None
    got = tuple(getattr(value, "shape", ()))
    if got != expected:
        raise DeclarationError(
            f"{where}: twin {called(twin.function, letters, arguments)} "
            f"returned shape {got}, the declaration says "
            f"{expected}"
        )
    return value


def called(function: Callee, letters: tuple[str, ...], arguments: list) -> str:
    """How a message shows a twin's call: ``ctx(V: 5×4, A_diff: 5×5)``."""
    shown = [
        f"{letter}: {'×'.join(str(k) for k in getattr(value, 'shape', ())) or 'scalar'}"
        for letter, value in zip(letters, arguments, strict=False)
    ]
    return f"{callee_name(function).rpartition('.')[2]}({', '.join(shown)})"


def torch_values(explicit: ExplicitGraph, inputs: dict[str, Any]) -> dict[str, Any]:
    """Each explicit step computed by its twin, keyed like `Values` (``"Omega_2"`` for head 2),
    with the inputs; a declared mask by its twin too (`attention.functional.causal_mask`: its
    booleans are what the weights' twin is given)."""
    values = dict(inputs)
    read = Reader(explicit, values)
    for declaration in explicit.graph.declarations:
        if declaration.constant and declaration.twin is not None:
            expected = _shape(explicit, explicit.graph.shapes[declaration.output])
            values[declaration.output] = _call(declaration, None, read, expected)
    for step in explicit.steps:
        declaration = step.step.declaration
        if not declaration.across:
            values[step.output] = _call(declaration, step.head, read, step.entries.shape)
        elif step.output not in values:  # every head's at once, the first time one is asked
            every = _call(declaration, None, read, step.entries.shape)
            for head in range(1, explicit.heads + 1):
                at = head if explicit.heads > 1 else None
                values[key_of(declaration.output, at)] = every[head - 1]
    return values


def dyadic(explicit: ExplicitGraph, seed: int, dtype: Any = None) -> dict[str, Any]:
    """Seeded inputs, every entry k/8 with -16 ≤ k ≤ 16 (exact in float64, and in float32)."""
    generator = torch.Generator().manual_seed(seed)
    dtype = torch.float64 if dtype is None else dtype
    return {
        letter: torch.randint(-16, 17, symbols.shape, generator=generator).to(dtype) / 8
        for letter, symbols in explicit.inputs.items()
    }
