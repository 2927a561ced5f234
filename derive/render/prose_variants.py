"""The prose of the variants' documents: words only (each variant's own words are in its
registry entry, `derive.graph.variants`)."""

VARIANT_SHARED = (
    "The steps it shares with {base} ({steps}) are declared as in the derivation of {base} and "
    "are not repeated here. What it declares differently:"
)

VARIANT_NOTHING_NEW = (
    "It declares no step of its own: its steps are those of {base}, declared in that "
    "derivation. What is new is how they are computed, and what SymPy derives about that:"
)

VARIANT_SHAPES = "Its matrices of new shapes: {shapes}."

VARIANT_COUNT = "Counted on the whole mechanism composed from its matrix forms:"

VARIANT_BACKWARD = (
    "Walking its steps backwards, SymPy derives the gradients; those that differ from the "
    "gradients of {base}, in their matrix form or their shape:"
)

VARIANT_SAME_BACKWARD = (
    "Walking its steps backwards gives the same gradients as {base}, matrix form for matrix "
    "form: a masked weight is the constant 0, and its score gets no gradient."
)

CLAIM_TEXT = {
    "same_as": (
        "The declarations it changes, and what they become under the substitution or the "
        "assumption, each condition decided by SymPy from the index ranges:"
    ),
    "reads_rows": (
        "The derived causal weights put into the context, and the sums stopped where the "
        "weights vanish: row $m$ reads the keys and values of the tokens up to $m$ only. That "
        "row is what a decoding step computes from the new token's query and the cached rows, "
        "so decoding with a cache gives the rows of causal attention, one at a time."
    ),
    "cache_size": "The cache holds the keys and values of every token, per head and per layer:",
    "decode_cost": (
        "One new token costs its own projections and one row of scores and of context against "
        "the $m$ cached rows; recomputing everything at length $m$ costs the whole mechanism:"
    ),
    "allowed_pairs": (
        "The pairs of a query and a key the mask allows, summed over the rows: the first rows "
        "see fewer keys than the window. Computing the scores and the context over these "
        "pairs only:"
    ),
}
