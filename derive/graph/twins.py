"""How the torch side computes what a declaration declares: the twins `derive check` calls.

Nothing here imports torch: a twin is named (a dotted name such as
``"attention.functional.scores"``) or given (a callable, for a variant declared in a user's
file), and `derive.bridge` calls it.

- `StepTwin`: one step. By default the function of `attention.functional` that has the step's
  name, given the matrices the step reads, in the order it reads them. A declaration names
  another (`Declaration.twin`) where the numeric side differs: RoPE's rotation takes the
  positions' angles from the book's tables, the weights take the scores before the mask and the
  mask as booleans.
- `Twin`: a whole entry point, called on the graph's inputs (`C · fused path`).
- `ModuleTwin`: one of the book's classes, holding the derivation's weights.
- `GradientTwin`: a function that returns gradients (`self_attention_backward`).
- `StateTwin`: a function that returns an algorithm's state block by block (FlashAttention's),
  beside the function of `derive` that computes the same state from the derivation.

Argument and option values: a letter (``"X"``) is that matrix; a matrix declared with one row
(the gains of QK-norm) is handed over as a vector; the mask M (0 or −∞) as booleans, True where a
query may attend; a size or parameter symbol is its number at the check's sizes; anything else
is passed as it is. A letter written ``"W_o?"`` is passed only where the graph has it. A
`Built` option is an object made at the check's sizes (a score modification of `attention.mods`:
``mods=(Built("attention.mods.Chunked", (χ,)),)``); the tuples of them that two variants give
the same keyword join.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Built",
    "Given",
    "StepTwin",
    "Twin",
    "ModuleTwin",
    "GradientTwin",
    "StateTwin",
    "Callee",
    "argument_order",
    "joined",
    "step_twin",
    "twin_letters",
]

#: A dotted name (imported when the check runs) or a callable.
Callee = str | Callable


@dataclass(frozen=True)
class Given:
    """An option's value as it is, read as nothing else (a string such as a ``rope_type``,
    which a letter's name would otherwise be read as). Printed as its value."""

    value: str | float | bool | None

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Built:
    """An option that is an object: `factory` (a dotted name or a callable) called with
    `arguments`, each read as an option is (a size or parameter symbol is its number at the
    check's sizes). Printed as the call."""

    factory: Callee
    arguments: tuple = ()

    def __repr__(self) -> str:
        name = self.factory if isinstance(self.factory, str) else self.factory.__qualname__
        return f"{str(name).rpartition('.')[2]}({', '.join(map(str, self.arguments))})"


def joined(first: object, second: object) -> object:
    """Two variants' values of one option: tuples of `Built` objects join (each variant adds
    its modification to ``mods=``); otherwise the later one holds."""
    if (
        isinstance(first, tuple)
        and isinstance(second, tuple)
        and all(isinstance(v, Built) for v in (*first, *second))
    ):
        return first + second
    return second


@dataclass(frozen=True)
class StepTwin:
    """The torch function that computes one step.

    Args:
        function: a dotted name or a callable.
        arguments: the letters it takes positionally; None (the default): the matrices the
            step reads, constants left out.
        options: keyword arguments, as (name, value) pairs (see the module docstring for
            their values).
    """

    function: Callee
    arguments: tuple[str, ...] | None = None
    options: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Twin:
    """An entry point of `attention` (or of a user's file) that computes a whole variant.

    Args:
        function: a dotted name or a callable.
        arguments: the graph's inputs it takes positionally (``"W_o?"``: where the graph has
            W_o); default: X, W_q, W_k, W_v.
        options: keyword arguments of its own, as (name, value) pairs; a variant's `options`
            add to them.
        label: how `derive check` names its row; None (the default): the function's name.
        output: the position of C in what it returns, where it returns a tuple; None (the
            default): it returns C.
        incremental: called one new row of X at a time with the cache it returned last
            (``decode_step(x_new, w_q, w_k, w_v, cache=None) -> (context rows, cache)``).
        implies: the variants' options it computes without being told (decode_step is causal).
        requires: the variants that must be part of the entry for it to apply (the book's
            multi-head class is causal).
    """

    function: Callee
    arguments: tuple[str, ...] = ("X", "W_q", "W_k", "W_v")
    options: tuple[tuple[str, object], ...] = ()
    label: str | None = None
    output: int | None = None
    incremental: bool = False
    implies: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModuleTwin:
    """One of the book's classes, built at the check's sizes and given the derivation's weights.

    Attributes:
        cls: a dotted name (``"attention.CausalAttention"``).
        init: its constructor's arguments (sizes as symbols, numbers as they are).
        weights: (parameter path, letter, transposed): where each matrix goes
            (``("W_query.weight", "W_q", True)``: nn.Linear stores W_q transposed).
        zeroed: parameters set to zero (a bias the derivation does not have).
        implies, requires: as in `Twin`.
    """

    cls: str
    init: tuple[object, ...]
    weights: tuple[tuple[str, str, bool], ...]
    zeroed: tuple[str, ...] = ()
    implies: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.cls.rpartition(".")[2]


