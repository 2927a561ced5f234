r"""The backward pass at concrete sizes, derived by SymPy from the forward steps (reverse mode).

A scalar loss L reaches self-attention through its output: the upstream gradient
$dC = \partial L / \partial C$ is a matrix of fresh symbols dc_{m,j}. Every forward step
(`ExplicitStep`) gives each output entry y as a short formula f_y in the previous steps' named
entries. Walking the steps backwards, the gradient of each named entry u is the chain rule

$$du = \sum_{\text{steps that read } u} \; \sum_{y} dy \, \frac{\partial f_y}{\partial u},$$

each partial derivative taken by `sympy.diff` on one entry's formula (a few terms), never on one
expanded expression in x and the weights. So dv_{p,j} = Σ_m dc_{m,j} a_{m,p} is *derived*; the
compact matrix forms (dV = Aᵀ dC, dA = dC Vᵀ, the softmax Jacobian, dΩ = dΩ̃/√c, dQ = dΩ K,
dK = dΩᵀ Q, dW_q = Xᵀ dQ, dX = dQ W_qᵀ + dK W_kᵀ + dV W_vᵀ; for several heads dĈ = dC W_oᵀ and
dW_o = Ĉᵀ dC) are built separately (`compact_forms`) and `residuals` shows the two agree.

For the derivation, the weights step reads the scaled scores: a_{m,p} = exp(ω̃_{m,p}) / Σ_r
exp(ω̃_{m,r}) (the forward step's exp(ω_{m,p}/√c) with ω = √c ω̃), so the chain runs
C → A → Ω̃ → Ω → Q, K and dΩ = dΩ̃/√c comes out of the scaling step. A masked weight is the
constant 0: it contributes nothing.
"""

from __future__ import annotations

import functools

import sympy as sp
from sympy import Add, ImmutableMatrix, Indexed

from . import _notation as N
from ._explicit import ExplicitAttention
from ._gradient_steps import GradientStep, compact_forms, reads_scaled_scores
from ._sizes import check_size
from ._values import Values, compose, evaluate_steps, exact_numbers, size_values

__all__ = ["MAX_GRADIENT_SIZE", "ExplicitGradients", "explicit_gradients", "gradient_of"]

#: The largest n, d or c that `explicit_gradients` accepts (see docs/benchmarks.md: the
#: whole check against autograd takes about 3 s at n = d = c = 8 on a 2-core machine and grows
#: like n⁴).
MAX_GRADIENT_SIZE = 8


def gradient_of(entry: Indexed) -> Indexed:
    """The named gradient entry of a named entry: ω_{m,p} -> dω_{m,p}, x_{m,i} -> dx_{m,i}."""
    return N.base("d" + entry.base.label.name)[entry.indices]


def _partials(formula: sp.Expr) -> list[tuple[Indexed, sp.Expr]]:
    """(u, ∂formula/∂u) for each named entry u in one entry's formula, by `sympy.diff`.

    SymPy differentiates with respect to a plain symbol faster than with respect to an
    `Indexed` (whose every occurrence it checks index by index; the whole derivation at
    n = d = c = 8 took 6.6 s that way, 3.1 s this way), so each entry stands in as a symbol of
    the same name for the derivative and is put back after.
    """
    entries = formula.atoms(Indexed)
    plain = {u: sp.Symbol(str(u), real=True) for u in entries}
    back = {symbol: u for u, symbol in plain.items()}
    stand_in = formula.xreplace(plain)
    return [(u, sp.diff(stand_in, plain[u]).xreplace(back)) for u in entries]


def _gradient_entries(entries: ImmutableMatrix) -> ImmutableMatrix:
    return entries.applyfunc(gradient_of)


