"""Calling the target with inputs in the book's conventions, and reading its weights as matrices.

`ModuleHarness` works on its own deep copy of a module, in eval mode (the target's weights, mode
and buffers are never touched), and calls it as its adapter says, on a batch (batch, n, d), or one
sequence at a time when the module takes (n, d) only. `FunctionHarness` calls a function
f(q, k, v, ...) like torch's scaled_dot_product_attention. Outputs come back as float64 copies;
masks go in as booleans with True = may attend, translated to the target's convention.
"""

from __future__ import annotations

import copy
import inspect
import typing
import warnings
from typing import Any

import sympy as sp
import torch
from torch import nn

from ...notation import letters as L
from .adapters import Adapter, Weights, forward_takes
from .target import ConformError, Target
from .variant_values import at_sizes, found_inputs, found_values, variant_inputs, variant_sizes

__all__ = ["ModuleHarness", "FunctionHarness", "stand_in_dropout"]


def _first_tensor(result: Any) -> Any:
    """The output, or the first tensor of a tuple (torch's MultiheadAttention, GPT-2)."""
    if isinstance(result, tuple | list):
        result = next((r for r in result if isinstance(r, torch.Tensor)), None)
    if not isinstance(result, torch.Tensor):
        raise ConformError(
            f"the target returned {type(result).__name__}, expected a tensor "
            "(or a tuple whose first tensor is the output)"
        )
    return result


def _causal_mask(buffer: Any) -> bool:
    """Whether a buffer is a causal mask of some length L > 1: L × L in its last two axes (any
    leading axes of one), triangular one way and not the other: the book's ``triu`` of ones
    (1 where masked), GPT-2's ``tril`` of booleans (True where read), or an additive one (0
    and −∞)."""
    if buffer.ndim < 2 or buffer.shape[-1] != buffer.shape[-2] or buffer.shape[-1] < 2:
        return False
    if any(size != 1 for size in buffer.shape[:-2]):
        return False
    square = buffer.reshape(buffer.shape[-2:])
    if square.is_floating_point():
        square = square != 0  # 1 or −∞ where masked, 0 where read: the nonzero entries
    elif square.dtype != torch.bool:
        square = square != 0
    ones = torch.ones(square.shape, dtype=torch.bool, device=square.device)
    above, below = square[torch.triu(ones, 1)], square[torch.tril(ones, -1)]
    diagonal = torch.diagonal(square)
    masked_above = bool(above.all()) and not below.any() and not diagonal.any()
    read_below = bool(below.all()) and bool(diagonal.all()) and not above.any()
    return masked_above or read_below


def _passed(x: Any, mask: Any) -> str:
    """What a call was given, by shape: ``x of shape (2, 5, 6)`` and the mask if one."""
    given = f"x of shape {tuple(x.shape)}"
    return given if mask is None else f"{given} and a boolean mask of shape {tuple(mask.shape)}"


