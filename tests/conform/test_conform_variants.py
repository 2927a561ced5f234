"""`derive conform` of a variant: its graph, its parameters, its gradients, and the probes where
variants differ.

This package's `GroupedQueryAttention` is built with each variant it has (the adapter reads which
from the module) and must conform; the same module read as if it lacked the variant (an adapter
of the test's, `blind`, reads the W's alone), or told a variant it does not compute, must not.
So must this package's multi-head modules with each score modification (the `book` adapter reads
the modification objects the module's forward uses). A softcap of 50
is told apart from no softcap by the row at large scores (near 0, tanh(ω̃/50)·50 ≈ ω̃). The
evaluator of the variants' derived forms (RoPE's cos and sin, tanh, the sigmoid, RMS norms, a
sink in the softmax, ALiBi's per-head slope, the sum of a group's heads) equals derive.explicit's
values, step by step, forward and backward.
"""

from pathlib import Path

import ported
import pytest
import sympy as sp
import torch
import torch.nn as nn

from attention import mods as M
from attention.modules import GroupedQueryAttention
from derive import ConformError, conform
from derive.cli import main
from derive.conformance.evaluate.matrices import Evaluation
from derive.conformance.read import adapters
from derive.explicit.forward import ExplicitGraph
from derive.explicit.gradients import ExplicitGradients
from derive.graph.forms import Form, reference
from derive.notation import letters as L
from derive.testing import Weights, register_adapter


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(adapters, "_REGISTERED", [])


@pytest.fixture
def blind(registry):
    """An adapter that reads W_query, W_key, W_value and out_proj alone, as if the module had
    no variant (called as the grouped adapter calls it)."""
    from derive.conformance.read.grouped import GROUPED

    def weights(module):
        return Weights(
            module.W_query.weight.mT,
            module.W_key.weight.mT,
            module.W_value.weight.mT,
            W_o=module.out_proj.weight.mT,
            heads=module.num_heads,
        )

    register_adapter("blind", recognises=lambda module: False, call=GROUPED.call, mask="blocked")(
        weights
    )
    return "blind"


def _module(**options):
    torch.manual_seed(0)
    shape = {"num_heads": 4, "num_kv_groups": 2, "d_out": 16}
    if options.get("qk_norm"):
        shape = {"num_heads": 4, "num_kv_groups": 2, "head_dim": 4}
    module = GroupedQueryAttention(16, **(shape | options))
    with torch.no_grad():  # gains and sinks away from their initial 1 and ≈ 0
        for name, parameter in module.named_parameters():
            if name.endswith("scale") or name == "sinks":
                parameter.normal_()
    return module


#: (what the module is built with, what conform is told, the variant the report must name)
VARIANTS = {
    "gqa": ({}, {}, "gqa"),
    "mqa": ({"num_kv_groups": 1}, {}, "gqa"),
    "rope": ({}, {"variant": "rope"}, "gqa+rope"),
    "partial-rope": (
        {},
        {"variant": "rope+partial-rope", "values": {"c_r": 2}},
        "gqa+rope+partial-rope",
    ),  # 2 of each head's 4 features
    "qk-norm": ({"qk_norm": True}, {}, "gqa+qk-norm"),
    "sliding-window": ({"sliding_window": 2}, {}, "gqa+sliding-window"),
    "softcap": ({"softcap": 5.0}, {}, "gqa+softcap"),
    "alibi": ({"alibi": True}, {}, "gqa+alibi"),
    "sinks": ({"sinks": True}, {}, "gqa+sinks"),
    "gate": ({"gate": True}, {}, "gqa+gate"),
}


def _declared_objects():
    """(variant, the object its twins are given, built at the variant's default values): every
    registered variant that declares its modification as an `attention.mods` object."""
    from derive.bridge.evaluate import number, resolve
    from derive.graph.registry import declared, variants
    from derive.graph.twins import Built

    found = []
    for name in variants():
        entry = declared(name)
        defaults = {p.symbol: p.default for p in entry.parameters}
        defaults |= {size.symbol: size.default for size in entry.sizes}
        for option, value in entry.options:
            for built in value if option == "mods" else ():
                if isinstance(built, Built):
                    arguments = [number(defaults.get(a, a)) for a in built.arguments]
                    kind = resolve(built.factory, name)
                    found.append(pytest.param(name, kind(*arguments), id=name))
    return found


