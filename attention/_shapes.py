"""Shape names, runtime checks and the errors they raise.

Every public boundary of `attention` is annotated with jaxtyping in the book's letters:

    n  tokens            d  input width        c  context width (per head: c_h)
    h  heads             *batch  any leading batch dimensions
    s  keys of another sequence Y, of width d_y (cross-attention)
    t  new tokens, m  cached tokens, m_next  cached tokens after a step (generation)

Checks run with jaxtyping + beartype (the decorators are in `attention._checks`). Before those,
`check_tensors` here binds the letters itself so that a mismatch names the function, both
arguments, the letter and both sizes ("x has d=4 but w_q has d=3"; jaxtyping's own message does
not name the dimension), and rejects what jaxtyping lets through: integer or bool tensors where
floats are expected, float tensors whose dtypes disagree, tensors on different devices.

Turning checks off uses jaxtyping's own switch, read at call time:

    JAXTYPING_DISABLE=1 python ...                      # for a whole process
    jaxtyping.config.update("jaxtyping_disable", True)  # from Python, at any time

With checks off every public function and `forward` calls straight into the computation.
"""

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Any, TypeAlias, TypeVar

import torch
from jaxtyping import config as jaxtyping_config
from torch import Tensor

__all__ = [
    "AttentionError",
    "ShapeError",
    "DtypeError",
    "DeviceError",
    "checks_enabled",
    "check_tensors",
    "check_result",
    "tensor_pair",
    "pair_parts",
]


class AttentionError(Exception):
    """Base class of the errors raised for bad input to `attention`."""


class ShapeError(AttentionError, ValueError):
    """A tensor has the wrong number of dimensions or a size that disagrees with another."""


class DtypeError(AttentionError, TypeError):
    """A tensor has the wrong kind of dtype, or float dtypes disagree between arguments."""


class DeviceError(AttentionError, ValueError):
    """Tensors that must meet in one computation live on different devices."""


def checks_enabled() -> bool:
    """Whether the runtime checks are on.

    Returns:
        True unless checks were turned off with jaxtyping's switch (see the module docstring).
    """
    return not jaxtyping_config.jaxtyping_disable


# ---------------------------------------------------------------------------------------------
# Reading jaxtyping annotations


def _array_annotations(annotation: Any) -> list[Any]:
    """The jaxtyping array types in `annotation`: itself, or the members of a union (`| None`)."""
    if hasattr(annotation, "dim_str"):
        return [annotation]
    return [arg for arg in typing.get_args(annotation) if hasattr(arg, "dim_str")]


def tensor_pair(annotation: Any) -> tuple[Any, ...]:
    """The array types of an annotation that is a tuple of them (`tuple[Float[...], Float[...]]`,
    or that `| None`): the cache of `decode_step`; () for any other annotation."""
    for member in (annotation, *typing.get_args(annotation)):
        parts = typing.get_args(member) if typing.get_origin(member) is tuple else ()
        if parts and all(hasattr(part, "dim_str") for part in parts):
            return parts
    return ()


def record_fields(annotation: Any) -> dict[str, Any]:
    """The tensor fields of an annotation that is a record (a dataclass whose fields carry
    jaxtyping annotations, such as `LayerWeights`), or that `| None`: {field: annotation};
    {} for any other annotation."""
    for member in (annotation, *typing.get_args(annotation)):
        if isinstance(member, type) and dataclasses.is_dataclass(member):
            return {
                field.name: field.type
                for field in dataclasses.fields(member)
                if _array_annotations(field.type)
            }
    return {}


def record_parts(where: str, name: str, value: Any, hint: Any) -> dict[str, tuple[Any, Any]]:
    """A record's tensors for `check_tensors`, named `name.field`; nothing for None where the
    annotation allows it; TypeError for a value of another type."""
    if value is None and _is_optional(hint):
        return {}
    kind: type = next(
        m
        for m in (hint, *typing.get_args(hint))
        if isinstance(m, type) and dataclasses.is_dataclass(m)
    )
    if not isinstance(value, kind):
        raise TypeError(f"{where}: {name} must be a {kind.__name__}, got {type(value).__name__}")
    return {
        f"{name}.{field}": (getattr(value, field), annotation)
        for field, annotation in record_fields(hint).items()
    }


