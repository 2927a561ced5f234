"""What SymPy derives from a graph of declarations: the matrix form of each step
(`matrix_form`), the backward pass at symbolic sizes (`backward`), compositions, and the
operation and FLOP counts."""

from .compose import composed_expression, inline
from .counts import flop_count, operation_count, step_flops
from .forward import Step, steps
from .indices import canonical_sums, element_of, readable_sums, under_ranges, zero_based
from .matrix_form import NoMatrixForm, matrix_form
from .naming import book_indices
from .reverse import (
    KINK_CONVENTION,
    Contribution,
    Gradient,
    almost_everywhere,
    backward,
    has_kinks,
)

__all__ = [
    "Contribution",
    "KINK_CONVENTION",
    "has_kinks",
    "almost_everywhere",
    "Gradient",
    "NoMatrixForm",
    "Step",
    "backward",
    "book_indices",
    "canonical_sums",
    "readable_sums",
    "composed_expression",
    "element_of",
    "flop_count",
    "inline",
    "matrix_form",
    "operation_count",
    "step_flops",
    "steps",
    "under_ranges",
    "zero_based",
]
