"""The prose of the variants' documents: words only (each variant's own words are in its
registry entry, `derive.graph.variants`)."""

VARIANT_SHARED = (
    "The steps it shares with {base} ({steps}) are declared as in the derivation of {base} and "
    "are not repeated here. What it declares differently:"
)

VARIANT_NOTHING_NEW = (
    "It declares no step of its own: its steps are those of {base}, declared in that "
    "derivation. What is new is how they are computed, and what SymPy derives about that, in "
    "the sections below."
)

VARIANT_SHAPES = "Its matrices of new shapes: {shapes}."
MODEL_VALUES = (
    "This is the attention of {source}, as the Hugging Face adapter of derive conform reads "
    "the layer built from its config: the combination of variants derived here, with the "
    "config's values {values}."
)

QK_NORM_FIGURE_TEXT = (
    "The bound does not depend on the scale of the inputs. Queries and keys whose components "
    "are $s$ times standard normal give scores that grow like $s^2$, and without QK-norm the "
    "softmax tends to a single key; after it, the weights are the same at every scale, and no "
    "row can go past what $|\\tilde\\omega_{m,p}| \\le \\sqrt{c}$ allows (gains 1): one "
    "key at $+\\sqrt{c}$, the others at $-\\sqrt{c}$."
)

QK_NORM_FIGURE_CAPTION = (
    "The mean largest weight of a row of 16 keys against the scale $s$ of queries and keys "
    "($c = 16$, 200 rows with seeded standard normal components, gains 1, "
    "$\\epsilon = 10^{-6}$), without and with QK-norm, and the most the bound allows."
)

FLASH_ROUNDING_TEXT = (
    "The bounds above, evaluated on draws of scores $s + z$ (4 keys a row, $z$ standard "
    "normal), against the errors measured in float32 with PyTorch's kernels on the same draws "
    "(the figures and the script are in docs/benchmarks.md): from the stored log-sum-exp, the "
    "error of the weights and of the scores' gradient grows with $s$ as derived; from the "
    "recomputed maximum, it stays at float32's rounding."
)

FLASH_ROUNDING_CAPTION = (
    "The largest error of the weights (left) and of the scores' gradient over the largest "
    "$\\beta$ (right) over 20 seeded draws of 8 rows of scores $s + z$ (4 keys, values and "
    "upstream gradient of width 8), for the two backward routes: the derived first-order "
    "bounds (dashed) and the measured errors (dots)."
)

VARIANT_COUNT = "Counted on the whole mechanism composed from its matrix forms:"

FACTS_HEADING = "What SymPy derives"

#: Before a claim of a user's variant that SymPy could not prove (and no draw refutes).
UNPROVED_TEXT = (
    "\\emph{Unproved.} SymPy could not prove this claim, and no counter-example was found at "
    "the numbers it was tried at: it is shown as stated, not as derived."
)

COUNTS_HEADING = "What it costs"

