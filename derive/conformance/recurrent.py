"""The recurrent layers `derive conform` checks by their own rules rather than by the softmax
attention catalogue: Gated DeltaNet's (`linear`), Kimi Delta Attention's (`kda`), Mamba-2's and
Mamba's (`ssm`). Each family is its
readers and the run that checks a layer one of them reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import kda, linear, ssm
from .linear import Reader
from .report import Report

__all__ = ["recognised", "FAMILIES"]

Run = Callable[..., Report]

#: Each family: its readers, in the order they are tried, and its run.
FAMILIES: tuple[tuple[tuple[Reader, ...], Run], ...] = (
    (linear.READERS, linear.run),
    (kda.READERS, kda.run),
    (ssm.READERS, ssm.run),
    (ssm.MAMBA_READERS, ssm.run_mamba),
)


def recognised(obj: Any) -> tuple[Reader, Run] | None:
    """The reader of a recurrent layer and the run that checks it, or None for anything else."""
    for readers, run in FAMILIES:
        reader = next((reader for reader in readers if reader.matches(obj)), None)
        if reader is not None:
            return reader, run
    return None
