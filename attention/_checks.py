"""Checking whole calls: the decorators on every public function and every `forward`.

`checked` and `checked_forward` check the arguments before the call (the tensors with
`check_tensors`, for messages that name the dimension; then everything through beartype, the
tensors in one jaxtyping memo), and the result after it, against the same dimension letters.

What a call costs. The full check takes about 60 µs (`@jaxtyped(typechecker=beartype)` on each
function measured about 130 µs). Whether a call passes depends only on its signature: the shape,
dtype and device of each tensor (the module's weights included), the type of every other argument
and the value of its flags and sizes (bools and ints, which decide the shape of the result). So
the full check, of the arguments and of the result, runs once per signature; a call whose
signature has passed before costs building its signature and one dictionary look-up, about 2 µs
(see docs/benchmarks.md).

Under `torch.compile`: the checks run eagerly, outside the compiled graph, through
`torch.compiler.disable` applied at trace time (jaxtyping's own wrapper breaks Dynamo). Nothing
here touches `torch._dynamo` before a compilation starts: importing it costs about 0.7 s, and a
function wrapped by `torch.compiler.disable` costs about 1 µs a call even when nothing compiles.
"""

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import torch
from jaxtyping import config as jaxtyping_config
from jaxtyping import jaxtyped
from torch import Tensor
from torch.nn import Parameter

from ._shapes import (
    _array_annotations,
    _hint_name,
    check_result,
    check_tensors,
    pair_parts,
    record_fields,
    record_parts,
    tensor_pair,
)

__all__ = ["check_arguments", "check_returned", "checked", "checked_forward"]


# ---------------------------------------------------------------------------------------------
# Checking a call: arguments before, result after


@functools.cache
def _beartype() -> tuple[Any, Any, Any]:
    """beartype's `is_bearable` and `die_if_unbearable`, and its configuration with PEP 484's
    numeric tower (so that `dropout_p=0`, an int, is a valid float). Imported at the first full
    check, not with `attention`: importing beartype is about 0.15 s, most of `import
    attention`'s cost, and a call whose signature passed before never needs it."""
    from beartype import BeartypeConf
    from beartype.door import die_if_unbearable, is_bearable

    return is_bearable, die_if_unbearable, BeartypeConf(is_pep484_tower=True)


P = ParamSpec("P")
R = TypeVar("R")
Checked = Mapping[str, tuple[Any, Any]]
#: A module's own tensors for the checks: ((name as in its state_dict, annotation) for each,
#: the tensors in the same order). The first part is a constant, so that a call whose signature
#: passed before costs reading the tensors only.
Weights = tuple[tuple[tuple[str, Any], ...], tuple[Any, ...]]


def check_arguments(where: str, tensors: Checked, others: Checked) -> dict[str, Any]:
    """Check one call's arguments; return the dimension bindings for `check_returned`.

    `tensors` and `others` map a name to (value, annotation): the tensors go through
    `check_tensors` (precise messages), then everything through beartype, tensors inside one
    jaxtyping memo so that their letters bind together.
    """
    is_bearable, die_if_unbearable, conf = _beartype()
    for name, (value, hint) in others.items():
        if not is_bearable(value, hint, conf=conf):
            raise TypeError(f"{where}: {name} must be {_hint_name(hint)}, got {value!r}")
    bindings = check_tensors(where, tensors)
    with jaxtyped("context"):
        for tensor, annotation in tensors.values():
            if tensor is not None:
                die_if_unbearable(tensor, annotation, conf=conf)
    return bindings


def check_returned(where: str, result: Any, annotation: Any, bindings: dict) -> None:
    """Check a result against its annotation (a tensor, or a tuple of tensors or of such
    tuples, in a union) and against the letters bound by the arguments; the letters that only
    the result has (`m_next`) bind across its parts."""
    _, die_if_unbearable, conf = _beartype()
    die_if_unbearable(result, annotation, conf=conf)
    _check_part(where, "result", result, annotation, dict(bindings))


def _check_part(where: str, name: str, result: Any, annotation: Any, bindings: dict) -> None:
    members = [annotation, *typing.get_args(annotation)]
    tuples = [typing.get_args(m) for m in members if typing.get_origin(m) is tuple]
    if isinstance(result, tuple) and tuples:
        for index, (part, part_annotation) in enumerate(zip(result, tuples[0], strict=True)):
            _check_part(where, f"{name}[{index}]", part, part_annotation, bindings)
    elif isinstance(result, Tensor):
        check_result(where, name, result, annotation, bindings)


