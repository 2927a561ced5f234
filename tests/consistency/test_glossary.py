"""The glossary names every dimension string that `attention` checks at runtime."""

import inspect
import typing
from pathlib import Path

import attention
from attention import functional as F

GLOSSARY = Path(__file__).parents[2] / "docs" / "glossary.md"


def _dimension_strings(annotation):
    found = set()
    if hasattr(annotation, "dim_str"):
        found.add(" ".join(annotation.dim_str.split()))
    for argument in typing.get_args(annotation):
        found |= _dimension_strings(argument)
    return found


def _public_signatures():
    for module in (F, attention.linear):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value):
                yield inspect.signature(value)
    for name in attention.__all__:
        value = getattr(attention, name)
        if inspect.isclass(value) and hasattr(value, "forward"):
            yield inspect.signature(value.forward)


def test_every_checked_dimension_string_is_in_the_glossary():
    used = set()
    for signature in _public_signatures():
        for parameter in signature.parameters.values():
            used |= _dimension_strings(parameter.annotation)
        used |= _dimension_strings(signature.return_annotation)
    assert {"*batch n d", "d c", "*batch h n c_h"} <= used  # the collection itself works
    text = GLOSSARY.read_text(encoding="utf-8")
    missing = sorted(dims for dims in used if f'`"{dims}"`' not in text)
    assert not missing, f"docs/glossary.md lacks {missing}"
