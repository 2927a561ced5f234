"""The generated code of a document: the forward and backward functions printed from the
entry's declarations and its checked gradients (`derive.codegen.program`), as they run under
`derive.torch_function`."""

from __future__ import annotations

from ...codegen.program import program
from ...graph import Entry
from ...graph.errors import DeclarationError
from .. import prose as P
from ..blocks import Block, Code, Heading, Prose

__all__ = ["code"]


def code(entry: Entry) -> list[Block]:
    """The heading, the forward function, the backward function; a sentence saying why where a
    formula has no torch printing."""
    heading = Heading(P.CODE_HEADING)
    try:
        found = program(entry)
    except DeclarationError as error:
        return [heading, Prose(P.CODE_REFUSED.format(reason=str(error).rstrip(".")))]
    return [
        heading,
        Prose(P.CODE_TEXT),
        Code(found.forward_source),
        Prose(P.CODE_BACKWARD),
        Code(found.backward_source),
    ]
