"""The words of self-attention's document (the book's section 3.4): prose only.

Every equation the document shows is printed from a SymPy object; the words here name letters
inline ($X$, $W_q$, $n$) but state no formula.
"""

READING = (
    "Only the element-wise formula of each step, marked \\emph{declared}, and the assumptions "
    "behind the scaling were typed in. Everything else was derived from them by SymPy, or "
    "computed, and a tag beside each display says which: \\emph{declared}, \\emph{derived} or "
    "\\emph{numeric}."
)

PIPELINE = (
    "A decoder-only, GPT-style transformer predicts the next token from the tokens seen so far. "
    "A string is split into tokens; each token becomes a token embedding, and a position "
    "embedding is added to it, giving one input embedding per token. The $n$ input embeddings, "
    "each of width $d$, are the rows of the input matrix $X$. Self-attention turns them into "
    "$n$ context vectors of width $c$: for each token, a weighted sum over all tokens, with "
    "weights that say how much attention to pay to each one (in \\emph{the fat cat sat on the "
    "mat}, looking at \\emph{cat}, \\emph{fat} may matter; looking at \\emph{mat}, it may matter "
    "less). The weights come from three learnable matrices $W_q$, $W_k$, $W_v$ that project "
    "each input into separate query, key and value spaces."
)

STEPS_INTRO = (
    "Each step is declared by the formula of one entry of its output; SymPy derives its matrix "
    "form from that formula. Indices run from 1: $m$ and $p$ index tokens, $i$ input features "
    "and $j$ context features."
)

STEP_TEXT = {
    ("projection", "Q"): (
        "The query of token $m$ is its input embedding projected by $W_q$, which maps a "
        "$d$-dimensional input into a $c$-dimensional query space."
    ),
    ("projection", "K"): "Keys are projected the same way, by $W_k$, into their own space.",
    ("projection", "V"): "So are values, by $W_v$.",
    ("scores", "Omega"): (
        "The attention score of token $m$ for token $p$ is the dot product of query $m$ with "
        "key $p$; one matrix product with the transpose of $K$ computes all of them at once."
    ),
    ("scaled_scores", "Omega_scaled"): (
        "The scores are divided by the square root of the width $c$ of the query and key "
        "spaces (the reason is one of the facts below)."
    ),
    ("weights", "A"): (
        "A softmax along each row (over the keys $p$; \\texttt{dim=-1} in PyTorch) turns the "
        "scaled scores into attention weights that are positive and sum to 1 along the row."
    ),
    ("context", "C"): (
        "The context vector of token $m$ is the attention-weighted sum of the value rows: one "
        "matrix product for all tokens."
    ),
}

COMPOSED_WEIGHTS = "Put together with the scaling, the weights read as the book writes them:"

FACTS_INTRO = "What SymPy derives from these steps, for any $n$ and $c$:"

FACT_TEXT = {
    "rows_sum_to_one": (
        "The denominator of the softmax does not depend on $p$, so it leaves the sum over $p$, "
        "and what remains is the denominator itself."
    ),
    "shift_invariance": (
        "Adding a constant $\\lambda$ to every score of a row leaves the weights unchanged: the "
        "factor it contributes cancels between numerator and denominator."
    ),
    "assumptions": (
        "Why divide by the square root of $c$: the book's reason assumes that the components "
        "of a query and of a key are independent random variables, with these means and "
        "variances (each line names the moment, the symbol used below for it, and its value):"
    ),
    "score_variance": (
        "From these, an expectation operator that knows only linearity, independence and the "
        "moments derives the variance of a score. Two components of one vector are the same "
        "variable when their indices agree and independent otherwise, which is where the "
        "Kronecker deltas come from; the stated values go in last:"
    ),
    "scaled_score_variance": (
        "The variance grows with $c$; in a real model $c$ runs to the thousands, the scores "
        "spread so widely that the softmax behaves like a step function (the largest score "
        "takes nearly all the weight) and its gradients vanish. The scaled score does not grow:"
    ),
}

COUNT_TEXT = (
    "Substituting each step's matrix form into the next gives the whole mechanism as one "
    "matrix expression; counted on it, self-attention takes five matrix products and one "
    "transpose. Each product costs two FLOPs per term, one multiplication and one addition: "
    "the count that PyTorch's FLOP counter reports. The scaling and the softmax are not matrix "
    "products and are not counted."
)

BACKWARD_INTRO = (
    "$W_q$, $W_k$ and $W_v$ are trainable: gradient descent moves them against the gradient of "
    "a scalar loss $L$. A bar marks a gradient: $\\bar{C}$ holds the derivative of $L$ with "
    "respect to each entry of $C$, the upstream gradient that the network above hands to "
    "self-attention. Walking the steps backwards, SymPy derives the gradient of every matrix, "
    "which always has that matrix's shape:"
)

BACKWARD_STEP_TEXT = {
    "dA": (
        "Each context entry is a weighted sum of values: for a step that is linear in a matrix, "
        "SymPy's matrix calculus differentiates the trace of the upstream gradient times the "
        "step, which gives the gradients of the weights and of the values."
    ),
    "jacobian": (
        "A row's weights all depend on every score of that row. SymPy differentiates the "
        "declared weights with respect to the score of a second key $t$ and sums out the "
        "Kronecker deltas it produces under the index ranges:"
    ),
    "dOmega_scaled": (
        "The chain rule entry by entry: the gradient of a score collects the gradients of every "
        "weight it moves. The deltas are summed out, the exponentials written back as weights, "
        "and the result has a matrix form, in which $J$ is the all-ones matrix:"
    ),
    "dOmega": "Through the scaling, which the gradient keeps:",
    "dQ": "Through the scores, the product of the queries with the transposed keys:",
    "dW_q": (
        "Every token's query, key and value used the same weights, so each weight's gradient "
        "sums over the tokens; and $X$ fed all three projections, so its gradient has three "
        "terms, one per step that reads it."
    ),
}

BACKWARD_ROWSUM = (
    "The sum in the softmax's gradient needs all $n$ weights of a row, but it can be had from "
    "$\\bar{C}$ and $C$ alone, which have only $c$ entries per row. FlashAttention's backward "
    "pass relies on this identity (the written-out backward pass of the PyTorch implementation "
    "does not: in floating point, a row whose weights have all gone to one key keeps its exact "
    "zero gradient only when the sum is taken over the weights):"
)

BACKWARD_CHECKED = (
    "These gradients are derived twice. At concrete sizes, SymPy also derives every gradient "
    "entry by entry with the chain rule on the explicit steps, and the difference from the "
    "forms above, instantiated at the same sizes, simplifies to zero. Evaluated on numbers, "
    "the gradients agree with PyTorch's autograd to $10^{-10}$ for one head, causal attention "
    "and several heads."
)