@pytest.mark.parametrize(("name", "mod"), _declared_objects())
def test_each_object_a_variant_declares_is_read_back_as_that_variant(name, mod):
    """Read from the registry, not a list: a variant that gives its twins an object
    (``mods=(Built(...),)``) is the variant conform names for a module built with that object,
    at its values, and the module conforms. A new modification declared this way is covered
    by its declaration alone."""
    report = conform(_module(mods=(mod,)))
    assert report.conforms, report.table()
    assert report.variant == f"gqa+{name}"


def test_the_registry_declares_the_clamp_as_an_object():
    """The test above reads the registry: it covers the modification added end to end."""
    assert "clamp" in [p.id for p in _declared_objects()]


def _row(report, name):
    return next(check for check in report.checks if check.name == name)


@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_of_the_package_class_conforms_as_its_adapter_reads_it(name):
    built, told, variant = VARIANTS[name]
    report = conform(_module(**built), **told)
    assert report.conforms, report.table()
    assert report.variant == variant
    assert _row(report, "gradients").status == "PASS"
    # QK-norm normalises q and k: its scores do not grow with x (the row says so)
    assert _row(report, "large scores").status == ("n/a" if name == "qk-norm" else "PASS")


@pytest.mark.parametrize(
    "name", [n for n in VARIANTS if n not in ("gqa", "mqa", "rope", "partial-rope", "gate")]
)
def test_each_variant_read_as_if_it_were_absent_does_not_conform(name, blind):
    """The blind adapter reads W_query, W_key, W_value and out_proj alone: the graph it is
    compared with lacks the variant's step, and the values differ."""
    built, _, _ = VARIANTS[name]
    report = conform(_module(**built), adapter=blind)
    assert not report.conforms
    assert report.variant == "gqa"


def test_the_gate_read_as_if_absent_is_refused_by_its_shapes(blind):
    """With the gate, W_query holds each head's queries and gate logits: twice W_o's rows."""
    with pytest.raises(ConformError, match=r"W_o has shape \(16, 16\), expected \(32, c_out\)"):
        conform(_module(gate=True), adapter=blind)


class _DetachedSinks(ported.PortedGrouped):
    """The sinks read detached: the right values, and no gradient reaches the parameter."""

    def forward(self, x, blocked=None, cos=None, sin=None):
        sinks = self._parameters.pop("sinks")
        self.sinks = sinks.detach()
        try:
            return super().forward(x, blocked, cos, sin)
        finally:
            del self.sinks
            self.sinks = sinks


def test_a_variant_input_no_gradient_reaches_is_compared_and_fails():
    """The gradient of Zeta read back is zero (the parameter, with no gradient, read as one);
    the derived one is not. Its forward values conform."""
    report = conform(_DetachedSinks(sinks=True))
    assert _row(report, "forward values").status == "PASS"
    row = _row(report, "gradients")
    assert row.status == "FAIL" and "worst Zeta" in row.note


def test_a_variant_the_module_does_not_compute_does_not_conform():
    report = conform(_module(), variant="softcap", values={"kappa": 2.0})
    assert not report.conforms
    assert report.variant == "gqa+softcap"


def test_a_softcap_of_50_and_none_are_told_apart_where_the_scores_are_large(blind):
    capped = conform(_module(softcap=50.0), adapter=blind)
    uncapped = conform(_module(), variant="softcap")  # κ = 50, the variant's default
    for report in (capped, uncapped):
        row = _row(report, "large scores")
        assert row.status == "FAIL" and row.error > 10 * row.tolerance


