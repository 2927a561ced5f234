"""The checks of a module that need its weights: gradients, large scores, heads kept separate,
dropout.

Each is a function of the running `ModuleRun` (`self`), working on its own deep copy of conform's
copy of the module: the gradients of x and of every weight (read through the adapter from the
parameters' gradients) against the derived backward pass; one head's queries negated with
W_o = I, so that Ĉ is the output and only that head's block may move; the module's dropout
replaced by a stand-in that keeps every entry at rate ρ = 1/2 (x -> 2x), against the weights
declared with dropout after the softmax.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch import nn

from ...graph.forms import Form, reference
from ...notation import letters as L
from ..evaluate.formulas import composed, declared, softmax_gradient, weights
from ..read.harness import stand_in_dropout
from ..report import Check
from .compare import Scenario, agree, predict, why

__all__ = ["gradients", "large_scores", "heads_separate", "dropout", "RATE"]

#: Rate of the stand-in dropout: it multiplies what it is given by 1/(1 − ρ) = 2.
RATE = 0.5


def gradients(self: Any, forward: Scenario) -> Check:

    what = "the gradients of x and of every weight equal the derived backward pass"
    formula = softmax_gradient(reference(forward.form))
    module = copy.deepcopy(self.h.module)
    for parameter in module.parameters():
        parameter.requires_grad_(True)
        parameter.grad = None
    x = self.x.to(self.h.dtype).to(self.h.device).requires_grad_(True)
    out = self.h(x, module=module, grad=True)
    if not out.requires_grad:
        return Check(
            "gradients",
            "FAIL",
            what,
            *formula,
            None,
            None,
            "—",
            "no gradient reaches x: the output does not require grad",
        )
    upstream = self.dyadic(tuple(out.shape), 16)
    (out * upstream.to(out.device)).sum().backward()
    got = {"X": x.grad, **_weight_gradients(self, module)}
    evaluation = _evaluation(self, forward).backward(reference(forward.form), upstream)
    pairs = []
    augmented = self.h.graph_inputs_augmented()
    for letter, tensor in got.items():
        bias = letter.startswith("b_")
        name = L.gradient("W_" + letter[2:] if bias else letter)
        if tensor is None or name not in evaluation.values:
            continue
        value, bound = evaluation[name], evaluation.bound(name)
        if bias:  # the last row of its augmented W
            value, bound = value[-1], bound[-1]
        elif augmented and letter == "X":  # less the column of ones
            value, bound = value[..., : self.h.d], bound[..., : self.h.d]
        elif augmented and letter != "W_o":  # less the bias row
            value, bound = value[: self.h.d], bound[: self.h.d]
        pairs.append((letter, agree(tensor.detach().double().cpu(), value, bound)))
    failing = [(k, a) for k, a in pairs if not a.passed]
    letter, worst = max(failing or pairs, key=lambda item: item[1].ratio)
    names = ", ".join(k for k, _ in pairs)
    note = f"compared: {names}" + (
        "" if not failing else f"; worst {letter}: " + self._entry(worst)
    )
    return Check(
        "gradients",
        "FAIL" if failing else "PASS",
        what,
        *formula,
        worst.error,
        worst.tolerance,
        why(self.dtype, "backward"),
        note,
    )


def _evaluation(self: Any, scenario: Scenario) -> Any:
    """A fresh evaluation of the scenario's correct graph, with bounds (for the backward)."""

    return predict(scenario, rounding=self.rounding)


def _weight_gradients(self: Any, module: Any) -> dict:
    """Each weight's gradient, read through the adapter from the parameters' gradients: what it
    reads with every parameter replaced by its gradient (zeros where none reached it), less what
    it reads with every one replaced by zeros (an adapter's reading is linear or affine in the
    parameters: a view, a block, Gemma's gains 1 + weight)."""
    parameters = list(module.parameters())
    saved = [p.data for p in parameters]
    normal = _copy(self.h.adapter.read(module))
    readings = []
    try:
        gradient = lambda p: torch.zeros_like(p) if p.grad is None else p.grad  # noqa: E731
        for replace in (gradient, torch.zeros_like):
            for parameter in parameters:
                parameter.data = replace(parameter)
            readings.append(_copy(self.h.adapter.read(module)))  # (a parameter is live)
    finally:
        for parameter, data in zip(parameters, saved, strict=True):
            parameter.data = data
    read, zero = readings
    names = ["W_q", "W_k", "W_v", "b_q", "b_k", "b_v"]
    if self.h.weights.W_o is not None:
        names.append("W_o")
    found = {k: (getattr(read, k), getattr(zero, k)) for k in names}
    # a variant's input read off no parameter (ALiBi's slopes, a buffer or computed) reads the
    # same whatever the parameters are: it has no gradient to compare
    found |= {
        k: (read.inputs[k], zero.inputs[k])
        for k in self.h.extra
        if not (
            torch.equal(zero.inputs[k], normal.inputs[k])
            and torch.equal(read.inputs[k], zero.inputs[k])
        )
    }
    return {k: None if v is None else (v - z).detach().clone() for k, (v, z) in found.items()}


