"""Every registered variant, and the combinations the book's models use, against `attention`:
each step derived by SymPy equals its twin on the same dyadic inputs, the variant's own entry
points give the derived C, and every gradient derived by the chain rule equals autograd's (what
`derive check --variant NAME` prints). Parametrised over `derive.variants()`: a variant
registered is a variant tested.

Sizes are pairwise distinct where the variant allows (n = 5, d = 3, c = 4, and its own sizes
other than their defaults), so that a swapped axis cannot pass by coincidence.
"""

import pytest

import derive
from derive.bridge.check import trial_rows
from derive.graph import variant


def variant_rows(name, n, d, c, given, *, seed, forward_only=False):
    sizes = {"n": n, "d": d, "c": c, **given}
    return trial_rows(variant(name), sizes, seed=seed, forward_only=forward_only)


#: The variants, each at sizes of its own: h = 2 heads in g = 1 group for gqa (multi-query at
#: the smallest), 4 heads in 2 groups for the combinations (c = 8: an even head width for RoPE).
CASES = [(name, 5, 3, 4, {}) for name in derive.variants()] + [
    ("gqa", 4, 3, 8, {"h": 4, "g": 2}),
    ("gqa+rope", 4, 3, 8, {"h": 4, "g": 2}),
    ("gqa+qk-norm+rope", 4, 3, 8, {"h": 4, "g": 2}),
    ("gqa+whole-qk-norm+rope", 4, 3, 8, {"h": 4, "g": 2}),  # OLMo 3: norms of whole rows
    ("multi-head+causal", 5, 3, 6, {"h": 3}),
    ("multi-head+masked", 4, 3, 4, {"h": 2}),
    ("mla", 4, 3, 6, {"h": 3, "d_u": 2}),
    ("sliding-window", 6, 2, 3, {"w": 3}),
    ("cross-attention", 3, 2, 4, {"s": 5, "d_y": 3}),
]


@pytest.mark.parametrize(
    ("name", "n", "d", "c", "given"), CASES, ids=[f"{case[0]}-{case[3]}" for case in CASES]
)
def test_every_step_and_gradient_of_the_variant_agrees_with_torch(name, n, d, c, given):
    rows, note = variant_rows(name, n, d, c, given, seed=7)
    failed = [row for row in rows if not row.passed]
    assert not failed, failed
    assert note == ""  # the backward pass was checked too
    labels = [row.step for row in rows]
    found = variant(name)
    assert any(label.startswith("C · ") for label in labels)  # the variant's own entry point
    gradients = {label for label in labels if label.startswith("d")}
    assert {"d" + letter for letter in found.graph.inputs if letter != "M"} <= gradients


def test_a_wrong_twin_is_caught(monkeypatch):
    """The check is not vacuous: a twin that drops RoPE's rotation fails."""
    monkeypatch.setattr("attention.rope.rope_rotation", lambda x, theta_base: x)  # no rotation
    rows, _ = variant_rows("rope", 5, 3, 4, {}, seed=7, forward_only=True)
    failed = {row.step for row in rows if not row.passed}
    assert {"Q_rot", "K_rot"} <= failed