def pair_parts(where: str, name: str, value: Any, hint: Any) -> dict[str, tuple[Any, Any]]:
    """A tuple of tensors as its parts for `check_tensors`, named `name[0]`, `name[1]`, …;
    nothing for None where the annotation allows it; TypeError for anything else."""
    parts = tensor_pair(hint)
    if value is None and _is_optional(hint):
        return {}
    if type(value) is not tuple or len(value) != len(parts):
        shapes = ", ".join(_describe(_letters(part.dim_str)) for part in parts)
        optional = "None or " if _is_optional(hint) else ""
        got = "None" if value is None else type(value).__name__
        if type(value) is tuple:
            got = f"a tuple of {len(value)}"
        raise TypeError(
            f"{where}: {name} must be {optional}a tuple of {len(parts)} tensors of shapes "
            f"{shapes}, got {got}"
        )
    return {f"{name}[{index}]": (part, parts[index]) for index, part in enumerate(value)}


def _is_bool_annotation(annotation: Any) -> bool:
    return "bool" in annotation.dtypes


def _plain(value: Any, annotation: Any) -> bool:
    """True for a bool or a number where the annotation admits one beside a tensor
    (`bool | Float[...]`: ALiBi's default slopes; `float | Float[Tensor, ""]`: a slope)."""
    kind = type(value)
    if kind not in (bool, int, float):
        return False
    admitted = typing.get_args(annotation)
    return kind in admitted or (kind is int and float in admitted)


def _is_optional(annotation: Any) -> bool:
    """True for an annotation that admits None (`Float[Tensor, "c"] | None`)."""
    return type(None) in typing.get_args(annotation)


@functools.cache
def _letters(dim_str: str) -> tuple[str, ...]:
    """'*batch n d' -> ('*batch', 'n', 'd'); numbers stay as their decimal strings."""
    return tuple(dim_str.split())


def _describe(letters: tuple[str, ...]) -> str:
    return "(" + ", ".join(letter.replace("#", "") for letter in letters) + ")"


# ---------------------------------------------------------------------------------------------
# The checks


def _check_kind(where: str, name: str, tensor: Any, annotation: Any) -> None:
    if not isinstance(tensor, Tensor):
        got = "None" if tensor is None else type(tensor).__name__
        raise TypeError(
            f"{where}: {name} must be a torch.Tensor of shape "
            f"{_describe(_letters(annotation.dim_str))}, got {got}"
        )
    if tensor.is_nested or tensor.layout != torch.strided:  # sparse, nested (jagged) tensors
        kind = "nested" if tensor.is_nested else str(tensor.layout).removeprefix("torch.")
        raise TypeError(
            f"{where}: {name} must be a dense tensor, got a {kind} one; convert it first "
            f"({name}.to_dense(), or pad a nested tensor with its .to_padded_tensor(0.0))"
        )
    if _is_bool_annotation(annotation):
        if tensor.dtype != torch.bool:
            raise DtypeError(
                f"{where}: {name} must be a bool tensor (True = may attend), got {tensor.dtype}"
            )
    elif not tensor.is_floating_point():
        raise DtypeError(
            f"{where}: {name} must be a floating-point tensor, got {tensor.dtype}; "
            f"convert it first, e.g. {name}.float()"
        )


