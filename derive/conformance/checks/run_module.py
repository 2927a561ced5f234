"""`derive conform` of an nn.Module: x (batch, n, d) -> C (batch, n, c_out), weights by adapter.

The rows, each on the module's own weights read by its adapter (biases as one more row of W read
by a column of ones, the output bias added after W_o): forward values; causality (probed: does
the first row change with the last token?); permutation equivariance and batch independence
(properties of the calls); the mask convention and a query with no key (when it takes a mask);
the gradients of x and every weight against the derived backward pass; heads kept separate
(W_o set to I on a copy, one head's queries negated); dropout on the weights (a stand-in that
keeps every entry at rate 1/2 in place of its dropout module).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...graph.forms import (
    Form,
    combines_with_causal,
    own_mask,
    reads_positions,
    reference,
    variant_names,
)
from ...notation import letters as L
from ...proofs.claims import reads_rows_before
from ..evaluate.elementwise import evaluate_element
from ..evaluate.formulas import composed, declared, weights
from ..read.harness import ModuleHarness
from ..read.registry import find_adapter
from ..read.target import ConformError, Target, says_causal
from .cached import after_a_cache
from .compare import Scenario
from .module_checks import dropout, gradients, heads_separate, large_scores
from .run import Options, Run, fresh_size, moved

__all__ = ["ModuleRun"]


class ModuleRun(Run):
    def __init__(self, target: Target, options: Options) -> None:
        adapter = find_adapter(target.obj, options.adapter)
        self.h = ModuleHarness(
            target,
            adapter,
            dtype=options.dtype,
            variant=options.variant,
            values=options.values,
            params=options.params,
        )
        known = {} if adapter.conventions is None else adapter.conventions(self.h.module)
        super().__init__(target, options, self.h.dtype, known=known)
        self.notes += [adapter.note] if adapter.note else []
        for key, value in known.items():
            if key not in options.conventions and not options.strict:
                self.notes.append(f"convention ({adapter.name} modules): {_KNOWN[key]} {value}")
        self.kind, self.convention, self.variant = target.kind, adapter.name, self.h.variant
        limit = self.h.max_tokens()
        n = options.n or min(self._tokens(), limit or 64)
        if n < 2 or (limit is not None and n > limit):
            raise ConformError(f"n={n}: expected 2 ≤ n ≤ {limit or 'any'} (the module's longest)")
        h = self.h
        batch = options.batch or fresh_size({n, h.d, h.c, h.heads, h.c // h.heads, h.c_out})
        self.n, self.batch = n, batch
        self.x = self.unsaturated(self.dyadic((batch, n, h.d), 16))

    def _tokens(self) -> int:
        """5 tokens, or more where a window w needs them: w + 2, so that the last two queries
        have keys past their window (up to 64; past that 5, and a note says the window is not
        reached)."""
        window = self.h.values.get(L.w)
        window = None if window is None else int(window)
        if window is None:
            return 5
        if window + 2 > 64:
            self.notes.append(
                f"note: the window w = {window} is wider than the 5 tokens shown, "
                "so no query reaches past it: it is not exercised (give the "
                "layer a window under 63, or --n)"
            )
            return 5
        return max(5, int(window) + 2)

    def unsaturated(self, x: Any) -> Any:
        """x halved until the scaled scores spread over no more than about ±2: a saturated
        softmax is one-hot, and one-hot weights cannot tell most mistakes apart (exact: a power
        of two, at most 2⁻⁶)."""
        for _ in range(6):
            if float(self.scaled_scores(x, self.form()).std()) <= 2:
                break
            x = x / 2
        return x

    def scaled_scores(self, x: Any, form: Form) -> Any:
        """The derivation's scaled scores Ω̃ (per head where it has heads) for x, in float64."""
        from .compare import predict

        inputs, b_o = self.h.graph_inputs(x)
        shown = Scenario("scores", form, inputs, None, self.h.sizes(self.n), b_o)
        return predict(shown)["Omega_scaled" + _s(form)]

    def form(self, **kinds: Any) -> Form:
        """The form of this module's graph: its heads, its variant, and `kinds`."""
        return Form(heads=self.h.with_heads, variant=self.h.variant, **kinds)

    def sizes(self) -> dict:
        h = self.h
        found = {"batch": self.batch, "n": self.n, "d": h.d, "c": h.c, "heads": h.heads}
        if h.heads > 1:
            found["c_h"] = h.c // h.heads
        if h.groups != h.heads:
            found["g"] = h.groups
        if h.c_out != h.c:
            found["c_out"] = h.c_out
        every = h.sizes(self.n)
        return found | {str(symbol): every[symbol] for symbol in h.values}

    def call(self, x: Any, allowed: Any = None, module: Any = None) -> tuple[Any, dict]:
        """The target's C, and what its adapter lets us see inside (Q, K, V, Ĉ)."""
        seen: dict[str, list] = {}
        hooks = []
        target = self.h.module if module is None else module
        for path, side, letters in self.h.adapter.observe:
            try:
                sub = target.get_submodule(path)
            except AttributeError:
                continue

            def keep(_, inputs, out, letters=letters, side=side):
                tensor = out if side == "output" else inputs[0]
                seen.setdefault(letters, []).append(tensor.detach().double().cpu())

            hooks.append(sub.register_forward_hook(keep))
        try:
            got = self.h(x, allowed, module)
        finally:
            for hook in hooks:
                hook.remove()
        observed = {}
        for letters, parts in seen.items():
            if self.h.one_at_a_time:  # a failed try on the whole batch may have left a part
                parts = [p for p in parts if p.ndim == x.ndim - 1][-x.shape[0] :]
            whole = parts[0] if len(parts) == 1 else self._stack(parts)
            for letter, block in zip(letters, whole.chunk(len(letters), dim=-1), strict=True):
                observed[letter] = block
        return got, observed

    @staticmethod
    def _stack(parts: list) -> Any:
        return torch.stack(parts) if parts[0].ndim == 2 else torch.cat(parts)

    def scenario(self, name: str, form: Form, x: Any, got: Any, **extra: Any) -> Scenario:
        inputs, b_o = self.h.graph_inputs(x, extra.pop("weights", None))
        inputs.update(extra.pop("inputs", {}))
        return Scenario(name, form, inputs, got, self.h.sizes(self.n), b_o, **extra)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Run:
        got, observed = self.call(self.x)
        self.causal, self.causal_how = self._probe()
        said = says_causal(self.h.module)
        self.broken_contract = ""
        if said and not self.causal and self.options.causal is None:
            if self.h.accepts_mask:  # its caller may give the mask (Hugging Face's layers): a note
                self.notes.append(
                    f"warning (causal-mask-missing): {said}, but the last token "
                    "changes row 1: is its causal mask missing? (--causal checks it "
                    "as causal)"
                )
            else:  # no mask comes from its caller: its causality is its own, and broken
                self.broken_contract = (
                    f"causal-mask-missing: {said} and takes no mask from its caller, but "
                    "the last token changes row 1"
                )
        form = self.form(causal=self.causal)
        self._causal_by_itself(form)
        forward = self.scenario("forward", form, self.x, got, observed=observed)
        graph = reference(form)
        self.rows.append(
            self.value_row(
                "forward values",
                "C equals the derivation on the module's own weights",
                composed(graph),
                forward,
            )
        )
        self.rows.append(large_scores(self, form, graph))
        self.rows.append(after_a_cache(self, form, graph))
        _, bound = self.expected(forward)
        self.rows += [
            self._causality(got, bound),
            self._permutation(got, bound),
            self._batch(got, bound),
        ]
        self.rows += self._masks(form)
        self.rows += [
            gradients(self, forward),
            heads_separate(self, form, graph),
            dropout(self, form),
        ]
        return self

    def _causal_by_itself(self, form: Form) -> None:
        """A causal module whose variant does not combine with causal attention (its own
        weights replace what causal attention changes) is read as the variant alone: its
        weights must keep row m off the later keys themselves, else a ConformError says to
        declare it on causal attention."""
        if not (form.causal and form.variant):
            return
        if combines_with_causal(variant_names(form)) or reads_rows_before(reference(form)):
            return
        raise ConformError(
            f"{type(self.h.module).__name__} is causal (the last token leaves row 1), but "
            f"variant {form.variant} neither combines with causal attention nor keeps row m "
            "off the later keys by its weights: declare it on causal attention "
            '(base="causal"), or check the module as not causal (--no-causal)'
        )

    def _probe(self) -> tuple[bool, str]:
        if self.options.causal is not None:
            return self.options.causal, "as told"
        small = self.x / 64  # weights near uniform: any key a row reads moves it
        later = small.clone()
        later[:, -1] = self.dyadic(later[:, -1].shape, 16) / 64
        changed = moved(self.call(later)[0][:, 0], self.call(small)[0][:, 0])
        return changed == 0.0, f"probed: the last token {'changes' if changed else 'leaves'} row 1"

    def _causality(self, got: Any, bound: Any) -> Any:
        what = "a token's output reads no later token"
        formula = declared(reference(Form(causal=True)), "M")
        if not self.causal and not self.broken_contract:
            return self.missing("causality", what, formula, "not causal: " + self.causal_how)
        pairs = []
        for t in range(1, self.n):
            later = self.x.clone()
            later[:, t:] = self.dyadic(later[:, t:].shape, 16)
            pairs.append((self.call(later)[0][:, :t], got[:, :t], bound[:, :t]))
        row = self.same_row("causality", what, formula, pairs)
        if self.broken_contract:  # the module says it is causal: held to it, by the mistake's id
            note = "; ".join(part for part in (self.broken_contract, row.note) if part)
            return dataclasses.replace(row, note=note)
        return row

    def _permutation(self, got: Any, bound: Any) -> Any:
        what = "permuting the tokens permutes the outputs"
        formula = weights(reference(self.form(causal=self.causal)), reference(Form()))
        if self.causal:
            return self.missing("permutation", what, formula, "causal attention reads positions")
        positional = reads_positions(reference(self.form()))
        if positional is not None:
            return self.missing("permutation", what, formula, f"{positional} read positions")
        order = [*range(1, self.n), 0]
        moved = self.call(self.x[:, order])[0]
        return self.same_row(
            "permutation", what, formula, [(moved, got[:, order], bound[:, order])]
        )

    def _batch(self, got: Any, bound: Any) -> Any:
        what = "each sequence of a batch is computed alone"
        formula = declared(reference(Form()), "Q")
        if self.h.one_at_a_time:
            return self.missing(
                "batch independence",
                what,
                formula,
                "the module takes one sequence (n, d) at a time",
            )
        if self.batch == 1:
            return self.missing(
                "batch independence", what, formula, "one sequence (batch = 1): no other to change"
            )
        others = self.x.clone()
        others[1:] = self.dyadic(others[1:].shape, 16)
        return self.same_row(
            "batch independence", what, formula, [(self.call(others)[0][0], got[0], bound[0])]
        )

    def _allowed(self, empty_row: bool = False) -> Any:
        """True = may attend: (m + p) even, so both the mask and its inverse leave each row a
        key (inside the causal triangle from the second row on); one row empty if asked."""
        m, p = torch.arange(self.n)[:, None], torch.arange(self.n)[None, :]
        allowed = (m + p) % 2 == 0
        if empty_row:
            allowed[1] = False
        return allowed

    def _own_allowed(self, form: Form) -> Any:
        """Where the form's own mask (causal, a window) lets a query attend: (n, n) booleans."""
        step = own_mask(form)
        if step is None:
            return torch.ones(self.n, self.n, dtype=torch.bool)
        return evaluate_element(step, {}, self.h.sizes(self.n), 1)[0] == 0

    def _masks(self, form: Form) -> list:
        name, what = "mask convention", "a boolean mask (True = may attend) masks what it says"
        formula = declared(reference(Form(masked=True)), "Omega_masked")
        empty, says = "query with no key", "a query with no key leaves every other row as derived"
        masked = self.form(causal=form.causal, masked=True)
        try:
            weights = declared(reference(masked), "A" + _s(form))
        except ValueError as error:  # a variant that takes no given mask (a DeclarationError)
            weights = declared(reference(form), "A" + _s(form))
            reason = f"variant {self.h.variant} takes no given mask ({error})"
            return [
                self.missing(name, what, formula, reason),
                self.missing(empty, says, weights, reason),
            ]
        if not self.h.accepts_mask:
            reason, unchecked = _no_mask(self.h.adapter)
            if unchecked:
                self.unchecked.append(f"the mask checks did not run: {reason}")
            return [
                self.missing(name, what, formula, reason),
                self.missing(empty, says, weights, reason),
            ]
        scenarios = []
        for title, allowed in ((name, self._allowed()), (empty, self._allowed(empty_row=True))):
            whole = allowed & self._own_allowed(form)
            got, observed = self.call(self.x, allowed)
            mask = {"M": torch.where(whole, 0.0, -torch.inf).double()}
            observed["allowed"] = allowed
            scenarios.append(
                self.scenario(title, masked, self.x, got, inputs=mask, observed=observed)
            )
        return [
            self.value_row(name, what, formula, scenarios[0]),
            self.empty_row(says, weights, scenarios[1]),
        ]


#: How a report states a convention an adapter knows its modules keep.
_KNOWN = {
    "softmax": "the softmax in",
    "tables": "RoPE's tables in",
    "precision": "every step in",
    "empty rows": "empty rows:",
}


def _s(form: Form) -> str:
    return "_l" if form.heads else ""


def _no_mask(adapter: Any) -> tuple[str, bool]:
    """Why the mask checks cannot run, and whether the adapter left them out (a call that could
    be given a mask, with no mask= to say it takes one) rather than the convention (no mask)."""
    if adapter.call is not None and adapter.mask is None:
        return f"adapter {adapter.name} gives call= but no mask=, so its call gets no mask", True
    return f"{adapter.name} modules take no mask", False