class ExplicitGradients:
    """The backward pass at sizes n, d, c: see `explicit_gradients`."""

    def __init__(self, n: int, d: int, c: int, *, causal: bool, heads: int) -> None:
        for name, value in (("n", n), ("d", d), ("c", c)):
            check_size(
                name,
                value,
                limit=MAX_GRADIENT_SIZE,
                what="derive.MAX_GRADIENT_SIZE",
                generic="derive.backward_steps()",
            )
        self.forward = ExplicitAttention(n, d, c, causal=causal, heads=heads)
        ea = self.forward
        self.n, self.d, self.c, self.heads, self.causal = ea.n, ea.d, ea.c, ea.heads, ea.causal
        self.width = ea.width
        self.dC = _gradient_entries(N.entries("ctx", self.n, self.c))
        self.inputs = {**ea.inputs, "dC": self.dC}
        self.steps = tuple(self._derive())

    def _repr_latex_(self) -> str:
        """Every gradient entry by its derived formula, in the named entries before it."""
        from ._sections import explicit_lines, matrix_line

        lines = [matrix_line("dC", self.dC)]
        for step in self.steps:
            lines += explicit_lines(step)
        return "$$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$$"

    def __repr__(self) -> str:
        causal = ", causal=True" if self.causal else ""
        return f"explicit_gradients(n={self.n}, d={self.d}, c={self.c}{causal}, heads={self.heads})"

    # -- the derivation ----------------------------------------------------------------------------

    def _graph(self) -> list[tuple[str, int | None, ImmutableMatrix, ImmutableMatrix | None]]:
        """(key, head, entries, formula) of every node: the inputs, then each forward step."""
        nodes = [(key, None, value, None) for key, value in self.forward.inputs.items()]
        for step in self.forward.steps:
            formula = step.formula
            if step.name == "weights":
                width = N.c_h if self.heads > 1 else N.c
                formula = reads_scaled_scores(step, width)
            nodes.append((step.output, step.head, step.entries, formula))
        return nodes

    def _derive(self) -> list[GradientStep]:
        nodes = self._graph()
        terms: dict[Indexed, list[sp.Expr]] = {}
        for _, _, entries, formula in nodes:
            if formula is None:
                continue
            for output, f in zip(entries, formula, strict=True):
                d_output = gradient_of(output)
                for u, partial in _partials(f):
                    terms.setdefault(u, []).append(d_output * partial)
        compact = compact_forms(self)
        derived = []
        for key, head, entries, _ in reversed(nodes):
            if key == "C":
                continue  # dC is the upstream gradient, given
            formula = entries.applyfunc(lambda u: Add(*terms.get(u, [])))
            derived.append(
                GradientStep(
                    output="d" + key,
                    of=key,
                    head=head,
                    entries=_gradient_entries(entries),
                    formula=ImmutableMatrix(formula),
                    compact=compact["d" + key],
                )
            )
        return derived

    def step(self, output: str) -> GradientStep:
        """The gradient step that produces `output` (``"dV"``, ``"dA_2"``, ...)."""
        for step in self.steps:
            if step.output == output:
                return step
        raise KeyError(f"no gradient step {output!r}; known: {[s.output for s in self.steps]}")

    # -- the matrices over X, the weights and dC ---------------------------------------------------

    @functools.cached_property
    def _composed(self) -> dict[str, ImmutableMatrix]:
        env = size_values(self.forward.sizes)
        compose(self.forward.steps, env)  # the forward entries, in x and the weights
        return compose(self.steps, env)

    def _matrix(self, key: str) -> ImmutableMatrix | tuple[ImmutableMatrix, ...]:
        if self.heads > 1 and key in ("dOmega", "dOmega_scaled", "dA"):
            return tuple(self._composed[f"{key}_{h}"] for h in range(1, self.heads + 1))
        return self._composed[key]

    dX = property(lambda self: self._matrix("dX"), doc="dX = dQ W_qᵀ + dK W_kᵀ + dV W_vᵀ.")
    dW_q = property(lambda self: self._matrix("dW_q"), doc="dW_q = Xᵀ dQ.")
    dW_k = property(lambda self: self._matrix("dW_k"), doc="dW_k = Xᵀ dK.")
    dW_v = property(lambda self: self._matrix("dW_v"), doc="dW_v = Xᵀ dV.")
    dQ = property(lambda self: self._matrix("dQ"), doc="dQ = dΩ K (per head, its columns).")
    dK = property(lambda self: self._matrix("dK"), doc="dK = dΩᵀ Q (per head, its columns).")
    dV = property(lambda self: self._matrix("dV"), doc="dV = Aᵀ dC (per head, its columns).")
    dA = property(lambda self: self._matrix("dA"), doc="dA = dC Vᵀ (a tuple per head).")
    dOmega = property(lambda self: self._matrix("dOmega"), doc="dΩ = dΩ̃ / √c.")
    dOmega_scaled = property(
        lambda self: self._matrix("dOmega_scaled"),
        doc="dω̃_{m,p} = a_{m,p} (da_{m,p} − Σ_r a_{m,r} da_{m,r}): the softmax Jacobian.",
    )

    @property
    def dW_o(self) -> ImmutableMatrix:
        """dW_o = Ĉᵀ dC (multi-head only)."""
        if self.heads == 1:
            raise AttributeError("dW_o exists only for heads > 1 (the single head has no W_o)")
        return self._composed["dW_o"]

    # -- proofs ------------------------------------------------------------------------------------

    def residuals(self) -> dict[str, ImmutableMatrix]:
        """Derived minus compact, per gradient step, simplified: all zero when the forms agree.

        Polynomial steps: `expand`. The softmax step: the weights replaced by their formula and
        each exp(ω̃_{m,r}) by a positive symbol e_{m,r}, then `cancel` (a rational function).
        """
        from ._gradient_steps import residual

        return {step.output: residual(self, step) for step in self.steps}

    def proven(self) -> bool:
        """True when every derived gradient equals its compact matrix form (`residuals`)."""
        return all(matrix.is_zero_matrix for matrix in self.residuals().values())

    def rowsum_residual(self) -> ImmutableMatrix:
        """Σ_r a_{m,r} da_{m,r} − Σ_j dc_{m,j} c_{m,j} per row (and head), with dA and C
        replaced by their formulas and expanded: the zero column when the identity holds."""
        from ._gradient_steps import rowsum_residual

        return rowsum_residual(self)

    # -- numbers -----------------------------------------------------------------------------------

    def evaluate(
        self,
        X: object,
        W_q: object,
        W_k: object,
        W_v: object,
        dC: object,
        W_o: object = None,
        *,
        digits: int | None = 30,
    ) -> Values:
        """The forward steps, then each gradient step, on numbers (`xreplace`, step by step).

        Returns a `Values` holding the forward values (``Q`` … ``C``) and the gradients (``dA``,
        ``dV``, …, ``dX``), 30-digit SymPy Floats by default. Shapes: X (n, d); W_q, W_k, W_v
        (d, c); dC (n, c); W_o (c, c) when heads > 1.
        """
        given = {"X": X, "W_q": W_q, "W_k": W_k, "W_v": W_v, "dC": dC}
        exact = exact_numbers(self.inputs, self.forward.sizes, self.heads, given, W_o, digits)
        return evaluate_steps(self.forward.steps + self.steps, exact, digits, self.heads)