def test_shared_keys_are_compared_as_shared_and_repeating_them_is_a_different_graph(registry):
    """W_k and W_v of g·c_h columns are compared with dW_k, dW_v of the grouped graph. An
    adapter that repeats each group's block h/g times reads a (d, c) W_k: the forward values
    agree (the same keys), the gradient read back through the repetition is each group's sum
    and cannot equal a gradient of independent heads' keys."""
    module = _module()
    right = conform(module)
    assert "W_k" in _row(right, "gradients").note and right.conforms

    def repeated(module):
        per_group = lambda w: w.reshape(16, 2, 4).repeat_interleave(2, dim=1).reshape(16, 16)  # noqa: E731
        return Weights(
            module.W_query.weight.mT,
            per_group(module.W_key.weight.mT),
            per_group(module.W_value.weight.mT),
            W_o=module.out_proj.weight.mT,
            heads=4,
        )

    register_adapter("repeated", recognises=lambda m: False, call=lambda m, x, a: m(x))(repeated)
    wrong = conform(module, adapter="repeated")
    assert _row(wrong, "forward values").status == "PASS"
    assert _row(wrong, "gradients").status == "FAIL"


def test_the_values_told_are_the_values_compared(registry):
    """RoPE's base β as the adapter or --value says: a module that rotates with β = 10 000
    does not conform to β = 500."""
    from derive.conformance.read.grouped import GROUPED

    def at_ten_thousand(module, x, allowed):
        return GROUPED.call(module, x, allowed, variant="rope", values={"beta": 10_000})

    register_adapter("fixed-beta", recognises=lambda m: False, call=at_ten_thousand)(
        GROUPED.weights
    )
    assert conform(_module(), adapter="fixed-beta", variant="rope").conforms
    told = conform(_module(), adapter="fixed-beta", variant="rope", values={"beta": 500})
    assert not told.conforms and told.sizes["beta"] == 500


def test_unknown_variants_and_values_are_refused_with_what_is_known():
    with pytest.raises(ConformError, match=r"variant 'gqa\+ropey'.*known: self-attention"):
        conform(_module(), variant="ropey")
    with pytest.raises(ConformError, match=r"values \['kappa'\].*not read by gqa"):
        conform(_module(), values={"kappa": 3.0})


def test_an_adapter_missing_a_variant_input_is_told_which(registry):
    def no_gains(module):
        return Weights(
            module.W_query.weight.mT,
            module.W_key.weight.mT,
            module.W_value.weight.mT,
            W_o=module.out_proj.weight.mT,
            heads=4,
            variant="qk-norm",
        )

    register_adapter("no-gains", recognises=lambda m: False)(no_gains)
    with pytest.raises(ConformError, match=r"reads G_q, G_k; give them in Weights\(inputs"):
        conform(_module(qk_norm=True), adapter="no-gains")


def test_a_narrower_w_k_that_no_group_count_fits_is_refused(registry):
    def odd(module):
        return Weights(torch.zeros(6, 8), torch.zeros(6, 6), torch.zeros(6, 6), heads=4)

    register_adapter("odd", recognises=lambda m: False)(odd)
    with pytest.raises(ConformError, match=r"W_k has shape \(6, 6\).*g groups dividing heads=4"):
        conform(nn.Linear(6, 8), adapter="odd")


def test_the_command_takes_variants_and_values(tmp_path, capsys):
    target = tmp_path / "layer.py"
    target.write_text(
        "import torch\nfrom attention.modules import GroupedQueryAttention\n"
        "torch.manual_seed(0)\n"
        "layer = GroupedQueryAttention(16, num_heads=4, num_kv_groups=2, d_out=16)\n"
    )
    assert main(["conform", f"{target}:layer", "--variant", "rope", "--value", "beta=500"]) == 0
    out = capsys.readouterr().out
    assert "variant gqa+rope" in out and "beta = 500" in out
    assert main(["conform", f"{target}:layer", "--value", "beta"]) == 2
    assert "expected NAME=NUMBER" in capsys.readouterr().err
    assert main(["conform", f"{target}:layer", "--variant", "nope"]) == 2
    assert "unknown variant 'nope'" in capsys.readouterr().err


# -- the evaluator of the variants' forms, against derive.explicit -------------------------------

