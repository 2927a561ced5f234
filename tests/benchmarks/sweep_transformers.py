"""The sweep: every decoder family of the installed transformers, built from a small config with
random weights, each kind of attention layer conformed (`derive.conform`), and the table of
verdicts written to docs/conformance.md.

    PYTHONPATH=. python tests/benchmarks/sweep_transformers.py            # every family
    PYTHONPATH=. python tests/benchmarks/sweep_transformers.py llama gemma3_text

A family is a model type of `AutoModelForCausalLM`'s mapping. Its config is the library's
default with the sizes made small (`SMALL`, each key set where the config has it); a family
whose model does not build so is listed with the reason. Each kind of attention layer
(`derive.testing.attention_layers`: a model's local and global layers, its layers with and
without RoPE, are two kinds) gets a row: its path, its class, the variant the adapter read, the
verdict (conforms, does not conform with the rows that failed and the diagnosis, or not read
with the reason), and the check's time. A family with no layer any adapter reads gets one row
saying so.

The test suite runs `sweep` on a fixed list of families (tests/conform/test_conform_sweep.py);
the whole sweep is this benchmark (about ten minutes on a 2-core machine), run by hand after a
transformers upgrade or a change to the adapters, its table committed.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
import warnings
from pathlib import Path

#: The sizes of every model built: small enough for a check in about a second.
SMALL = {
    "vocab_size": 64,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "query_pre_attn_scalar": 16,  # Gemma's 1/√s: the head width, as in its released models
    "max_position_embeddings": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 64,
    "n_inner": 128,
    # mixtures of experts: a few small experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
}
#: The state-space layers' heads, head width and expansion, as each family's config names them:
#: heads of SMALL's head width, as many as make the inner width (expansion × hidden size), as
#: the layers need (Mamba 2's default 128 heads would not run at SMALL's hidden size).
SSM_HEADS = (
    ("num_heads", "head_dim", "expand"),
    ("mamba_n_heads", "mamba_d_head", "mamba_expand"),
    ("n_mamba_heads", "mamba_headdim", "mamba_expand"),
)
#: The seconds one family may take to build and check before it is listed as too slow.
PATIENCE = 30
DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


@dataclasses.dataclass(frozen=True)
class Row:
    """One kind of attention layer of one family (or the family itself, `path` empty)."""

    family: str
    path: str
    layer: str
    variant: str
    verdict: str  # "conforms", "does not conform", "not read", "not built", "too slow"
    seconds: float
    why: str = ""


def families() -> list[str]:
    """Every model type of `AutoModelForCausalLM`'s mapping in the installed transformers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


#: The most layers a model is built with, whatever its pattern of layer kinds.
MOST_LAYERS = 8


def layers_for_every_kind(config) -> int:
    """The fewest layers (at least SMALL's, at most `MOST_LAYERS`) whose kinds include every
    kind of layer of the full model: each distinct entry of ``layer_types`` (Gemma 3's fifth
    local layer then its global one) and of ``no_rope_layers`` (SmolLM3's and Llama 4's layers
    without RoPE) at its first index."""
    needed = SMALL["num_hidden_layers"]
    for key in ("layer_types", "no_rope_layers"):
        pattern = getattr(config, key, None)
        if isinstance(pattern, list | tuple) and pattern:
            first = {kind: index for index, kind in reversed(list(enumerate(pattern)))}
            needed = max(needed, max(first.values()) + 1)
    return min(needed, MOST_LAYERS)


