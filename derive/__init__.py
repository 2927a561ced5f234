"""attention-derive's symbolic half: self-attention and its variants declared once, derived by
SymPy.

The package reads as its pipeline (each layer imports only the ones before it):

- `derive.notation`: the book's letters, the matrix expressions and functions SymPy lacks, the
  LaTeX printer and its line breaking;
- `derive.graph`: the declarations of the steps (the only typed-in mathematics) and the stated
  assumptions; the one registry of the variants they form (`variants()`: self-attention, causal,
  masked, multi-head, kv-cache, sliding-window, cross-attention, rope, gqa, qk-norm, mla), open
  to a user's own (`derive.declare`, `register_variant`);
- `derive.calculus`: what SymPy derives from a graph: matrix forms (`matrix_form`), the backward
  pass at symbolic sizes, compositions, operation and FLOP counts;
- `derive.proofs`: the facts and the chains of equations that derive them;
- `derive.explicit`: concrete sizes: entries, values, the chain rule, the two derivations agree;
- `derive.render`: documents (LaTeX, Markdown, PDF, a self-contained HTML page, notebooks),
  prose, figures (PNG and SVG), the glossary;
- `derive.cli`: the `derive` command; `derive.bridge`: the only part that touches torch (the
  one evaluator of a graph by its twins, the checks against `attention`, the worked example,
  `conform` for anyone's attention), imported lazily; `derive.declare`: the public API to
  declare a variant in your own file; `derive.testing`: `assert_conforms` for a test suite.

``import derive`` never imports torch.
"""

from . import calculus as _calculus
from . import declare
from . import proofs as _proofs
from .bridge.conform import ConformError, Report, Weights, conform, register_adapter
from .bridge.example import WorkedExample, worked_example
from .bridge.gradients import check_gradients_against_torch, gradient_inputs, torch_gradient_steps
from .bridge.steps import Comparison, check_against_torch, compare, dyadic_inputs, torch_steps
from .calculus import Contribution, Gradient, NoMatrixForm, Step, matrix_form
from .explicit import (
    MAX_GRADIENT_SIZE,
    MAX_SIZE,
    ExplicitAttention,
    ExplicitGradients,
    ExplicitGraph,
    ExplicitStep,
    GradientStep,
    Values,
    explicit_attention,
    explicit_gradients,
)
from .explicit.sizes import check_size
from .graph import (
    STEP_NAMES,
    Declaration,
    DeclarationError,
    Entry,
    Graph,
    Variant,
    explicit_sizes,
    load_variant,
    register_variant,
    variant,
    variants,
)
from .graph import self_attention as graph
from .notation import AttentionPrinter, Concat, Softmax, latex
from .notation import letters as L
from .proofs import Fact
from .render import DocumentOptions, Provenance
from .render import documents as _documents

__all__ = [
    "MAX_GRADIENT_SIZE",
    "MAX_SIZE",
    "STEP_NAMES",
    "AttentionPrinter",
    "Comparison",
    "Concat",
    "Contribution",
    "Declaration",
    "DocumentOptions",
    "ExplicitAttention",
    "ExplicitGradients",
    "ExplicitStep",
    "Fact",
    "Gradient",
    "GradientStep",
    "Graph",
    "NoMatrixForm",
    "Provenance",
    "Softmax",
    "Step",
    "Values",
    "WorkedExample",
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
    "graph",
    "html_document",
    "latex",
    "latex_document",
    "markdown_document",
    "matrix_form",
    "operation_count",
    "rows_sum_to_one",
    "rowsum_identity",
    "scaled_score_variance",
    "score_variance",
    "shift_invariance",
    "softmax_jacobian",
    "steps",
    "torch_gradient_steps",
    "torch_steps",
    "Variant",
    "variant",
    "variants",
    "worked_example",
    "conform",
    "ConformError",
    "Report",
    "Weights",
    "register_adapter",
    "Entry",
    "DeclarationError",
    "register_variant",
    "load_variant",
    "ExplicitGraph",
    "declare",
    "explicit_variant",
]


def _graph(given: Graph | str | None, **form: bool) -> Graph:
    """A graph given, a registered variant's by name, or self-attention's in the flags' form."""
    if isinstance(given, str):
        return variant(given).graph
    return graph(**form) if given is None else given


def _named(name: str | None, causal: bool, masked: bool, heads: bool) -> Graph:
    """The graph of a registered variant, or of self-attention in the form the flags say."""
    if name is None:
        return graph(causal=causal, masked=masked, heads=heads)
    if causal or masked or heads:
        raise ValueError(
            f"give a variant's name or causal=, masked=, heads=, not both (got {name!r})"
        )
    return variant(name).graph


def steps(
    name: str | None = None, *, causal: bool = False, masked: bool = False, heads: bool = False
) -> tuple[Step, ...]:
    """The steps of a variant (self-attention by default; causal, masked, multi-head by the
    flags), each with its declaration and the matrix form SymPy derives from it.

    Example:
        >>> [step.output for step in steps("sliding-window")][-4:]
        ['M', 'Omega_masked', 'A', 'C']
    """
    return _calculus.steps(_named(name, causal, masked, heads))