FORMS = [
    Form(heads=True, causal=True, variant="gqa+rope"),  # 4 heads in 2 groups (GROUPED below)
    Form(heads=True, variant="softcap"),
    Form(heads=True, causal=True, variant="alibi"),
    Form(heads=True, causal=True, variant="sinks"),
    Form(heads=True, causal=True, variant="qk-norm"),
    Form(heads=True, variant="gate"),
    Form(heads=True, causal=True, variant="sliding-window"),
]
N, D, C = 3, 5, 4
SIZES = {
    L.n: N,
    L.d: D,
    L.c: C,
    L.h: 2,
    L.c_h: 2,
    L.g: 1,
    L.kappa: 3,
    L.beta: 100,
    L.w: 2,
    L.eps: sp.Rational(1, 1000),
}
#: grouped-query attention with groups shared: 4 heads of c_h = 2 in 2 groups
GROUPED = SIZES | {L.c: 8, L.h: 4, L.g: 2}


def _per_head(evaluation, key):
    letter, _, head = key.rpartition("_")
    if head.isdigit() and letter + "_l" in evaluation.values:
        return evaluation[letter + "_l"][int(head) - 1]
    return evaluation[key]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.variant)
def test_every_step_and_gradient_of_a_variant_equals_the_explicit_values(form):
    graph = reference(form)
    sizes = GROUPED if "gqa" in form.variant else SIZES
    explicit = ExplicitGraph(graph, sizes, heads=sizes[L.h])
    generator = torch.Generator().manual_seed(3)
    inputs = {
        k: torch.randint(-8, 9, v.shape, generator=generator).double() / 8
        for k, v in explicit.inputs.items()
    }
    evaluation = Evaluation(sizes, empty_rows="zero")
    for letter, tensor in inputs.items():
        evaluation.give(letter, tensor)
    evaluation.forward(graph)
    values = explicit.evaluate(**inputs)
    for key in values.matrices:
        expected = torch.tensor(values.floats(key), dtype=torch.float64)
        assert torch.allclose(_per_head(evaluation, key), expected, rtol=0, atol=1e-12), key
    gradients = ExplicitGradients(explicit)
    upstream = torch.randint(-8, 9, gradients.dC.shape, generator=generator).double() / 8
    expected_gradients = gradients.evaluate(**inputs, dC=upstream)
    evaluation.backward(graph, upstream)
    for step in gradients.steps:
        expected = torch.tensor(expected_gradients.floats(step.output), dtype=torch.float64)
        got = _per_head(evaluation, step.output)
        assert torch.allclose(got, expected, rtol=0, atol=1e-10), step.output


def test_the_package_latent_attention_conforms_with_its_latent_weights_compared(registry):
    """Multi-head latent attention (the book's ch04/05_mla): K and V from the latent X W_dkv;
    the gradients of W_dkv, W_uk and W_uv are compared. Read with W_uk and W_uv swapped, the
    same module does not conform."""
    from attention.modules import MultiHeadLatentAttention
    from derive.conformance.read.grouped import LATENT

    torch.manual_seed(0)
    module = MultiHeadLatentAttention(16, 16, 0.0, 4, latent_dim=6)
    report = conform(module)
    assert report.conforms and report.variant == "mla" and report.sizes["d_u"] == 6
    assert _row(report, "gradients").note == "compared: X, W_q, W_o, W_dkv, W_uk, W_uv"

    def swapped(module):
        weights = LATENT.weights(module)
        inputs = weights.inputs
        inputs["W_uk"], inputs["W_uv"] = inputs["W_uv"], inputs["W_uk"]
        return weights

    register_adapter("swapped", recognises=lambda m: False)(swapped)
    assert not conform(module, adapter="swapped").conforms


SIGMOID_LAYER = '''import math

import torch
import torch.nn as nn


class SigmoidAttention(nn.Module):
    """One head of sigmoid attention (Ramapuram et al., 2024): b = -log n, or as given."""

    def __init__(self, b=None):
        super().__init__()
        torch.manual_seed(0)
        self.W_query, self.W_key, self.W_value = (nn.Linear(8, 6, bias=False) for _ in range(3))
        self.b = b

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        b = -math.log(x.shape[-2]) if self.b is None else self.b
        return torch.sigmoid(q @ k.mT / math.sqrt(q.shape[-1]) + b) @ v


layer = SigmoidAttention()
shifted = SigmoidAttention(b=0.5)
'''


