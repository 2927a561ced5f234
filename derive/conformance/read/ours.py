"""This package's own modules (`attention.modules`): the modifications each was built with read
from the objects its forward uses (`attention.mods`, the module's `score_mods` with its tensors,
`module_mods`), one table row per kind of modification: the registry's variant that declares it
and the numbers and matrices that variant reads. A kind with no row is refused by name."""

from __future__ import annotations

from typing import Any

from .target import ConformError

__all__ = ["read_modifications"]


def _rows() -> dict:
    from attention import mods as M

    return {
        M.Softcap: ("softcap", lambda mod: ({"kappa": mod.cap}, {})),
        M.ALiBi: ("alibi", lambda mod: ({}, {"Mu": mod.slopes[None]})),  # (h,) -> (1, h)
        M.Sinks: ("sinks", lambda mod: ({}, {"Zeta": mod.logits[None]})),
        M.Chunked: ("chunked", lambda mod: ({"chi": mod.size}, {})),
        M.Temperature: (
            "temperature-tuning",
            lambda mod: ({"F": mod.floor, "alpha": mod.scale}, {}),
        ),
    }


def read_modifications(module: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(the variants, their values by symbol name, their matrices by letter) of the score
    modifications `module` was built with; a query scale other than 1/√c_h is refused (no
    registered variant declares it)."""
    from attention import mods as M
    from attention.modules._common import module_mods

    if not hasattr(module, "score_mods"):
        return [], {}, {}
    mods = M.resolved(module_mods(module), module.num_heads, module.W_query.weight)
    rows = _rows()
    parts, values, inputs = [], {}, {}
    for mod in mods:
        if isinstance(mod, M.QueryScale):
            if mod.scalar != module.head_dim:
                raise ConformError(
                    f"{type(module).__name__} scales by 1/√query_pre_attn_scalar = "
                    f"1/√{mod.scalar}, not 1/√c_h = 1/√{module.head_dim}: no registered "
                    "variant declares that scale"
                )
            continue
        if type(mod) not in rows:
            raise ConformError(
                f"{type(module).__name__} was built with {type(mod).__name__}, which no "
                f"registered variant declares (read: {', '.join(k.__name__ for k in rows)})"
            )
        name, read = rows[type(mod)]
        found_values, found_inputs = read(mod)
        parts.append(name)
        values |= found_values
        inputs |= found_inputs
    return parts, values, inputs