def explicit_gradients(
    n: int, d: int, c: int, *, causal: bool = False, heads: int = 1
) -> ExplicitGradients:
    r"""The backward pass of self-attention at concrete sizes, derived by SymPy.

    $$dV = A^\top dC,\quad dA = dC\,V^\top,\quad
      d\tilde\omega_{m,p} = a_{m,p}\Big(da_{m,p} - \sum_r a_{m,r}\,da_{m,r}\Big),\quad
      d\Omega = d\tilde\Omega/\sqrt{c},$$
    $$dQ = d\Omega\,K,\quad dK = d\Omega^\top Q,\quad dW_q = X^\top dQ,\ \ldots,\quad
      dX = dQ\,W_q^\top + dK\,W_k^\top + dV\,W_v^\top$$

    Attributes: `dC` (n, c), fresh symbols dc_{m,j}; `dX` (n, d), `dW_q`, `dW_k`, `dW_v` (d, c),
    `dQ`, `dK`, `dV` (n, c), `dA`, `dOmega`, `dOmega_scaled` (n, n; a tuple per head), and
    `dW_o` (c, c) for heads > 1: SymPy matrices over the entries of X, the weights and dC, the
    same symbols as `explicit_attention(n, d, c, causal=causal, heads=heads)`. `steps` lists each
    gradient's derived formula in named entries; `evaluate` puts numbers in step by step;
    `residuals` proves the compact matrix forms. Each of n, d, c is at most `MAX_GRADIENT_SIZE`.

    Example:
        >>> g = explicit_gradients(2, 3, 2)
        >>> g.dW_q.shape
        (3, 2)
    """
    return ExplicitGradients(n, d, c, causal=causal, heads=heads)
