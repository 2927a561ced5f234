"""Symbolic half of attention-derive (see issue: derive)."""
