"""The book's letters (section 3.4 of *Build a Large Language Model (from Scratch)*): the
matrices of self-attention, X, W_q, W_k, W_v, Q, K, V, Ω, Ω̃, A and C, each declared once with
the record every entry of the registry declares its letters with (`Letter`) and registered when
`derive.notation` is imported, so that the printers know them before any variant is read. The
self-attention entry lists them as its notation; each variant declares its own in its module.
"""

from __future__ import annotations

from . import letters as L
from .letters import Letter, register_letter

__all__ = ["X", "W_Q", "W_K", "W_V", "Q", "K", "V", "OMEGA", "OMEGA_SCALED", "A", "C"]

X = register_letter(
    Letter(
        "X",
        "x",
        meaning="input embedding of token m, feature i",
        indices=(L.m, L.i),
        role="input embeddings, one row per token",
    )
)
W_Q = register_letter(
    Letter(
        "W_q",
        "wq",
        "W_q",
        "(W_q)",
        meaning="query weight from input feature i to query feature j",
        indices=(L.i, L.j),
        after="gq",
        gradient_after="dsink",
        role="query weights (learnable)",
    )
)
W_K = register_letter(
    Letter(
        "W_k",
        "wk",
        "W_k",
        "(W_k)",
        meaning="key weight",
        indices=(L.i, L.j),
        after="wdkv",
        gradient_after="dwdkv",
        role="key weights (learnable)",
    )
)
W_V = register_letter(
    Letter(
        "W_v",
        "wv",
        "W_v",
        "(W_v)",
        meaning="value weight",
        indices=(L.i, L.j),
        after="wk",
        gradient_after="dwk",
        role="value weights (learnable)",
    )
)
Q = register_letter(
    Letter(
        "Q",
        "q",
        meaning="query of token m, feature j",
        indices=(L.m, L.j),
        after="qnorm",
        gradient_after="dknorm",
        role="queries, one row per token",
    )
)
K = register_letter(
    Letter(
        "K",
        "k",
        meaning="key of token p, feature j",
        indices=(L.p, L.j),
        after="knorm",
        gradient_after="dq",
        role="keys, one row per token",
    )
)
V = register_letter(
    Letter(
        "V",
        "v",
        meaning="value of token p, feature j",
        indices=(L.p, L.j),
        after="gk",
        gradient_after="dk",
        role="values, one row per token",
    )
)
OMEGA = register_letter(
    Letter(
        "Omega",
        "omega",
        r"\Omega",
        r"\omega",
        meaning="attention score of token m for token p",
        indices=(L.m, L.p),
        after="v",
        gradient_after="dgamma",
        role="attention scores",
    )
)
OMEGA_SCALED = register_letter(
    Letter(
        "Omega_scaled",
        "omegatilde",
        r"\tilde{\Omega}",
        r"\tilde{\omega}",
        meaning="scaled score",
        indices=(L.m, L.p),
        after="omega",
        gradient_after="domega",
        role="scaled scores",
    )
)
A = register_letter(
    Letter(
        "A",
        "a",
        meaning="attention weight of token m on token p",
        indices=(L.m, L.p),
        after="ctxcat",
        gradient_after="domegahat",
        role="attention weights",
    )
)
C = register_letter(
    Letter(
        "C",
        "ctx",
        "C",
        "z",
        meaning="context vector of token m (the book's z), feature j",
        indices=(L.m, L.j),
        after="dctx",
        gradient_after="dctxgated",
        role="context vectors, one row per token (the book's $z$)",
    )
)