class ModuleHarness:
    """A module's copy, its adapter, its weights, and how to call it."""

    def __init__(
        self,
        target: Target,
        adapter: Adapter,
        *,
        dtype: Any = None,
        variant: str = "",
        values: dict | None = None,
        params: dict | None = None,
    ) -> None:
        self.target = target
        self.module = copy.deepcopy(target.obj)
        if dtype is not None:
            self.module.to(dtype)
        self.module.eval()
        read = adapter.read(self.module).variants  # what the adapter reads the module as
        told = [p for p in variant.split("+") if p and p not in read.split("+")]
        #: the registered variants it computes besides heads and causality ("gqa+rope")
        self.variant = "+".join(p for p in (read, *told) if p)
        #: the adapter, reading besides its own the variant's matrices the module names
        self.adapter = found_inputs(self.variant, adapter, dict(params or {}))
        self.weights: Weights = self.adapter.read(self.module)
        self.dtype, self.device = self.weights.W_q.dtype, self.weights.W_q.device
        self.d, self.c = (int(x) for x in self.weights.W_q.shape)
        self.heads, self.groups = self.weights.heads, self.weights.groups
        self.c_out = self.c if self.weights.W_o is None else int(self.weights.W_o.shape[1])
        self.with_heads = self.weights.W_o is not None or self.heads > 1 or "gqa" in told
        self.extra = variant_inputs(self.variant, self.weights.inputs, adapter.name)
        on_module = found_values(self.variant, self.module, dict(params or {}))
        given = {**on_module, **self.weights.values, **(values or {})}
        self.values = variant_sizes(self.variant, given, adapter.name)
        self.one_at_a_time: bool | None = None
        self.mask_per_sequence = False

    @property
    def accepts_mask(self) -> bool:
        if self.adapter.mask is None:
            return False
        if self.adapter.call is not None:
            return True
        return bool(forward_takes(self.module, self.adapter.mask))

    def max_tokens(self) -> int | None:
        """The length of the smallest causal mask the module holds as a buffer (the book's
        ``mask`` of context_length tokens), if any: a buffer read by what it holds, never by
        its shape alone (ALiBi's slopes (h, 1, 1) are square in their last two axes too)."""
        sizes = [b.shape[-1] for b in self.module.buffers() if _causal_mask(b)]
        return min(sizes) if sizes else None

    def __call__(self, x: Any, allowed: Any = None, module: Any = None, grad: bool = False) -> Any:
        """C for X (batch, n, d) in the target's dtype; float64, detached unless `grad`."""
        module = self.module if module is None else module
        x = x.to(self.dtype).to(self.device) if not grad else x
        mask = None if allowed is None else allowed.to(self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.set_grad_enabled(grad):
                out = self._run(module, x, mask)
        out = out.double() if grad else out.detach().double().cpu()
        return out

    def told(self, function: Any = None) -> dict:
        """What a call (the adapter's `call`, or `function`) that asks for them is told: the
        variant, and its values by name."""
        try:
            wants = inspect.signature(function or typing.cast(Any, self.adapter.call)).parameters
        except (TypeError, ValueError):
            return {}
        numbers = {k: v for k, v in self.values.items() if not sp.sympify(v).free_symbols}
        told = {
            "variant": self.variant,
            "values": {str(k): v for k, v in at_sizes(numbers, {}).items()},
        }
        return {key: value for key, value in told.items() if key in wants}

    def _once(self, module: Any, x: Any, mask: Any) -> Any:
        if self.adapter.call is not None:
            return _first_tensor(self.adapter.call(module, x, mask, **self.told()))
        if mask is None:
            return _first_tensor(module(x))
        given = mask if self.adapter.mask_means == "allowed" else ~mask
        if self.mask_per_sequence:  # a module that wants (*batch, n, n), not (n, n)
            given = given.expand(*x.shape[:-2], *given.shape[-2:])
        try:
            keyword = typing.cast(str, self.adapter.mask)  # a mask comes only where accepts_mask
            return _first_tensor(module(x, **{keyword: given}))
        except Exception:
            if self.mask_per_sequence or x.ndim == 2:
                raise
            self.mask_per_sequence = True
            return self._once(module, x, mask)

    def _run(self, module: Any, x: Any, mask: Any) -> Any:
        if self.one_at_a_time is None:
            return self._first_run(module, x, mask)
        try:
            out = self._as_it_takes(module, x, mask)
        except ConformError:
            raise
        except Exception as error:  # noqa: BLE001 - the target's own failure
            raise ConformError(
                f"calling {self.target.name} on {_passed(x, mask)} failed: "
                f"{type(error).__name__}: {error}"
            ) from None
        expected = (*x.shape[:-1], self.c_out)
        if tuple(out.shape) != expected:
            raise ConformError(
                f"{self.target.name} returned shape {tuple(out.shape)}, "
                f"expected {expected} (batch, n, c_out)"
            )
        return out

    def _first_run(self, module: Any, x: Any, mask: Any) -> Any:
        """The first call: on the whole batch, else one sequence at a time (a module that takes
        (n, d) only), and that way from then on; if neither works, both failures, each with the
        shape it was given."""
        expected = (*x.shape[:-1], self.c_out)
        problems = []
        for one_at_a_time, given in ((False, x), (True, x[0])):
            self.one_at_a_time = one_at_a_time
            try:
                out = self._as_it_takes(module, x, mask)
            except Exception as error:  # noqa: BLE001 - the target's own failure
                problems.append(f"{_passed(given, mask)} ({type(error).__name__}: {error})")
                continue
            if tuple(out.shape) == expected:
                return out
            shape = tuple(out.shape if not one_at_a_time else out.shape[1:])
            problems.append(f"{_passed(given, mask)} (it returned shape {shape})")
        raise ConformError(
            f"calling {self.target.name} failed on a batch, {problems[0]}, "
            f"and on one sequence, {problems[1]}"
        )

    def _as_it_takes(self, module: Any, x: Any, mask: Any) -> Any:
        """The module on the batch x, or on each of its sequences if it takes one at a time."""
        return (
            self._sequences(module, x, mask) if self.one_at_a_time else self._once(module, x, mask)
        )

    def _sequences(self, module: Any, x: Any, mask: Any) -> Any:
        """The module on each sequence (n, d) of x alone, stacked: (batch, n, c_out)."""
        return torch.stack([self._once(module, sequence, mask) for sequence in x.unbind(0)])

    def graph_inputs(self, x: Any, weights: Weights | None = None) -> tuple[dict, Any]:
        """The graph's inputs in float64 and the output bias b_o (or None). A bias is one more
        row of its W, read by a column of ones appended to X: Q = [X 1] [W_q; b_q]."""
        w = self.weights if weights is None else weights
        as64 = lambda t: t.detach().to(torch.float64).cpu()  # noqa: E731
        inputs = {"X": x.to(torch.float64)}
        biases = [w.b_q, w.b_k, w.b_v]
        for letter, matrix, bias in zip(
            ("W_q", "W_k", "W_v"), (w.W_q, w.W_k, w.W_v), biases, strict=True
        ):
            if matrix is None:  # K and V from elsewhere (a latent: the variant's inputs)
                continue
            inputs[letter] = as64(matrix)
            if any(b is not None for b in biases):
                width = matrix.shape[1]
                row = torch.zeros(1, width).double() if bias is None else as64(bias)[None]
                inputs[letter] = torch.cat([inputs[letter], row])  # (d, c) -> (d + 1, c)
        extra = (
            self.extra
            if weights is None
            else variant_inputs(self.variant, w.inputs, self.adapter.name)
        )
        inputs.update({letter: as64(matrix) for letter, matrix in extra.items()})
        if any(b is not None for b in biases):
            ones = torch.ones(*x.shape[:-1], 1, dtype=torch.float64)
            inputs["X"] = torch.cat([inputs["X"], ones], dim=-1)  # (…, n, d) -> (…, n, d + 1)
        if self.with_heads:
            identity = torch.eye(self.c, dtype=torch.float64)
            inputs["W_o"] = identity if w.W_o is None else as64(w.W_o)
        return inputs, None if w.b_o is None else as64(w.b_o)

    def sizes(self, n: int) -> dict:
        width = self.d + (1 if self.graph_inputs_augmented() else 0)
        own = {L.n: n, L.d: width, L.c: self.c, L.h: self.heads, L.c_h: self.c // self.heads}
        own[L.g] = self.groups
        return {**own, **at_sizes(self.values, own)}

    def graph_inputs_augmented(self) -> bool:
        return any(b is not None for b in (self.weights.b_q, self.weights.b_k, self.weights.b_v))


def stand_in_dropout(rate: float) -> Any:
    """A dropout that keeps every entry: x -> x / (1 − rate), whatever the mode; counts calls."""

    class KeepsEvery(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p, self.calls = 0.0, 0  # code that reads a rate off it reads 0

        def forward(self, x: Any) -> Any:
            self.calls += 1
            return x / (1 - rate)

    return KeepsEvery()


class FunctionHarness:
    """A function f(q, k, v, ...) and how to call it."""

    def __init__(self, target: Target, dtype: Any) -> None:
        self.target, self.dtype = target, dtype
        self.options = target.options

    def __call__(self, q: Any, k: Any, v: Any, *, grad: bool = False, **options: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.set_grad_enabled(grad):
                cast = (t if grad else t.to(self.dtype) for t in (q, k, v))
                try:
                    out = _first_tensor(self.target.obj(*cast, **options))
                except ConformError:
                    raise
                except Exception as error:  # noqa: BLE001 - the target's own failure
                    raise ConformError(
                        f"calling {self.target.name}(q, k, v) with q of shape "
                        f"{tuple(q.shape)} failed: {type(error).__name__}: "
                        f"{error}"
                    ) from None
        if tuple(out.shape) != tuple(v.shape):
            raise ConformError(
                f"{self.target.name} returned shape {tuple(out.shape)}, expected "
                f"{tuple(v.shape)} (batch, heads, n, c)"
            )
        return out.double() if grad else out.detach().double().cpu()