BATCH_TEXT = (
    "Several sequences are processed at once by adding a leading batch index $b$ to the "
    "entries of $X$, $Q$, $K$, $V$, $\\Omega$, $A$ and $C$; the weights are shared, and every "
    "formula above holds for each sequence separately:"
)

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
    "cache_size": (
        "The cache holds the keys and values of the tokens a new token can still read, "
        "per layer (every token, or the last $w$ with a window):"
    ),
    "decode_cost": (
        "One new token costs its own projections and one row of scores and of context against "
        "the $m$ cached rows; recomputing everything at length $m$ costs the whole mechanism:"
    ),
    "allowed_pairs": (
        "The pairs of a query and a key the mask allows, summed over the rows: the first rows "
        "see fewer keys than the window. Computing the scores and the context over these "
        "pairs only:"
    ),
    "relative_position": (
        "The rotated queries and keys put into the score, the rotation's deltas summed out, "
        "the sum split where the rotation changes sign so that the pair $(j, j + c/2)$ is one "
        "term, and each pair's coefficient simplified by SymPy's trigonometric identities. "
        "Every angle that remains is $(m - p)\\theta_j$, with $\\theta_j = "
        "\\beta^{-2(j-1)/c}$ ($c_h$ in place of $c$ where there are heads): the score "
        "depends on where the query and the key are only "
        "through how far apart they are (SymPy checks that moving both by the same amount "
        "changes no angle). The term of one pair is the statement for one pair:"
    ),
    "partial_relative_position": (
        "The rotated queries and keys put into the score, the rotation's deltas summed out, "
        "the sum split at $c_r/2$ and $c_r$ so that the pair $(j, j + c_r/2)$ is one term, "
        "and each pair's coefficient simplified by SymPy's trigonometric identities. Every "
        "angle that remains is $(m - p)\\theta_j$, with $\\theta_j = \\beta^{-2(j-1)/c_r}$; "
        "past $c_r$ the angles are $0$ and the rotation has no entry, so those features add "
        "$q_{m,j} k_{p,j}$, which reads no position at all. The score depends on where the "
        "query and the key are only through how far apart they are:"
    ),
    "interleaved_relative_position": (
        "The rotated queries and keys put into the score, the rotation's deltas summed out, "
        "the sum split into its odd and even terms so that the neighbours $(2j - 1, 2j)$ are "
        "one term, and each pair's coefficient simplified by SymPy's trigonometric identities. "
        "Every angle that remains is $(m - p)\\theta_j$, with $\\theta_j = "
        "\\beta^{-2(j-1)/c}$ ($c_r$ in place of $c$ where only the first $c_r$ features turn, "
        "the others adding $q_{m,j} k_{p,j}$, which reads no position): the score depends on "
        "where the query and the key are only through how far apart they are:"
    ),
    "smoothed_relative_position": (
        "The rotated queries and keys put into the score, the rotation's deltas summed out, "
        "the sum split so that each pair of features is one term, each angle divided by its "
        "frequency, and each pair's coefficient simplified by SymPy's trigonometric "
        "identities. Every angle that remains is $(m - p)\\theta_j$, $\\theta_j$ now pair "
        "$j$'s frequency as Llama 3.1 smooths it (divided by $\\eta$ for the slow pairs, kept "
        "for the fast ones, blended between): the score still depends on where the query "
        "and the key are only through how far apart they are:"
    ),
    "zero_angles": (
        "With every angle $0$ (a rotation by nothing) the score is the score without RoPE:"
    ),
    "same_for_every_head": (
        "With one group ($g = 1$), the group a head reads is decided by SymPy for every "
        "$\\ell = 1 \\ldots h$: every head reads the same keys and values, which is "
        "multi-query attention:"
    ),
    "cache_against": (
        "What a cache keeps per layer, counted from the declared shapes, against the keys and "
        "values that multi-head attention keeps, and their ratio:"
    ),
    "weight_count": "How many numbers the key and value projections hold:",
    "score_bound": (
        "The squared length of a normalised query, derived from the declaration: the root "
        "leaves the sum, and SymPy checks that what is subtracted from $c$ is not negative. "
        "Then the Cauchy–Schwarz inequality bounds every score, whatever the scale of $X$, "
        "$W_q$ and $W_k$: larger inputs cannot push the softmax towards a single key; the "
        "learned gains, where there are any, set how peaked it may be:"
    ),
    "absorption": (
        "The score of head $\\ell$ with its query and key put in, down to $X$, $W_q$, the "
        "latent $U$ and $W_{uk}$, head $\\ell$'s columns named as blocks, and the matrix form "
        "SymPy finds. The product $W_q^{(\\ell)} {W_{uk}^{(\\ell)}}^\\top$ ($d \\times d_u$) "
        "can be computed once, and the scores read the cached latent directly: the keys are "
        "never formed."
    ),
}
