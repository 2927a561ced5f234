"""Softmax₁ ("quiet" attention), declared in a file of its own with no torch written.

Miller (2023, "Attention Is Off By One") adds 1 to the denominator of each row's softmax, so
that a head can attend to nothing: with every score far below 0 the weights all go to 0.

    a_{m,p} = exp(ω̃_{m,p}) / (1 + Σ_r exp(ω̃_{m,r}))

It is the attention sink of GPT-OSS with its logit fixed at 0 (e^0 = 1). This file declares the
one step and the variant around it, and nothing else: no twin of the step, none of the whole,
no module. derive generates the torch code from the declaration (`derive.torch_function`: the
forward from the formula, the backward from the derived gradients), `derive check` computes
every step by it, and `layer` below is the generated module (`derive.torch_module`), which
`derive conform` reads by its letters. From this repository's root:

    derive latex --variant docs/examples/softmax_one.py:SOFTMAX_ONE -o softmax-one.tex
    derive check --variant docs/examples/softmax_one.py:SOFTMAX_ONE
    derive conform docs/examples/softmax_one.py:layer \\
        --variant docs/examples/softmax_one.py:SOFTMAX_ONE
"""

import sympy as sp

from derive import declare
from derive.declare import a, m, n, omega_tilde, p, r

WEIGHTS = declare.step(
    "softmax_one_weights",
    sp.Eq(a[m, p], sp.exp(omega_tilde[m, p]) / (1 + sp.Sum(sp.exp(omega_tilde[m, r]), (r, 1, n)))),
    shape=(n, n),
    title="Attention weights (softmax plus one)",
    text="The softmax of each row, with 1 added to its denominator: the weights of a row sum to "
    "less than 1, and to almost 0 when every score is far below 0.",
)

SOFTMAX_ONE = declare.variant(
    "softmax-one",
    title="Softmax plus one (quiet attention)",
    text="Softmax$_1$ (Miller, 2023, \\emph{Attention Is Off By One}) adds 1 to the denominator "
    "of each row's softmax, so that a head may attend to nothing: an attention sink whose logit "
    "is fixed at 0.",
    replaces=[WEIGHTS],
    claims=[
        declare.claim(
            sp.Sum(a[m, p], (p, 1, n)),
            1 - 1 / (1 + sp.Sum(sp.exp(omega_tilde[m, r]), (r, 1, n))),
            title="A row's weights sum to less than 1",
            text="What a row's weights leave of 1 is the share of the 1 in the denominator, the "
            "attention paid to nothing:",
        ),
    ],
)


def layer():
    """The layer a model would hold, for `derive conform` (a function of no arguments builds
    the target): the module generated from the declaration, its weights by their letters."""
    import torch

    import derive

    torch.manual_seed(0)
    return derive.torch_module(f"{__file__}:SOFTMAX_ONE", d=4, c=3)
