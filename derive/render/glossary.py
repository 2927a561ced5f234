"""docs/glossary.md: the notation, once, printed from `derive.notation` by the same printer.

The letters and shapes come from the notation and the declarations; the words from the tables
below (prose only).
"""

from __future__ import annotations

import sympy as sp

from .. import calculus
from ..graph import self_attention, variant
from ..notation import latex
from ..notation import letters as L

__all__ = ["glossary_markdown"]

_SIZES = (
    (L.n, "tokens in the sequence (rows of $X$)"),
    (L.d, "width of an input embedding (columns of $X$)"),
    (L.c, "width of the query, key, value and context vectors"),
    (L.h, "number of heads (multi-head attention)"),
    (L.c_h, "width of one head"),
    (L.s, "keys read from another sequence $Y$ (cross-attention)"),
    (L.d_y, "width of an entry of $Y$ (cross-attention)"),
    (L.w, "the window of sliding-window attention: a query sees its last $w$ keys"),
    (L.g, "groups of keys and values (grouped-query attention): $h/g$ heads share one"),
    (L.d_u, "width of the latent $U$ of keys and values (multi-head latent attention)"),
    (L.c_r, "the rotated width of each head (partial RoPE: its first $c_r$ features)"),
    (L.beta, "base of the rotary angles (RoPE; the book's `theta_base`, 10 000)"),
    (L.eps, "the constant under the root of an RMS normalisation (QK-norm; $10^{-6}$)"),
    (L.kappa, "the cap of logit softcapping (Gemma 2: 50)"),
    (L.eta, "the factor of RoPE's slow frequencies (Llama 3.1's `factor`; Llama 3.2: 32)"),
    (L.alpha_l, "Llama 3.1's `low_freq_factor` (1): slow pairs' wavelengths pass $L_0/\\alpha_l$"),
    (L.alpha_h, "Llama 3.1's `high_freq_factor` (4): fast pairs' are below $L_0/\\alpha_h$"),
    (L.L_0, "the context length a Llama 3.1 model was first trained at (8192)"),
)

_INDICES = (
    (L.m, "a token, as the one that attends (a query; rows of $\\Omega$, $A$, $C$)"),
    (L.p, "a token, as the one attended to (a key; columns of $\\Omega$, $A$)"),
    (L.r, "the token summed over in the softmax's denominator"),
    (L.t, "a second key (the Jacobian of the softmax, the chain rule)"),
    (L.i, "an input feature (columns of $X$, rows of the weights)"),
    (L.j, "a context feature (columns of $Q$, $K$, $V$, $C$)"),
    (L.j2, "a second context feature (the variance of a score)"),
    (L.f, "a feature of the latent $U$ (multi-head latent attention)"),
    (L.ell, "a head (multi-head attention)"),
    (L.nu, "a group of keys and values (grouped-query attention)"),
    (L.b, "a sequence in a batch"),
)