def _made_small(config) -> None:
    """One config made small in place: the sizes of `SMALL` where it has them, the state-space
    heads, as many layers as its kinds of layer need, a padding id within the small vocabulary."""
    layers = layers_for_every_kind(config)
    for key, value in SMALL.items():
        if hasattr(config, key):
            setattr(config, key, value)
    for heads, width, expand in SSM_HEADS:
        if all(hasattr(config, key) for key in (heads, width, expand, "hidden_size")):
            inner = int(getattr(config, expand) * config.hidden_size)
            setattr(config, width, SMALL["head_dim"])
            setattr(config, heads, inner // SMALL["head_dim"])
    if hasattr(config, "num_hidden_layers"):
        config.num_hidden_layers = layers
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and pad >= SMALL["vocab_size"]:  # a token id of the full vocabulary
        config.pad_token_id = 0


def _with_sub_configs(config) -> list:
    """A config and the configs it holds (a multimodal model's text and vision configs, theirs
    in turn), as transformers' `sub_configs` names them."""
    found = [config]
    for name in getattr(config, "sub_configs", None) or {}:
        held = getattr(config, name, None)
        if held is not None and hasattr(held, "to_dict"):
            found += _with_sub_configs(held)
    return found


def build(family: str):
    """The family's causal LM from its default config, it and every config it holds (a
    multimodal model's text and vision towers) made small (`_made_small`: the sizes of `SMALL`,
    as many layers as its kinds of layer need), float32, random weights drawn from seed 0."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(family)
    for held in _with_sub_configs(config):
        _made_small(held)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _verdict(report) -> tuple[str, str]:
    """The verdict, and for a failing layer the checks that failed and the diagnosis."""
    if report.conforms:
        return "conforms", ""
    failed = ", ".join(check.name for check in report.checks if check.status == "FAIL")
    found = report.diagnosis
    if found is None:
        return "does not conform", f"failed: {failed}"
    named = found.id or f"no mistake of the catalogue; first difference: {found.first_difference}"
    return "does not conform", f"failed: {failed}; diagnosis: {named}"


def _why_not_read(model) -> str:
    """Why no adapter reads the model's first module named like an attention layer: the
    adapter's own refusal, or that no adapter recognises it."""
    from derive.conformance.read.registry import find_adapter

    for path, module in model.named_modules():
        if type(module).__name__.endswith(("Attention", "SelfAttention")):
            try:
                find_adapter(module).read(module)
            except Exception as error:  # noqa: BLE001 - the refusal is the answer
                said = f"{error}".splitlines()[0][:200]
                return f"{type(module).__name__} (`{path}`): {said}"
            return f"{type(module).__name__} (`{path}`): read, but not as a layer of its own"
    return "no module named like an attention layer"


def sweep_family(family: str) -> list[Row]:
    """The rows of one family."""
    import derive
    from derive.testing import attention_layers, refused_layers

    start = time.perf_counter()
    try:
        model = build(family)
    except Exception as error:  # noqa: BLE001 - any failure to build is the family's row
        reason = f"{type(error).__name__}: {error}".splitlines()[0][:160]
        return [Row(family, "", "", "", "not built", time.perf_counter() - start, reason)]
    layers, refused = attention_layers(model), refused_layers(model)
    if not layers and not refused:
        why = _why_not_read(model)
        return [Row(family, "", "", "", "not read", time.perf_counter() - start, why)]
    rows = [
        Row(family, path, type(model.get_submodule(path)).__name__, "", "not read", 0.0, why)
        for path, why in refused.items()
    ]
    for path, layer in layers.items():
        began = time.perf_counter()
        try:
            report = derive.conform(layer)
        except Exception as error:  # noqa: BLE001 - a refusal says why
            reason = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            row = Row(family, path, type(layer).__name__, "", "not read", 0.0, reason)
        else:
            verdict, why = _verdict(report)
            variant = report.variant or "self-attention"
            row = Row(family, path, type(layer).__name__, variant, verdict, 0.0, why)
        rows.append(dataclasses.replace(row, seconds=time.perf_counter() - began))
    return rows


class _TooSlow(BaseException):  # not an Exception: a family's own `except` lets it through
    pass


def _too_slow(*_) -> None:
    raise _TooSlow


def sweep(names: list[str], progress=None) -> list[Row]:
    """The rows of every family of `names`, each given `PATIENCE` seconds (where the platform
    has SIGALRM)."""
    warnings.filterwarnings("ignore")
    rows: list[Row] = []
    timed = hasattr(signal, "SIGALRM")
    if timed:
        signal.signal(signal.SIGALRM, _too_slow)
    for family in names:
        start = time.perf_counter()
        if timed:
            signal.alarm(PATIENCE)
        try:
            found = sweep_family(family)
        except _TooSlow:
            found = [
                Row(
                    family,
                    "",
                    "",
                    "",
                    "too slow",
                    time.perf_counter() - start,
                    f"over {PATIENCE} s",
                )
            ]
        finally:
            if timed:
                signal.alarm(0)
        rows += found
        if progress is not None:
            for row in found:
                progress(row)
    return rows


def markdown(rows: list[Row], version: str) -> str:
    """docs/conformance.md: the counts, then one row per kind of layer."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    lines = [
        "# Conformance of transformers' attention layers",
        "",
        f"> Generated by `tests/benchmarks/sweep_transformers.py` on transformers {version}: every "
        "model type of `AutoModelForCausalLM`'s mapping, built from its default config made small "
        "(random weights), each kind of attention layer checked by `derive conform` on its own "
        "weights, with as many layers as its pattern of layer kinds needs. A layer that computes "
        "something no registered variant declares (BitNet's norm of the merged heads, "
        "DiffLlama's two softmaxes) is refused by name with what it computes, as is a layout no "
        "table of the adapter knows (not read); a failing row of an unmodified layer would be a "
        "gap of the adapters or a finding about the layer, not a bug of the model until shown "
        "so. The tests run a fixed list of families (tests/conform/test_conform_sweep.py).",
        "",
        f"{len({row.family for row in rows})} families, {len(rows)} rows: {summary}.",
        "",
        # the verdict first, beside the family: the column a reader looks for, on screen at
        # any width (the layer's path and class, long, come after it)
        "| family | verdict | variant read | time | class | layer | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        why = row.why.replace("|", "\\|").replace("\n", " ")
        layer = f"`{row.path}`" if row.path else ""
        lines.append(
            f"| {row.family} | {row.verdict} | {row.variant if row.path else ''} | "
            f"{row.seconds:.1f} s | {row.layer if row.path else ''} | {layer} | {why} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    import transformers

    names = argv or families()

    def say(row: Row) -> None:
        print(f"{row.family:28} {row.verdict:17} {row.seconds:5.1f} s  {row.path} {row.why[:90]}")

    rows = sweep(names, progress=say)
    if not argv:
        DOC.write_text(markdown(rows, transformers.__version__), encoding="utf-8")
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