def test_a_user_s_own_variant_loaded_from_its_file_is_checked(tmp_path, capsys, monkeypatch):
    """docs/examples/sigmoid_attention.py declares sigmoid attention (its weights σ(ω̃ + b),
    b = −log n by default): a module computing it conforms to that variant, and to no softmax;
    its bias is the variant's value: read off the module's attribute `b` where it holds a
    number, and --value overrides it (a module with b = 0.5 told b = 0 does not conform)."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    (tmp_path / "sigmoid_layer.py").write_text(SIGMOID_LAYER)
    spec = "docs/examples/sigmoid_attention.py:SIGMOID"
    target = f"{tmp_path / 'sigmoid_layer.py'}"
    assert main(["conform", f"{target}:layer", "--variant", spec]) == 0
    out = capsys.readouterr().out
    assert "variant sigmoid" in out and "b = -1.609" in out  # −log 5
    assert main(["conform", f"{target}:layer"]) == 1
    capsys.readouterr()
    assert main(["conform", f"{target}:shifted", "--variant", spec]) == 0
    assert "b = 0.5" in capsys.readouterr().out
    assert main(["conform", f"{target}:shifted", "--variant", spec, "--value", "b=0"]) == 1


def test_olmo_s_qk_norm_of_whole_rows_is_read_from_the_module():
    """This package's GroupedQueryAttention(qk_norm="whole") (the book's OLMo 3) conforms as
    whole-qk-norm, read from the width of its norms' gains."""
    module = GroupedQueryAttention(16, num_heads=4, num_kv_groups=2, qk_norm="whole")
    with torch.no_grad():
        module.q_norm.scale.normal_()
        module.k_norm.scale.normal_()
    report = conform(module, variant="rope")
    assert report.conforms and report.variant == "gqa+whole-qk-norm+rope", report.table()


