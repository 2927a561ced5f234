"""What SymPy proves about a graph: each fact a claim and the chain of equations that derives
it from the declarations (and, for the variance, from the stated assumptions)."""

from .fact import Fact
from .rowsum import rowsum_identity
from .softmax import rows_sum_to_one, shift_invariance, softmax_jacobian, weights_element
from .variance import scaled_score_variance, score_variance

__all__ = [
    "Fact",
    "rows_sum_to_one",
    "rowsum_identity",
    "scaled_score_variance",
    "score_variance",
    "shift_invariance",
    "softmax_jacobian",
    "weights_element",
    "facts",
]


def facts(graph) -> tuple[Fact, ...]:
    """The facts a document states about the forward steps of `graph`, in order."""
    return (
        rows_sum_to_one(graph),
        shift_invariance(graph),
        score_variance(graph),
        scaled_score_variance(graph),
    )
