"""`derive conform TARGET`: anyone's attention against the derivation (see `derive.conform`).

Exit status 0 when it conforms, 1 when it does not, 2 for bad input (a target that cannot be
imported or called, an adapter that cannot find the weights: one line on stderr saying what was
looked for). The table is coloured only when stdout is a terminal (and NO_COLOR is not set).
"""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from .errors import EnvironmentProblem, UsageError
from .parsing import integer, value

__all__ = ["add", "run", "run_conform"]

EPILOG = """examples:
  derive conform torch.nn.functional:scaled_dot_product_attention
  derive conform my_model.py:attention            # an nn.Module instance, or a function
  derive conform my_model.py:build --json         # build() returns the module
  derive conform my_model.py:attention --causal --dtype bfloat16 --markdown
  derive conform my_model.py:llama_layer --variant rope --value beta=500000
  derive conform --model gemma2                   # each kind of layer of transformers' Gemma 2

exit status: 0 when it conforms, 1 when it does not, 2 for bad input"""

_DTYPES = ("float64", "float32", "float16", "bfloat16")


def add(commands, argparse) -> None:
    """The `conform` subcommand."""
    text = "check an attention implementation against the derivation (needs torch)"
    sub = commands.add_parser(
        "conform",
        help=text,
        epilog=EPILOG,
        description=text + ": each check a row, and the mistake it makes named",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help="module:attribute or path/to/file.py:attribute (or --model, --config)",
    )
    sub.add_argument(
        "--model",
        metavar="TYPE",
        help="a transformers model type (gemma2, llama, qwen3): its model built from its "
        "default config with random weights, each kind of attention layer conformed "
        "(needs transformers)",
    )
    sub.add_argument(
        "--config", metavar="FILE", help="a model's own config.json (no weights), as --model"
    )
    sub.add_argument("--kind", choices=("sdpa", "module", "self"), help="say what it is")
    causal = sub.add_mutually_exclusive_group()
    causal.add_argument(
        "--causal",
        dest="causal",
        action="store_const",
        const=True,
        help="it is causal (default: probed)",
    )
    causal.add_argument(
        "--no-causal", dest="causal", action="store_const", const=False, help="it is not causal"
    )
    output = sub.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="the report as JSON")
    output.add_argument("--markdown", action="store_true", help="the report as Markdown")
    output.add_argument(
        "-q", "--quiet", action="store_true", help="print only the verdict (and what fails)"
    )
    sub.add_argument("--n", type=integer(2, 64), metavar="N", help="tokens (default 5)")
    sub.add_argument(
        "--seed",
        type=integer(0, 2**32 - 1),
        default=0,
        metavar="S",
        help="seed of the inputs (default 0)",
    )
    sub.add_argument(
        "--dtype",
        choices=_DTYPES,
        help="of q, k, v (sdpa, default float32); a module's copy is converted",
    )
    sub.add_argument(
        "--width",
        type=integer(1, 1024),
        default=8,
        metavar="C",
        help="sdpa: c, the width of q, k, v (default 8)",
    )
    sub.add_argument(
        "--heads",
        type=integer(1, 64),
        default=3,
        metavar="H",
        help="sdpa: the heads axis of q, k, v (default 3)",
    )
    sub.add_argument(
        "--batch",
        type=integer(1, 64),
        metavar="B",
        help="batch size (default: a size no other dimension has)",
    )
    sub.add_argument("--adapter", metavar="NAME", help="the adapter to read a module with")
    sub.add_argument(
        "--strict",
        action="store_true",
        help="fail on conventions the derivation leaves open (NaN for a query with no key, a "
        "float64 layer's softmax in float32); default: state them",
    )
    sub.add_argument(
        "--convention",
        action="append",
        metavar="NAME=VALUE",
        type=_convention,
        help="a convention the target keeps: softmax=float32, tables=float32 (RoPE's), "
        "'empty rows=zero' (or nan, any)",
    )
    sub.add_argument(
        "--variant",
        action="append",
        metavar="NAME",
        help="a registered variant the module computes besides what its adapter reads "
        "(derive variants lists them; repeat it, or join names with +: gqa+rope)",
    )
    sub.add_argument(
        "--value",
        action="append",
        metavar="NAME=NUMBER",
        type=value,
        help="a number the variants read, by its symbol's name (beta=500000, kappa=30, w=4); "
        "default: the adapter's, else the module's attribute of that name, else the variant's",
    )
    sub.add_argument(
        "--param",
        action="append",
        metavar="NAME=PATH",
        type=_param,
        help="where the module keeps what the variant reads, by letter or symbol name "
        "(Lam=attn.lambda_); default: the attribute of that name (Lam or lam)",
    )


