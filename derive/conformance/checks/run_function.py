"""`derive conform` of a function f(q, k, v, ...) like torch's scaled_dot_product_attention.

q, k, v are (batch, heads, n, c) dyadic tensors in the chosen dtype (float32 by default); the
graph is self-attention from the scores on, with Q, K, V its inputs and the batch and heads as
leading axes. The rows: forward values; with ``is_causal``, the causal values and causality
(probed without it: is the function causal by itself?); permutation equivariance; batch and
heads independence; with ``attn_mask`` (True = may attend, as torch reads a boolean mask), the
mask convention and a query with no key; the gradients of q, k, v against the derived backward.

Told a variant (``--variant softcap --value kappa=5``), the graph is that variant's from the
scores on, its sizes and parameters the values given (else its defaults); a variant that reads
matrices besides Q, K, V (ALiBi's slopes, the sinks, QK-norm's gains) is refused by name: a
function f(q, k, v, ...) is given none.
"""

from __future__ import annotations

from typing import Any

import torch

from ...graph.forms import Form, own_mask, reference
from ...notation import letters as L
from ..evaluate.elementwise import evaluate_element
from ..evaluate.formulas import composed, declared, softmax_gradient
from ..read.harness import FunctionHarness
from ..read.target import ConformError, Target
from ..read.variant_values import at_sizes, variant_sizes
from ..report import Check
from .compare import Scenario, agree, why
from .run import Options, Run, fresh_size, moved

__all__ = ["FunctionRun"]