class _CallChecker:
    """The checks of one function's calls, with a memory of the signatures that passed."""

    MEMORY = 512  # signatures kept per function; forgotten all at once when full

    def __init__(self, fn: Callable, weights: Callable[[Any], Weights] | None = None) -> None:
        self.signature = inspect.signature(fn)
        self.tensor_hints: dict[str, Any] = {}
        self.pair_hints: dict[str, Any] = {}
        self.record_hints: dict[str, Any] = {}
        self.other_hints: dict[str, Any] = {}
        for name, parameter in self.signature.parameters.items():
            if _array_annotations(parameter.annotation):
                self.tensor_hints[name] = parameter.annotation
            elif tensor_pair(parameter.annotation):
                self.pair_hints[name] = parameter.annotation
            elif record_fields(parameter.annotation):  # its tensors, and then its type
                self.record_hints[name] = parameter.annotation
                self.other_hints[name] = parameter.annotation
            elif parameter.annotation is not inspect.Parameter.empty:
                self.other_hints[name] = parameter.annotation
        #: What a tensor argument left out stands for (`alibi=False`: not a tensor to check).
        self.defaults = {
            name: p.default
            for name, p in self.signature.parameters.items()
            if name in self.tensor_hints and p.default is not inspect.Parameter.empty
        }
        self.returns = self.signature.return_annotation
        self.where = fn.__qualname__
        self.weights = weights
        self.passed: set[Any] = set()
        #: The two checks wrapped by torch.compiler.disable, made at the first compilation.
        self.outside: tuple[Callable, Callable] | None = None

    def remember(self, key: Any) -> None:
        if key is None:  # a call without a signature (`_call_key`): checked every time
            return
        if len(self.passed) >= self.MEMORY:
            self.passed.clear()
        self.passed.add(key)


_PLAIN = frozenset({type(None), float, str})
#: Looked up once: inside each wrapper, attribute look-ups are part of every call's cost.
#: (TorchDynamo knows the function itself, whatever name it is reached by.)
_is_compiling = torch.compiler.is_compiling
_config = jaxtyping_config


def _part(value: Any) -> Any:
    """What a check depends on: shape, dtype and device of a tensor; the value of a flag or a
    size (with its type: True and 1 are different signatures); the type of anything else.

    `type(...) is` first: `isinstance(value, Tensor)` alone costs 0.15 µs (Tensor's metaclass).
    """
    kind = type(value)
    if kind is Tensor or kind is Parameter:
        return (value.shape, value.dtype, value.device, value.layout)
    if kind is bool or kind is int:
        return (kind, value)
    if kind is tuple:  # a cache (K, V): the signature of each part
        return tuple(map(_part, value))
    if hasattr(kind, "__dataclass_fields__"):  # a record (`LayerWeights`): each field's
        return kind, tuple(_part(getattr(value, name)) for name in kind.__dataclass_fields__)
    if kind in _PLAIN or not isinstance(value, Tensor):
        return kind
    return (value.shape, value.dtype, value.device, value.layout)


_TENSORS = frozenset({Tensor, Parameter})


def _call_key(args: tuple, kwargs: dict, tensors: tuple = ()) -> Any:
    """The signature of a call (for a module's forward: without `self`, with its weights).
    Tensors are read in line, without a call of `_part`: at the book's size every 0.1 µs of
    this function is 0.4 % of the call. A tensor on the CPU leaves its device out (reading
    `.device` makes an object, hashing it costs more than the shape's hash): (shape, dtype,
    layout) for the CPU, (shape, dtype, layout, device) for any other device, so the two never
    meet; the layout (25 ns a tensor quiet, up to 90 ns on a loaded machine) keeps a sparse
    tensor from passing as the dense one of its shape.
    An absent bias (None) stands for itself. A nested tensor of torch's strided layout has no
    shape: the key is then None, never remembered, so that the call always goes through the
    full check, which refuses it by name (a `try` costs nothing until it catches)."""
    try:
        parts = tuple(
            [
                (
                    (a.shape, a.dtype, a.layout)
                    if a.is_cpu
                    else (a.shape, a.dtype, a.layout, a.device)
                )
                if type(a) in _TENSORS
                else (a if a is None else _part(a))
                for a in args + tensors
            ]
        )
        if kwargs:
            return parts, len(args), tuple(kwargs), tuple(map(_part, kwargs.values()))
    except RuntimeError:  # a nested tensor's shape
        return None
    return parts, len(args)


def _check_call(checker: _CallChecker, args: tuple, kwargs: dict, weights: Weights | None) -> dict:
    """The full check of one call's arguments (and of the module's weights); the bindings."""
    try:
        arguments = checker.signature.bind(*args, **kwargs).arguments
    except TypeError as error:
        raise TypeError(f"{checker.where}: {error}") from None
    tensors = {
        name: (arguments.get(name, checker.defaults.get(name)), h)
        for name, h in checker.tensor_hints.items()
    }
    for name, hint in checker.pair_hints.items():
        tensors |= pair_parts(checker.where, name, arguments.get(name), hint)
    for name, hint in checker.record_hints.items():
        tensors |= record_parts(checker.where, name, arguments.get(name), hint)
    if weights is not None:
        for (name, annotation), tensor in zip(*weights, strict=True):
            tensors[name] = (tensor, annotation)
    others = {n: (arguments[n], h) for n, h in checker.other_hints.items() if n in arguments}
    return check_arguments(checker.where, tensors, others)


