"""For your own test suite: assert that your attention computes what the derivation says.

    from derive.testing import assert_conforms

    def test_my_attention():
        assert_conforms(MyAttention(d_in=64, d_out=64, num_heads=4))

`assert_conforms` runs `derive.conform` (same options) and raises `AssertionError` whose message
is the report, with the mistake named when the catalogue has it. A convention of your own is
read by an adapter you register (`register_adapter`, see `derive.bridge.conform.adapters`).
"""

from __future__ import annotations

from typing import Any

from .bridge.conform import ConformError, Report, Weights, conform, register_adapter

__all__ = ["assert_conforms", "Weights", "register_adapter", "ConformError", "Report"]


def assert_conforms(obj: Any, **options: Any) -> Report:
    """`derive.conform(obj, **options)`, raising AssertionError (the report) unless it
    conforms; returns the report when it does. Bad input raises `ConformError`."""
    report = conform(obj, **options)
    if not report.conforms:
        raise AssertionError("\n" + report.table())
    return report