class FunctionRun(Run):
    """A run on a function f(q, k, v, ...): its inputs, the options it takes, its rows."""

    kind = "sdpa"

    def __init__(self, target: Target, options: Options) -> None:
        super().__init__(target, options, options.dtype or torch.float32)
        self.f = FunctionHarness(target, self.dtype)
        self.n, self.c, self.heads = options.n or 5, options.width, options.heads
        if min(self.n, self.c, self.heads) < 1 or self.n < 2:
            raise ConformError(
                f"sizes n={self.n}, width={self.c}, heads={self.heads}: expected "
                "n ≥ 2 and positive width and heads"
            )
        self.batch = options.batch or fresh_size({self.n, self.c, self.heads})
        shape = (self.batch, self.heads, self.n, self.c)
        self.q, self.k, self.v = (self.dyadic(shape, 8) for _ in range(3))
        self.variant = options.variant
        self.values = variant_sizes(self.variant, dict(options.values or {}), "function")
        extra = set(reference(self.form()).inputs) - {"Q", "K", "V", "M"}
        if extra:
            raise ConformError(
                f"{target.name} is a function f(q, k, v, ...): the variant {self.variant} reads "
                f"{', '.join(sorted(extra))}, which it is not given; wrap it in an nn.Module "
                "holding them"
            )

    def form(self, **kinds: Any) -> Form:
        """The graph from the scores on (Q, K, V the inputs), with the variant told."""
        return Form(projections=False, variant=self.variant, **kinds)

    def sizes(self) -> dict:
        own = {"batch": self.batch, "heads": self.heads, "n": self.n, "c": self.c}
        return own | {str(symbol): value for symbol, value in self.values.items()}

    def call(self, q: Any = None, k: Any = None, v: Any = None, **options: Any) -> Any:
        q, k, v = (
            self.q if q is None else q,
            self.k if k is None else k,
            self.v if v is None else v,
        )
        return self.f(q, k, v, **options)

    def scenario(
        self, name: str, form: Form, got: Any, q=None, k=None, v=None, **extra
    ) -> Scenario:
        inputs = {
            "Q": self.q if q is None else q,
            "K": self.k if k is None else k,
            "V": self.v if v is None else v,
            **extra.pop("inputs", {}),
        }
        sizes = {L.n: self.n, L.c: self.c, L.h: 1, L.c_h: self.c}
        sizes |= at_sizes(self.values, sizes)
        return Scenario(name, form, inputs, got, sizes, **extra)

    def run(self) -> Run:
        accepts = self.target.options
        got = self.call()
        self.causal, self.causal_how = self._probe()
        plain = self.form(causal=self.causal)
        forward = self.scenario("forward", plain, got)
        what = "C equals the derivation on q, k, v"
        self.rows.append(
            self.value_row("forward values", what, composed(reference(plain)), forward)
        )
        _, bound = self.expected(forward)
        self.rows += self._causal(accepts)
        self.rows += [self._permutation(got, bound), *self._independence(got, bound)]
        self.rows += self._masks(accepts)
        self.rows.append(self._gradients(forward))
        if "scale" in accepts:
            self.notes.append("scale: accepted, left at its default (1/√c, the derivation's)")
        return self

    def _probe(self) -> tuple[bool, str]:
        if self.options.causal is not None:  # causal by itself, with is_causal left False
            return self.options.causal, "as told"
        small = [t / 64 for t in (self.q, self.k, self.v)]  # weights near uniform
        later = [t.clone() for t in small]
        for t in later:
            t[..., -1, :] = self.dyadic(t[..., -1, :].shape, 8) / 64
        changed = moved(self.call(*later)[..., 0, :], self.call(*small)[..., 0, :])
        return changed == 0.0, f"probed: the last key {'changes' if changed else 'leaves'} row 1"

    def _causal(self, accepts: frozenset) -> list[Check]:
        what = "is_causal=True gives the causal derivation"
        causal = self.form(causal=True)
        formula = composed(reference(causal))
        told = {"is_causal": True} if "is_causal" in accepts and not self.causal else {}
        if not told and not self.causal:
            reason = "not causal, and takes no is_causal"
            return [
                self.missing("causal values", what, formula, reason),
                self.missing("causality", "a row reads no later key", formula, reason),
            ]
        got = self.call(**told)
        rows = []
        if told:
            rows.append(
                self.value_row("causal values", what, formula, self.scenario("causal", causal, got))
            )
        _, bound = self.expected(self.scenario("causal", causal, got))
        pairs = []
        for t in range(1, self.n):
            later = [x.clone() for x in (self.q, self.k, self.v)]
            for x in later:
                x[..., t:, :] = self.dyadic(x[..., t:, :].shape, 8)
            pairs.append(
                (self.call(*later, **told)[..., :t, :], got[..., :t, :], bound[..., :t, :])
            )
        mask = declared(reference(Form(causal=True)), "M")
        rows.append(self.same_row("causality", "a row reads no later key", mask, pairs))
        return rows

    def _permutation(self, got: Any, bound: Any) -> Check:
        what = "permuting the tokens (q, k, v together) permutes the outputs"
        formula = declared(reference(Form(projections=False)), "A")
        if self.causal:
            return self.missing("permutation", what, formula, "causal attention reads positions")
        order = [*range(1, self.n), 0]
        moved = self.call(*(t[..., order, :] for t in (self.q, self.k, self.v)))
        return self.same_row(
            "permutation", what, formula, [(moved, got[..., order, :], bound[..., order, :])]
        )

    def _independence(self, got: Any, bound: Any) -> list[Check]:
        formula = declared(reference(Form(projections=False)), "Omega")
        rows = []
        for name, what, index in (
            ("batch independence", "each sequence of a batch is computed alone", 0),
            ("heads kept separate", "each head is computed alone", 1),
        ):
            alone = _alone(index, size=self.q.shape[index])
            if alone:
                rows.append(self.missing(name, what, formula, alone))
                continue
            others = [t.clone() for t in (self.q, self.k, self.v)]
            for t in others:
                t.select(index, 1).copy_(self.dyadic(tuple(t.select(index, 1).shape), 8))
            first = lambda t, i=index: t.select(i, 0)  # noqa: E731
            pair = (first(self.call(*others)), first(got), first(bound))
            rows.append(self.same_row(name, what, formula, [pair]))
        return rows

    def _masks(self, accepts: frozenset) -> list[Check]:
        name, what = "mask convention", "a boolean attn_mask (True = may attend) masks what it says"
        masked = self.form(causal=self.causal, masked=True)
        formula = declared(reference(masked), "Omega_masked")
        empty, says = "query with no key", "a query with no key leaves every other row as derived"
        weights = declared(reference(masked), "A")
        if "attn_mask" not in accepts:
            reason = "takes no attn_mask"
            return [
                self.missing(name, what, formula, reason),
                self.missing(empty, says, weights, reason),
            ]
        m, p = torch.arange(self.n)[:, None], torch.arange(self.n)[None, :]
        allowed = (m + p) % 2 == 0
        without = allowed.clone()
        without[1] = False
        scenarios = []
        own = self._own_allowed(self.form(causal=self.causal))
        for title, mask in ((name, allowed), (empty, without)):
            got = self.call(attn_mask=mask)
            whole = mask & own  # the given mask and the form's own (causal, a window)
            given = {"M": torch.where(whole, 0.0, -torch.inf).double()}
            seen = {"allowed": mask}
            scenarios.append(self.scenario(title, masked, got, inputs=given, observed=seen))
        return [
            self.value_row(name, what, formula, scenarios[0]),
            self.empty_row(says, weights, scenarios[1]),
        ]

    def _own_allowed(self, form: Form) -> Any:
        """Where the form's own mask (causal, the variant's window or chunks at its values)
        lets a query attend: (n, n) booleans; all True where it has none."""
        step = own_mask(form)
        if step is None:
            return torch.ones(self.n, self.n, dtype=torch.bool)
        sizes = {L.n: self.n, L.c: self.c, L.h: 1, L.c_h: self.c}
        sizes |= at_sizes(self.values, sizes)
        return evaluate_element(step, {}, sizes, 1)[0] == 0

    def _gradients(self, forward: Scenario) -> Check:
        from .compare import predict

        what = "the gradients of q, k, v equal the derived backward pass"
        formula = softmax_gradient(reference(forward.form))
        leaves = [t.to(self.dtype).requires_grad_(True) for t in (self.q, self.k, self.v)]
        out = self.f(*leaves, grad=True)
        if not out.requires_grad:
            return Check(
                "gradients",
                "FAIL",
                what,
                *formula,
                None,
                None,
                "—",
                "no gradient reaches q, k, v: the output does not require grad",
            )
        upstream = self.dyadic(tuple(out.shape), 8)
        (out * upstream).sum().backward()
        evaluation = predict(forward, rounding=self.rounding)
        evaluation.backward(reference(forward.form), upstream)
        found = []
        for letter, leaf in zip("QKV", leaves, strict=True):
            name = L.gradient(letter)
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)  # unread
            found.append((letter, agree(grad.double(), evaluation[name], evaluation.bound(name))))
        failing = [item for item in found if not item[1].passed]
        letter, worst = max(failing or found, key=lambda item: item[1].ratio)
        note = "compared: Q, K, V" + (f"; worst {letter}: {self._entry(worst)}" if failing else "")
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


def _alone(axis: int, *, size: int) -> str:
    """Why an independence check has nothing to compare along `axis` (0 batch, 1 heads): ""
    when there is a second sequence or head to change."""
    if size > 1:
        return ""
    return ("one sequence (batch = 1)", "one head (heads = 1)")[axis] + ": no other to change"
