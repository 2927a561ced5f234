r"""Talking-heads attention, declared in a file of its own: the heads' scores mixed across the
heads before the softmax, and their weights mixed again after it.

Shazeer, Lan, Cheng, Ding and Hou (2020, "Talking-Heads Attention") let the h heads of
multi-head attention (the book's section 3.6) exchange what they see: head ℓ's logits are a
learnt combination of every head's scaled scores, and its weights a learnt combination of
every head's softmax:

    ω̌^{(ℓ)}_{m,p} = Σ_{ℓ'=1}^{h} (P_L)_{ℓ',ℓ} ω̃^{(ℓ')}_{m,p}        P_L, h × h, learnt
    a^{(ℓ)}_{m,p} = exp(ω̌^{(ℓ)}_{m,p}) / Σ_{r=1}^{n} exp(ω̌^{(ℓ)}_{m,r})
    B^{(ℓ)}_{m,p} = Σ_{ℓ'=1}^{h} (P_W)_{ℓ',ℓ} a^{(ℓ')}_{m,p}        P_W, h × h, learnt
    c^{(ℓ)}_{m,j} = Σ_{p=1}^{n} B^{(ℓ)}_{m,p} v^{(ℓ)}_{p,j}

the heads' contexts then side by side and projected by W_o, as in the book. With P_L = P_W = I
it is the book's multi-head attention. (The paper's pseudo-code leaves the 1/√c_h in the
queries; here it is in ω̃, the book's scaled scores.) What the declaring language is asked
for here: a step of one head whose entry reads every head (the entries are written with the
head's index, ``OMEGA_MIX[ell, m, p]``, and the sum runs over another head, ``ell2``), so that the
gradient of head ℓ's scores gathers what every head's logits sent back,
ω̃̄^{(ℓ)} = Σ_{ℓ'} (P_L)_{ℓ,ℓ'} ω̌̄^{(ℓ')}, and P_L's gradient reads every head's scores. From
this repository's root:

    derive latex --variant docs/examples/talking_heads.py:TALKING_HEADS -o talking.tex
    derive check --variant docs/examples/talking_heads.py:TALKING_HEADS
    derive conform docs/examples/talking_heads.py:layer \
        --variant docs/examples/talking_heads.py:TALKING_HEADS

A step's twin that reads every head is called once, given each per-head matrix as every
head's stacked (h × rows × cols), and returns every head's output (docs/twins.md); the
other steps' twins are called once per head, as always.
"""

import math

import sympy as sp

from derive import declare
from derive.declare import a, c_h, ell, ell2, h, j, m, n, omega_tilde, p, r, v, z

#: The two mixing matrices (h × h, learnt): inputs of the graph, their gradients derived.
P_L = declare.matrix(
    "P_L",
    entry="pL",
    shape=(h, h),
    latex="P_L",
    entry_latex="P_L",
    meaning="the logits' mixing across heads (talking heads)",
)
P_W = declare.matrix(
    "P_W",
    entry="pW",
    shape=(h, h),
    latex="P_W",
    entry_latex="P_W",
    meaning="the weights' mixing across heads (talking heads)",
)
#: Head ℓ's mixed logits and mixed weights (n × n each, one per head).
OMEGA_MIX = declare.matrix(
    "Omega_mix",
    entry="omegamix",
    shape=(n, n),
    latex="\\check{\\Omega}",
    entry_latex="\\check{\\omega}",
    meaning="mixed logits (talking heads)",
)
B = declare.matrix(
    "B_mix", entry="bmix", shape=(n, n), latex="B", entry_latex="B", meaning="mixed weights"
)


def _mixed(every, mixing):
    """Σ_{ℓ'} mixing[ℓ', ℓ] every[ℓ'], for every head ℓ at once: (h, n, n) -> (h, n, n)."""
    return (mixing.transpose(0, 1)[:, :, None, None] * every[None]).sum(1)


def mixed_logits(omega_scaled, p_l):
    """The twin of the logits: every head's scaled scores (h × n × n), mixed by P_L."""
    return _mixed(omega_scaled, p_l)


def talking_weights(omega_mix):
    """The twin of one head's weights: the softmax of its mixed logits, row by row."""
    return omega_mix.softmax(-1)


def mixed_weights(a, p_w):
    """The twin of the mixed weights: every head's softmax (h × n × n), mixed by P_W."""
    return _mixed(a, p_w)


def talking_context(b_mix, v):
    """The twin of one head's context: its mixed weights times its values."""
    return b_mix @ v


