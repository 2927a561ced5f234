r"""FlashAttention (Dao et al., 2022; Dao, 2023), declared: self-attention's own steps, computed
without the n × n matrix of weights. Its graph is self-attention's, unchanged: what it adds is
what SymPy derives about computing that graph block by block (`derive.proofs.online_softmax`, the
forward pass; `derive.proofs.blocked_backward`, the backward pass) and the blocks' sizes, B_r
queries and B_c keys (``--block-rows``, ``--block-keys``).

Its twins: the blocked reference `attention.flash` (every block's running maximum, sum and
output compared with the invariant's values, and each block's share of dQ, dK, dV), beside the
fast path and the explicit path of self-attention.
"""

from __future__ import annotations

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import (
    BlockedBackward,
    BlockedCost,
    OnlineSoftmax,
    Rounding,
    RowsumIdentity,
    Streamed,
)
from ..sizes import AtLeast, Size
from ..twins import GradientTwin, StateTwin, Twin
from ..variant import Document, Variant

#: FlashAttention's state after block t (`derive.proofs.online_softmax`): μ^{(t)}_{m,1},
#: ℓ^{(t)}_{m,1}, o^{(t)}_{m,j}, indexed (t, m, j) as a head's entries are.
MU_STATE = register_letter(Letter("Mu_state", "mustate", r"\mu", r"\mu", indices=(L.m, 1)))
ELL_STATE = register_letter(Letter("Ell_state", "ellstate", r"\ell", r"\ell", indices=(L.m, 1)))
O_STATE = register_letter(Letter("O_state", "ostate", "O", "o", indices=(L.m, L.j)))

__all__ = ["VARIANT"]

_BLOCKS = (("block_rows", L.B_r), ("block_keys", L.B_c))

