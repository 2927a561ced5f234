"""What `derive conform` is pointed at: a target named on the command line, and its kind.

A TARGET is ``module:attribute`` (imported) or ``path/to/file.py:attribute`` (loaded from the
file, its folder on the import path while it loads); the attribute may be dotted. It is one of

- ``sdpa``: a function f(q, k, v, ...) of tensors (batch, heads, n, c), like
  `torch.nn.functional.scaled_dot_product_attention`; the options it accepts (``attn_mask``,
  ``is_causal``, ``scale``) are read from its signature (or, for a built-in, its docstring);
- ``module``: an `nn.Module` mapping x (batch, n, d) to (batch, n, d_out), its weights found by
  an adapter (`derive.conformance.read.adapters`);
- ``self``: one of this package's own `attention` modules (a module, recognised by its class).

A function with no required argument is a factory: it is called, and what it returns is checked.
A function may be a functools.partial (of a built-in too), a bound method or a lambda; what
torch.compile returns is checked through the original it wraps, run eagerly (the report says so).
Nothing but the target is imported or run.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ...graph.user_code import UserCodeError, import_file, import_named

__all__ = ["ConformError", "Target", "load", "recognise", "KINDS", "sdpa_options", "says_causal"]

KINDS = ("sdpa", "module", "self")
#: The options of a scaled-dot-product function that conform uses when it accepts them.
SDPA_OPTIONS = ("attn_mask", "is_causal", "scale")


class ConformError(ValueError):
    """Bad input to `derive conform`: a target that cannot be loaded or called, an adapter that
    cannot find the weights. The message says what was expected and what was found."""


@dataclass(frozen=True)
class Target:
    """A target and what it is.

    Attributes:
        obj: the function or module, as given (conform works on a copy of a module).
        kind: ``"sdpa"``, ``"module"`` or ``"self"``.
        name: how reports name it.
        options: for ``sdpa``, which of ``attn_mask``, ``is_causal``, ``scale`` it accepts.
        notes: what the report should say about how the target was read (torch.compile's).
    """

    obj: Any
    kind: str
    name: str
    options: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()


def load(spec: str) -> Any:
    """The object a TARGET string names (``module:attribute`` or ``file.py:attribute``)."""
    where, colon, attribute = spec.rpartition(":")
    if not colon or not where or not attribute:
        raise ConformError(
            f"target must be 'module:attribute' or 'path/to/file.py:attribute', got {spec!r}"
        )
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _from_file(Path(where))
    else:
        try:
            module = import_named(where)
        except UserCodeError as error:
            raise ConformError(str(error)) from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            known = ", ".join(n for n in dir(found) if not n.startswith("_"))[:200]
            raise ConformError(f"{where} has no attribute {attribute!r} (it has: {known})")
        found = getattr(found, part)
    return found


def _from_file(path: Path) -> Any:
    if not path.is_file():
        raise ConformError(f"no file {str(path)!r} (target 'path/to/file.py:attribute')")
    name = "_conform_target_" + "".join(ch if ch.isalnum() else "_" for ch in path.stem)
    try:
        return import_file(path, name)
    except UserCodeError as error:
        raise ConformError(str(error)) from None


def _signature(function: Any) -> inspect.Signature | None:
    """The signature, or for a built-in the one the first line of its docstring gives (also
    under a functools.partial: what the partial leaves to give)."""
    if isinstance(function, functools.partial):
        return _partial_signature(function)
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        pass
    first = (getattr(function, "__doc__", None) or "").strip().split("->")[0].strip()
    try:
        tree = ast.parse(f"def {first}: pass")
    except SyntaxError:
        return None
    arguments = tree.body[0].args  # type: ignore[attr-defined]
    required = len(arguments.args) - len(arguments.defaults)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [
            inspect.Parameter(a.arg, kind)
            if i < required
            else inspect.Parameter(a.arg, kind, default=None)
            for i, a in enumerate(arguments.args)
        ]
        + [
            inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY, default=None)
            for a in arguments.kwonlyargs
        ]
    )


def _partial_signature(partial: functools.partial) -> inspect.Signature | None:
    """What a partial of `partial.func` still takes: inspect's reading of a partial, applied
    to the signature `_signature` finds for the function (a built-in's from its docstring)."""
    inner = _signature(partial.func)
    if inner is None:
        return None

    def stand_in(*args: Any, **keywords: Any) -> None:
        """Takes what `partial.func` takes (its __signature__)."""

    stand_in.__signature__ = inner  # type: ignore[attr-defined]
    try:
        return inspect.signature(functools.partial(stand_in, *partial.args, **partial.keywords))
    except (TypeError, ValueError):  # the partial binds what the function does not take
        return None


def sdpa_options(function: Any) -> frozenset[str]:
    """Which of attn_mask, is_causal, scale the function takes by keyword."""
    signature = _signature(function)
    if signature is None:
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return frozenset(SDPA_OPTIONS)
    return frozenset(name for name in SDPA_OPTIONS if name in signature.parameters)


def _positional(function: Any) -> tuple[int, int]:
    """(required positional parameters, all positional parameters); (-1, -1) if unknown."""
    signature = _signature(function)
    if signature is None:
        return -1, -1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in signature.parameters.values() if p.kind in kinds]
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        return sum(p.default is inspect.Parameter.empty for p in positional), 1_000
    return sum(p.default is inspect.Parameter.empty for p in positional), len(positional)


def _uncompiled(obj: Any) -> tuple[Any, str]:
    """What torch.compile wrapped, and a note saying it is checked instead; (obj, "") if it
    is not compiled. Checked eagerly: the same formulas, without a compile for every shape."""
    if type(obj).__name__ == "OptimizedModule" and hasattr(obj, "_orig_mod"):
        where = "_orig_mod"
    elif callable(getattr(obj, "_torchdynamo_orig_callable", None)):
        where = "_torchdynamo_orig_callable"
    else:
        return obj, ""
    note = (
        f"torch.compile: checked the original it wraps ({where}), run eagerly; "
        "the compiled code was not run"
    )
    return getattr(obj, where), note


def _display_name(obj: Any) -> str:
    """How a report names an object given as such: its qualified name; a partial with what
    it binds (``functools.partial(f, enable_gqa=True)``)."""
    if isinstance(obj, functools.partial):
        bound = [_short(value) for value in obj.args]
        bound += [f"{key}={_short(value)}" for key, value in obj.keywords.items()]
        return f"functools.partial({', '.join([_display_name(obj.func), *bound])})"
    qualname: str | None = getattr(obj, "__qualname__", None)
    return qualname or type(obj).__name__


def _short(value: Any) -> str:
    written = repr(value)
    return written if len(written) <= 24 else f"<{type(value).__name__}>"


def recognise(obj: Any, kind: str | None = None, name: str | None = None) -> Target:
    """What `obj` is (or `kind` says it is); a factory is called first."""

    if kind is not None and kind not in KINDS:
        raise ConformError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    original, how = _uncompiled(obj)
    if how:
        target = recognise(original, kind, name or f"torch.compile({_display_name(original)})")
        return dataclasses.replace(target, notes=(how, *target.notes))
    name = name or _display_name(obj)
    owner = getattr(obj, "__self__", None)
    calls = (getattr(type(owner), "forward", None), nn.Module.__call__)
    if isinstance(owner, nn.Module) and getattr(obj, "__func__", None) in calls:
        return recognise(owner, kind, name)  # module.forward: the module, called as itself
    if isinstance(obj, type):
        raise ConformError(
            f"{name} is a class; conform needs an instance (or a function that builds one, "
            "such as `build = lambda: MyAttention(64, 64, 4)`)"
        )
    if isinstance(obj, nn.Module) and kind != "sdpa":
        ours = type(obj).__module__.split(".")[0] == "attention"
        if kind == "self" and not ours:
            raise ConformError(
                f"--kind self is for this package's own attention modules; "
                f"{name} is {type(obj).__module__}.{type(obj).__name__}"
            )
        return Target(obj, "self" if ours else "module", name)
    if not callable(obj):
        raise ConformError(
            f"{name} is of type {type(obj).__name__}: expected a function or an nn.Module"
        )
    required, total = _positional(obj)
    if kind in (None, "sdpa") and (total >= 3 or kind == "sdpa"):
        if 0 <= required and required > 3:
            raise ConformError(
                f"{name} requires {required} positional arguments; an attention "
                "function takes q, k, v (and options by keyword)"
            )
        return Target(obj, "sdpa", name, sdpa_options(obj))
    if required == 0:
        try:
            built = obj()
        except Exception as error:  # noqa: BLE001 - the target's own failure
            raise ConformError(
                f"calling {name}() failed: {type(error).__name__}: {error}"
            ) from None
        return recognise(built, kind, f"{name}()")
    takes = (
        "its signature cannot be read: say --kind sdpa if it is f(q, k, v, ...)"
        if required < 0
        else f"it takes {required} required arguments"
    )
    raise ConformError(
        f"{name} is neither an nn.Module, a function f(q, k, v, ...) nor a function with no "
        f"arguments that builds one ({takes})"
    )


def says_causal(module: Any) -> str | None:
    """Where a module says it is a decoder's (causal) layer: `is_causal`, its config's
    `is_decoder`, or its class's name; None where it says nothing."""
    config = getattr(module, "config", None)
    name = type(module).__name__
    if getattr(module, "is_causal", None) is True:
        return f"{name} says is_causal = True"
    if getattr(config, "is_decoder", None) is True:
        return f"{name}'s config says is_decoder = True"
    if "causal" in name.lower() or "decoder" in name.lower():
        return f"{name} says it is causal by its name"
    return None