_ENTRIES = {
    "x": "input embedding of token m, feature i",
    "y": "entry p of the sequence the keys and values come from (cross-attention)",
    "wq": "query weight from input feature i to query feature j",
    "wk": "key weight",
    "wv": "value weight",
    "wo": "output weight (multi-head attention)",
    "q": "query of token m, feature j",
    "k": "key of token p, feature j",
    "v": "value of token p, feature j",
    "omega": "attention score of token m for token p",
    "omegatilde": "scaled score",
    "omegacap": "capped score, $\\kappa \\tanh(\\tilde\\omega_{m,p} / \\kappa)$ (softcapping)",
    "gap": "distance of key p before query m, $m - p$ (ALiBi)",
    "mu": "slope of head $\\ell$'s linear bias (ALiBi)",
    "omegabias": "score with ALiBi's bias, $\\tilde\\omega_{m,p} - \\mu_{1,\\ell} (m - p)$",
    "sink": "logit of head $\\ell$'s attention sink, in each row's denominator (GPT-OSS)",
    "mask": "mask: 0 where token m may attend to p, minus infinity where not",
    "omegahat": "masked score",
    "a": "attention weight of token m on token p",
    "ctx": "context vector of token m (the book's z), feature j",
    "ctxcat": "the heads' context vectors side by side (multi-head attention)",
    "wg": "gate weight from input feature i to the gate logit of feature j (output gate)",
    "gamma": "gate logit of token m, feature j, $\\gamma = X W_g$ (output gate)",
    "ctxgated": "the heads' context vectors gated, $\\hat z_{m,j} \\sigma(\\gamma_{m,j})$ "
    "(Qwen 3.5's output gate)",
    "phi": "rotary angle of token m, feature j: its position times the pair's frequency",
    "rot": "the rotation of RoPE's pairs: $x R$ is $[-x_2\\ x_1]$ (the book's rotate half)",
    "qrot": "query rotated by its position (RoPE)",
    "krot": "key rotated by its position (RoPE)",
    "qnorm": "query divided by its root mean square, times the gains (QK-norm)",
    "knorm": "key divided by its root mean square, times the gains (QK-norm)",
    "gq": "gain of query feature j (QK-norm; the book's `q_norm.scale`)",
    "gk": "gain of key feature j (QK-norm; the book's `k_norm.scale`)",
    "u": "latent of token m, feature f: what the cache keeps (latent attention)",
    "wdkv": "down-projection weight to the latent (the book's `W_DKV`)",
    "wuk": "up-projection weight from the latent to the keys (the book's `W_UK`)",
    "wuv": "up-projection weight from the latent to the values (the book's `W_UV`)",
}

_OTHER = (
    (r"\lambda", "a constant added to every score of a row (shift invariance)"),
    (r"\mathbb{E}, \operatorname{Var}", "expectation and variance (the stated assumptions)"),
    (r"\mu_q, \sigma_q^{2}", "mean and variance of a query's components (likewise for keys)"),
    (r"\delta_{p,t}", "the Kronecker delta: 1 when p = t, else 0"),
    ("J", "the all-ones matrix"),
    ("D_m", "the softmax's denominator of row m, in the explicit sections"),
    (r"\circ", "the entry-wise (Hadamard) product"),
    (r"\bar{Y}", "the gradient of the loss L with respect to Y, shaped like Y"),
)

