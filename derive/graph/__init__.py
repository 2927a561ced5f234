"""What attention is: the declarations of its steps (the only hand-entered mathematics), the
stated assumptions of the facts, and the one registry of variants they form (self-attention,
causal, masked, multi-head, the book's later variants, and the user's own)."""

from .attention import STEP_NAMES
from .declaration import Declaration, Graph
from .entry import Entry
from .fitting import explicit_sizes
from .loading import load_variant
from .registry import (
    DeclarationError,
    declared,
    entry_name,
    register_variant,
    self_attention,
    variants,
)
from .variant import Document, Group, Show, Variant

# isort: split
# the built-in entries, each registering the letters it declares (`derive.notation.letters`)
# before anything prints or reads them
from . import entries as _entries  # noqa: E402, F401

# isort: split
# `variant`, the registry's look-up, bound after the submodule of the same name (.variant) so
# that the name is the function, whatever order the submodules were first imported in
from .registry import variant

__all__ = [
    "Declaration",
    "Graph",
    "STEP_NAMES",
    "self_attention",
    "Variant",
    "Entry",
    "Document",
    "Group",
    "Show",
    "variant",
    "variants",
    "register_variant",
    "load_variant",
    "explicit_sizes",
    "DeclarationError",
    "entry_name",
    "declared",
]
