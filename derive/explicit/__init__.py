"""Concrete sizes: the declarations instantiated entry by entry, their values (exact or 30-digit),
the backward pass by the chain rule, and its agreement with the forms derived at symbolic sizes."""

from .forward import ExplicitGraph
from .gradients import MAX_GRADIENT_SIZE, ExplicitGradients, GradientStep
from .instantiate import ExplicitStep
from .sizes import MAX_SIZE
from .values import Values

__all__ = [
    "MAX_GRADIENT_SIZE",
    "MAX_SIZE",
    "ExplicitGradients",
    "ExplicitGraph",
    "ExplicitStep",
    "GradientStep",
    "Values",
]