@dataclass(frozen=True)
class GradientTwin:
    """A function that returns gradients, written out (`self_attention_backward`).

    Attributes:
        function: a dotted name or a callable, called with `arguments` (the letters of the
            inputs, and ``"dC"``, the upstream gradient) and the options.
        returns: the gradients it returns, in order (``("dX", "dW_q", "dW_k", "dW_v")``).
        implies, requires: as in `Twin`.
    """

    function: Callee
    arguments: tuple[str, ...]
    returns: tuple[str, ...]
    implies: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()

    @property
    def label(self) -> str:
        return _name(self.function)


@dataclass(frozen=True)
class StateTwin:
    """A function that returns what an algorithm holds on its way, block by block (the running
    maximum of the online softmax), compared with the values `derive` computes for the same
    blocks.

    Attributes:
        function: a dotted name or a callable, called with `arguments` (letters; ``"dC"``, the
            upstream gradient, makes it a check of the backward pass) and `options`; it returns
            an object with the attributes `states` names, each a tensor whose first dimension
            is the blocks.
        derived: a dotted name or a callable, called with the entry's graph, the check's
            explicit matrices by letter (and ``"dC"``) and its sizes by name; it returns, for
            each attribute, a list over the blocks of rows of numbers.
        states: (attribute, how the check's rows name it).
        options, implies, requires: as in `Twin`.
    """

    function: Callee
    arguments: tuple[str, ...]
    derived: Callee
    states: tuple[tuple[str, str], ...]
    options: tuple[tuple[str, object], ...] = ()
    implies: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return _name(self.function)


def step_twin(declaration) -> StepTwin:
    """The twin a step declares, or the function of `attention.functional` named after it."""
    return declaration.twin or StepTwin(f"attention.functional.{declaration.name}")


def twin_letters(declaration, twin: StepTwin) -> tuple[str, ...]:
    """The matrices a step's twin is given, in order: those it names, else those the step
    reads, its constants (a mask's booleans) left out."""
    from ..notation import letters as L

    if twin.arguments is not None:
        return tuple(twin.arguments)
    return tuple(x for x in declaration.inputs if x not in L.CONSTANT_LETTERS)


def _name(function: Callee) -> str:
    return function.rpartition(".")[2] if isinstance(function, str) else function.__name__


def _spelled(name: str) -> str:
    return name.replace("_", "").lower()


def argument_order(twin: StepTwin, letters: tuple[str, ...]) -> tuple[str, ...]:
    """The matrices a step's twin is called with, in the order it takes them: `twin.arguments`
    where the declaration gives them; else, where the twin is a function whose positional
    parameters name exactly the letters read (``def context(a_diff, v)`` for A_diff and V, a
    head's V_l too; case and underscores aside), in the order it names them; else `letters`
    (the contract: the book's letters in the book's order, X, A, …, V, then the user's in the
    order they were declared). A function that cannot take that many matrices, or does not take
    one of its options by name, is a TypeError that says its signature and the call."""
    if twin.arguments is not None:
        return tuple(twin.arguments)
    if not callable(twin.function):
        return letters  # a dotted name: imported where a check calls it, checked there
    try:
        signature = inspect.signature(twin.function)
    except (TypeError, ValueError):
        return letters
    parameters = list(signature.parameters.values())
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    spread = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    keywords = any(p.kind is p.VAR_KEYWORD for p in parameters)
    called = f"{_name(twin.function)}({', '.join(letters)})"
    if len(required) > len(letters) or (len(positional) < len(letters) and not spread):
        takes = ", ".join(p.name for p in positional) or "none"
        raise TypeError(
            f"twin {called}: it is called with the {len(letters)} matrices the "
            f"step reads, and its positional parameters are ({takes}); give "
            "arguments=(...) to say which it takes"
        )
    names = {p.name for p in parameters}
    for option, _ in twin.options:
        if option not in names and not keywords:
            raise TypeError(f"twin {called} takes no keyword {option!r}, an option of the step")
    by_name = {_spelled(letter.removesuffix("_l")): letter for letter in letters}  # a head's
    named = [by_name.get(_spelled(p.name)) for p in positional[: len(letters)]]
    if len(named) == len(letters) and None not in named and len(set(named)) == len(letters):
        return tuple(x for x in named if x is not None)
    return letters