def _softcapped_sdpa(q, k, v, attn_mask=None, is_causal=False):
    """A port's function: scaled dot-product attention with Gemma 2's softcap of 5."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = 5.0 * torch.tanh(scores / 5.0)
    if is_causal:
        n = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -torch.inf)
    return torch.softmax(scores, dim=-1).nan_to_num() @ v


def test_a_function_honours_the_variant_and_the_values_it_is_told():
    """A function f(q, k, v) told --variant softcap --value kappa=5 is compared with that
    variant's graph at those values (issue 34: it was compared with plain attention): the
    softcapped function conforms, torch's plain one does not, nor the softcapped one told
    another cap."""
    import torch.nn.functional as F

    report = conform(_softcapped_sdpa, variant="softcap", values={"kappa": 5})
    assert report.conforms, report.table()
    assert report.variant == "softcap" and report.sizes["kappa"] == 5
    assert not conform(
        F.scaled_dot_product_attention, variant="softcap", values={"kappa": 5}
    ).conforms
    assert not conform(_softcapped_sdpa, variant="softcap", values={"kappa": 2}).conforms
    assert not conform(_softcapped_sdpa).conforms  # and plain attention is not what it computes


def test_a_function_told_a_variant_with_matrices_is_refused_by_name():
    """ALiBi's slopes, a module's attributes: a function is given neither."""
    import torch.nn.functional as F

    with pytest.raises(ConformError, match=r"the variant alibi reads Mu, which it is not given"):
        conform(F.scaled_dot_product_attention, variant="alibi")
    with pytest.raises(ConformError, match=r"params \(\{'Mu': 'slopes'\}\) name a module's"):
        conform(F.scaled_dot_product_attention, params={"Mu": "slopes"})


def _ours(kind, **options):
    from attention import MultiHeadAttention, MultiHeadAttentionWithSWA

    torch.manual_seed(0)
    if kind == "swa":
        return MultiHeadAttentionWithSWA(8, 8, 0.0, 2, sliding_window_size=3, **options)
    return MultiHeadAttention(8, 8, 16, 0.0, 2, **options)


#: This package's multi-head modules with each modification: (the module, the variant read)
OURS = {
    "alibi": (lambda: _ours("mha", alibi=True), "alibi"),
    "softcap": (lambda: _ours("mha", softcap=5.0), "softcap"),
    "window and softcap": (lambda: _ours("swa", softcap=5.0), "sliding-window+softcap"),
    "sinks and gate": (lambda: _ours("mha", sinks=True, gate=True), "sinks+gate"),
    "chunked": (lambda: _ours("mha", mods=(M.Chunked(3),)), "chunked"),
    "temperature": (lambda: _ours("mha", mods=(M.Temperature(2.0, 0.5),)), "temperature-tuning"),
    "gqa chunked": (
        lambda: _module(mods=(M.Chunked(3), M.Temperature(2.0, 0.5))),
        "gqa+temperature-tuning+chunked",
    ),
    "gqa l2 norm": (lambda: _module(qk_norm="l2"), "gqa+l2-qk-norm"),
}


@pytest.mark.parametrize("name", OURS)
def test_this_package_s_modules_conform_with_every_modification_they_were_built_with(name):
    """The adapter reads the modification objects the module's forward uses (issue 34: these
    modules were said not to conform, or refused)."""
    make, variant = OURS[name]
    report = conform(make())
    assert report.conforms, report.table()
    assert report.variant.endswith(variant), report.variant


@pytest.mark.parametrize("name", ["softcap", "chunked", "temperature"])
def test_a_module_whose_modification_computes_otherwise_does_not_conform(name, monkeypatch):
    """The control: the modification's own method changed (what the module computes, not what
    the adapter reads), conform says so."""
    make, _ = OURS[name]
    owner, method = {
        "softcap": (M.Softcap, "scores"),
        "chunked": (M.Chunked, "bounds"),
        "temperature": (M.Temperature, "factors"),
    }[name]
    original = getattr(owner, method)
    changed = {
        "scores": lambda self, s, *a: (lambda out: (out[0] * 0.5, out[1]))(original(self, s, *a)),
        "bounds": lambda self, m: original(M.Chunked(self.size + 1), m),
        "factors": lambda self, *a: 2 * original(self, *a),
    }[method]
    monkeypatch.setattr(owner, method, changed)
    assert not conform(make()).conforms


def test_a_rope_layer_s_report_prints_the_book_s_notation_in_every_form():
    """sin Φ and cos Φ, not SymPy's Lambda(_z, sin(_z)).(Φ), and one minus sign (−), in the
    table and the JSON; \\sin \\Phi in the markdown's LaTeX (issue 34)."""
    import json

    report = conform(_module(qk_norm=True), variant="rope")
    assert report.conforms, report.table()
    table = [line for line in report.table().splitlines() if "formula:" in line]
    given = [check["formula"] for check in report.as_json()["checks"]]
    for formulas in (table, given):
        text = "\n".join(formulas)
        assert "sin Φ" in text and "cos Φ" in text
        assert "Lambda" not in text and "_z" not in text
        assert " - " not in text and "(1 - " not in text, formulas
    assert "Lambda" not in json.dumps(report.as_json())
    markdown = report.markdown()
    assert "\\sin \\Phi" in markdown and "Lambda" not in markdown


def test_a_variant_whose_object_is_not_a_dataclass_breaks_no_other_reading():
    """A user's variant may build its object with any callable: conform cannot read such an
    object back, and the modules built with other objects are read as before."""
    import dataclasses

    from derive.graph.entries import clamp
    from derive.graph.registry import register_variant, unregister_variant
    from derive.graph.twins import Built

    def make(bound):
        return M.Clamp(bound)

    register_variant(
        dataclasses.replace(
            clamp.VARIANT, name="made-clamp", options=(("mods", (Built(make, (clamp.GAMMA,)),)),)
        )
    )
    try:
        report = conform(_module(softcap=5.0))
        assert report.conforms and report.variant == "gqa+softcap"
    finally:
        unregister_variant("made-clamp")


def test_an_object_counted_from_another_start_is_refused_by_name():
    """Chunked's start (a cache's first position) is no symbol of the chunked variant: a module
    built with a chunk counted from elsewhere is refused, not compared as if it started at 0."""
    with pytest.raises(ConformError, match=r"Chunked has start=3, which its registered variant"):
        conform(_module(mods=(M.Chunked(4, start=3),)))
