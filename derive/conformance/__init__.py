"""`derive conform`: anyone's attention checked against the derivation, and its mistake named.

`conform(obj, **options)` recognises what `obj` is (`derive.conformance.read.target`), shows it
dyadic inputs on a copy (its weights and the global random state are left as they were),
compares what it computes with the graph of self-attention evaluated on the same inputs and
its own weights (`derive.conformance.evaluate.matrices`), checks the properties attention has,
and when a check fails names the mistake of the catalogue (`derive.graph.mistakes`) it
computes. A wing of its own beside `derive.bridge`: `read` (targets, adapters, the Hugging Face
tables), `evaluate` (the derivation on the target's weights), `checks`, `diagnosis`, `report`;
and `linear` and `ssm` for attention without the softmax and state-space layers (`recurrent`
finds which).

The package is named for what it does, not for its function: `derive.conform` is the function,
and a package of the same name would replace it on `derive` once any of its modules is
imported. It imports torch; `import derive` loads it only when used.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import recurrent
from .read.adapters import Adapter, Weights, register_adapter
from .read.target import KINDS, ConformError
from .report import Check, Diagnosis, Report

__all__ = [
    "conform",
    "Report",
    "Check",
    "Diagnosis",
    "Weights",
    "Adapter",
    "register_adapter",
    "ConformError",
    "KINDS",
]


def conform(obj: Any, **options: Any) -> Report:
    """Check an attention implementation against the derivation.

    Args:
        obj: an `nn.Module` (x `(batch, n, d)` -> `(batch, n, d_out)`), a function
            f(q, k, v, ...) on `(batch, heads, n, c)` tensors, a function with no arguments that
            builds one of these, or a TARGET string (``"module:attribute"``,
            ``"path/file.py:attribute"``). A function may be a functools.partial, a bound method
            or a lambda; a torch.compile'd target is checked through its original, eagerly.
        **options: keyword options, each optional:

            - `kind`: ``"sdpa"``, ``"module"`` or ``"self"`` to say what it is (default:
                recognised).
            - `causal`: True or False to say whether it is causal (default: probed).
            - `n`: tokens (default 5, or fewer where a module's context is shorter).
            - `seed`: of the inputs (default 0).
            - `dtype`: a torch dtype: of q, k, v for a function (default float32); a module's
                copy is converted to it (default: the module's own).
            - `width`, `heads`: c and the heads of q, k, v for a function (defaults 8 and 3).
            - `batch`: the batch size (default: the smallest size from 2 on that no other size
                has).
            - `adapter`: the name of the adapter to use (default: the first that recognises
                it).
            - `variant`: registered variants the module computes besides what its adapter
                reads, joined by ``+`` (``"rope"``, ``"gqa+qk-norm"``;
                `derive.graph.registry.variants` lists them, the user's own included), or a
                user's declaration to load (``"path/to/file.py:NAME"``): the forms, tolerances
                and diagnosis come from that variant's graph.
            - `values`: numbers those variants read, by their symbol's name
                (``{"beta": 5e5}``), over the adapter's and the module's (an attribute of that
                name), whose absence means the variant's default.
            - `params`: where the module keeps what a variant reads, by letter or symbol name
                (``{"Lam": "attn.lambda_", "s": "scale"}``); without it, each matrix the
                adapter does not read and each parameter is looked for by its own name
                (``Lam`` or ``lam``, case and underscores aside; an nn.Linear is read as its
                weight transposed, as the book's W_query).
            - `strict`: fail on the conventions the derivation leaves open (default False:
                state them): a query with no key gets derive's zero weights, and a float64
                target is float64 throughout (its adapter's known conventions ignored).
            - `conventions`: conventions told, over those the adapter knows its modules keep
                (the huggingface adapter: an eager layer's softmax and every model's RoPE
                tables in float32): ``{"softmax": "float32"}`` (the dtype the softmax runs
                in), ``{"tables": "float32"}`` (that of RoPE's tables),
                ``{"precision": "float32"}`` (every step: a layer that casts to float32
                inside), ``{"empty rows": "zero"}`` (or ``"nan"``, ``"any"``: what a query with
                no key must get). A float64 target that fails is tried again with its softmax,
                its tables, then both in float32, and the report says when that would conform
                (it still fails: only the caller can say the rest of the layer is float64);
                then, unless `strict`, with every step in float32: where that passes, it
                conforms at float32's precision, and the report's verdict, its `precision` and
                a finding say so (never "no mistake matches").
            - `mistakes`: the catalogue to diagnose with (default
                `derive.graph.mistakes.MISTAKES`).

    Returns:
        A `Report`: ``report.conforms``, its checks, its diagnosis; ``print(report)``.

    Raises:
        ConformError: the target cannot be loaded or called, or its weights not found.
        TypeError: an option not in the list above.
    """
    from .checks.run import Options
    from .checks.run_function import FunctionRun
    from .checks.run_module import ModuleRun
    from .read.target import load, recognise

    unknown = set(options) - set(Options.__dataclass_fields__)
    if unknown:
        raise TypeError(
            f"conform() got unknown options {sorted(unknown)}; "
            f"known: {', '.join(Options.__dataclass_fields__)}"
        )
    settings = Options(**options)
    if ":" in settings.variant:  # a user's declaration, from a file or a module
        from .read.variant_values import registered_names

        settings = dataclasses.replace(settings, variant=registered_names(settings.variant))
    name = obj if isinstance(obj, str) else None
    loaded = load(obj) if isinstance(obj, str) else obj
    if _builder(loaded):  # a function that builds the target: built once, here
        name = f"{name or getattr(loaded, '__name__', 'target')}()"
        loaded = recognise(loaded, settings.kind, name).obj
    found = recurrent.recognised(loaded)
    if found is not None:  # a recurrent layer (a delta rule, Mamba-2): its own checks
        reader, run = found
        with torch.random.fork_rng(devices=[]):
            return run(loaded, reader, n=settings.n or 7, seed=settings.seed, name=name or "")
    target = recognise(loaded, settings.kind, name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and spins on no other core
    kind = FunctionRun if target.kind == "sdpa" else ModuleRun
    if kind is FunctionRun and settings.params:  # a function holds no matrices to find
        raise ConformError(
            f"{target.name} is a function f(q, k, v, ...): params ({settings.params}) name "
            "a module's attributes; wrap it in an nn.Module holding them"
        )
    try:
        with torch.random.fork_rng(devices=[]):
            report = kind(target, settings).run().report()
        if report.conforms or report.dtype != "float64" or settings.conventions:
            return report
        for coarser in (("tables",), ("softmax",), ("softmax", "tables")):  # tightest first
            told = {**settings.conventions, **dict.fromkeys(coarser, "float32")}
            with torch.random.fork_rng(devices=[]):  # the same inputs
                found = kind(target, dataclasses.replace(settings, conventions=told)).run()
                relaxed = found.report()
            if relaxed.conforms:
                return _hint(report, coarser)
        if settings.strict:
            return report
        told = {**settings.conventions, "precision": "float32"}  # the whole layer in float32
        with torch.random.fork_rng(devices=[]):
            relaxed = kind(target, dataclasses.replace(settings, conventions=told)).run().report()
        if relaxed.conforms:
            return _at_precision(relaxed, "float32")
        return report
    finally:
        torch.set_num_threads(threads)


def _builder(obj: Any) -> bool:
    """A function with no arguments (a target's factory), not a module, class or sdpa."""
    from .read.target import _positional

    if isinstance(obj, (torch.nn.Module, type)) or not callable(obj):
        return False
    required, total = _positional(obj)
    return required == 0 and total == 0


def _at_precision(report: Report, precision: str) -> Report:
    """A float64 target that fails within float64's rounding and passes every check within
    `precision`'s: it computes in `precision` inside (Qwen 3.5's linear layers cast to
    float32), and the report says so, its verdict naming the precision, rather than "no
    mistake matches"."""
    line = (
        f"finding: it computes at {precision}'s precision: given {report.dtype}, it passes every "
        f"check within {precision}'s rounding and not within {report.dtype}'s (a layer that "
        f"casts to {precision} inside); --strict holds it to {report.dtype}"
    )
    return dataclasses.replace(report, notes=(*report.notes, line), precision=precision)


def _hint(report: Report, coarser: tuple) -> Report:
    """A float64 target that fails, and would conform with its softmax or its RoPE tables taken
    in float32: the failing report, saying so. Only the caller (or the adapter) can say that
    this is the target's convention, not the whole layer computed in float32."""
    what = " and ".join({"softmax": "its softmax", "tables": "its RoPE tables"}[k] for k in coarser)
    told = ", ".join(f'"{k}": "float32"' for k in coarser)
    line = (
        f"note: with {what} in float32 it would conform; if that is its convention, say "
        f"conventions={{{told}}} (--convention {coarser[0]}=float32)"
    )
    return dataclasses.replace(report, notes=(*report.notes, line))