def large_scores(self: Any, form: Form, graph: Any) -> Check:
    """The forward values again where the softmax saturates: x doubled (exact) until the
    largest scaled score reaches 16, where e^{-16} ≈ 1e-7 of a weight is left to the
    others. A softcap, a scale or a bias that moves the scores by a little where they are
    near 0 moves them by much there (κ = 50 moves a score of 16 by 0.5)."""
    name, what = "large scores", "C equals the derivation where the softmax saturates"
    x = self.x
    for _ in range(8):
        if float(self.scaled_scores(x, form).abs().max()) >= 16:
            break
        x = x * 2
    else:
        reason = "the scaled scores stay below 16 with x·2⁸ (a norm keeps them from growing?)"
        return self.missing(name, what, composed(graph), reason)
    got, observed = self.call(x)
    scenario = self.scenario(name, form, x, got, observed=observed)
    return self.value_row(name, what, composed(graph), scenario)


def heads_separate(self: Any, form: Form, graph: Any) -> Check:
    what = "changing one head's queries changes only that head's block of Ĉ"
    formula = declared(reference(Form(heads=True)), "Q_l")
    h = self.h
    if h.heads == 1:
        return self.missing("heads kept separate", what, formula, "one head")
    mixing = [step for step in graph.declarations if step.across]
    if mixing:
        step = mixing[0]
        reason = f"step {step.name} ({step.output}) reads every head: the heads are mixed"
        return self.missing("heads kept separate", what, formula, reason)
    if h.c_out != h.c:
        return self.missing(
            "heads kept separate",
            what,
            formula,
            "W_o is not square: Ĉ cannot be read through W_o = I",
        )
    module = copy.deepcopy(h.module)
    width = h.c // h.heads
    with torch.no_grad():
        weights = h.adapter.read(module)
        if weights.W_o is not None:
            weights.W_o.copy_(torch.eye(h.c))
            if weights.b_o is not None:
                weights.b_o.zero_()
        identity = _copy(h.adapter.read(module))
    base, seen = self.call(self.x, module=module)
    with torch.no_grad():
        h.adapter.read(module).W_q[:, :width].neg_()
        negated = _copy(h.adapter.read(module))
    eye = torch.eye(h.c).to(identity.W_q)
    if (identity.W_o is not None and not torch.equal(identity.W_o, eye)) or not torch.equal(
        negated.W_q[:, :width], -identity.W_q[:, :width]
    ):
        return self.missing(
            "heads kept separate",
            what,
            formula,
            f"adapter {h.adapter.name} returns copies, not views of the weights",
        )
    moved, seen_moved = self.call(self.x, module=module)
    first = self.scenario("heads (W_o = I)", form, self.x, base, observed=seen, weights=identity)
    second = self.scenario(
        "heads (head 1's W_q negated)", form, self.x, moved, observed=seen_moved, weights=negated
    )
    self.scenarios += [first, second]
    _, bound = self.expected(first)
    return self.same_row(
        "heads kept separate",
        what,
        formula,
        [(moved[..., width:], base[..., width:], bound[..., width:])],
    )


def dropout(self: Any, form: Form) -> Check:

    what = "dropout acts on the weights, after the softmax"
    own = reference(dataclasses.replace(form, dropout=True))  # the variant's weights, kept
    formula = weights(own, reference(Form(dropout=True)))
    name = self.h.adapter.dropout
    module = copy.deepcopy(self.h.module)
    found = [
        path
        for path, sub in module.named_modules()
        if name and path.split(".")[-1] == name and isinstance(sub, nn.Dropout)
    ]
    if not found:
        return self.missing("dropout", what, formula, _no_dropout(self.h.adapter.name, name))
    stand_ins = []
    for path in found:
        parent = module.get_submodule(path.rpartition(".")[0]) if "." in path else module
        stand_ins.append(stand_in_dropout(RATE))
        setattr(parent, path.split(".")[-1], stand_ins[-1])
    got, observed = self.call(self.x, module=module)
    if not any(stand_in.calls for stand_in in stand_ins):
        return self.missing(
            "dropout",
            what,
            formula,
            f"{name} is not called in eval mode (a rate passed to a kernel?)",
        )
    kept = dataclasses.replace(form, dropout=True)
    scenario = self.scenario("dropout", kept, self.x, got, rho=RATE, observed=observed)
    return self.value_row(
        "dropout", what + " (a stand-in keeping every entry, ρ = 1/2)", formula, scenario
    )


def _no_dropout(adapter: str, name: str | None) -> str:
    """Why no dropout was replaced: the adapter named none, or no nn.Dropout has its name."""
    if name is None:
        return (
            f"adapter {adapter} names no dropout module (dropout=, the nn.Dropout on the weights)"
        )
    return f"no submodule named {name!r} is an nn.Dropout (adapter {adapter}'s dropout=)"


def _copy(weights: Any) -> Any:
    """The weights as they are now (copies, off the module)."""
    fields = {f.name: getattr(weights, f.name) for f in dataclasses.fields(weights)}
    copied = {k: v.detach().clone() for k, v in fields.items() if hasattr(v, "detach")}
    inputs = {k: v.detach().clone() for k, v in weights.inputs.items()}
    return dataclasses.replace(weights, **copied, inputs=inputs)