def talking_heads_attention(x, w_q, w_k, w_v, w_o, p_l, p_w, *, heads):
    """The twin of the whole (n × d in, n × c out): the projections split into `heads` blocks
    of columns, the two mixings, the contexts side by side, W_o."""
    n_, c = x.shape[-2], w_q.shape[-1]
    width = c // heads

    def split(y):  # (n, c) -> (h, n, c_h)
        return y.reshape(n_, heads, width).transpose(0, 1)

    q, k, v_ = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(width)
    mixed = _mixed(_mixed(scores, p_l).softmax(-1), p_w)
    return (mixed @ v_).transpose(0, 1).reshape(n_, c) @ w_o


LOGITS = declare.step(
    "mixed_logits",
    sp.Eq(OMEGA_MIX[ell, m, p], sp.Sum(P_L[ell2, ell] * omega_tilde[ell2, m, p], (ell2, 1, h))),
    shape=(n, n),
    title="Logits mixed across the heads",
    twin=mixed_logits,
    text="Head $\\ell$'s logits, a learnt combination of every head's scaled scores:",
)
WEIGHTS = declare.step(
    "talking_weights",
    sp.Eq(
        a[ell, m, p], sp.exp(OMEGA_MIX[ell, m, p]) / sp.Sum(sp.exp(OMEGA_MIX[ell, m, r]), (r, 1, n))
    ),
    shape=(n, n),
    title="Attention weights",
    twin=talking_weights,
    text="The softmax of each head's mixed logits, row by row:",
)
MIXED = declare.step(
    "mixed_weights",
    sp.Eq(B[ell, m, p], sp.Sum(P_W[ell2, ell] * a[ell2, m, p], (ell2, 1, h))),
    shape=(n, n),
    title="Weights mixed across the heads",
    twin=mixed_weights,
    text="Head $\\ell$'s weights, a learnt combination of every head's softmax:",
)
CONTEXT = declare.step(
    "talking_context",
    sp.Eq(z[ell, m, j], sp.Sum(B[ell, m, p] * v[ell, p, j], (p, 1, n))),
    shape=(n, c_h),
    title="Context vectors",
    twin=talking_context,
    text="Each head's values weighted by its mixed weights:",
)

TALKING_HEADS = declare.variant(
    "talking-heads",
    title="Talking-heads attention",
    text="Talking-heads attention (Shazeer et al., 2020) mixes the heads of multi-head "
    "attention twice with learnt $h \\times h$ matrices: their logits before the softmax, "
    "their weights after it.",
    base="multi-head",
    inserts=[("Omega_scaled", LOGITS), ("A", MIXED)],
    replaces=[WEIGHTS, CONTEXT],
    claims=[
        declare.claim(
            sp.Sum(a[ell, m, p], (p, 1, n)),
            1,
            title="Each head's softmax rows sum to 1",
            text="Mixed before it, the softmax is still a softmax:",
        ),
    ],
    arguments=("X", "W_q", "W_k", "W_v", "W_o", "P_L", "P_W"),
    twin=talking_heads_attention,
)


def layer():
    """The layer as a model would hold it (plain torch), for `derive conform`: the book's
    projections and out_proj by their names, num_heads, and the two mixings as parameters
    named by their letters."""
    import torch

    class TalkingHeadsAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d_in, d_out, self.num_heads = 4, 6, 3
            self.W_query = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)
            self.out_proj = torch.nn.Linear(d_out, d_out, bias=False)
            heads = self.num_heads
            self.P_L = torch.nn.Parameter(torch.eye(heads) + 0.3 * torch.randn(heads, heads))
            self.P_W = torch.nn.Parameter(torch.eye(heads) + 0.3 * torch.randn(heads, heads))

        def forward(self, x):  # (batch, n, d_in) -> (batch, n, d_out)
            batch, n_, _ = x.shape
            heads, width = self.num_heads, self.W_query.out_features // self.num_heads

            def split(y):  # (batch, n, c) -> (batch, h, n, c_h)
                return y.view(batch, n_, heads, width).transpose(1, 2)

            q, k = split(self.W_query(x)), split(self.W_key(x))
            scores = q @ k.transpose(-2, -1) / math.sqrt(width)
            logits = torch.einsum("bgmp,gl->blmp", scores, self.P_L)
            mixed = torch.einsum("bgmp,gl->blmp", logits.softmax(-1), self.P_W)
            context = (mixed @ split(self.W_value(x))).transpose(1, 2)
            return self.out_proj(context.reshape(batch, n_, heads * width))

    torch.manual_seed(0)
    return TalkingHeadsAttention()
