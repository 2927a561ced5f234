"""For your own test suite: assert that your attention computes what the derivation says.

    from derive.testing import assert_conforms, assert_model_conforms

    def test_my_attention():
        assert_conforms(MyAttention(d_in=64, d_out=64, num_heads=4))

    def test_my_port():  # every attention layer of a model, each kind of layer once
        assert_model_conforms(my_model)

`assert_conforms` runs `derive.conform` (same options) and raises `AssertionError` whose message
is the report, with the mistake named when the catalogue has it. A convention of your own is
read by an adapter you register (`register_adapter`, see `derive.conformance.read.adapters`).
"""

from __future__ import annotations

from typing import Any

from .conformance import ConformError, Report, Weights, conform, register_adapter
from .conformance.read.layers import layer_kinds

__all__ = [
    "assert_conforms",
    "assert_model_conforms",
    "attention_layers",
    "refused_layers",
    "Weights",
    "register_adapter",
    "ConformError",
    "Report",
]


def assert_conforms(obj: Any, **options: Any) -> Report:
    """`derive.conform(obj, **options)`, raising AssertionError (the report) unless it
    conforms.

    Args:
        obj: the attention to check, as `derive.conform` takes it (a module, a function
            f(q, k, v, ...), a builder, or a TARGET string).
        **options: `derive.conform`'s options (`kind`, `causal`, `n`, `dtype`, `variant`, …).

    Returns:
        The `Report`, when it conforms.

    Raises:
        AssertionError: when it does not conform; the message is the report's table.
        ConformError: bad input (a target that cannot be loaded or called, weights not found).
        TypeError: an option `derive.conform` does not take.
    """
    report = conform(obj, **options)
    if not report.conforms:
        raise AssertionError("\n" + report.table())
    return report


def attention_layers(model: Any) -> dict[str, Any]:
    """The attention layers of `model`, each kind once, by the path of its first layer
    (``"model.layers.0.self_attn"``): the modules an adapter recognises (not those inside one),
    a kind being the layer's class, the variant the adapter reads and its values (a model's local
    and global layers, its layers with and without RoPE, are two kinds); a hybrid model's
    linear-attention layers (Gated DeltaNet's) are a kind of their own. The layers an adapter
    recognises and refuses to read are `refused_layers`'.

    Args:
        model: the model, an `nn.Module`, whose submodules are searched.

    Returns:
        The first layer of each kind, by its path in `model`.
    """
    return layer_kinds(model)[0]


def refused_layers(model: Any) -> dict[str, str]:
    """The layers of `model` an adapter recognises and refuses to read (the Hugging Face
    adapter's refusals: BitNet's norm of the merged heads, a scale no variant declares, ...),
    each kind (class and reason) once, by the path of its first layer.

    Args:
        model: the model, an `nn.Module`, whose submodules are searched.

    Returns:
        The reason each kind is refused, by the path of its first layer in `model`.
    """
    return layer_kinds(model)[1]


def assert_model_conforms(model: Any, **options: Any) -> dict[str, Report]:
    """`derive.conform` on each kind of attention layer of `model` (`attention_layers`: each
    layer read with its own index, its own variant).

    Args:
        model: the model, an `nn.Module`.
        **options: `derive.conform`'s options, the same for every layer.

    Returns:
        The `Report` of each kind of layer, by the path of its first layer, when all conform.

    Raises:
        AssertionError: naming every layer that does not conform, with its report, and every
            layer an adapter refuses to read (`refused_layers`), with the reason.
        ConformError: when no attention layer of the model is recognised by an adapter, or
            `derive.conform` raises it for a layer (an option it cannot apply there).
        TypeError: an option `derive.conform` does not take.
    """
    layers, refused = layer_kinds(model)
    if not layers and not refused:
        raise ConformError(
            f"assert_model_conforms: no attention layer of {type(model).__name__} is read by an "
            "adapter (register one with derive.testing.register_adapter)"
        )
    reports = {path: conform(layer, **options) for path, layer in layers.items()}
    failing = {path: report.table() for path, report in reports.items() if not report.conforms}
    failing |= {path: f"not read: {why}" for path, why in refused.items()}
    if failing:
        told = "\n\n".join(f"{path}:\n{said}" for path, said in failing.items())
        raise AssertionError(
            f"\n{len(failing)} of {len(reports) + len(refused)} kinds of attention layer do "
            "not conform or are not read:\n\n" + told
        )
    return reports
