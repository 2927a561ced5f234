"""A module made by `derive.torch_module` is read by conform with no adapter written (its
weights by their letters, its variant the one it was generated from), conforms, and does not
when what it runs is not what it says."""

import pytest
import torch

import derive
from derive.bridge.generated import GeneratedModule

#: variant, its own sizes and parameters
MODULES = [
    ("self-attention", {}),
    ("causal", {}),
    ("masked", {}),
    ("multi-head", {"h": 2}),
    ("gqa+rope", {"h": 4, "g": 2}),
    ("softcap", {"kappa": 5.0}),
    ("alibi", {}),
    ("gqa+qk-norm+partial-rope+gate", {"h": 4, "g": 2}),
    ("gqa+sliding-window+sinks+rope", {"h": 4, "g": 2, "w": 3}),
    ("mla", {"h": 2, "d_u": 3}),
]


@pytest.mark.parametrize(("name", "own"), MODULES, ids=[m[0] for m in MODULES])
def test_a_generated_module_conforms(name, own):
    torch.manual_seed(0)
    module = derive.torch_module(name, d=8, c=8, **own)
    report = derive.conform(module)
    assert report.conforms, report.table()
    assert report.convention.startswith("generated")


def test_a_generated_module_that_runs_other_code_does_not_conform():
    """Softcapping at κ = 5 said, plain attention run: the forward values fail."""
    plain = derive.torch_function("self-attention")

    class Uncapped(GeneratedModule):
        def forward(self, x):
            return plain(x, self.W_q, self.W_k, self.W_v)

    torch.manual_seed(0)
    module = derive.torch_module("softcap", d=8, c=8, kappa=5.0)
    module.__class__ = Uncapped
    with torch.no_grad():
        module.W_q.mul_(8)  # scores large enough for the cap to bite
    report = derive.conform(module)
    assert not report.conforms
    assert "forward values" in [c.name for c in report.checks if c.status == "FAIL"]
