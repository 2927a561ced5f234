"""What an entry of the registry is: a `Variant`, declared once.

Self-attention itself, causal attention, multi-head attention, RoPE and a user's own attention
are all variants, built the same way: a variant names its base entry and says how its graph is
made from the base's (`build`: the steps it replaces or inserts), the sizes and parameters it
adds with their defaults and conditions, what SymPy is to derive about it (`claims`), the torch
functions that compute it (`twin`, `also`, `options`), and its words (`title`, `text`,
`document`). Its document, its explicit matrices, `derive check --variant NAME` and its tests
all come from this one declaration (`derive.graph.registry` resolves it into an `Entry`).

Variants combine (``gqa+rope``): each is applied to the graph in the order of its `rank`, so
that a variant written for one head (RoPE rotates whatever the scores read) also rotates each
head's queries once multi-head attention has split them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import overload

from ..notation.letters import Letter, Name
from .claims import Claim
from .declaration import Graph
from .sizes import Constraint, Parameter, Size
from .twins import GradientTwin, ModuleTwin, StateTwin, Twin

__all__ = ["Variant", "Document", "Group", "Show", "SECTIONS", "Build"]

#: A variant's graph, from its base's graph.
Build = Callable[[Graph], Graph]

#: The sections of a document, in order (`derive.render.sections`); an entry says which it has.
SECTIONS = (
    "introduction",
    "shapes",
    "steps",
    "facts",
    "figures",
    "counts",
    "backward",
    "explicit",
    "code",
)


@dataclass(frozen=True)
class Show:
    """Gradients shown together in the backward section, with the words before them. One
    gradient derived entry by entry is shown with its chain rule; several, each by its matrix
    form and its entry."""

    letters: tuple[str, ...]
    text: str = ""


@dataclass(frozen=True)
class Group:
    """A part of the backward section: a heading (or none) and what it shows, in order (the
    gradients, and claims such as the Jacobian of the weights)."""

    heading: str | None
    items: tuple[Show | Claim, ...]


@dataclass(frozen=True)
class Document:
    """How the document of a variant reads, beyond what its declarations print.

    Attributes:
        heading: the first section's heading (None: the variant's title).
        sections: which sections it has, in order (`SECTIONS`; self-attention adds "batches"
            and "example").
        prose: (key, words) where a variant has its own words for a section: ``"steps"``,
            ``"facts heading"``, ``"facts"``, ``"counts"``, ``"backward"``,
            ``"backward end"``.
        figures: the figures it shows after its facts (``"softmax-saturation"``).
        states: the state an algorithm keeps block by block, shown on the page after the
            explicit matrices: a dotted path to a function (graph, explicit sizes) -> matrices
            (`derive.proofs.online_softmax.block_states`, FlashAttention's; named, not
            imported, since the declarations may not import the proofs).
        backward: the backward section in parts (None: the gradients that differ from the
            base's, in one display).
    """

    heading: str | None = None
    sections: tuple[str, ...] = SECTIONS
    prose: tuple[tuple[str, str], ...] = ()
    figures: tuple[str, ...] = ()
    backward: tuple[Group, ...] | None = None
    states: str | None = None

    @overload
    def words(self, key: str) -> str | None: ...
    @overload
    def words(self, key: str, default: str) -> str: ...

    def words(self, key: str, default: str | None = None) -> str | None:
        """The variant's words for a section, or `default`."""
        return dict(self.prose).get(key, default)


@dataclass(frozen=True)
class Variant:
    """One entry of the registry.

    Args:
        name: its key (``"sliding-window"``), as ``derive latex --variant NAME`` takes it: one
            word without `+`, `:` or spaces.
        title: a few words for documents (``"Sliding-window attention"``).
        text: a few sentences for its document, one string or a paragraph each (words only;
            the formulas come from the graph).
        base: the entry it changes (a name, or a combination such as ``"causal+multi-head"``;
            default `"self-attention"`, None only for self-attention itself); its document
            refers to the base's steps.
        build: its graph from the graph it is put into (None: that graph, unchanged).
        claims: what SymPy derives about it, proved at its stage (`derive.graph.claims`).
        sizes: the sizes it adds to n, d, c, with their defaults (`Size`).
        parameters: the parameters it adds, with their defaults (`Parameter`).
        requires: conditions on the sizes beyond those its steps state (`derive.graph.sizes`).
        draws: conditions on the sizes `derive check` draws (n ≥ 2: one token tests nothing).
        twin: the function that computes it (None: none of its own; see `Entry.twins`).
        also: more functions that compute it (the explicit path, the book's classes, a
            written-out backward pass).
        options: `(key, value)` pairs it adds to the twins of the variants it is combined with
            (`(("causal", True),)`).
        rank: where it goes in a combination (applied in increasing rank; default 100).
        alone: why it joins no other variant, where it does not (the step it replaces and
            what is derived for that graph alone); `""` (the default) for a variant that
            combines.
        drops: variants it takes out of a combination's chains (cross-attention takes out
            causal attention, on which GQA and QK-norm are declared: a query's position and a
            key's are in two sequences); naming one of them beside it is refused.
        short: its words in the title of a combination (`""`: the title without what is in
            brackets).
        document: how its document reads (`Document`; default: the sections of `SECTIONS`,
            no words of its own).
        notation: the letters its steps introduce (`derive.notation.letters.Letter`, each
            registered where it is declared) and the other symbols it names (`Name`): what the
            glossary lists, in this order.
    """

    name: str
    title: str
    text: str | tuple[str, ...] = ()
    base: str | None = "self-attention"
    build: Build | None = None
    claims: tuple[Claim, ...] = ()
    sizes: tuple[Size, ...] = ()
    parameters: tuple[Parameter, ...] = ()
    requires: tuple[Constraint, ...] = ()
    draws: tuple[Constraint, ...] = ()
    twin: Twin | None = None
    also: tuple[Twin | ModuleTwin | GradientTwin | StateTwin, ...] = ()
    options: tuple[tuple[str, object], ...] = ()
    rank: int = 100
    alone: str = ""
    drops: tuple[str, ...] = ()
    short: str = ""
    document: Document = Document()
    notation: tuple[Letter | Name, ...] = ()

    def __repr__(self) -> str:
        """Short, at a prompt: its name, title, base and rank (the fields hold the rest)."""
        return f"Variant({self.name!r}: {self.title}; base {self.base}, rank {self.rank})"

    @property
    def paragraphs(self) -> tuple[str, ...]:
        return (self.text,) if isinstance(self.text, str) else tuple(self.text)

    @property
    def short_title(self) -> str:
        return self.short or self.title.split(" (")[0]
