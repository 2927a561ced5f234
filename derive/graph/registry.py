"""The one registry: every variant of attention, self-attention itself included, and the user's.

`variants()` lists the names; `variant(name)` resolves a name, or a combination of names joined
by ``+`` (``"gqa+rope"``), into an `Entry`: its graph, the graph of its base, each claim with the
stage it is proved at, its sizes, parameters and conditions, and its twins.

How a name resolves. Each variant names its base, so that it stands for a set of variants, its
chain: itself and its base's chain (``gqa``: self-attention, causal, multi-head, gqa). A
combination stands for the union of its parts' chains; a part already in another part's chain
is dropped (``causal+rope`` is ``rope``). The graph of a set is self-attention's graph with each
other variant's `build` applied in the order of their ranks. A variant's claims are proved at
its stage: the graph of the variants ranked up to it, with its own chain (`Stage`).

`register_variant` adds a variant to this process's registry (`derive.graph.loading` reads one
from a user's file or module and registers it).
A mistake in a declaration is a `DeclarationError` that names the variant, the step and what is
wrong.
"""

from __future__ import annotations

import difflib
import functools
import typing
from dataclasses import replace

import sympy as sp

from .claims import Bound, Claim, Equality
from .declaration import Graph
from .entry import Entry, Stage
from .errors import DeclarationError, DerivationError
from .variant import Document, Variant

__all__ = [
    "DeclarationError",
    "DerivationError",
    "Entry",
    "Stage",
    "register_variant",
    "variants",
    "variant",
    "self_attention",
    "ROOT",
    "entry_name",
    "declared",
    "registered",
    "unregister_variant",
    "compatibility",
]

#: The entry every other builds on.
ROOT = "self-attention"


_USER: dict[str, Variant] = {}


@functools.cache
def _built_in() -> dict[str, Variant]:
    from .entries import BUILT_IN

    return {found.name: found for found in BUILT_IN}


def _registry() -> dict[str, Variant]:
    return _built_in() | _USER


def variants() -> tuple[str, ...]:
    """The names of the registered variants: self-attention, causal, masked, multi-head, the
    book's later variants, then those registered in this process.

    Returns:
        The names, in the registry's order (`variant` takes each, or several joined by `+`).
    """
    return tuple(_registry())


def registered(name: str) -> Variant | None:
    """The variant a user registered under `name` in this process, or None."""
    return _USER.get(name)


def declared(name: str) -> Variant:
    """The registered declaration of one variant (no graph built); a ValueError naming the
    known ones otherwise."""
    return _lookup(name)


def register_variant(found: Variant) -> Variant:
    """Add `found` to this process's registry (then ``variant(found.name)`` and
    ``--variant NAME`` find it). Registering a name again replaces the user's earlier variant
    of that name.

    Args:
        found: the declaration to register; its `base` names the entry it changes.

    Returns:
        `found` itself, now registered.

    Raises:
        DeclarationError: when `found` is not a `Variant` (an `Entry` included), its name is
            not one word without `+`, `:` or spaces, names a built-in variant, its base is
            None, or its declaration does not resolve (the earlier registration is kept).
    """
    if not isinstance(found, Variant):
        kind = type(found).__name__
        said = (
            f"the entry {found.name!r} (load_variant and variant return entries, and "
            "load_variant has registered it already: register the Variant the file declares)"
            if kind == "Entry"
            else f"a {kind}"
        )
        raise DeclarationError(f"register_variant takes a derive.Variant, got {said}")
    name = found.name
    if not isinstance(name, str) or not name or "+" in name or ":" in name or " " in name:
        raise DeclarationError(
            f"a variant's name is one word without '+', ':' or spaces, got {name!r}"
        )
    if name in _built_in():
        raise DeclarationError(f"variant {name!r} is built in; give yours another name")
    if found.base is None:
        raise DeclarationError(
            f"variant {name!r}: base must name the entry it changes (for example {ROOT!r})"
        )
    previous = _USER.get(name)
    _USER[name] = found
    _forget()
    try:
        variant(name)
    except (DeclarationError, ValueError) as error:
        if previous is None:
            del _USER[name]
        else:
            _USER[name] = previous
        _forget()
        raise DeclarationError(str(error)) from None
    return found


def unregister_variant(name: str) -> None:
    """Take a user's variant out of this process's registry (a built-in one stays)."""
    if name in _built_in():
        raise DeclarationError(f"variant {name!r} is built in; it cannot be taken out")
    if _USER.pop(name, None) is None:
        raise ValueError(f"no variant {name!r} was registered in this process")
    _forget()


def _forget() -> None:
    """Forget what was resolved: a name may now stand for another declaration."""
    _resolve.cache_clear()
    graph_of.cache_clear()