def _bind(
    where: str, items: list[tuple[str, Tensor, str]], bindings: dict[str, Any]
) -> dict[str, Any]:
    """Bind each dimension letter to a size, raising ShapeError at the first disagreement.

    `bindings` maps a letter to (size, name of the argument that bound it); '*batch' binds a tuple.
    '*#batch' (a mask's) broadcasts against '*batch' as torch broadcasts, right-aligned, each of
    its sizes 1 or the same, never more dimensions (`check_tensors` binds the masks last).
    """
    for name, tensor, dim_str in items:
        letters = _letters(dim_str)
        shape = tuple(tensor.shape)
        variadic = [i for i, letter in enumerate(letters) if letter.startswith("*")]
        fixed = len(letters) - len(variadic)
        if len(shape) < fixed or (not variadic and len(shape) != fixed):
            expected = _describe(letters)
            raise ShapeError(
                f"{where}: {name} must have shape {expected}"
                f"{' (any leading batch dimensions)' if variadic else ''}, "
                f"got {len(shape)} dimension(s) {shape}"
            )
        head = variadic[0] if variadic else len(letters)
        tail = len(letters) - head - (1 if variadic else 0)
        pairs: list[tuple[str, Any]] = list(zip(letters[:head], shape[:head], strict=True))
        if variadic:
            pairs.append((letters[head], shape[head : len(shape) - tail]))
        pairs += list(zip(letters[len(letters) - tail :], shape[len(shape) - tail :], strict=True))
        for letter, size in pairs:
            if letter.isdigit():
                if size != int(letter):
                    raise ShapeError(
                        f"{where}: {name} must have size {letter} here, got {size} (shape {shape})"
                    )
                continue
            if letter.startswith("*#"):
                _broadcast(where, name, shape, letters, "*" + letter[2:], size, bindings)
                continue
            bound = bindings.get(letter)
            if bound is None:
                bindings[letter] = (size, name)
                continue
            if bound[0] != size:
                label = letter.lstrip("*")
                raise ShapeError(
                    f"{where}: {name} has {label}={_size(size)} but {bound[1]} has "
                    f"{label}={_size(bound[0])} ({name}: shape {shape}, expected "
                    f"{_describe(letters)})"
                )
    return bindings


def _broadcast(
    where: str, name: str, shape: tuple, letters: tuple, letter: str, size: tuple, bindings: dict
) -> None:
    """`size`, the leading dimensions of `name`, broadcast to those `letter` is bound to (or bind
    it, where nothing else did); ShapeError naming both arguments otherwise."""
    bound = bindings.get(letter)
    if bound is None:
        bindings[letter] = (size, name)
        return
    target = tuple(bound[0])
    fits = len(size) <= len(target) and all(
        mine in (1, theirs) for mine, theirs in zip(size[::-1], target[::-1], strict=False)
    )
    if not fits:
        label = letter.lstrip("*")
        raise ShapeError(
            f"{where}: {name} has {label}={_size(size)}, which does not broadcast to "
            f"{bound[1]}'s {label}={_size(target)} ({name}: shape {shape}, expected "
            f"{_describe(letters)} with leading dimensions of size 1 or {bound[1]}'s, or fewer)"
        )


def _hint_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint)


def _size(size: int | tuple[int, ...]) -> str:
    return str(size) if isinstance(size, int) else str(tuple(size))


