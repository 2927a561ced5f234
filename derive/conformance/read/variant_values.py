"""What a module's variant adds to a run of `derive conform`: its sizes and parameters, each the
value the adapter read or the variant's default, and the matrices it reads besides the W's."""

from __future__ import annotations

from typing import Any

import sympy as sp

from ...graph import registry
from ...graph.fitting import check_given
from ...notation import letters as L
from .target import ConformError

__all__ = [
    "variant_sizes",
    "variant_inputs",
    "at_sizes",
    "registered_names",
    "found_inputs",
    "found_values",
]

#: The sizes a run gives itself (n, d, c, h, c_h, g): never a variant's default.
_OWN = frozenset({L.n, L.d, L.c, L.h, L.c_h, L.g})


def _entry(name: str, adapter: str) -> Any:
    try:
        return registry.variant(name)
    except ValueError as error:
        raise ConformError(f"variant {name!r}: {error}") from None


def variant_sizes(name: str, values: dict[str, Any], adapter: str) -> dict:
    """Every size and parameter the variants of `name` read, by symbol: the value given in
    `values` (by the symbol's name), else the variant's default (an expression where it reads
    the run's sizes: `at_sizes` evaluates it)."""
    if not name:
        if values:
            raise ConformError(f"adapter {adapter}: values {sorted(values)} given, but no variant")
        return {}
    entry = _entry(name, adapter)
    known = {str(s.symbol): (s.symbol, s.default) for s in entry.sizes if s.symbol not in _OWN}
    known |= {str(p.symbol): (p.symbol, p.default) for p in entry.parameters}
    unknown = sorted(set(values) - set(known))
    if unknown:
        reads = ", ".join(known) or "no value"
        raise ConformError(
            f"values {unknown} (adapter {adapter}'s or given) are not read by "
            f"{name} (it reads {reads})"
        )
    try:
        check_given(entry, values)  # each within its domain (κ > 0), the conditions they decide
    except ValueError as error:
        raise ConformError(str(error)) from None
    return {
        symbol: sp.sympify(values.get(key, default)) for key, (symbol, default) in known.items()
    }


def at_sizes(values: dict, sizes: dict) -> dict:
    """Each value at the run's sizes (a default may read them: sigmoid attention's b = −log n),
    as a number."""
    at = {symbol: sp.sympify(value) for symbol, value in sizes.items()}
    found = {}
    for symbol, value in values.items():
        number = sp.sympify(value).xreplace(at)
        if number.free_symbols:
            raise ConformError(
                f"the value of {symbol}, {value}, reads a size the run does not "
                f"have ({', '.join(map(str, number.free_symbols))})"
            )
        found[symbol] = int(number) if number.is_Integer else float(number)
    return found


def registered_names(variant: str) -> str:
    """`variant` with each user's declaration (``path/to/file.py:NAME``, ``module:NAME``)
    loaded and registered, and named by its name."""
    from ...graph import DeclarationError, load_variant
    from ...graph.user_code import UserCodeError

    parts = []
    for part in (p for p in variant.split("+") if p):
        if ":" not in part:
            parts.append(part)
            continue
        try:
            parts.append(load_variant(part).name)
        except (DeclarationError, UserCodeError) as error:
            raise ConformError(f"variant {part}: {error}") from None
    return "+".join(parts)


def variant_inputs(name: str, inputs: dict[str, Any], adapter: str) -> dict[str, Any]:
    """The matrices the variants of `name` read besides X and the W's, checked present."""
    if not name:
        return {}
    graph = _entry(name, adapter).graph
    needed = [x for x in graph.inputs if x not in ("X", "W_q", "W_k", "W_v", "W_o", "M")]
    missing = [x for x in needed if x not in inputs]
    if missing:
        raise ConformError(
            f"adapter {adapter}: variant {name} reads {', '.join(missing)}; "
            "give them in Weights(inputs={...})"
        )
    extra = sorted(set(inputs) - set(needed))
    if extra:
        raise ConformError(
            f"adapter {adapter}: inputs {extra} are not read by {name} "
            f"(it reads {', '.join(needed) or 'none'})"
        )
    return {letter: inputs[letter] for letter in needed}


def _spelled(name: str) -> str:
    return name.replace("_", "").lower()


def _attribute(module: Any, path: str) -> Any:
    """The attribute at a dotted path (``"attn.lam"``), a ConformError naming it if absent."""
    found = module
    for part in path.split("."):
        if not hasattr(found, part):
            raise ConformError(f"{type(module).__name__} has no {path!r} (--param)")
        found = getattr(found, part)
    return found


