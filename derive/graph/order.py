"""The ranks of the registry's rules on the scores, read from the one declaration of where each
acts, `attention.mods.SCORE_RULES`: a variant's rank is `FIRST` plus its place in that order,
so a combination's rules are derived in the order attention applies them.

The table is read from attention/mods.py as text (its literal, not its code), the file found
where attention's package is without importing it: derive's layers outside its torch wings
import neither torch nor attention (`import derive` stays light).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

__all__ = ["FIRST", "score_rank", "score_rules"]

#: The rank of the first rule on the scores: after the QK norms (40), before RoPE (50), which
#: leaves the rules between the masks and the rotation as the table orders them.
FIRST = 41
#: The rank of the next variant (RoPE's), which the rules' ranks must stay below.
NEXT = 50


@functools.cache
def score_rules() -> tuple[str, ...]:
    """The rules on the scores in the order they act (`attention.mods.SCORE_RULES`, by stage)."""
    spec = importlib.util.find_spec("attention")  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("derive reads the order of the rules on the scores from attention")
    path = Path(next(iter(spec.submodule_search_locations))) / "mods.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (table,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "SCORE_RULES"
        and node.value is not None
    ]
    rules = ast.literal_eval(table)
    if FIRST + len(rules) > NEXT:
        raise ValueError(
            f"{len(rules)} rules on the scores take the ranks {FIRST} to {FIRST + len(rules) - 1}"
            f", past RoPE's {NEXT}: move FIRST or RoPE's ranks"
        )
    return tuple(name for name, _ in sorted(rules, key=lambda row: row[1]))


def score_rank(name: str) -> int:
    """The rank of the rule on the scores registered as `name` (a ValueError for another)."""
    return FIRST + score_rules().index(name)