def _convention(text: str) -> tuple[str, str]:
    import argparse

    name, equals, value = text.partition("=")
    known = {
        "softmax": _DTYPES,
        "tables": _DTYPES,
        "precision": _DTYPES,
        "empty rows": ("zero", "nan", "any"),
    }
    if not equals or name.strip() not in known or value.strip() not in known[name.strip()]:
        choices = "; ".join(f"{k}={'|'.join(v)}" for k, v in known.items())
        raise argparse.ArgumentTypeError(f"expected one of {choices}, got {text!r}")
    return name.strip(), value.strip()


def _param(text: str) -> tuple[str, str]:
    import argparse

    name, equals, path = text.partition("=")
    if not equals or not name.strip() or not all(p.isidentifier() for p in path.split(".")):
        raise argparse.ArgumentTypeError(
            f"expected NAME=attribute.path (Lam=attn.lam), got {text!r}"
        )
    return name.strip(), path.strip()


def run(args, progress=None) -> int:
    """`derive conform`, its report on standard output."""
    return run_conform(args)


def run_conform(args, out: TextIO | None = None) -> int:
    """Execute `derive conform`; 0 when it conforms, 1 when it does not."""
    out = sys.stdout if out is None else out
    try:
        import torch
    except ImportError as error:
        raise EnvironmentProblem(
            f"derive conform needs torch ({error}); pip install torch"
        ) from None
    from ..conformance import ConformError, conform

    options = {
        "kind": args.kind,
        "causal": args.causal,
        "n": args.n,
        "seed": args.seed,
        "width": args.width,
        "heads": args.heads,
        "batch": args.batch,
        "adapter": args.adapter,
        "variant": "+".join(args.variant or ()),
        "values": dict(args.value or ()),
        "params": dict(args.param or ()),
        "strict": args.strict,
        "conventions": dict(args.convention or ()),
    }
    if args.dtype is not None:
        options["dtype"] = getattr(torch, args.dtype)
    if (args.target is None) == (args.model is None and args.config is None):
        raise UsageError(
            "derive conform: give a TARGET, or --model TYPE or --config FILE (one of them)"
        )
    if args.target is None:
        return _conform_model(args, options, out)
    try:
        report = conform(args.target, **options)
    except ConformError as error:
        raise UsageError(f"derive conform: {error}") from None
    _print(report, args, out)
    return 0 if report.conforms else 1


def _conform_model(args, options: dict, out: TextIO | None) -> int:
    """Each kind of attention layer of the model --model or --config names, conformed (every
    layer read with what its adapter reads: --variant, --value and --param are one module's);
    0 when every kind conforms and none is refused."""
    from ..conformance import ConformError, conform
    from ..conformance.read.layers import layer_kinds
    from ..conformance.read.models import ModelError, built_model

    if args.model and args.config:
        raise UsageError("derive conform: give --model or --config, not both")
    told = [flag for flag in ("variant", "value", "param") if getattr(args, flag)]
    if told:
        raise UsageError(
            f"derive conform: --{told[0]} is for one module; with --model each layer is read "
            "with what its adapter reads"
        )
    try:
        built, source = built_model(model=args.model, config=args.config)
    except ModelError as error:
        raise UsageError(f"derive conform: {error}") from None
    layers, refused = layer_kinds(built)
    if not layers and not refused:
        raise UsageError(f"derive conform: {source}: no attention layer an adapter reads")
    options = {k: v for k, v in options.items() if k not in ("variant", "values", "params")}
    reports = {}
    for path, layer in layers.items():
        try:
            reports[path] = conform(layer, **options)
        except ConformError as error:
            refused[path] = str(error)
    if args.json:
        shown = {path: report.as_json() for path, report in reports.items()}
        shown |= {path: {"not read": why} for path, why in refused.items()}
        document = {"model": source, "layers": shown}
        print(json.dumps(document, indent=2, ensure_ascii=False), file=out)
    else:
        kinds = len(reports) + len(refused)
        said = f"{kinds} kind{'s' if kinds > 1 else ''} of attention layer"
        print(f"{source}: {said}", file=out)
        for path, report in reports.items():
            print(f"\n{path} ({type(built.get_submodule(path)).__name__}):", file=out)
            _print(report, args, out)
        for path, why in refused.items():
            print(f"\n{path}: not read: {why}", file=out)
    conforms = not refused and all(report.conforms for report in reports.values())
    return 0 if conforms else 1


def _print(report, args, out: TextIO | None) -> None:
    """One report as the options ask: JSON, Markdown, its verdict only, or its table."""
    if args.json:
        print(json.dumps(report.as_json(), indent=2, ensure_ascii=False), file=out)
    elif args.markdown:
        print(report.markdown(), file=out, end="")
    elif args.quiet:
        print(report.table().rstrip().splitlines()[-1], file=out)
    else:
        colour = out is not None and out.isatty() and not os.environ.get("NO_COLOR")
        print(report.table(colour=colour), file=out)