#: The dimension strings of `attention`'s jaxtyping annotations: what each holds, and where.
_JAXTYPING = (
    ("*batch n d", "$X$", "the input of every function and `forward`"),
    ("d c", "$W_q$, $W_k$, $W_v$", "the book's orientation ($Q = X W_q$): `attention.functional`, "
     "`SelfAttentionV1`, and `w_q`, `w_k`, `w_v` of every module"),
    ("c d", "$W_q^\\top$, …", "`nn.Linear` weights (`W_query.weight`) of `SelfAttentionV2`, "
     "`CausalAttention`, `MultiHeadAttention`"),
    ("c", "$b_q$, …", "biases of the projections"),
    ("*batch n c", "$Q$, $K$, $V$, $C$", "projections and context vectors"),
    ("*batch n n", "$\\Omega$, $A$", "scores, weights"),
    ("*#batch n n", "a full mask", "True = may attend; its leading dimensions broadcast against "
     "x's as torch's do (one (n, n) mask for a whole batch)"),
    ("*#batch n", "key-padding mask", "True for the keys that exist; broadcasts as a mask does"),
    ("*batch h n c_h", "per-head $Q$, $K$, $V$, $C$", "`split_heads`, `merge_heads`"),
    ("*batch h n n", "per-head $A$", "`multi_head_attention(..., return_weights=True)`"),
    ("c c_out", "$W_o$", "the output projection (`out_proj.weight` is its transpose)"),
    ("c_out", "$b_o$", "bias of the output projection"),
    ("*batch n c_out", "the output", "of multi-head attention ($c_{out}$ = d_out), and of the "
     "wrapper of heads ($c_{out}$ = h · d_out)"),
    ("*batch s d_y", "$Y$", "the sequence cross-attention reads its keys and values from "
     "(`cross_attention`, `CrossAttention.forward`)"),
    ("d_y c", "$W_k$, $W_v$", "cross-attention's key and value weights ($K = Y W_k$)"),
    ("c d_y", "$W_k^\\top$, $W_v^\\top$", "`CrossAttention`'s `W_key.weight`, `W_value.weight`"),
    ("*batch s c", "$K$, $V$", "s keys and values: the steps `scores` and `context` (s = n in "
     "self-attention)"),
    ("*batch n s", "$\\Omega$, $A$, masks", "n queries against s keys: the steps `scores`, "
     "`scaled_scores`, `weights`, `context`, and cross-attention's weights and `mask`"),
    ("*#batch n s", "masks of s keys", "cross-attention's and the steps' `mask`, broadcasting"),
    ("*#batch s", "key-padding mask", "True for the keys that exist, of s keys (the steps, "
     "cross-attention), broadcasting"),
    ("*batch h n s", "per-head $A$", "`CrossAttention.forward(..., return_weights=True)`"),
    ("*batch t d", "the new rows of $X$", "`decode_step`: t new tokens"),
    ("*batch t c", "their rows of $C$", "`decode_step`: the new tokens' context vectors"),
    ("*batch m c", "the cache: $K$, $V$", "`decode_step`'s `cache`: the keys and values of the m "
     "tokens before the new ones"),
    ("*batch m_next c", "the grown cache", "what `decode_step` returns: m + t rows (the last w "
     "with a window)"),
    ("h", "ALiBi's slopes $\\mu$, the sinks $\\zeta$", "one per head: `alibi=`, `sinks=` of "
     "`multi_head_attention`, `grouped_query_attention`, the modules; `alibi_slopes(h)`"),
    ("1", "ALiBi's slope, a sink", "`self_attention(..., alibi=, sinks=)`: one head's"),
    ("", "one number", "a head's slope or sink, `alibi_scores(omega_scaled, slope)`, "
     "`weights(..., sink=)`"),
    ("c2 d", "W_query.weight with the gate", "the modules' `gate=True`: each head's queries, "
     "then its gate logits (Qwen 3.5's `q_proj`)"),
    ("n_ctx c_r", "RoPE's $\\cos\\Phi$, $\\sin\\Phi$", "`compute_rope_params`' tables "
     "(context_length × the rotated width: head_dim, or fewer for partial RoPE), as "
     "`apply_rope` and `GroupedQueryAttention.forward` take them"),
)  # fmt: skip


def _variant_graphs() -> list:
    """The graphs of the built-in entries after self-attention's causal and multi-head forms
    (the glossary lists the book's letters, not a user's)."""
    from ..graph.entries import BUILT_IN

    return [variant(found.name).graph for found in BUILT_IN]


def _per_head_rows() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """The rows of one number per head (ALiBi's slopes): 1 × h, as a combination with
    multi-head attention declares them (an entry alone has one head, 1 × 1)."""
    from ..graph.entries import BUILT_IN

    found = {}
    for entry in BUILT_IN:
        if entry.combines and entry.name != "multi-head":
            graph = variant(f"multi-head+{entry.name}").graph
            found |= {letter: shape for letter, shape in graph.shapes.items()
                      if shape == (1, L.h)}  # fmt: skip
    return found


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _index(name: str) -> tuple[sp.Expr, sp.Expr]:
    """The indices the documents give an entry of this letter (its gradient's alike)."""
    return calculus.book_indices(L.BASES[name.removeprefix("d")])