def _first_call(
    checker: _CallChecker,
    key: Any,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    weights: Weights | None,
) -> Any:
    """A signature not seen before: check the arguments, call, check the result, remember."""
    bindings = _check_call(checker, args, kwargs, weights)
    result = fn(*args, **kwargs)
    check_returned(checker.where, result, checker.returns, bindings)
    checker.remember(key)
    return result


def _outside_graph(checker: _CallChecker) -> tuple[Callable, Callable]:
    """The checks as functions that torch.compile runs eagerly, outside its graph.

    Made at the first compilation, not at import: `torch.compiler.disable` imports
    torch._dynamo. The compiled call itself stays in each wrapper's own code (see `_own_code`):
    were it in a shared helper, the graph breaks around the checks would put every function's
    computation in that helper's frames, which share one recompilation limit.
    """
    if checker.outside is None:
        checker.outside = (
            torch.compiler.disable(_arguments_outside_graph),
            torch.compiler.disable(_result_outside_graph),
        )
    return checker.outside


def _arguments_outside_graph(checker: _CallChecker, args: tuple, kwargs: dict) -> Any:
    """Under torch.compile, run eagerly: check a new signature's arguments; None if it passed
    before, else (key, bindings) for `_result_outside_graph`."""
    if checker.weights is None:
        weights, key = None, _call_key(args, kwargs)
    else:
        weights = checker.weights(args[0])
        key = _call_key(args[1:], kwargs, weights[1])
    if key in checker.passed:
        return None
    return key, _check_call(checker, args, kwargs, weights)


def _result_outside_graph(checker: _CallChecker, pending: Any, result: Any) -> None:
    if pending is not None:
        key, bindings = pending
        check_returned(checker.where, result, checker.returns, bindings)
        checker.remember(key)


def _own_code(wrapper: Callable, wrapped: Callable) -> Callable:
    """`wrapper` with a code object of its own, named after `wrapped`.

    TorchDynamo keeps its compiled graphs per code object, and gives up after 8 recompilations
    of one (`recompile_limit`): were every checked `forward` to share one wrapper's code, five
    module classes used with and without gradients would exhaust it, and compiled modules would
    silently run eagerly. A copy of the code per decorated function keeps their caches apart.
    """
    code = wrapper.__code__.replace(
        co_name=wrapped.__name__, co_qualname=f"{wrapped.__qualname__}[checked]"
    )
    fresh = types.FunctionType(
        code, wrapper.__globals__, wrapped.__name__, wrapper.__defaults__, wrapper.__closure__
    )
    fresh.__kwdefaults__ = wrapper.__kwdefaults__
    return functools.wraps(wrapped)(fresh)


def checked(fn: Callable[P, R]) -> Callable[P, R]:
    """Check every call of a public function: arguments (tensors with precise messages), then
    the result, all against the function's jaxtyping annotations."""
    checker = _CallChecker(fn)
    passed = checker.passed

    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _config.jaxtyping_disable:
            return fn(*args, **kwargs)
        if _is_compiling():
            arguments, result_of = _outside_graph(checker)
            pending = arguments(checker, args, kwargs)
            result = fn(*args, **kwargs)
            result_of(checker, pending, result)
            return result
        key = _call_key(args, kwargs)
        if key in passed:
            return fn(*args, **kwargs)
        return _first_call(checker, key, fn, args, kwargs, None)

    return _own_code(wrapper, fn)


def checked_forward(
    weights_of: Callable[[Any], Weights],
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Check every call of a module's `forward`: its arguments, the module's own weights (from
    `weights_of(self)`, see `Weights`) against the same dimension letters, and its result.
    Errors name the module, the argument or weight, the letter and both sizes.
    """

    def decorate(forward: Callable[..., R]) -> Callable[..., R]:
        checker = _CallChecker(forward, weights_of)
        passed = checker.passed

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> R:
            if _config.jaxtyping_disable:
                return forward(self, *args, **kwargs)
            if _is_compiling():
                arguments, result_of = _outside_graph(checker)
                pending = arguments(checker, (self, *args), kwargs)
                result = forward(self, *args, **kwargs)
                result_of(checker, pending, result)
                return result
            weights = weights_of(self)
            key = _call_key(args, kwargs, weights[1])
            if key in passed:
                return forward(self, *args, **kwargs)
            return _first_call(checker, key, forward, (self, *args), kwargs, weights)

        return _own_code(wrapper, forward)

    return decorate
