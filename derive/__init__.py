"""attention-derive's symbolic half: self-attention and its variants declared once, derived by
SymPy.

One dialect: a variant is named, as the registry names it (``"causal+multi-head"``,
``"gqa+rope"``, a user's ``"path/to/file.py:NAME"`` once loaded), and every function takes that
name. The public face:

- the registry: `variant` (a name resolved into an `Entry`: its graph, claims, sizes, twins),
  `variants`, `register_variant`, `load_variant`, `Variant`, `Entry`;
- declaring your own: `declare` (the module), `DeclarationError` (a mistake in a declaration),
  `DerivationError` (derive could not do what a declaration asks);
- what SymPy derives: `steps` (each step with its matrix form), `backward_steps` (the gradients
  at symbolic sizes), `facts` (each claim proved), `explicit_variant` and `explicit_gradients`
  (concrete sizes, entry by entry), `latex` (the printer);
- documents: `DocumentOptions`, `document` (LaTeX, Markdown or an HTML page);
- code: `torch_function` (a variant's forward generated from its declaration, its derived
  gradients as the backward), `torch_module` (the same with its weights as parameters) and
  `score_mod` (a variant's rule on the scores, with its derived derivative, for
  `attention.mods`, FlexAttention and FlashAttention 4);
- against torch: `check` (every step and gradient with the twins), `conform` (anyone's
  attention against the derivation), `Report`, `ConformError`, `Weights`, `register_adapter`;
  `derive.testing` has `assert_conforms` for a test suite.

Everything else lives in the layer that computes it (`derive.notation`, `derive.graph`,
`derive.calculus`, `derive.proofs`, `derive.explicit`, `derive.render`) or in a wing beside them
(`derive.bridge`, `derive.conformance`) and is imported from there. ``import derive`` loads
nothing but this page: each name is imported when it is first used (the symbolic layers then,
torch and the renderers only for what needs them), so that ``import derive.graph.registry``
and the command line start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "variant",
    "variants",
    "register_variant",
    "load_variant",
    "Variant",
    "Entry",
    "declare",
    "DeclarationError",
    "DerivationError",
    "steps",
    "backward_steps",
    "facts",
    "explicit_variant",
    "explicit_gradients",
    "latex",
    "DocumentOptions",
    "document",
    "torch_function",
    "torch_module",
    "score_mod",
    "check",
    "conform",
    "Report",
    "ConformError",
    "Weights",
    "register_adapter",
]

#: Where each public name lives: (module, attribute; None for the module itself).
_WHERE = {
    "variant": ("derive.graph.registry", "variant"),
    "variants": ("derive.graph.registry", "variants"),
    "register_variant": ("derive.graph.registry", "register_variant"),
    "load_variant": ("derive.graph.loading", "load_variant"),
    "Variant": ("derive.graph.variant", "Variant"),
    "Entry": ("derive.graph.entry", "Entry"),
    "declare": ("derive.declare", None),
    "DeclarationError": ("derive.graph.errors", "DeclarationError"),
    "DerivationError": ("derive.graph.errors", "DerivationError"),
    "steps": ("derive.public", "steps"),
    "backward_steps": ("derive.public", "backward_steps"),
    "facts": ("derive.public", "facts"),
    "explicit_variant": ("derive.explicit.named", "explicit_variant"),
    "explicit_gradients": ("derive.explicit.named", "explicit_gradients"),
    "latex": ("derive.notation.printer", "latex"),
    "DocumentOptions": ("derive.render.documents", "DocumentOptions"),
    "document": ("derive.public", "document"),
    "torch_function": ("derive.bridge.generated", "torch_function"),
    "torch_module": ("derive.bridge.generated", "torch_module"),
    "score_mod": ("derive.bridge.score_mod", "score_mod"),
    "check": ("derive.bridge.check", "check"),
    "conform": ("derive.conformance", "conform"),
    "Report": ("derive.conformance", "Report"),
    "ConformError": ("derive.conformance", "ConformError"),
    "Weights": ("derive.conformance", "Weights"),
    "register_adapter": ("derive.conformance", "register_adapter"),
}


#: The subpackages and modules, imported when first named (``derive.calculus.flop_count``).
_MODULES = (
    "notation",
    "graph",
    "calculus",
    "proofs",
    "explicit",
    "render",
    "codegen",
    "bridge",
    "conformance",
    "cli",
    "testing",
    "public",
)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"derive.{name}")
    if name not in _WHERE:
        raise AttributeError(f"module 'derive' has no attribute {name!r}")
    module, attribute = _WHERE[name]
    found = importlib.import_module(module)
    value = found if attribute is None else getattr(found, attribute)
    globals()[name] = value  # once imported, an attribute like any other
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what a type checker and an editor see
    from . import declare
    from .bridge.check import check
    from .bridge.generated import torch_function, torch_module
    from .bridge.score_mod import score_mod
    from .conformance import ConformError, Report, Weights, conform, register_adapter
    from .explicit.named import explicit_gradients, explicit_variant
    from .graph.entry import Entry
    from .graph.errors import DeclarationError, DerivationError
    from .graph.loading import load_variant
    from .graph.registry import register_variant, variant, variants
    from .graph.variant import Variant
    from .notation.printer import latex
    from .public import backward_steps, document, facts, steps
    from .render.documents import DocumentOptions