def glossary_markdown() -> str:
    """The glossary as GitHub Markdown (inline ``$…$`` math)."""
    lines = [
        "# Notation",
        "",
        "*Generated by `derive docs` from `derive/notation/letters.py`: the letters of section "
        "3.4 of *Build a Large Language Model (from Scratch)*, used alike by the SymPy symbols, "
        'the LaTeX documents and the jaxtyping shapes of `attention` (`"n d"`, `"d c"`, '
        '`"n n"`, `"n c"`, `"*batch"`, `"h"`). One letter, one meaning: the entries of $C$ are '
        "$z_{m,j}$, so that $c$ is only a width; a gradient carries a bar, so that $d$ is only "
        "a width.*",
        "",
        "## Sizes",
        "",
        _row("symbol", "meaning"),
        _row("---", "---"),
        *(_row(f"${latex(symbol)}$", text) for symbol, text in _SIZES),
        "",
        "## Indices (1-based)",
        "",
        _row("symbol", "runs over"),
        _row("---", "---"),
        *(_row(f"${latex(symbol)}$", text) for symbol, text in _INDICES),
        "",
        "## Matrices and their entries",
        "",
        _row("matrix", "shape", "entry", "meaning"),
        _row("---", "---", "---", "---"),
    ]
    shapes: dict[str, tuple[sp.Expr, sp.Expr]] = {}
    for graph in (self_attention(causal=True), self_attention(heads=True), *_variant_graphs()):
        shapes |= {letter: shape for letter, shape in graph.shapes.items() if letter not in shapes}
    shapes |= _per_head_rows()
    for name, text in _ENTRIES.items():
        letter = L.BASES[name]
        matrix = latex(L.matrix_symbol(letter, *shapes[letter]))
        entry = latex(L.base(name)[_index(name)])
        lines.append(
            _row(
                f"${matrix}$",
                f"${latex(shapes[letter][0])} \\times {latex(shapes[letter][1])}$",
                f"${entry}$",
                text,
            )
        )
    lines += _gradient_rows()
    lines += [
        "",
        "## Other symbols",
        "",
        _row("symbol", "meaning"),
        _row("---", "---"),
        *(_row(f"${symbol}$", text) for symbol, text in _OTHER),
        "",
        "## Shapes in `attention` (jaxtyping)",
        "",
        "The same letters name the dimensions checked at runtime; `*batch` is any number of "
        "leading batch dimensions, `h` the heads. In generation (`decode_step`, as in the "
        "kv-cache variant's decoding step), m counts the tokens already cached and t the new "
        "ones.",
        "",
        _row("dimensions", "holds", "where"),
        _row("---", "---", "---"),
        *(_row(f'`"{dims}"`', holds, where) for dims, holds, where in _JAXTYPING),
    ]
    head = latex(L.base("omega")[L.ell, L.m, L.p])
    lines += [
        "",
        f"Per-head matrices carry the head in a superscript: ${head}$ is entry $(m, p)$ of "
        f"${L.MATRIX_LATEX['Omega_l']}$, the scores of head $\\ell$.",
        "",
    ]
    return "\n".join(lines)


def _gradient_rows() -> list[str]:
    """The backward pass: each gradient, its shape (that of its matrix) and its entry."""
    lines = [
        "",
        "## Gradients (the backward pass)",
        "",
        "Each gradient of the scalar loss $L$ has the shape of its matrix; "
        "$\\bar{C}$ is the upstream gradient.",
        "",
        _row("gradient", "shape", "entry", "gradient of $L$ with respect to"),
        _row("---", "---", "---", "---"),
    ]
    graphs = (self_attention(), self_attention(causal=True), self_attention(heads=True),
              *_variant_graphs())  # fmt: skip
    seen: dict[str, tuple] = {"C": self_attention().shapes["C"]}
    for graph in graphs:
        for gradient in calculus.backward(graph):
            if not gradient.of.endswith("_l"):
                seen.setdefault(gradient.of, graph.shapes[gradient.of])
    seen |= {letter: shape for letter, shape in _per_head_rows().items() if letter in seen}
    for letter, (rows, cols) in seen.items():
        name = "d" + L.name_of(letter)
        entry = latex(L.base(name)[_index(name)])
        matrix = latex(L.matrix_symbol("d" + letter, rows, cols))
        lines.append(_row(f"${matrix}$", f"${latex(rows)} \\times {latex(cols)}$", f"${entry}$",
                          f"${L.MATRIX_LATEX[letter]}$"))  # fmt: skip
    return lines
