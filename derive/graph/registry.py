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

from .claims import Claim
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
    book's later variants, then those registered in this process."""
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
    ``--variant NAME`` find it); a `DeclarationError` if its declaration does not resolve.
    Registering a name again replaces the user's earlier variant of that name."""
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


def _stage(found: Variant, names: frozenset[str]) -> Stage:
    ranked = {v.name for v in _ranked(names) if v.rank <= found.rank}
    upto = frozenset(ranked | _chain(found.name))
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
    """The entry registered under `name`, or the combination ``"gqa+rope"``; a ValueError
    naming the known variants otherwise (a `DeclarationError` where a declaration does not
    resolve, or parts do not combine)."""
    parts = _normalised(name)
    return _resolve("+".join(p.name for p in parts))


@functools.cache
def _resolve(name: str) -> Entry:
    parts = tuple(_lookup(part) for part in name.split("+"))
    if len(parts) > 1:
        alone = [p.name for p in parts if not p.combines]
        if alone:
            joining = sorted(v for v in variants() if _lookup(v).combines)
            raise ValueError(
                f"{name}: {', '.join(alone)} does not combine; only {', '.join(joining)} combine"
            )
    names = frozenset().union(*(_chain(p.name) for p in parts))
    chain = _ranked(names)
    graph = graph_of(names)
    bases = frozenset().union(*(_chain(p.base) for p in parts if p.base is not None))
    bases -= {p.name for p in parts}
    base = graph_of(bases) if bases else None
    claims: list[tuple[Claim, Stage]] = []
    for part in parts:  # a claim two parts make is proved once, at the later one's stage
        stage = _stage(part, names)
        seen = [claim for claim, _ in claims]
        claims = [(c, stage if c in part.claims else at) for c, at in claims]
        claims += [(c, stage) for c in part.claims if c not in seen]
    single = parts[0] if len(parts) == 1 else None
    text = single.paragraphs if single else tuple(x for p in parts for x in p.paragraphs)
    figures = tuple(dict.fromkeys(f for p in parts for f in p.document.figures))
    document = single.document if single else Document(figures=figures)
    return Entry(name, _title(parts), text, parts, chain, graph, base, tuple(claims), document)


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
