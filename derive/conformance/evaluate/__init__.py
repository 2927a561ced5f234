"""Evaluating the derivation on a target's own weights: the registry's graph as matrix forms or
entry by entry, in float64, each with its rounding bound, and the formulas printed from it."""
