"""docs/glossary.md: the notation, once, printed from `derive.notation` by the same printer.

Every symbol and its words come from the registry: the letters each built-in entry declares
(`derive.notation.letters.Letter`, with their meaning and the indices of their entries), the
other symbols it names (`Name`), and the sizes and parameters it adds (`Size`, `Parameter`),
entry by entry in the registry's order; the shapes from the declarations. The one table here is
the jaxtyping dimensions of `attention`, the other package's notation.
"""

from __future__ import annotations

import sympy as sp

from .. import calculus
from ..graph import self_attention, variant
from ..notation import latex
from ..notation import letters as L
from ..notation.letters import Letter, Name

__all__ = ["glossary_markdown"]

#: The dimension strings of `attention`'s jaxtyping annotations: what each holds, and where.
_JAXTYPING = (
    ("*batch n d", "$X$", "the input of every function and `forward`"),
    (
        "d c",
        "$W_q$, $W_k$, $W_v$",
        "the book's orientation ($Q = X W_q$): `attention.functional`, "
        "`SelfAttentionV1`, and `w_q`, `w_k`, `w_v` of every module",
    ),
    (
        "c d",
        "$W_q^\\top$, …",
        "`nn.Linear` weights (`W_query.weight`) of `SelfAttentionV2`, "
        "`CausalAttention`, `MultiHeadAttention`",
    ),
    ("c", "$b_q$, …", "biases of the projections"),
    ("*batch n c", "$Q$, $K$, $V$, $C$", "projections and context vectors"),
    ("*batch n n", "$\\Omega$, $A$", "scores, weights"),
    (
        "*#batch n n",
        "a full mask",
        "True = may attend; its leading dimensions broadcast against "
        "x's as torch's do (one (n, n) mask for a whole batch)",
    ),
    ("*#batch n", "key-padding mask", "True for the keys that exist; broadcasts as a mask does"),
    ("*batch h n c_h", "per-head $Q$, $K$, $V$, $C$", "`split_heads`, `merge_heads`"),
    ("*batch h n n", "per-head $A$", "`multi_head_attention(..., return_weights=True)`"),
    ("c c_out", "$W_o$", "the output projection (`out_proj.weight` is its transpose)"),
    ("c_out", "$b_o$", "bias of the output projection"),
    (
        "*batch n c_out",
        "the output",
        "of multi-head attention ($c_{out}$ = d_out), and of the "
        "wrapper of heads ($c_{out}$ = h · d_out)",
    ),
    (
        "*batch s d_y",
        "$Y$",
        "the sequence cross-attention reads its keys and values from "
        "(`cross_attention`, `CrossAttention.forward`)",
    ),
    ("d_y c", "$W_k$, $W_v$", "cross-attention's key and value weights ($K = Y W_k$)"),
    ("c d_y", "$W_k^\\top$, $W_v^\\top$", "`CrossAttention`'s `W_key.weight`, `W_value.weight`"),
    (
        "*batch s c",
        "$K$, $V$",
        "s keys and values: the steps `scores` and `context` (s = n in self-attention)",
    ),
    (
        "*batch n s",
        "$\\Omega$, $A$, masks",
        "n queries against s keys: the steps `scores`, "
        "`scaled_scores`, `weights`, `context`, and cross-attention's weights and `mask`",
    ),
    ("*#batch n s", "masks of s keys", "cross-attention's and the steps' `mask`, broadcasting"),
    (
        "*#batch s",
        "key-padding mask",
        "True for the keys that exist, of s keys (the steps, cross-attention), broadcasting",
    ),
    ("*batch h n s", "per-head $A$", "`CrossAttention.forward(..., return_weights=True)`"),
    ("*batch t d", "the new rows of $X$", "`decode_step`: t new tokens"),
    ("*batch t c", "their rows of $C$", "`decode_step`: the new tokens' context vectors"),
    (
        "*batch m c",
        "the cache: $K$, $V$",
        "`decode_step`'s `cache`: the keys and values of the m tokens before the new ones",
    ),
    (
        "*batch m_next c",
        "the grown cache",
        "what `decode_step` returns: m + t rows (the last w with a window)",
    ),
    ("d c_v", "$W_v$ of linear attention", "`attention.linear.linear_self_attention`: c_v wide"),
    (
        "d c_k",
        "$W_k$ of linear attention",
        "`attention.linear.linear_self_attention`: c_k = g · c_h with groups, c without",
    ),
    (
        "c_o c_out",
        "$W_o$ of linear attention",
        "`attention.linear.linear_self_attention`: the heads' contexts side by side, projected",
    ),
    (
        "*batch n c_v",
        "$V$ or $U$, and $C$",
        "`attention.linear`: the values (the delta rule's written values), the context",
    ),
    (
        "*batch n d_k",
        "$Q$, $K$ of `attention.linear`",
        "queries and keys, d_k wide, heads in *batch",
    ),
    ("*batch n d_v", "$V$, the outputs", "`attention.linear`: values and outputs, d_v wide"),
    ("*batch n", "$g$, $\\beta$", "`attention.linear`: each token's log-decay and write strength"),
    (
        "*batch d_k d_v",
        "the state $S$",
        "`attention.linear`: `initial_state`, and the final state with `return_state=True`",
    ),
    ("chunks *batch d_k d_v", "the states", "`attention.linear.chunk_states`: after each chunk"),
    ("*#batch n n", "the decays $\\Gamma$", "`attention.linear.causal_weights(..., decays=)`"),
    (
        "*batch n e",
        "$x$, $\\Delta$, $y$ of Mamba",
        "`attention.linear.selective_scan`: each token's e channels, their steps, the outputs",
    ),
    ("*batch n d_state", "$B$, $C$ of Mamba", "`attention.linear.selective_scan`: one per token"),
    ("e d_state", "$A$ of Mamba", "`selective_scan`: a decay rate per channel and state entry"),
    ("e", "the skip $D$ of Mamba", "`selective_scan(..., D=)`: one per channel"),
    (
        "*batch e d_state",
        "Mamba's state",
        "`selective_scan`: `initial_state` and the final state (Mamba's ssm_state layout)",
    ),
    (
        "*#batch n c",
        "the log-decays $G$ of KDA",
        "`attention.linear.channel_decayed`, `kda_read`: one per token and key channel",
    ),
    (
        "*#batch n 1",
        "the steps $\\Delta$",
        "`attention.linear.stepped_values`, `ssd_read`: one a token",
    ),
    (
        "*batch n h p",
        "$x$, $y$ of Mamba-2",
        "`attention.linear.ssd`: each token's inputs and outputs, h heads of width p",
    ),
    ("*batch n h", "the steps $\\Delta$ of Mamba-2", "`attention.linear.ssd`'s `dt`, one per head"),
    (
        "*batch n g d_state",
        "$B$, $C$ of Mamba-2",
        "`attention.linear.ssd`: its keys and queries, g groups of d_state, shared by h/g heads",
    ),
    (
        "*batch h p d_state",
        "Mamba-2's state",
        "`attention.linear.ssd`: `initial_state` and the final state (Mamba's ssm_state layout)",
    ),
    (
        "h p",
        "the skip $D$ per channel",
        "`attention.linear.ssd(..., D=)`: one per head or per channel",
    ),
    (
        "h",
        "ALiBi's slopes $\\mu$, the sinks $\\zeta$",
        "one per head: `alibi=`, `sinks=` of "
        "`multi_head_attention`, `grouped_query_attention`, the modules; `alibi_slopes(h)`",
    ),
    ("1", "ALiBi's slope, a sink", "`self_attention(..., alibi=, sinks=)`: one head's"),
    (
        "",
        "one number",
        "a head's slope or sink, `alibi_scores(omega_scaled, slope)`, `weights(..., sink=)`",
    ),
    (
        "c2 d",
        "W_query.weight with the gate",
        "the modules' `gate=True`: each head's queries, then its gate logits (Qwen 3.5's `q_proj`)",
    ),
    (
        "n_ctx c_r",
        "RoPE's $\\cos\\Phi$, $\\sin\\Phi$",
        "`compute_rope_params`' tables "
        "(context_length × the rotated width: head_dim, or fewer for partial RoPE), as "
        "`apply_rope` and `GroupedQueryAttention.forward` take them",
    ),
)


