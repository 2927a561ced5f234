r"""Declare your own attention, in your own file, and derive it as the built-in variants are.

A variant is its base entry (``"self-attention"``, ``"causal"``, any registered name) with some
steps replaced or inserted, each declared by the formula of one entry of its output (a SymPy
equation over the book's letters and indices), plus its sizes and parameters, what SymPy is to
prove about it, a few sentences, and its torch twin. From that one declaration `derive` prints
its derivation (``derive latex|markdown|pdf|html|notebook --variant file.py:NAME``): the matrix
form of each step where SymPy finds one (its entries otherwise), the backward pass at symbolic
sizes, the claims proved, the explicit matrices; and ``derive check --variant file.py:NAME``
compares every step and every gradient with the twins.

    import sympy as sp
    from derive import declare
    from derive.declare import a, m, n, omega_tilde, p

    b = sp.Symbol("b", real=True)
    weights = declare.step(
        "sigmoid_weights", sp.Eq(a[m, p], 1 / (1 + sp.exp(-(omega_tilde[m, p] + b)))),
        shape=(n, n), title="Attention weights (sigmoid)", twin=my_torch_weights,
    )
    SIGMOID = declare.variant(
        "sigmoid", title="Sigmoid attention", replaces=[weights],
        parameters={b: -sp.log(n)}, text="…", twin=my_torch_attention,
    )

What this module gives:

- the book's letters: the sizes (`n`, `d`, `c`, `h`, `c_h`), the indices (`m`, `p`, `r`, `t`
  for tokens, `i` for input features, `j` for context features, `ell` and `ell2` for heads)
  and the entries of the book's matrices (`x`, `w_q`, `w_k`, `w_v`, `q`, `k`, `v`, `omega`,
  `omega_tilde`, `mask`, `omega_hat`, `a`, `z`, `w_o`), each an ``IndexedBase`` whose entries
  are 1-based;
  `RANGES`, the index each size's rows and columns run over; `matrix` adds a letter of yours;
  `sigmoid`, σ as one SymPy function (its derivative σ(1 − σ), its matrix form σ(Z));
- `base_step`, a step of a registered entry by its output or its name, to read or change;
- `step`, a step declared by one entry's formula; `variant`, the variant (registered with
  ``register=True``, or by ``--variant file.py:NAME``); `claim`, an equality SymPy is to prove;
  `bound`, an inequality; and the registry's kinds of claim (`SameAs`, `ReadsRows`,
  `RowsSumToOne`, `ShiftInvariance`, `WeightsJacobian`, `RowsumIdentity`), sizes (`Size`),
  conditions (`AtLeast`, `Divides`, `Even`), twins (`Twin`, `StepTwin`).

A mistake in a declaration (a letter no step defines, an index outside its range or of the
wrong kind, a step placed before a step it reads, shapes that do not chain, a twin that does
not exist, cannot take what the step reads or returns the wrong shape, a claim a
counter-example refutes) is a `DeclarationError` whose message names the step and what is
wrong; the command line prints it as one line and exits with status 2. A failure of derive's
own (SymPy failing on a step) is a `DerivationError` that says what derive could not do, and
exits with status 3.

How twins are called (the order of their arguments, the shapes of a 1 × 1 or per-head input,
their options) is written once, in docs/twins.md; ``derive variants --show NAME`` prints the
call of every twin of a variant. docs/examples/ holds complete files: sigmoid attention,
Scalable-Softmax, differential attention, cosine attention, the Forgetting Transformer,
stick-breaking attention, Softpick, talking-heads attention.

The forms of a step's formula: an output of one entry per row (``F[m, 1]`` with shape
(n, 1)); sums and products (``sympy.Sum``, ``sympy.Product``) over ranges the other indices set
(Σ_{ℓ=p+1}^{m}), every index shown by its ranges to stay on its axis; ``Piecewise``, ``Max``,
``Min``, ``Abs`` and ``sign``, differentiated where they have a derivative and, at a kink, to
torch's value (θ(0) = 0, sign(0) = 0); on a base with heads (``base="multi-head"``), one
head's entries, the head's index `ell` first (``s[ell, m, p]``), and a step that reads every
head by a sum over another head `ell2` (``Σ_{ℓ'} P[ell2, ell] ω̃[ell2, m, p]``, talking heads),
its twin given every head's matrices stacked (h × rows × cols). In derive's numbers an empty
sum is 0 and an empty product 1, whatever the order of the limits (not SymPy's sum of a
negative count).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy as sp
from sympy import Indexed, IndexedBase

from .graph import Declaration, DeclarationError, Variant, register_variant
from .graph import variant as _entry
from .graph.claims import (
    BEFORE,
    Bound,
    Equality,
    ReadsRows,
    RowsSumToOne,
    RowsumIdentity,
    SameAs,
    ShiftInvariance,
    WeightsJacobian,
)
from .graph.edits import SHAPES, Step, build
from .graph.registry import ROOT
from .graph.sizes import AtLeast, Divides, Even, Parameter, Size
from .graph.twins import Callee, StepTwin, Twin
from .notation import letters as L
from .notation.functions import Sigmoid
from .notation.letters import Letter, Name

__all__ = [
    "n",
    "d",
    "c",
    "h",
    "c_h",
    "m",
    "p",
    "r",
    "t",
    "i",
    "j",
    "ell",
    "ell2",
    "x",
    "w_q",
    "w_k",
    "w_v",
    "q",
    "k",
    "v",
    "omega",
    "omega_tilde",
    "mask",
    "omega_hat",
    "a",
    "z",
    "w_o",
    "sigmoid",
    "RANGES",
    "matrix",
    "Letter",
    "Name",
    "letter_base",
    "base_step",
    "step",
    "variant",
    "claim",
    "bound",
    "Step",
    "DeclarationError",
    "Variant",
    "Size",
    "Parameter",
    "AtLeast",
    "Divides",
    "Even",
    "Twin",
    "StepTwin",
    "SameAs",
    "ReadsRows",
    "RowsSumToOne",
    "ShiftInvariance",
    "WeightsJacobian",
    "RowsumIdentity",
    "BEFORE",
]

# -- the book's letters ----------------------------------------------------------------------------

n, d, c, h, c_h = L.n, L.d, L.c, L.h, L.c_h
m, p, r, t, i, j = L.m, L.p, L.r, L.t, L.i, L.j
#: The head ℓ of an entry of one head's matrix (ω̃[ell, m, p]), and another head ℓ′ a step that
#: reads every head sums over.
ell, ell2 = L.ell, L.ell2
x, w_q, w_k, w_v, w_o = (L.base(name) for name in ("x", "wq", "wk", "wv", "wo"))
q, k, v = (L.base(name) for name in "qkv")
omega, omega_tilde, mask, omega_hat = (
    L.base(name) for name in ("omega", "omegatilde", "mask", "omegahat")
)
a, z = L.base("a"), L.base("ctx")
#: The logistic sigmoid σ(x) = 1 / (1 + e^{−x}), one SymPy function: σ'(x) = σ(x)(1 − σ(x)).
sigmoid = Sigmoid

#: Which index runs over which size: a token m (a query; rows of Q, Ω, A, C) or p (a key: rows
#: of K, V; columns of Ω, A) over 1 … n, an input feature i over 1 … d, a context feature j
#: over 1 … c. A free index of a step's formula runs over the rows or columns of its output; a
#: summation index over its sum's limits.
RANGES = {
    m: (1, n),
    p: (1, n),
    r: (1, n),
    t: (1, n),
    i: (1, d),
    j: (1, c),
    ell: (1, h),
    ell2: (1, h),
}


def matrix(
    letter: str,
    *,
    entry: str,
    shape: tuple,
    latex: str | None = None,
    entry_latex: str | None = None,
    meaning: str = "",
    indices: tuple = (),
    role: str = "",
) -> IndexedBase:
    """A matrix of yours: an input of your variant (weights) or the output of a step of yours.

    It is a `Letter`, the record the built-in variants declare theirs with, registered by
    `letter_base`.

    Args:
        letter: the matrix's letter in code (``"W_g"``; a Python identifier).
        entry: the name of its entries (``"wg"``; a Python identifier).
        shape: its ``(rows, columns)`` in the book's sizes (``(d, c)``).
        latex: how documents print the matrix; None (the default): `letter`.
        entry_latex: how documents print one entry's letter; None (the default): `entry`.
        meaning: what an entry is, for the glossary.
        indices: the indices documents give its entries; empty (the default): the book's for
            its shape: ``(m, p)`` for ``(n, n)``, ``(i, j)`` for ``(d, c)``, ``(m, j)`` for
            ``(n, c)``, ``(1, 1)`` for one number.
        role: what the matrix is, for a document's table of shapes.

    Returns:
        The ``IndexedBase`` of its entries, 1-based (``wg[i, j]``).

    Raises:
        DeclarationError: when the letter is J, is not a Python identifier, ends in ``_l``, is
            taken with another meaning or reads as another letter's gradient (``dq``), or when
            `shape` is not two sizes.
    """
    return letter_base(
        Letter(
            letter,
            entry,
            latex or "",
            entry_latex or "",
            meaning,
            tuple(indices),
            tuple(sp.sympify(x) for x in shape),
            role=role,
        )
    )


def letter_base(record: Letter) -> IndexedBase:
    """Register a `Letter` (its shape, where it gives one) and return the ``IndexedBase`` of
    its entries.

    Args:
        record: the letter; registering one already registered with the same meaning does
            nothing.

    Returns:
        The ``IndexedBase`` of its entries, 1-based (``base[m, p]``).

    Raises:
        DeclarationError: when the letter is J, is not a Python identifier, ends in ``_l``, is
            taken with another meaning or reads as another letter's gradient (``dq``), or when
            its shape is given and is not two sizes.
    """
    if "J" in (record.matrix, record.latex):
        raise DeclarationError(
            f"matrix {record.matrix}: J is the all-ones matrix of the derived matrix forms "
            "(the softmax's gradient reads (A ∘ Ā) J): give yours another letter"
        )
    try:
        L.register_letter(record)
    except ValueError as error:
        raise DeclarationError(f"matrix {record.matrix}: {error}") from None
    if record.shape:
        if len(record.shape) != 2:
            raise DeclarationError(
                f"matrix {record.matrix}: shape is (rows, columns), got {record.shape!r}"
            )
        SHAPES[record.matrix] = tuple(sp.sympify(size) for size in record.shape)
    return L.base(record.entry)


def base_step(output: str, of: str = ROOT) -> Declaration:
    """The step of a registered entry that computes `output`, or the one named `output`: its
    formula to read, or to change with `dataclasses.replace`.

    Args:
        output: the letter of the matrix the step computes (``"A"``), or the step's name
            (``"weights"``).
        of: the registered entry whose steps are read; self-attention by default.

    Returns:
        The step, as the entry's graph declares it.

    Raises:
        DeclarationError: when the entry has no such step (the message lists its steps).
        ValueError: when `of` is not a registered variant.
    """
    graph = _entry(of).graph
    found = graph.producer(output) or next(
        (s for s in graph.declarations if s.name == output), None
    )
    if found is None:
        known = ", ".join(f"{s.output} ({s.name})" for s in graph.declarations)
        raise DeclarationError(f"{of} has no step {output!r}; its steps: {known}")
    return found


def _twin(
    twin: Callee | StepTwin | None, options: Mapping | None, arguments: Iterable[str] | None
) -> StepTwin | None:
    if twin is None or isinstance(twin, StepTwin):
        return twin
    pairs = tuple((str(key), value) for key, value in (options or {}).items())
    return StepTwin(twin, tuple(arguments) if arguments is not None else None, pairs)


def step(
    name: str,
    element: sp.Eq,
    *,
    shape: tuple,
    title: str,
    twin: Callee | StepTwin | None = None,
    options: Mapping | None = None,
    arguments: Iterable[str] | None = None,
    requires: Iterable = (),
    text: str = "",
) -> Step:
    """A step declared by the formula of one entry of its output.

    Args:
        name: what it computes (``"sigmoid_weights"``); with no `twin`, the name of the
            function of ``attention.functional`` that is its twin.
        element: ``Eq(entry of the output, formula)``, such as ``Eq(a[m, p], ...)``: the
            left-hand side an entry of the output at its free indices, the right-hand side in
            entries of earlier steps and inputs (finite sums with ``sympy.Sum``).
        shape: the output's ``(rows, columns)``, in the book's sizes (``(n, n)``).
        title: a few words for documents.
        twin: the torch function that computes it (a callable, or a dotted name), called with
            the matrices the step reads and `options` as keywords: docs/twins.md is the
            contract (the order, the shapes of a 1 × 1 or per-head input, what it returns).
            None (the default): the function of ``attention.functional`` of its name where
            there is one, else the torch code derive generates. A `StepTwin` is taken as it
            is, `options` and `arguments` ignored.
        options: the twin's keyword arguments by name (a size or parameter symbol is passed
            as its number at the check's sizes); None (the default): none.
        arguments: the letters of the matrices it takes, in its order (default: the order its
            parameters' names say, ``def context(a_diff, v)``, else the book's).
        requires: conditions on the sizes it needs (`Even`, `Divides`, `AtLeast`).
        text: a few sentences its document prints before it.

    Returns:
        The step, for `variant`'s `replaces` or `inserts`; it is checked against the graph it
            goes into when the variant is built.

    Raises:
        DeclarationError: when `element` is not a ``sympy.Eq``, its left-hand side is not an
            entry of a known matrix with two indices (three, the first ``ell``, for one
            head's), each a symbol or 1 on an axis of one entry, or `shape` is not two sizes.
    """
    where = f"step {name}"
    if not isinstance(element, sp.Eq):
        raise DeclarationError(
            f"{where}: the formula is sympy.Eq(entry, formula), got {type(element).__name__}"
        )
    lhs = element.lhs
    if not isinstance(lhs, Indexed) or lhs.base.label.name not in L.BASES:
        raise DeclarationError(
            f"{where}: the left-hand side must be an entry of its output, "
            f"such as a[m, p]; got {lhs}"
        )
    if len(tuple(shape)) != 2:
        raise DeclarationError(f"{where}: shape is (rows, columns), got {shape!r}")
    head, entry = (lhs.indices[0], lhs.indices[1:]) if len(lhs.indices) == 3 else (None, ())
    if head is not None and head != ell:
        raise DeclarationError(
            f"{where}: the left-hand side {lhs} has three indices, so it is an entry of one "
            f"head's matrix, and its first must be the head's index ell (ℓ); got {head}"
        )
    entry = entry or lhs.indices
    if len(entry) != 2 or not all(
        isinstance(index, sp.Symbol) or (index == 1 and size == 1)
        for index, size in zip(entry, shape, strict=True)
    ):
        raise DeclarationError(
            f"{where}: the left-hand side {lhs} must have two indices, the row and the column "
            "of its entry (after the head's ℓ, for one head's: a[ell, m, p]): an index "
            "symbol, or 1 on an axis of one entry (f[m, 1] for a step of shape (n, 1)); the "
            f"shape is {tuple(shape)}"
        )
    return Step(
        name,
        sp.Eq(lhs, element.rhs, evaluate=False),
        tuple(sp.sympify(size) for size in shape),
        title,
        _twin(twin, options, arguments),
        tuple(requires),
        text,
    )


def claim(
    lhs: sp.Expr, rhs: sp.Expr, *, title: str, text: str | None = None, how: str = ""
) -> Equality:
    """An equality SymPy is to prove on your variant's graph: each side with the formulas of
    the steps it names put in (down to the inputs where needed), limits and derivatives
    evaluated, the difference simplified to 0 (``claim(sympy.Limit(a[m, p], b, -sympy.oo), 0,
    title="…")``). A claim SymPy cannot prove is tried at numbers: one a counter-example
    refutes is a `DeclarationError` that shows it; one no draw refutes is printed as stated,
    marked unproved (a warning; ``--strict`` refuses it), never as derived.

    Args:
        lhs: the left-hand side, a SymPy expression in the entries of the graph
            (``sympy.Limit(a[m, p], b, -sympy.oo)``).
        rhs: the right-hand side (``0``).
        title: the heading of the fact in documents.
        text: the words documents print before it; None (the default): none.
        how: a few words on what SymPy did, for the provenance; empty (the default): the
            declared formulas put in, evaluated and simplified by SymPy.

    Returns:
        The claim, for `variant`'s `claims`.
    """
    return Equality(sp.sympify(lhs), sp.sympify(rhs), title, how, text=text)


def bound(smaller: sp.Expr, larger: sp.Expr, *, title: str, text: str | None = None) -> Bound:
    """A bound SymPy is to prove, smaller ≤ larger (``bound(a[m, p], 1, title="…")``): the
    difference with the formulas of the steps it names put in, simplified, and found
    non-negative from what SymPy knows of its symbols (entries are real, sizes positive).

    Args:
        smaller: the side that is at most the other, a SymPy expression in the entries of the
            graph (``a[m, p]``).
        larger: the side that is at least the other (``1``).
        title: the heading of the fact in documents.
        text: the words documents print before it; None (the default): none.

    Returns:
        The claim, for `variant`'s `claims`.
    """
    return Bound(sp.sympify(smaller), sp.sympify(larger), title, text=text)


def variant(
    name: str,
    *,
    title: str,
    text: str | Iterable[str] = (),
    base: str = ROOT,
    replaces: Iterable[Step] = (),
    inserts: Iterable[tuple[str, Step]] = (),
    sizes: Mapping[sp.Symbol, int] | Iterable[Size] = (),
    parameters: Mapping[sp.Symbol, object] | Iterable[tuple[sp.Symbol, object]] = (),
    requires: Iterable = (),
    claims: Iterable = (),
    twin: Callee | Twin | None = None,
    arguments: Iterable[str] = ("X", "W_q", "W_k", "W_v", "W_o?"),
    rank: int = 100,
    register: bool = False,
) -> Variant:
    """A variant of attention, declared (see the module docstring).

    Args:
        name: its key, as ``--variant`` takes it (one word).
        title: its title in documents; the graph is named after it.
        text: its words, a few sentences (one string, or several paragraphs); formulas come
            from the steps.
        base: the registered entry it changes (``"self-attention"``, ``"causal"``, …).
        replaces: steps declared in place of the base's steps that compute the same output.
        inserts: pairs (the output a new step comes after, the step).
        sizes: sizes it adds, with their defaults (``{w: 2}``), or `Size` records.
        parameters: the numbers its formulas read that are not sizes, with their defaults (a
            number, or an expression in the sizes: ``{b: -sympy.log(n)}``), as a mapping or
            pairs.
        requires: conditions on its sizes (`Even`, `Divides`, `AtLeast`).
        claims: what SymPy is to prove (`claim`, `bound`, `SameAs`, `RowsSumToOne`, …).
        twin: the function that computes it (a callable, or a dotted name), called with the
            graph's `arguments` and its parameters by name (docs/twins.md); a `Twin` is taken
            as it is. None (the default): no twin of the whole.
        arguments: the letters of the graph's inputs the twin takes, in order (``"W_o?"``:
            where the graph has W_o); default: X, W_q, W_k, W_v, W_o?.
        rank: where it goes in a combination (the built-ins rank from 0 to 50).
        register: add it to this process's registry now (``--variant file.py:NAME`` does it).

    Returns:
        The variant (registered too, with `register`); its steps are checked against its base
            when it is built (registered, or first resolved).

    Raises:
        DeclarationError: when an item of `replaces` or `inserts` is not a step made by
            `step`; with `register`, when `register_variant` refuses it (its name, its base,
            or a mistake in its steps).
    """
    replaces, inserts = tuple(replaces), tuple(inserts)
    for item in (*replaces, *(spec for _, spec in inserts)):
        if not isinstance(item, Step):
            raise DeclarationError(
                f"variant {name}: replaces and inserts take steps made by "
                f"derive.declare.step, got {item!r}"
            )
    sizes = (
        tuple(Size(symbol, default) for symbol, default in sizes.items())
        if isinstance(sizes, Mapping)
        else tuple(sizes)
    )
    own = tuple(Parameter(symbol, sp.sympify(value)) for symbol, value in dict(parameters).items())
    if twin is not None and not isinstance(twin, Twin):
        options = tuple((str(p_.symbol), p_.symbol) for p_ in own)
        twin = Twin(twin, tuple(arguments), options)
    graph_name = title[:1].lower() + title[1:]
    found = Variant(
        name,
        title,
        text if isinstance(text, str) else tuple(text),
        base=base,
        build=build(name, base, replaces, inserts, graph_name),
        claims=tuple(claims),
        sizes=sizes,
        parameters=own,
        requires=tuple(requires),
        twin=twin,
        rank=rank,
    )
    return register_variant(found) if register else found