def backward_steps(
    name: str | None = None, *, causal: bool = False, masked: bool = False, heads: bool = False
) -> tuple[Gradient, ...]:
    """Every gradient of a variant at symbolic sizes, derived by reverse mode."""
    return _calculus.backward(_named(name, causal, masked, heads))


def explicit_variant(name: str, n: int, d: int, c: int, **sizes: object) -> ExplicitGraph:
    """A registered variant written out at sizes n, d, c and its own (``w=3``, ``h=2``; its
    defaults otherwise): every step's entries, their formulas, `evaluate` for numbers.

    Example:
        >>> explicit = explicit_variant("sliding-window", 4, 3, 2, w=2)
        >>> explicit.A[3, 0]  # the fourth token does not see the first
        0
    """
    found = variant(name)
    n, d, c = (check_size(k, v) for k, v in (("n", n), ("d", d), ("c", c)))
    at = explicit_sizes(found, n, d, c, sizes)
    return ExplicitGraph(found.graph, at, heads=int(at.get(L.h, 1)))


def composed_expression(graph: Graph | str | None = None, *, heads: bool = False):
    """C as one matrix expression in X and the weights (each step's matrix form put in)."""
    return _calculus.composed_expression(_graph(graph, heads=heads))


def operation_count(graph: Graph | str | None = None, *, heads: bool = False) -> dict:
    """Matrix products and transposes of C: 5 and 1 for one head."""
    return _calculus.operation_count(_graph(graph, heads=heads))


def flop_count(graph: Graph | str | None = None, *, heads: bool = False):
    """FLOPs of C's matrix products: 6ndc + 4n²c for one head."""
    return _calculus.flop_count(_graph(graph, heads=heads))


def facts(graph: Graph | str | None = None) -> tuple[Fact, ...]:
    """The facts of a variant's document, each proved at its stage (self-attention's by
    default: rows sum to 1, shift invariance, the variances); of a graph given, the facts of
    self-attention's forward steps proved on it.

    Example:
        >>> [fact.name for fact in facts("sliding-window")]
        ['rows_sum_to_one', 'same_as', 'allowed_pairs']
    """
    if isinstance(graph, Graph):
        return _proofs.facts(graph)
    from .proofs.claims import prove

    entry = variant(graph or "self-attention")
    return tuple(prove(stage.graph, claim, stage.before) for claim, stage in entry.claims)


def rows_sum_to_one(graph: Graph | None = None, *, causal: bool = False) -> Fact:
    """Σ_p a_{m,p} = 1, derived (causal: from the declared mask, over its limits)."""
    return _proofs.rows_sum_to_one(_graph(graph, causal=causal))


def shift_invariance(graph: Graph | None = None) -> Fact:
    """A constant added to a row of scores leaves the weights unchanged."""
    return _proofs.shift_invariance(_graph(graph))


def score_variance(graph: Graph | None = None) -> Fact:
    """Var(ω_{m,p}) = c from the stated assumptions."""
    return _proofs.score_variance(_graph(graph))


def scaled_score_variance(graph: Graph | None = None) -> Fact:
    """Var(ω̃_{m,p}) = 1: the reason for 1/√c."""
    return _proofs.scaled_score_variance(_graph(graph))


def softmax_jacobian(graph: Graph | None = None) -> Fact:
    """∂a_{m,p}/∂ω̃_{m,t} = a_{m,p}(δ_{p,t} − a_{m,t})."""
    return _proofs.softmax_jacobian(_graph(graph))


def rowsum_identity(graph: Graph | None = None) -> Fact:
    """Σ_r a_{m,r} ā_{m,r} = Σ_j z̄_{m,j} z_{m,j}."""
    return _proofs.rowsum_identity(_graph(graph))


def _example(options: DocumentOptions, example):
    if example is not None or not options.example:
        return example
    from .bridge.example import example_for

    return example_for(options)


def latex_document(
    options: DocumentOptions, *, fragment: bool = False, example=None, graph: Graph | None = None
) -> str:
    r"""The derivation as LaTeX: a standalone article, or with `fragment` the body to \input.
    With ``options.example`` the worked example is computed (torch) unless given.

    Example:
        >>> tex = latex_document(DocumentOptions(sizes=(3, 4, 2)))
        >>> tex.count("% provenance: declared")
        8
    """
    return _documents.latex_document(
        options, fragment=fragment, example=_example(options, example), graph=graph
    )


def markdown_document(options: DocumentOptions, *, example=None, graph: Graph | None = None) -> str:
    """The derivation as GitHub-flavoured Markdown with ``$$`` math (see `latex_document`)."""
    return _documents.markdown_document(options, example=_example(options, example), graph=graph)


def html_document(options: DocumentOptions, *, example=None, graph: Graph | None = None) -> str:
    """The derivation as one self-contained HTML page: KaTeX and the figures (SVG) inlined, the
    explicit matrices as tables whose entries show their formula (see `latex_document`)."""
    return _documents.html_document(options, example=_example(options, example), graph=graph)