def check_tensors(
    where: str,
    tensors: Mapping[str, tuple[Any, Any]],
    bindings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check named tensors against their jaxtyping annotations; return the letter bindings.

    `tensors` maps the name shown in errors to (tensor or None, annotation). None is skipped
    where the annotation admits it (`... | None`: an optional argument left out), and so is a
    bool or a number where it admits one (`bool | Float[...]`: ALiBi's default slopes or given
    ones; `float | Float[Tensor, ""]`: a slope); None is refused
    with a TypeError that names the argument everywhere else. An annotation that is a union of
    array types accepts the first member that binds. Kind (float or
    bool), dtype agreement between the float tensors, device agreement, every dimension letter,
    and sizes of at least 1 are checked, in that order; the first problem raises an
    `AttentionError` (or `TypeError` for a non-tensor) that names it.
    """
    present = [
        (name, tensor, _array_annotations(annotation))
        for name, (tensor, annotation) in tensors.items()
        if not (tensor is None and _is_optional(annotation)) and not _plain(tensor, annotation)
    ]
    # the masks, whose batch broadcasts against the others' ('*#batch'), once those are bound
    present.sort(key=lambda item: any("*#" in c.dim_str for c in item[2]))
    for name, tensor, candidates in present:
        _check_kind(where, name, tensor, candidates[0])
    # each entry's tensor is a Tensor now: _check_kind raised for anything else
    present = typing.cast("list[tuple[str, Tensor, list[Any]]]", present)
    floats = [
        (name, t)
        for name, t, c in present
        if not _is_bool_annotation(c[0]) and not _keeps_own_dtype(c[0])
    ]
    for name, tensor in floats[1:]:
        if tensor.dtype != floats[0][1].dtype:
            raise DtypeError(
                f"{where}: {name} has dtype {tensor.dtype} but {floats[0][0]} has "
                f"{floats[0][1].dtype}; all float arguments must share one dtype"
            )
    for name, tensor, _ in present[1:]:
        if tensor.device != present[0][1].device:
            raise DeviceError(
                f"{where}: {name} is on {tensor.device} but {present[0][0]} is on "
                f"{present[0][1].device}; move them to one device"
            )
    bindings = {} if bindings is None else bindings
    for name, tensor, candidates in present:
        try:
            _bind_one_of(where, name, tensor, candidates, bindings)
        except ShapeError as error:
            raise ShapeError(f"{error}{_fits_elsewhere(name, tensor, tensors, bindings)}") from None
    for letter, (size, name) in bindings.items():
        if size == 0 or (isinstance(size, tuple) and 0 in size):
            raise ShapeError(
                f"{where}: {name} has {letter.lstrip('*')}={_size(size)}; "
                f"every dimension must be at least 1"
            )
    return bindings


def _fits_elsewhere(
    name: str, tensor: Tensor, tensors: Mapping[str, tuple[Any, Any]], bindings: dict[str, Any]
) -> str:
    """A hint when a misfit tensor would fit an optional argument left out (a key-padding mask
    given as `mask`) and takes its dtype, else ''. A record's field (`weights.b_o`) gets none:
    it is no argument that could have been given in another's place."""
    if "." in name:
        return ""
    kind = str(tensor.dtype).removeprefix("torch.")
    for other, (value, annotation) in tensors.items():
        if other == name or value is not None or not _is_optional(annotation) or "." in other:
            continue  # (a record's field left out is no argument to give instead)
        for candidate in _array_annotations(annotation):
            if kind not in getattr(candidate, "dtypes", (kind,)):
                continue  # a float tensor is no mask, a bool one no bias
            try:
                _bind("", [(other, tensor, candidate.dim_str)], dict(bindings))
            except ShapeError:
                continue
            return f"; its shape fits {other} {_describe(_letters(candidate.dim_str))}"
    return ""


def _bind_one_of(
    where: str, name: str, tensor: Tensor, candidates: list[Any], bindings: dict[str, Any]
) -> None:
    if len(candidates) == 1:
        _bind(where, [(name, tensor, candidates[0].dim_str)], bindings)
        return
    for candidate in candidates:
        trial = dict(bindings)
        try:
            _bind(where, [(name, tensor, candidate.dim_str)], trial)
        except ShapeError:
            continue
        bindings.update(trial)
        return
    expected = " or ".join(_describe(_letters(c.dim_str)) for c in candidates)
    known = ", ".join(f"{k.lstrip('*')}={_size(v[0])}" for k, v in bindings.items())
    raise ShapeError(
        f"{where}: {name} has shape {tuple(tensor.shape)}, expected {expected} with {known}"
    )


def check_result(where: str, name: str, result: Tensor, annotation: Any, bindings: dict) -> None:
    """Check a returned tensor against the bindings made from the arguments; the letters it
    binds first are added to `bindings` (the caller passes a copy)."""
    _bind(where, [(name, result, _array_annotations(annotation)[0].dim_str)], bindings)


# ---------------------------------------------------------------------------------------------
# Tensors that keep a float dtype of their own


class _OwnDtype:
    """The marker `OwnDtype` puts in `typing.Annotated` metadata."""

    def __repr__(self) -> str:
        return "own dtype"


OWN_DTYPE = _OwnDtype()
_Annotation = TypeVar("_Annotation")

#: `OwnDtype[annotation]`: `annotation`, for a tensor whose float dtype need not be the call's: a
#: table or a gain that a model keeps in float32 beside bfloat16 activations and computes with in
#: float32 (the book's Qwen 3 keeps RoPE's cos and sin, and its RMSNorm gains, so). Kind, shape
#: and device are checked as for any tensor; only the dtype agreement of `check_tensors` leaves
#: it out. (A generic alias, `typing.Annotated[annotation, OWN_DTYPE]` once subscripted, so that
#: type checkers read it as the annotation it wraps.)
OwnDtype: TypeAlias = typing.Annotated[_Annotation, OWN_DTYPE]


def _keeps_own_dtype(annotation: Any) -> bool:
    return typing.get_origin(annotation) is typing.Annotated and any(
        meta is OWN_DTYPE for meta in typing.get_args(annotation)[1:]
    )