#: The functions a derivation may print, beside the registry's own symbols (a user's variant
#: prints them too: a gate's σ, a rectifier's θ and sign).
_FUNCTIONS = (
    ("\\sigma(x)", "the logistic sigmoid, 1 / (1 + exp(−x)); its derivative is σ(x)(1 − σ(x))"),
    ("[P]", "Iverson's bracket: 1 where the condition P on indices holds, else 0"),
    (
        "\\theta(x)",
        "the Heaviside step, the derivative of max(0, x): 0 for x < 0, 1 for x > 0, and 0 at "
        "x = 0 in a derivative (torch's value at the kink)",
    ),
    (
        "\\operatorname{sign}(x)",
        "the sign of x, the derivative of the absolute value: −1, 0 or 1 (0 at the kink, as "
        "torch's)",
    ),
    ("\\prod_{t=a}^{b}", "a product over t = a … b; an empty one (b < a) is 1"),
)


def _built_in() -> tuple:
    from ..graph.entries import BUILT_IN

    return BUILT_IN


def _variant_graphs() -> list:
    """The graphs of the built-in entries after self-attention's causal and multi-head forms
    (the glossary lists the book's letters, not a user's)."""
    return [variant(found.name).graph for found in _built_in()]


def _per_head_rows() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """The rows of one number per head (ALiBi's slopes): 1 × h, as a combination with
    multi-head attention declares them (an entry alone has one head, 1 × 1)."""
    found = {}
    for entry in _built_in():
        if not entry.alone and entry.name != "multi-head":
            graph = variant(f"multi-head+{entry.name}").graph
            found |= {letter: shape for letter, shape in graph.shapes.items() if shape == (1, L.h)}
    return found


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _index(name: str) -> tuple[sp.Expr, sp.Expr]:
    """The indices the documents give an entry of this letter (its gradient's alike: a name
    that is no letter's but ``d`` and a letter's; a letter may begin with d, ``deltastep``)."""
    gradient = name not in L.BASES and name.startswith("d")
    return calculus.book_indices(L.BASES[name[1:] if gradient else name])