def _lookup(name: str) -> Variant:
    found = _registry().get(name)
    if found is None:
        close = difflib.get_close_matches(name, variants(), n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(
            f"unknown variant {name!r}; {guess}known: {', '.join(variants())} "
            "(they combine with +: gqa+rope)"
        )
    return found


def _chain(name: str, seen: tuple[str, ...] = ()) -> frozenset[str]:
    """The variants a name stands for: itself and its base's chain."""
    names: set[str] = set()
    for part in name.split("+"):
        found = _lookup(part)
        if found.name in seen:
            raise DeclarationError(
                f"variant {found.name!r} builds on itself: {' -> '.join((*seen, found.name))}"
            )
        names.add(found.name)
        if found.base is not None:
            names |= _chain(found.base, (*seen, found.name))
    return frozenset(names)


def _ranked(names: frozenset[str]) -> tuple[Variant, ...]:
    order = list(_registry())
    return tuple(sorted((_lookup(x) for x in names), key=lambda v: (v.rank, order.index(v.name))))


@functools.cache
def graph_of(names: frozenset[str]) -> Graph:
    """The graph of a set of variants: self-attention's, each other's build applied in turn."""
    graph: Graph | None = None
    for found in _ranked(names):
        if found.build is None:
            if graph is None:
                raise DeclarationError(f"variant {found.name!r} has no base and no build")
            continue
        try:  # (graph is None for the root only, whose build starts from nothing)
            graph = found.build(typing.cast(Graph, graph))
        except DeclarationError:
            raise
        except (ValueError, KeyError, TypeError) as error:
            others = sorted(names - {found.name, ROOT})
            with_what = f" with {', '.join(others)}" if others else ""
            raise DeclarationError(
                f"variant {found.name!r} cannot be put into the graph{with_what}: {_said(error)}"
            ) from None
        if not isinstance(graph, Graph):
            raise DeclarationError(f"variant {found.name!r}: build returned {graph!r}, not a graph")
    assert graph is not None
    return graph


def _said(error: Exception) -> str:
    text = str(error)
    return text[1:-1] if isinstance(error, KeyError) and text.startswith(("'", '"')) else text


def _stage(found: Variant, names: frozenset[str], dropped: frozenset[str] = frozenset()) -> Stage:
    ranked = {v.name for v in _ranked(names) if v.rank <= found.rank}
    upto = frozenset(ranked | _chain(found.name)) - dropped
    before = upto - {found.name}
    graph = graph_of(upto)
    return Stage(found, graph, graph_of(before) if before else graph)


def _normalised(name: str) -> tuple[Variant, ...]:
    """The parts of a name, each once, those in another part's chain left out, in rank order."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a variant is named by a string, got {name!r}")
    parts = [_lookup(part) for part in name.split("+")]
    names = {p.name for p in parts}
    kept = {p for p in names if not any(p in _chain(o) - {o} for o in names - {p})}
    return _ranked(frozenset(kept))


def _title(parts: tuple[Variant, ...]) -> str:
    from .entries import MODELS, TITLES

    key = tuple(p.name for p in parts)
    if len(parts) == 1:
        return parts[0].title
    if key in TITLES:
        return TITLES[key]
    first, *rest = parts
    shorts = [p.short_title for p in rest]
    joined = shorts[0] if len(shorts) == 1 else ", ".join(shorts[:-1]) + " and " + shorts[-1]
    model = MODELS.get(key)
    return f"{first.title} with {joined}" + (f" (the attention of {model})" if model else "")


def variant(name: str) -> Entry:
    """The entry registered under `name`, or the combination ``"gqa+rope"``.

    Args:
        name: a registered variant's name, or several joined by `+` (`"gqa+rope"`); a part
            already in another part's chain is dropped (`"causal+rope"` is `"rope"`).

    Returns:
        The resolved `Entry`: its graph, its base's graph, its claims with their stages.

    Raises:
        ValueError: when `name` is not a non-empty string, a part is not registered (the
            message names the closest and the known ones), or the parts do not combine.
        DeclarationError: when a declaration does not resolve (a `ValueError` too).
    """
    parts = _normalised(name)
    return _resolve("+".join(p.name for p in parts))


@functools.cache
def _resolve(name: str) -> Entry:
    parts = tuple(_lookup(part) for part in name.split("+"))
    if len(parts) > 1:
        alone = [p for p in parts if p.alone]
        if alone:
            said = "; ".join(f"{p.name} joins no other variant: {p.alone}" for p in alone)
            raise ValueError(f"{name}: {said}")
    dropped = _dropped(name, parts)
    names = frozenset().union(*(_chain(p.name) for p in parts)) - dropped
    chain = _ranked(names)
    graph = graph_of(names)
    bases = frozenset().union(*(_chain(p.base) for p in parts if p.base is not None))
    bases -= {p.name for p in parts} | dropped
    base = graph_of(bases) if bases else None
    claims: list[tuple[Claim, Stage]] = []
    for part in parts:  # a claim two parts make is proved once, at the later one's stage
        stage = _stage(part, names, dropped)
        seen = [claim for claim, _ in claims]
        claims = [(c, stage if c in part.claims else at) for c, at in claims]
        claims += [(c, stage) for c in part.claims if c not in seen]
    claims = [(_followed(claim, stage), stage) for claim, stage in claims]
    claims = _superseded_out(claims)
    single = parts[0] if len(parts) == 1 else None
    text = single.paragraphs if single else tuple(x for p in parts for x in p.paragraphs)
    figures = tuple(dict.fromkeys(f for p in parts for f in p.document.figures))
    document = single.document if single else Document(figures=figures)
    return Entry(name, _title(parts), text, parts, chain, graph, base, tuple(claims), document)


def _followed(claim: Claim, stage: Stage) -> Claim:
    """A claim written for its variant alone, about what the variant's steps read (ALiBi's
    bias, ω_b − ω̃), restated for a combination where a step of another part comes between
    (ALiBi after softcapping reads the capped scores: ω_b − ω_cap). The entries of the matrix
    a step of the variant's own (an output its base has not) reads alone are those of the
    matrix the same step reads here."""
    if not isinstance(claim, Equality | Bound):
        return claim
    names = _chain(stage.variant.name)
    alone = graph_of(names)
    under = names - {stage.variant.name}
    before = graph_of(under) if under else None
    moved: dict[sp.Basic, sp.Basic] = {}
    for step in alone.declarations:  # the steps of its own: outputs its base has not
        there = stage.graph.producer(step.output) or stage.graph.producer(f"{step.output}_l")
        if there is None or (before is not None and before.producer(step.output) is not None):
            continue
        ours, theirs = _bases(step), _bases(there)
        if len(ours - theirs) == 1 and len(theirs - ours) == 1:
            moved[(ours - theirs).pop()] = (theirs - ours).pop()
    if not moved:
        return claim
    if isinstance(claim, Equality):
        return replace(claim, lhs=claim.lhs.xreplace(moved), rhs=claim.rhs.xreplace(moved))
    return replace(
        claim, smaller=claim.smaller.xreplace(moved), larger=claim.larger.xreplace(moved)
    )


def _bases(step) -> set[sp.Basic]:
    """The matrices a step's formula reads, as SymPy's bases."""
    return {e.base for e in step.element.rhs.atoms(sp.Indexed)}


def _dropped(name: str, parts: tuple[Variant, ...]) -> frozenset[str]:
    """The variants the parts take out of the combination's chains (`Variant.drops`); a
    ValueError where one of them is named as a part."""
    dropped = frozenset(x for p in parts for x in p.drops)
    for part in parts:  # a variant of claims about its base alone (the cache) has no base left
        if part.build is None and part.base in dropped:
            (taker,) = [p for p in parts if part.base in p.drops][:1]
            raise ValueError(
                f"{name}: {part.name} declares no step, only what holds of {part.base}, which "
                f"{taker.name} takes out (the queries and the keys are two sequences)"
            )
    named = [p.name for p in parts if p.name in dropped]
    if named:
        (taker,) = [p for p in parts if named[0] in p.drops][:1]
        raise ValueError(
            f"{name}: {taker.name} takes {named[0]} out of what it joins ({taker.title.lower()}: "
            f"the queries and the keys are two sequences, no position compares them); name "
            f"{taker.name} without {named[0]}"
        )
    return dropped


def _superseded_out(claims: list[tuple[Claim, Stage]]) -> list[tuple[Claim, Stage]]:
    """The claims of a combination less those another part's claim restates for the whole (a
    claim's class names those it `supersedes`: with sinks, the rows sum to less than one, so
    the sink's claim stands for every part's "the rows sum to one")."""
    kinds = tuple(k for claim, _ in claims for k in getattr(claim, "supersedes", ()))
    return [(claim, stage) for claim, stage in claims if not (kinds and isinstance(claim, kinds))]


def compatibility(names: tuple[str, ...] | None = None) -> dict[tuple[str, str], str]:
    """Every pair of the variants `names` (default: the built-in ones, in the registry's
    order), each once: "" where ``variant("a+b")`` resolves, else why it is refused (the rule,
    and the step or variant that collides)."""
    names = tuple(_built_in()) if names is None else names
    found: dict[tuple[str, str], str] = {}
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            try:
                variant(f"{first}+{second}")
                found[first, second] = ""
            except (ValueError, DeclarationError) as error:
                found[first, second] = str(error)
    return found


def entry_name(name: str | None = None, *, causal: bool = False, heads: int = 1) -> str:
    """The entry a command's flags name: the variant named (self-attention by default), with
    causal attention joined for `causal`, and multi-head attention for ``heads > 1`` where it
    has no heads of its own (a variant with heads takes h from `heads`)."""
    parts = [name or ROOT]
    if causal:
        parts.append("causal")
    if heads > 1 and not variant(parts[0]).heads:
        parts.append("multi-head")
    return variant("+".join(parts)).name


def self_attention(*, causal: bool = False, masked: bool = False, heads: bool = False) -> Graph:
    """The graph of self-attention, causal or with a given mask, one head or several (the
    entries ``self-attention``, ``causal``, ``masked``, ``multi-head`` and their combinations)."""
    if causal and masked:
        raise ValueError("choose causal=True or masked=True: the causal mask is one mask M")
    parts = [
        name for name, on in (("causal", causal), ("masked", masked), ("multi-head", heads)) if on
    ]
    return variant("+".join(parts) or ROOT).graph
