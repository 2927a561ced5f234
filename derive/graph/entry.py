"""A name of the registry resolved: an `Entry` (its graph, its base's, its claims each with the
`Stage` it is proved at, its sizes, conditions and twins), made by `derive.graph.registry`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .claims import Claim
from .declaration import Graph
from .sizes import Constraint, Parameter, Size
from .twins import GradientTwin, ModuleTwin, StateTwin, Twin, joined
from .variant import Document, Variant

__all__ = ["Entry", "Stage"]


@dataclass(frozen=True)
class Stage:
    """Where a variant's claims are proved: `graph`, the graph of the variants ranked up to it
    (with its own chain), and `before`, the same without it."""

    variant: Variant
    graph: Graph
    before: Graph


@dataclass(frozen=True)
class Entry:
    """A name resolved: what documents, explicit matrices and checks read (`derive.variant`
    makes one).

    Args:
        name: the canonical name (parts in their order: ``"gqa+qk-norm+rope"``).
        title: its title, for documents.
        text: its paragraphs, for documents.
        parts: the variants named, in order.
        chain: every variant it stands for, in rank order.
        graph: its declarations.
        base: the graph of its base, whose steps its document refers to (None for
            self-attention).
        claims: each claim with the `Stage` it is proved at.
        document: how its document reads (`Document`).
    """

    name: str
    title: str
    text: tuple[str, ...]
    parts: tuple[Variant, ...]
    chain: tuple[Variant, ...]
    graph: Graph
    base: Graph | None
    claims: tuple[tuple[Claim, Stage], ...]
    document: Document

    def __repr__(self) -> str:
        """Short, at a prompt: its name, title, steps and claims (``derive variants --show
        NAME`` prints the whole)."""
        steps, inputs = len(self.graph.declarations), len(self.graph.inputs)
        title = self.title if len(self.title) <= 80 else self.title[:79] + "…"
        return (
            f"Entry({self.name!r}: {title}; {steps} steps from {inputs} inputs, "
            f"{len(self.claims)} claim{'' if len(self.claims) == 1 else 's'})"
        )

    @property
    def heads(self) -> bool:
        """True when its graph has heads (then h is one of its sizes)."""
        return any(step.head for step in self.graph.declarations)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(v.name for v in self.chain)

    @property
    def sizes(self) -> tuple[Size, ...]:
        """The sizes its variants add, each once."""
        return tuple(dict.fromkeys(s for v in self.chain for s in v.sizes))

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        return tuple(dict.fromkeys(p for v in self.chain for p in v.parameters))

    @property
    def requires(self) -> tuple[Constraint, ...]:
        """Every condition on its sizes: those its steps state, and its variants'."""
        found = (*self.graph.requires, *(c for v in self.chain for c in v.requires))
        return tuple(dict.fromkeys(found))

    @property
    def draws(self) -> tuple[Constraint, ...]:
        """The conditions `derive check` puts on the sizes it draws, besides `requires`."""
        return tuple(dict.fromkeys(c for v in self.chain for c in v.draws))

    @property
    def options(self) -> dict[str, object]:
        """The options its variants give to its twins, in rank order."""
        found: dict[str, object] = {}
        for v in self.chain:
            for key, value in v.options:
                found[key] = joined(found[key], value) if key in found else value
        return found

    @property
    def twins(self) -> tuple[Twin | ModuleTwin | GradientTwin | StateTwin, ...]:
        """The functions that compute it: the twins of its highest-ranked variant that declares
        one and hears of every change to the graph (`_told`), and the `also` of that variant
        and of those ranked after it that hear of them too (none where a variant ranked after
        it changes the graph and gives no option: a user's variant without a twin). A twin
        applies where the entry's options are ones it takes or implies (`derive.bridge` checks
        its signature) and the variants it requires are in the entry."""
        declaring = [v for v in self.chain if v.twin is not None and self._told(v)]
        if not declaring:
            return ()
        owner = declaring[-1]
        later = self.chain[self.chain.index(owner) :]
        if any(v.build is not None and not v.options for v in later[1:]):
            return ()  # a variant after it changes the graph and tells its twins nothing
        found = (owner.twin, *(t for v in later if self._told(v) for t in v.also))
        return tuple(t for t in found if t is not None and set(t.requires) <= self.names)

    def _told(self, variant: Variant) -> bool:
        """Whether `variant`'s twins hear of every change the entry's other variants make to
        the graph: each variant outside `variant`'s own chain changes nothing or gives its
        twins options. Linear attention replaces the softmax and says nothing to the twins
        of multi-head attention, which compute the softmax's heads: with heads, linear
        attention's own twins (told the heads) compute the entry."""
        by_name = {v.name: v for v in self.chain}
        under: set[str] = set()
        names = [variant.name]
        while names:
            name = names.pop()
            if name in under or name not in by_name:
                continue
            under.add(name)
            base = by_name[name].base
            names += base.split("+") if base else []
        return all(v.name in under or v.build is None or v.options for v in self.chain)

    def with_graph(self, graph: Graph) -> Entry:
        """The entry with other declarations in place of its graph's (a test changes one
        declaration this way and checks that every display derived from it changes).

        Args:
            graph: the declarations to put in place of the entry's graph.

        Returns:
            A copy of the entry with `graph`; the claims proved on its old graph are proved on
                `graph`, the others keep their stages.
        """
        claims = tuple(
            (claim, replace(stage, graph=graph) if stage.graph == self.graph else stage)
            for claim, stage in self.claims
        )
        return replace(self, graph=graph, claims=claims)