def _declared() -> tuple[list[Name], list[tuple[sp.Symbol, str]], list[Letter]]:
    """What the built-in entries declare, in the registry's order, each once: the names, the
    sizes and parameters (symbol, meaning) and the letters."""
    names: dict[object, Name] = {}
    sized: dict[sp.Symbol, str] = {}
    letters: dict[str, Letter] = {}
    for found in _built_in():
        for item in found.notation:
            if isinstance(item, Name):
                names.setdefault(item.symbol, item)
            elif item.meaning:
                letters.setdefault(item.entry, item)
        for record in (*found.sizes, *found.parameters):
            sized.setdefault(record.symbol, record.meaning or record.text)
    return list(names.values()), list(sized.items()), list(letters.values())


def _symbol(symbol: sp.Symbol | str) -> str:
    return symbol if isinstance(symbol, str) else latex(symbol)


def glossary_markdown() -> str:
    """The glossary as GitHub Markdown (inline ``$…$`` math)."""
    names, sized, letters = _declared()
    sizes = [(n.symbol, n.meaning) for n in names if n.kind == "size"] + sized
    lines = [
        "# Notation",
        "",
        "*Generated by `derive docs` from the letters each entry of the registry declares: the "
        "letters of section "
        "3.4 of *Build a Large Language Model (from Scratch)*, used alike by the SymPy symbols, "
        'the LaTeX documents and the jaxtyping shapes of `attention` (`"n d"`, `"d c"`, '
        '`"n n"`, `"n c"`, `"*batch"`, `"h"`). One letter, one meaning: the entries of $C$ are '
        "$z_{m,j}$, so that $c$ is only a width; a gradient carries a bar, so that $d$ is only "
        "a width.*",
        "",
        "## Sizes and parameters",
        "",
        _row("symbol", "meaning"),
        _row("---", "---"),
        *(_row(f"${_symbol(symbol)}$", text) for symbol, text in sizes),
        "",
        "## Indices (1-based)",
        "",
        _row("symbol", "runs over"),
        _row("---", "---"),
        *(_row(f"${_symbol(n.symbol)}$", n.meaning) for n in names if n.kind == "index"),
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
    for record in letters:
        letter = record.matrix
        if letter not in shapes and record.shape:  # a letter of combinations only (M̊)
            shapes[letter] = record.shape
        matrix = latex(L.matrix_symbol(letter, *shapes[letter]))
        entry = latex(L.base(record.entry)[_index(record.entry)])
        lines.append(
            _row(
                f"${matrix}$",
                f"${latex(shapes[letter][0])} \\times {latex(shapes[letter][1])}$",
                f"${entry}$",
                record.meaning,
            )
        )
    lines += _gradient_rows()
    lines += [
        "",
        "## Other symbols",
        "",
        _row("symbol", "meaning"),
        _row("---", "---"),
        *(_row(f"${_symbol(n.symbol)}$", n.meaning) for n in names if n.kind == "other"),
        *(_row(f"${symbol}$", meaning) for symbol, meaning in _FUNCTIONS),
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
    graphs = (
        self_attention(),
        self_attention(causal=True),
        self_attention(heads=True),
        *_variant_graphs(),
    )
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
        lines.append(
            _row(
                f"${matrix}$",
                f"${latex(rows)} \\times {latex(cols)}$",
                f"${entry}$",
                f"${L.MATRIX_LATEX[letter]}$",
            )
        )
    return lines
