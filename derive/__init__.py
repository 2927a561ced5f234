"""Symbolic half of attention-derive: self-attention derived step by step with SymPy.

The pipeline reads top to bottom: notation (`_notation`) -> steps (`_steps`, `_explicit`) ->
facts (`_facts`) -> printer (`_latex`) -> documents (`_sections`, `_documents`, `_blocks`) ->
the `derive` command (`cli`). Importing `derive` never imports torch; only the
bridge functions (`check_against_torch`, `torch_steps`, the worked example) import torch and
`attention`, when they are called.
"""

from ._backward_facts import backward_facts, rowsum_identity, softmax_backward, softmax_jacobian
from ._backward_steps import backward_steps
from ._check import Comparison, check_against_torch, compare, dyadic_inputs, torch_steps
from ._check_backward import check_gradients_against_torch, gradient_inputs, torch_gradient_steps
from ._documents import DocumentOptions, latex_document, markdown_document
from ._explicit import ExplicitAttention, ExplicitStep, explicit_attention
from ._facts import (
    Fact,
    composed_expression,
    facts,
    flop_count,
    operation_count,
    rows_sum_to_one,
    score_variance,
    shift_invariance,
)
from ._gradient_steps import GradientStep
from ._gradients import MAX_GRADIENT_SIZE, ExplicitGradients, explicit_gradients
from ._latex import AttentionPrinter, latex
from ._sizes import MAX_SIZE
from ._steps import STEP_NAMES, Concat, Softmax, Step, steps
from ._values import Values

__all__ = [
    "MAX_GRADIENT_SIZE",
    "MAX_SIZE",
    "STEP_NAMES",
    "AttentionPrinter",
    "Comparison",
    "Concat",
    "DocumentOptions",
    "ExplicitAttention",
    "ExplicitGradients",
    "ExplicitStep",
    "Fact",
    "GradientStep",
    "Softmax",
    "Step",
    "Values",
    "backward_facts",
    "backward_steps",
    "check_against_torch",
    "check_gradients_against_torch",
    "compare",
    "composed_expression",
    "dyadic_inputs",
    "explicit_attention",
    "explicit_gradients",
    "facts",
    "flop_count",
    "gradient_inputs",
    "latex",
    "latex_document",
    "markdown_document",
    "operation_count",
    "rows_sum_to_one",
    "rowsum_identity",
    "score_variance",
    "shift_invariance",
    "softmax_backward",
    "softmax_jacobian",
    "steps",
    "torch_gradient_steps",
    "torch_steps",
]