VARIANT = Variant(
    "flash",
    "FlashAttention (the online softmax)",
    (
        "FlashAttention computes the same context as self-attention without ever holding the "
        "$n \\times n$ matrix of weights: each row of queries meets the keys in blocks of "
        "$B_c$, and keeps of each row its largest score so far $\\mu^{(t)}$, its sum of "
        "exponentials $\\ell^{(t)}$ and its output $o^{(t)}_j$ ($c + 2$ numbers), "
        "rescaled by $e^{\\mu^{(t)} - \\mu^{(t+1)}}$ whenever a block raises the maximum (the "
        "online softmax: Milakov and Gimelshein, 2018). Every exponential is then at most 1.",
        "The backward pass keeps of each row its context and one number, the log-sum-exp "
        "$L_m$: it recomputes the weights of a block from it, and needs the row sums "
        "$\\sum_r a_{m,r} \\bar{a}_{m,r}$ only through $D_m = \\sum_j \\bar{z}_{m,j} z_{m,j}$, "
        "read off the context and its gradient before any block is seen.",
    ),
    claims=(
        OnlineSoftmax(
            "sum",
            heading="The running sum, block after block",
            text="Block $t + 1$ holds the keys $B_c t + 1$ to $B_c (t + 1)$. Suppose the "
            "running sum after block $t$ is the sum of the exponentials of the keys seen so "
            "far, taken at the running maximum (at $t = 0$: an empty sum). The update, with "
            "its rescaling, gives the same sum after block $t + 1$, for any block and any "
            "maxima:",
        ),
        OnlineSoftmax(
            "output",
            heading="The running output, block after block",
            text="The same for the output, each exponential weighting its key's value:",
        ),
        OnlineSoftmax(
            "context",
            text="After the last of $T$ blocks ($n = T B_c$), the output over the sum: "
            "$e^{-\\mu^{(T)}}$ cancels, and what remains is the weights of the softmax applied "
            "to the values, the context $z_{m,j}$ of self-attention:",
        ),
        OnlineSoftmax(
            "log-sum-exp",
            heading="",
            text="and the maximum plus the logarithm of the sum is the logarithm of the "
            "softmax's denominator, the one number per row the backward pass keeps:",
        ),
        Streamed(
            "context",
            other="softcap",
            heading="Score modifications, block by block",
            text="Nothing above needs the scores to be $q_m \\cdot k_p / \\sqrt{c}$: the "
            "invariant holds for any numbers. A modification that changes each score before "
            "the softmax is streamed as it is: softcapping's $\\breve\\omega_{m,p} = "
            "\\kappa \\tanh(\\tilde\\omega_{m,p} / \\kappa)$ (Gemma 2), computed "
            "block by block before the running maximum, gives the context of the softcap "
            "variant,",
        ),
        Streamed(
            "context",
            other="alibi",
            heading="",
            text="and ALiBi's biased, masked scores (BLOOM) that of the ALiBi variant:",
        ),
        Streamed(
            "sink",
            heading="",
            text="A sink's logit $\\zeta$ (GPT-OSS) is one more term of every row's sum, "
            "carried by the same update: start from $\\mu^{(0)} = \\zeta$ and "
            "$\\ell^{(0)} = e^{\\zeta - \\mu^{(0)}} = 1$, with $o^{(0)}_j = 0$ (a sink "
            "has no value):",
        ),
        Streamed(
            "context",
            other="sinks",
            heading="",
            text="and after the last block the output over the sum is the sinks variant's context:",
        ),
        Streamed(
            "skipped-update",
            heading="",
            text="A mask sets some scores to $-\\infty$. A block of keys masked for every "
            "row of a block of queries adds $e^{-\\infty} = 0$ to every sum, and the maximum "
            "stays where it was ($\\max(\\mu^{(t)}, -\\infty) = \\mu^{(t)}$), so skipping "
            "it leaves the running sum as it was (the output's update has the same form):",
        ),
        Streamed(
            "skipped-blocks",
            other="causal",
            heading="",
            text="Which blocks those are, from the declared mask: the keys a row may read, "
            "solved from the mask's condition; causal attention skips block $j$ of keys for "
            "block $i$ of queries when its first key comes after the block's last query "
            "(the rule checked against the mask at every block pair of every split of "
            "$n = 8$ and $9$),",
        ),
        Streamed(
            "skipped-blocks",
            other="sliding-window",
            heading="",
            text="and a window of $w$ keys, also when its last key is too old for the "
            "block's first query:",
        ),
        Streamed(
            "context",
            other="sliding-window",
            heading="",
            text="The blocks that are not skipped stream the masked scores $\\hat\\omega$, "
            "and the sliding window's context follows:",
        ),
        BlockedBackward(
            "weights", text="The backward pass recomputes a block's weights from $L_m$ alone:"
        ),
        RowsumIdentity(),
        BlockedBackward(
            "rowsum",
            text="So the gradient of the scaled scores needs, beyond the block, one number per "
            "row, $D_m$, computed once from the context and its gradient:",
        ),
        BlockedBackward(
            "V",
            text="A block of $B_r$ queries adds its share to the gradients of the keys and "
            "values; after the last block, each is the derived gradient:",
        ),
        BlockedBackward("K", text=""),
        BlockedBackward(
            "Q", text="and a block of $B_c$ keys its share to the gradient of the queries:"
        ),
        BlockedCost(
            text="A row keeps its maximum, its sum and a row of the output, $c + 2$ numbers: "
            "$n(c + 2)$ for the $n$ rows against the $n^2$ of $A$; the pass keeps the context "
            "and $L_m$ for the backward pass. The forward pass computes the same products as "
            "self-attention, plus a rescaling for each block of keys after the first; the "
            "backward pass computes four products and $D$, and the scores once more:"
        ),
        Rounding(
            "stored-weights",
            heading="Where float32 breaks it",
            text="In float32 every operation's result is the exact one times $1 + \\xi$, "
            "$|\\xi| \\le u = 2^{-24}$ (an exponential's within $\\eta = 2u$, a sum of $k$ "
            "terms within $\\gamma_k = k u / (1 - k u)$ of each term, a dot product's "
            "rounding $\\theta$ within $\\gamma_c$ of $\\beta = \\sum_j |\\bar{z}_{m,j}| "
            "|v_{p,j}|$). SymPy gives each rounding a symbol, differentiates at 0 (the first "
            "order) and bounds each coefficient's magnitude by its unit. A weight recomputed "
            "from the stored log-sum-exp $\\hat{L}_m = L_m (1 + \\xi_1)$, as FlashAttention "
            "and PyTorch's fused kernels do, carries $u |L_m|$, the size of the scores:",
        ),
        Rounding(
            "maximum-weights",
            heading="",
            text="A weight recomputed from the row's maximum, as the fast path does, carries "
            "instead $u (\\mu_m - \\tilde\\omega_{m,r})$ "
            "for each key, times a weight (derived at $n = 3$ keys, for every key; the general "
            "sum is checked against each):",
        ),
        Rounding(
            "bounded-product",
            heading="",
            text="and a weight is at most $e^{\\tilde\\omega_{m,r} - \\mu_m}$, so each "
            "of those terms is at most $u/e$, however far apart the scores are (the scores "
            "themselves taken as given in float32: computing them carries its own error, the "
            "same in both routes):",
        ),
        Rounding(
            "scale-stored",
            heading="",
            text="On a row of scores $s + z_r$ (scores of size $s$ whose spread does not grow, "
            "so the row never saturates), the first bound grows as $u s$:",
        ),
        Rounding("scale-maximum", heading="", text="and the second does not depend on $s$:"),
        Rounding(
            "cancellation-stored",
            heading="",
            text="The gradient of the scores meets the rounding of the dot products "
            "$\\bar{a}_{m,p}$ and $D_m$. With $D_m$ from the stored context, the two "
            "roundings $\\theta$ enter the largest key's gradient with the weight itself, "
            "and stay as the row saturates (on a row of scores $s z_r$, $z_r = 1 - (r - 1) g$):",
        ),
        Rounding(
            "cancellation-maximum",
            heading="",
            text="With $D_m = \\sum_r a_{m,r} \\bar{a}_{m,r}$ summed from the same rounded "
            "$\\bar{a}$, they enter with $a_{m,1} (1 - a_{m,1})$ and $a_{m,1} a_{m,r}$, and "
            "vanish. (The two sums' own roundings, $\\gamma_n$ each, stay at first order; in a "
            "saturated row they are exact under rounding to nearest, $1 \\cdot x$ and $1$ "
            "plus less than half an ulp, which a first-order analysis does not see.) So the "
            "fast path recomputes each row's maximum and sums $D$ from the same "
            "$\\bar{a}$: given float32 scores, its weights' bound does not grow with them, "
            "where the stored log-sum-exp's grows as $u s$. The figure below evaluates the "
            "whole first-order bounds of both routes on measured draws.",
        ),
    ),
    sizes=(
        Size(
            L.B_r,
            2,
            "the queries of a block",
            option="block-rows",
            meaning="the queries of a block (FlashAttention's $B_r$)",
        ),
        Size(
            L.B_c,
            2,
            "the keys of a block",
            option="block-keys",
            meaning="the keys of a block (FlashAttention's $B_c$)",
        ),
    ),
    requires=(
        AtLeast(L.B_r, 1, "a block holds at least one query"),
        AtLeast(L.B_c, 1, "a block holds at least one key"),
    ),
    draws=(AtLeast(L.n, L.B_c + 1, "more than one block of keys, or nothing is rescaled"),),
    also=(
        Twin(
            "attention.flash.flash_attention",
            ("Q", "K", "V"),
            options=_BLOCKS,
            label="blocked reference",
        ),
        StateTwin(
            "attention.flash.online_softmax",
            ("Q", "K", "V"),
            "derive.proofs.online_softmax.states",
            (("mu", "μ"), ("ell", "ℓ"), ("o", "O")),
            options=_BLOCKS,
        ),
        GradientTwin(
            "attention.flash.flash_gradients",
            ("Q", "K", "V", "dC"),
            ("dQ", "dK", "dV"),
            options=_BLOCKS,
        ),
        StateTwin(
            "attention.flash.flash_gradients",
            ("Q", "K", "V", "dC"),
            "derive.proofs.blocked_backward.shares",
            (("dQ_blocks", "dQ"), ("dK_blocks", "dK"), ("dV_blocks", "dV")),
            options=_BLOCKS,
        ),
    ),
    alone="its facts (the online softmax over blocks of keys, the blocked backward pass, the "
    "causal block skip and the streamed score rules of its own document) are derived for one "
    "head of self-attention's softmax, not for the graph of another variant",
    document=Document(
        sections=("introduction", "steps", "facts", "figures", "explicit"),
        figures=("flash-rounding",),
        states="derive.proofs.online_softmax.block_states",
    ),
    notation=(MU_STATE, ELL_STATE, O_STATE),
)
