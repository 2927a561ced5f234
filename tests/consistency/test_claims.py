"""The seed's claims, checked against the running code, not only against the formulas.

"Five matrix products and one transpose": we trace the torch operations that the explicit path
actually runs (a TorchDispatchMode sees every aten call) and compare with what `derive` counts in
the matrix expression. The FLOP formula of `derive` is compared with torch's own FlopCounterMode
in tests/consistency/test_forward.py.
"""

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import derive
from attention import functional as F
from derive import calculus

PRODUCTS = {"aten.mm", "aten.bmm", "aten.matmul", "aten.addmm", "aten.baddbmm"}
TRANSPOSES = {"aten.t", "aten.transpose", "aten.permute", "aten.numpy_T", "aten.mT"}


class TraceOps(TorchDispatchMode):
    """Counts the aten operations run inside the `with` block."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    def count(self, names):
        return sum(number for op, number in self.ops.items() if op in names)


@pytest.mark.parametrize(("n", "d", "c"), [(5, 3, 2), (7, 4, 6)])
def test_explicit_path_runs_five_products_and_one_transpose(n, d, c):
    x = torch.randn(n, d, dtype=torch.float64)
    w_q, w_k, w_v = (torch.randn(d, c, dtype=torch.float64) for _ in range(3))
    with TraceOps() as trace:
        F.self_attention(x, w_q, w_k, w_v, return_weights=True)
    counted = calculus.operation_count(derive.variant("self-attention").graph)
    assert trace.count(PRODUCTS) == counted["matrix products"] == 5, trace.ops
    assert trace.count(TRANSPOSES) == counted["transposes"] == 1, trace.ops
    assert trace.ops["aten._softmax"] == 1  # one row-wise softmax, nothing else hidden


def test_fast_path_runs_the_fused_kernel_and_no_n_by_n_product():
    x = torch.randn(9, 4)
    w = torch.randn(4, 3)
    with TraceOps() as trace:
        F.self_attention(x, w, w, w)
    fused = [op for op in trace.ops if "scaled_dot_product" in op]
    assert fused, trace.ops
    assert trace.count(PRODUCTS) == 3  # only the projections Q, K, V
    assert trace.ops["aten._softmax"] == 0
