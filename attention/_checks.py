"""Checking whole calls: the decorators on every public function and every `forward`.

`checked` and `checked_forward` check the arguments before the call (the tensors with
`check_tensors`, for messages that name the dimension; then everything through beartype, the
tensors in one jaxtyping memo), and the result after it, against the same dimension letters.

Why not `@jaxtyped(typechecker=beartype)` on each function: measured here, it costs about 130 µs
a call (it binds the signature and checks the parameters twice), against about 60 µs for the
same checks made through `beartype.door` inside a `jaxtyped("context")` memo, as below, and
about 5 µs once a call's signature has passed (see `_CallChecker`).

The checks run in functions marked `torch.compiler.disable`: under `torch.compile` they run
eagerly, outside the compiled graph, and the computation between them is compiled (jaxtyping's
own wrapper breaks Dynamo on torch 2.13).
"""

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import torch
from beartype import BeartypeConf
from beartype.door import die_if_unbearable, is_bearable
from jaxtyping import config as jaxtyping_config
from jaxtyping import jaxtyped
from torch import Tensor

from ._shapes import _array_annotations, _hint_name, check_result, check_tensors

__all__ = ["check_arguments", "check_returned", "checked", "checked_forward"]


# ---------------------------------------------------------------------------------------------
# Checking a call: arguments before, result after

#: beartype with PEP 484's numeric tower, so that `dropout_p=0` (an int) is a valid float.
_CONF = BeartypeConf(is_pep484_tower=True)

P = ParamSpec("P")
R = TypeVar("R")
Checked = Mapping[str, tuple[Any, Any]]


def check_arguments(where: str, tensors: Checked, others: Checked) -> dict[str, Any]:
    """Check one call's arguments; return the dimension bindings for `check_returned`.

    `tensors` and `others` map a name to (value, annotation): the tensors go through
    `check_tensors` (precise messages), then everything through beartype, tensors inside one
    jaxtyping memo so that their letters bind together.
    """
    for name, (value, hint) in others.items():
        if not is_bearable(value, hint, conf=_CONF):
            raise TypeError(f"{where}: {name} must be {_hint_name(hint)}, got {value!r}")
    bindings = check_tensors(where, tensors)
    with jaxtyped("context"):
        for tensor, annotation in tensors.values():
            if tensor is not None:
                die_if_unbearable(tensor, annotation, conf=_CONF)
    return bindings


def check_returned(where: str, result: Any, annotation: Any, bindings: dict) -> None:
    """Check a result against its annotation (a tensor, or a tuple of tensors in a union) and
    against the letters bound by the arguments."""
    die_if_unbearable(result, annotation, conf=_CONF)
    members = [annotation, *typing.get_args(annotation)]
    tuples = [typing.get_args(m) for m in members if typing.get_origin(m) is tuple]
    if isinstance(result, tuple) and tuples:
        for index, (part, part_annotation) in enumerate(zip(result, tuples[0], strict=True)):
            check_result(where, f"result[{index}]", part, part_annotation, bindings)
    elif isinstance(result, Tensor):
        check_result(where, "result", result, annotation, bindings)


class _CallChecker:
    """The checks of one function's calls, with a memory of the argument signatures that passed.

    Whether a call passes depends only on its arguments' shapes, dtypes and devices and on the
    types of its other arguments, so a signature that passed once passes again: the full check
    (about 60 µs, and 150 µs measured between large matrix products that evict its working set
    from the caches) runs once per new signature, later calls cost a dictionary look-up.
    """

    MEMORY = 512  # signatures kept per function; forgotten all at once when full

    def __init__(self, fn: Callable) -> None:
        self.signature = inspect.signature(fn)
        self.tensor_hints: dict[str, Any] = {}
        self.other_hints: dict[str, Any] = {}
        for name, parameter in self.signature.parameters.items():
            if _array_annotations(parameter.annotation):
                self.tensor_hints[name] = parameter.annotation
            elif parameter.annotation is not inspect.Parameter.empty:
                self.other_hints[name] = parameter.annotation
        self.returns = self.signature.return_annotation
        self.where = fn.__qualname__
        self.passed: dict[Any, dict[str, Any]] = {}
        self.returned: set[Any] = set()


def _key(value: Any) -> Any:
    """What a check depends on: shape, dtype and device of a tensor; the type of anything else."""
    if isinstance(value, Tensor):
        return (value.shape, value.dtype, value.device)
    if isinstance(value, tuple):
        return tuple(_key(part) for part in value)
    return type(value)


@torch.compiler.disable
def _check_call_arguments(
    checker: _CallChecker, args: tuple, kwargs: dict, extra: Checked
) -> tuple[Any, dict[str, Any]]:
    key = (
        tuple(_key(a) for a in args),
        tuple((name, _key(v)) for name, v in kwargs.items()),
        tuple(_key(tensor) for tensor, _ in extra.values()),
    )
    bindings = checker.passed.get(key)
    if bindings is None:
        try:
            arguments = checker.signature.bind(*args, **kwargs).arguments
        except TypeError as error:
            raise TypeError(f"{checker.where}: {error}") from None
        tensors = {name: (arguments.get(name), h) for name, h in checker.tensor_hints.items()}
        tensors.update(extra)
        others = {n: (arguments[n], h) for n, h in checker.other_hints.items() if n in arguments}
        bindings = check_arguments(checker.where, tensors, others)
        if len(checker.passed) >= checker.MEMORY:
            checker.passed.clear()
        checker.passed[key] = bindings
    return key, bindings


@torch.compiler.disable
def _check_call_result(checker: _CallChecker, key: Any, bindings: dict, result: Any) -> None:
    result_key = (key, _key(result))
    if result_key not in checker.returned:
        check_returned(checker.where, result, checker.returns, bindings)
        if len(checker.returned) >= checker.MEMORY:
            checker.returned.clear()
        checker.returned.add(result_key)


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

    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if jaxtyping_config.jaxtyping_disable:
            return fn(*args, **kwargs)
        key, bindings = _check_call_arguments(checker, args, kwargs, {})
        result = fn(*args, **kwargs)
        _check_call_result(checker, key, bindings, result)
        return result

    return _own_code(wrapper, fn)


def checked_forward(
    weights_of: Callable[[Any], Checked],
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Check every call of a module's `forward`: its arguments, the module's own weights (from
    `weights_of(self)`, named as in the state_dict) against the same dimension letters, and its
    result. Errors name the module, the argument or weight, the letter and both sizes.
    """

    def decorate(forward: Callable[..., R]) -> Callable[..., R]:
        checker = _CallChecker(forward)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> R:
            if jaxtyping_config.jaxtyping_disable:
                return forward(self, *args, **kwargs)
            key, bindings = _check_call_arguments(checker, (self, *args), kwargs, weights_of(self))
            result = forward(self, *args, **kwargs)
            _check_call_result(checker, key, bindings, result)
            return result

        return _own_code(wrapper, forward)

    return decorate