def _named(module: Any, names: set[str]) -> list[tuple[str, Any]]:
    """The parameters, buffers, submodules and tensor or number attributes of `module` (at any
    depth) whose own name, case and underscores aside, is one of `names`."""
    import torch
    from torch import nn

    found: dict[str, Any] = {}
    for path, sub in module.named_modules():
        items = [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]
        items += [
            (k, v)
            for k, v in vars(sub).items()
            if isinstance(v, torch.Tensor | int | float)
            and not isinstance(v, bool)
            and not k.startswith("_")
        ]
        items += [(k, v) for k, v in sub.named_children() if isinstance(v, nn.Linear)]
        for name, value in items:
            if _spelled(name) in names:
                found.setdefault(f"{path}.{name}" if path else name, value)
    return list(found.items())


def _oriented(letter: str, value: Any, shape: tuple[int, ...], where: str) -> Any:
    """The module's tensor as the declaration's matrix: an nn.Linear's weight transposed (it
    stores Wᵀ), one number as 1 × 1, a row as 1 × k, else as it is or transposed."""
    import torch
    from torch import nn

    if isinstance(value, nn.Linear):
        value = value.weight.mT
    if not isinstance(value, torch.Tensor):
        value = torch.tensor(float(value))
    rows, cols = shape
    if value.numel() == 1 and rows * cols == 1:
        return value.reshape(1, 1)
    if value.ndim == 1 and rows == 1 and value.shape[0] == cols:
        return value[None]
    if tuple(value.shape) == (rows, cols):
        return value
    if tuple(value.shape) == (cols, rows):
        return value.mT
    raise ConformError(
        f"{where}, read as {letter}, has shape {tuple(value.shape)}; the declaration says "
        f"{rows} × {cols}"
    )


def found_inputs(variant: str, adapter: Any, params: dict[str, str]) -> Any:
    """`adapter`, reading besides its own the matrices the variants of `variant` read that it
    does not (a user's learnable s, its second W_q): each found on the module by its letter or
    its entries' name (``Lam``, ``lam``; case and underscores aside), or at the path `params`
    gives (``{"Lam": "attn.lambda_"}``); a ConformError where none or several are found."""
    import dataclasses

    if not variant:
        return adapter
    graph = _entry(variant, adapter.name).graph
    needed = [x for x in graph.inputs if x not in ("X", "W_q", "W_k", "W_v", "W_o", "M")]
    if not needed:
        return adapter
    shapes = graph.shapes
    read = adapter.weights

    def weights(module: Any) -> Any:
        found = read(module)
        c = int(found.W_q.shape[1])
        sizes = {
            L.d: int(found.W_q.shape[0]),
            L.c: c,
            L.h: found.heads,
            L.c_h: c // found.heads,
            L.g: found.groups,
        }
        unfound = []
        for letter in needed:
            if letter in found.inputs:
                continue
            entry = L.name_of(letter)
            if letter in params or entry in params:
                where = params.get(letter) or params[entry]
                value = _attribute(module, where)
            else:
                candidates = _named(module, {_spelled(letter), _spelled(entry)})
                if len(candidates) != 1:
                    said = ", ".join(path for path, _ in candidates) or "none"
                    unfound.append((letter, entry, said))
                    continue
                where, value = candidates[0]
            shape = tuple(int(sp.sympify(x).xreplace(sizes)) for x in shapes[letter])
            found.inputs[letter] = _oriented(letter, value, shape, f"{where}")
        if unfound:
            letters = ", ".join(letter for letter, _, _ in unfound)
            named = "; ".join(f"{e} (as {letter}): {said}" for letter, e, said in unfound)
            first = unfound[0][0]
            raise ConformError(
                f"adapter {adapter.name}: variant {variant} reads {letters}; give them in "
                f"Weights(inputs={{...}}), or say where {type(module).__name__} holds them "
                f"with --param {first}=attribute.path (params={{{first!r}: ...}}); its "
                f"attributes of those names: {named}"
            )
        return found

    return dataclasses.replace(adapter, weights=weights)


def found_values(variant: str, module: Any, params: dict[str, str]) -> dict[str, float]:
    """The numbers the variants of `variant` read (their parameters: a user's b, τ) that the
    module holds as an attribute of that name (a number, or a tensor of one), or at the path
    `params` gives: what it computes with, over the variant's defaults."""
    if not variant:
        return {}
    found = {}
    for parameter in _entry(variant, "").parameters:
        name = str(parameter.symbol)
        if name in params:
            value = _attribute(module, params[name])
        else:
            candidates = [
                (p, v)
                for p, v in _named(module, {_spelled(name)})
                if getattr(v, "numel", lambda: 1)() == 1
            ]
            if len(candidates) != 1:
                continue
            value = candidates[0][1]
        found[name] = float(value.item() if hasattr(value, "item") else value)
    return found
