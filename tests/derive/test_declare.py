"""`derive.declare`: a variant declared in a user's own file is derived, documented and checked as
the built-in ones are, and every kind of mistake in a declaration is one line (exit status 2)
that names the step and what is wrong, never a traceback."""

import re
import textwrap
from pathlib import Path

import pytest
import sympy as sp

import derive
from derive import declare
from derive.cli import main
from derive.declare import a, m, n, omega_tilde, p

#: The head of every user file below: what a user imports, and a twin of the softmax's shape.
HEAD = """
import sympy as sp
import torch
from derive import declare
from derive.declare import a, c, d, j, k, m, n, omega, omega_tilde, p, q, z

def twin(omega_scaled):
    return torch.softmax(omega_scaled, dim=-1)
"""


def _file(tmp_path, body: str, name: str = "mine.py") -> str:
    path = tmp_path / name
    path.write_text(HEAD + textwrap.dedent(body))
    return str(path)


def _run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_declared_variant_resolves_like_a_built_in_one(tmp_path):
    spec = _file(
        tmp_path,
        """
        weights = declare.step("cubed_weights", sp.Eq(a[m, p], omega_tilde[m, p] ** 3),
                               shape=(n, n), title="Cubed scores", twin=lambda s: s ** 3)
        CUBED = declare.variant("cubed", title="Cubed attention", replaces=[weights],
                                text="Not attention anyone uses: a test's.")
    """,
    )
    entry = derive.load_variant(spec + ":CUBED")
    assert entry.name == "cubed" and "cubed" in derive.variants()
    assert [s.output for s in entry.graph.declarations] == [
        "Q",
        "K",
        "V",
        "Omega",
        "Omega_scaled",
        "A",
        "C",
    ]
    assert entry.graph.step("A").element.rhs == omega_tilde[m, p] ** 3
    assert entry.base == derive.variant("self-attention").graph
    gradients = {g.output: g for g in derive.backward_steps("cubed")}
    assert derive.latex(gradients["dOmega_scaled"].element.rhs) == (
        r"3 \bar{a}_{m,p} \tilde{\omega}_{m,p}^{2}"
    )  # the chain rule through the declared formula
    assert derive.latex(entry.graph.step("A").element.rhs) == r"\tilde{\omega}_{m,p}^{3}"
    assert derive.latex(derive.steps("cubed")[5].matrix.rhs) == r"\tilde{\Omega}^{\circ {3}}"
    assert derive.load_variant(spec + ":CUBED") is not None  # loading twice runs the file once


def test_a_declared_step_runs_per_head_in_a_combination():
    weights = declare.step(
        "sig_weights",
        sp.Eq(a[m, p], declare.sigmoid(omega_tilde[m, p])),
        shape=(n, n),
        title="Sigmoid weights",
    )
    derive.register_variant(declare.variant("sig", title="Sig", replaces=[weights]))
    heads = derive.variant("sig+multi-head")
    step = heads.graph.step("A_l")
    assert step.element.rhs == declare.sigmoid(L_base("omegatilde")[L_ell(), m, p])
    with pytest.raises(
        derive.DeclarationError,
        match=r"replaces A, which another variant it is "
        r"combined with changed \(causal self-attention\)",
    ):
        derive.variant("sig+causal")


def L_base(name):
    from derive.notation import letters as L

    return L.base(name)


def L_ell():
    from derive.notation import letters as L

    return L.ell


def test_base_steps_and_ranges_are_the_books():
    assert declare.base_step("weights").output == "A"
    assert declare.base_step("Omega", of="causal").element.rhs.has(declare.q[m, declare.j])
    assert declare.RANGES[m] == (1, n) and declare.RANGES[declare.j] == (1, declare.c)
    with pytest.raises(derive.DeclarationError, match=r"self-attention has no step 'U'"):
        declare.base_step("U")


MISTAKES = [
    # a letter no step defines
    (
        """
        bad = declare.step("weights_of_u", sp.Eq(a[m, p], sp.IndexedBase("u")[m, p]),
                           shape=(n, n), title="Weights", twin=twin)
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"step weights_of_u \(A\) reads u\[m,p\], an entry of U, which no step of "
        r"self-attention computes and which is not declared",
    ),
    # an index outside its range: j runs over d, the columns of Q are c
    (
        """
        bad = declare.step("wide_scores", sp.Eq(omega[m, p], sp.Sum(q[m, j] * k[p, j], (j, 1, d))),
                           shape=(n, n), title="Scores")
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"step wide_scores \(Omega\): q\[m,j\] reads column j = 1 … d of Q, whose columns "
        r"run 1 … c",
    ),
    # a shifted index the ranges put outside its axis: j + c reaches 2c
    (
        """
        bad = declare.step("shifted", sp.Eq(omega[m, p], sp.Sum(q[m, j + c] * k[p, j], (j, 1, c))),
                           shape=(n, n), title="Scores")
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"step shifted \(Omega\): q\[m,c \+ j\] reads column c \+ j = c \+ 1 … 2 c of Q, "
        r"whose columns run 1 … c",
    ),
    # a column written 1 on an axis of more than one entry
    (
        """
        bad = declare.step("column", sp.Eq(a[m, 1], omega_tilde[m, m]), shape=(n, n),
                           title="Weights")
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"step column: the left-hand side a\[m, 1\] must have two indices, the row and the "
        r"column of its entry .*: an index symbol, or 1 on an axis of one entry .*; the shape is "
        r"\(n, n\)",
    ),
    # an index neither free nor summed over
    (
        """
        bad = declare.step("stray", sp.Eq(a[m, p], omega_tilde[m, j]), shape=(n, n),
                           title="Weights")
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"step stray \(A\): the index j of ω̃\[m,j\] is neither an index of the output "
        r"nor one a sum or a product runs over",
    ),
    # shapes that do not chain: A made n × c, the context reads it as n × n
    (
        """
        bad = declare.step("narrow", sp.Eq(a[m, j], q[m, j]), shape=(n, c), title="Weights")
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"step narrow makes A of shape n × c, but step context \(C\) reads it as n × n: the "
        r"shapes do not chain",
    ),
    # a left-hand side that is no entry
    (
        """
        bad = declare.step("nothing", sp.Eq(sp.Symbol("y"), omega_tilde[m, p]), shape=(n, n),
                           title="Weights")
     """,
        r"step nothing: the left-hand side must be an entry of its output, such as a\[m, p\]",
    ),
    # a step replaced that the base does not compute
    (
        """
        bad = declare.step("latent", sp.Eq(sp.IndexedBase("u")[m, j], q[m, j]), shape=(n, c),
                           title="Latent")
        V = declare.variant("bad", title="Bad", replaces=[bad])
     """,
        r"variant bad replaces U, which self-attention does not compute",
    ),
    # a name of the registry's own
    (
        """
        V = declare.variant("causal", title="Mine")
     """,
        r"variant 'causal' is built in; give yours another name",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"),
    MISTAKES,
    ids=["letter", "range", "shift", "column", "stray-index", "shapes", "lhs", "replaces", "name"],
)
def test_a_mistake_in_a_declaration_is_one_line_naming_the_step(tmp_path, capsys, body, message):
    spec = _file(tmp_path, body) + ":V"
    for command in ("latex", "check"):
        status, out, err = _run(capsys, command, "--variant", spec)
        assert status == 2 and out == "", (command, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert re.search(message, err), err


@pytest.mark.parametrize(
    ("twin", "message"),
    [
        (
            '"attention.functional.softmax_of_nothing"',
            r"step A \(odd_weights\): twin 'attention.functional.softmax_of_nothing' does not exist",
        ),
        (
            "lambda s: s[..., :1]",
            r"step A \(odd_weights\): twin <lambda>\(Omega_scaled: \d×\d\) returned shape \(\d, 1\), "
            r"the declaration says \(\d, \d\)",
        ),
    ],
)
def test_a_twin_that_is_missing_or_misshapen_is_one_line(tmp_path, capsys, twin, message):
    spec = (
        _file(
            tmp_path,
            f"""
        odd = declare.step("odd_weights", sp.Eq(a[m, p], omega_tilde[m, p] ** 2), shape=(n, n),
                           title="Weights", twin={twin})
        V = declare.variant("odd", title="Odd", replaces=[odd])
    """,
        )
        + ":V"
    )
    status, out, err = _run(capsys, "check", "--variant", spec, "--forward-only")
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err


def test_a_whole_twin_without_an_option_of_its_base_fails_check(tmp_path, capsys):
    """A variant on causal attention whose twin takes no ``causal``: derive check cannot call
    it, and says so (exit 2) where it used to leave the row out and pass; with the keyword,
    the twin's row is there."""
    body = """
        def squared(omega_masked):
            return omega_masked.exp() ** 2 / (omega_masked.exp() ** 2).sum(-1, keepdim=True)

        def whole(x, w_q, w_k, w_v{keyword}):
            q, k, v = x @ w_q, x @ w_k, x @ w_v
            s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
            s = s.masked_fill(s.new_ones(s.shape, dtype=bool).triu(1), float("-inf"))
            return squared(s) @ v

        w = declare.step("sq", sp.Eq(a[m, p], sp.exp(2 * declare.omega_hat[m, p]) / sp.Sum(
            sp.exp(2 * declare.omega_hat[m, declare.r]), (declare.r, 1, n))), shape=(n, n),
            title="Weights", twin=squared)
        V = declare.variant("sq", title="Squared", base="causal", replaces=[w], twin=whole)
    """
    spec = _file(tmp_path, body.replace("{keyword}", ""), "without.py") + ":V"
    status, out, err = _run(capsys, "check", "--variant", spec, "--forward-only")
    assert status == 2 and err.count("\n") == 1, out + err
    assert "variant sq: its twin whole takes no causal" in err
    assert "causal=True (from Causal attention)" in err
    spec = _file(tmp_path, body.replace("{keyword}", ", *, causal"), "with.py") + ":V"
    status, out, err = _run(capsys, "check", "--variant", spec, "--forward-only")
    assert status == 0 and "C · whole " in out, out + err


def test_a_file_or_attribute_that_is_not_there(tmp_path, capsys):
    spec = _file(tmp_path, "X = 1\n")
    status, _, err = _run(capsys, "latex", "--variant", spec + ":NOPE")
    assert status == 2 and "has no variant 'NOPE' (its variants: none)" in err
    status, _, err = _run(capsys, "latex", "--variant", spec + ":X")
    assert status == 2 and ":X is a int, not a derive.Variant" in err
    status, _, err = _run(capsys, "latex", "--variant", str(tmp_path / "none.py") + ":V")
    assert status == 2 and "no file" in err
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('the user broke it')\n")
    status, _, err = _run(capsys, "latex", "--variant", f"{broken}:V")
    assert status == 2 and "RuntimeError: the user broke it" in err and err.count("\n") == 1
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\n\nsys.exit(3)\n")
    status, _, err = _run(capsys, "check", "--variant", f"{exits}:V")
    assert status == 2 and err.endswith("it called sys.exit(3) while being imported\n")
    assert err.count("\n") == 1
    relative = tmp_path / "relative.py"
    relative.write_text("from .helper import V\n")  # the runner conform's targets use too
    status, _, err = _run(capsys, "check", "--variant", f"{relative}:V")
    assert status == 2 and err.count("\n") == 1
    assert "line 1, `from .helper import V`, is a relative import" in err
    assert "write `from helper import V`" in err


def test_a_claim_a_counter_example_refutes_stops_the_document(tmp_path, capsys):
    spec = (
        _file(
            tmp_path,
            """
        V = declare.variant("liar", title="Liar", claims=[
            declare.claim(a[m, p], 2, title="Every weight is 2")])
    """,
        )
        + ":V"
    )
    status, out, err = _run(capsys, "latex", "--variant", spec)
    assert status == 2 and out == "" and err.count("\n") == 1, err
    said = re.search(
        r"claim 'Every weight is 2' \(a\[m,p\] = 2\) is false: at (.*), left side "
        r"= ([\d.]+), right side = 2$",
        err.strip(),
    )
    assert said is not None, err
    assert "n = 3" in said.group(1) and 0 < float(said.group(2)) < 1  # a weight, at those values


def test_parameters_take_defaults_in_the_sizes_and_values_from_the_command_line():
    bias = sp.Symbol("bias", real=True)
    weights = declare.step(
        "biased",
        sp.Eq(a[m, p], sp.exp(omega_tilde[m, p] + bias)),
        shape=(n, n),
        title="Biased weights",
    )
    found = derive.register_variant(
        declare.variant("biased", title="Biased", replaces=[weights], parameters={bias: -sp.log(n)})
    )
    explicit = derive.explicit_variant(found.name, 3, 2, 2)
    assert explicit.sizes[bias] == -sp.log(3)
    assert derive.explicit_variant(found.name, 3, 2, 2, bias=sp.Rational(1, 2)).sizes[bias] == (
        sp.Rational(1, 2)
    )


def test_a_step_inserted_after_the_context_with_a_matrix_of_its_own(capsys):
    """An output gate, C_g = C ∘ σ(X W_g) (Qwen 3.5's, per whole context here): a weight
    matrix and an output of the user's own, a step inserted after C; derived and checked."""
    from derive.declare import d, i, j, x, z

    w_g = declare.matrix("W_g", entry="wg", shape=(d, declare.c), latex="W_g", entry_latex="(W_g)")
    gated = declare.matrix(
        "C_g", entry="zg", shape=(n, declare.c), latex="C_g", entry_latex="z^{g}"
    )
    gate = declare.step(
        "output_gate",
        sp.Eq(gated[m, j], z[m, j] * declare.sigmoid(sp.Sum(x[m, i] * w_g[i, j], (i, 1, d)))),
        shape=(n, declare.c),
        title="The output gate",
        twin=lambda x_, c_, w: c_ * (x_ @ w).sigmoid(),
    )
    found = declare.variant("gated", title="Gated attention", inserts=[("C", gate)], register=True)
    entry = derive.variant(found.name)
    assert entry.graph.output == "C_g" and "W_g" in entry.graph.inputs
    assert entry.graph.step("C_g").inputs == ("X", "C", "W_g")  # the twin's arguments, in order
    gradients = {g.output for g in derive.backward_steps("gated")}
    assert {"dW_g", "dC", "dX"} <= gradients  # X feeds the gate too
    status, out, err = _run(capsys, "check", "--variant", "gated", "--seed", "3")
    assert status == 0, out + err
    assert re.search(r"^  C_g\s+\d+×\d+\s+\S+\s+1e-12\s+pass$", out, re.M)
    assert re.search(r"^  dW_g\s+\d+×\d+\s+\S+\s+1e-10\s+pass$", out, re.M)
    assert "no entry point compared: no twin of the whole is declared" in out


#: The Forgetting Transformer written on self-attention itself: the gates a column (f[m, 1]),
#: the decay a sum whose range is the row's (ℓ = p+1 … m), the causal softmax a piecewise rule.
FORGETTING = """
x, i, r = declare.x, declare.i, declare.r
ell = sp.Symbol("ell", integer=True, positive=True)
W_f = declare.matrix("W_f", entry="wf", shape=(d, 1), latex="w_f", entry_latex="w_f")
F = declare.matrix("F", entry="fg", shape=(n, 1), latex="f", entry_latex="f")
D = declare.matrix("D", entry="dec", shape=(n, n), latex="D", entry_latex="D")

def gates(x, w_f):
    return (x @ w_f).sigmoid()

def decay(f):
    s = f.log().squeeze(-1).cumsum(-1)
    return (s.unsqueeze(-1) - s.unsqueeze(-2)).tril()

def causal_weights(omega_scaled, d):
    future = omega_scaled.new_ones(omega_scaled.shape[-2:], dtype=bool).triu(1)
    return (omega_scaled + d).masked_fill(future, float("-inf")).softmax(-1)

def s(row, key):
    return omega_tilde[row, key] + D[row, key]

GATES = declare.step("gates", sp.Eq(F[m, 1], declare.sigmoid(sp.Sum(x[m, i] * W_f[i, 1],
                     (i, 1, d)))), shape=(n, 1), title="Gates", twin=gates)
DECAY = declare.step("decay", sp.Eq(D[m, p], sp.Sum(sp.log(F[ell, 1]), (ell, p + 1, m))),
                     shape=(n, n), title="Decay", twin=decay)
WEIGHTS = declare.step("fox_weights", sp.Eq(a[m, p], sp.Piecewise(
    (sp.exp(s(m, p)) / sp.Sum(sp.exp(s(m, r)), (r, 1, m)), p <= m), (0, True))),
    shape=(n, n), title="Weights", twin=causal_weights)
V = declare.variant("forgetting-piecewise", title="Forgetting", inserts=[("V", GATES),
                    ("F", DECAY)], replaces=[WEIGHTS], arguments=("X", "W_q", "W_k", "W_v", "W_f"))
"""


def test_a_column_step_a_cumulative_sum_and_a_piecewise_rule_are_derived_and_checked(
    tmp_path, capsys
):
    spec = _file(tmp_path, FORGETTING, "forgetting.py") + ":V"
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "3")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    assert re.search(r"dF · printed\s+\d×1 ", out), out  # the gates' gradient, a column
    gradients = {g.output: g for g in derive.backward_steps(derive.load_variant(spec).name)}
    # f_m is in D[p, r] for r < m ≤ p: the sum over those entries, divided by f_m
    assert derive.latex(gradients["dF"].element.rhs) == (
        r"\frac{\sum_{p=m}^{n} \sum_{r=1}^{m - 1} \bar{D}_{p,r}}{f_{m,1}}"
    )
    # sums over the same range are one, what their terms share factored out: σ' = f (1 − f)
    assert derive.latex(gradients["dW_f"].element.rhs) == (
        r"\sum_{m=1}^{n} x_{m,i} f_{m,1} \bar{f}_{m,1} \left(1 - f_{m,1}\right)"
    )
    # a letter with a subscript of its own takes its indices in parentheses, as (W_q)_{i,j}
    assert derive.latex(gradients["dW_f"].element.lhs) == r"(\bar{w}_f)_{i,1}"
    assert r"(w_f)_{i,1}" in derive.latex(gradients["dX"].element.rhs)


def test_a_letter_ending_in_l_is_refused_as_a_head_s_block():
    with pytest.raises(derive.DeclarationError, match=r"matrix T_l: a name ending in _l is head"):
        declare.matrix("T_l", entry="tl", shape=(n, n), meaning="tempered")


def test_registering_an_entry_says_so_in_a_line(tmp_path):
    spec = _file(
        tmp_path,
        """
        w = declare.step("squared_w", sp.Eq(a[m, p], omega_tilde[m, p] ** 2), shape=(n, n),
                         title="Weights", twin=lambda s: s ** 2)
        V = declare.variant("squared_reg", title="Squared", replaces=[w])
        """,
        "registered.py",
    )
    entry = derive.load_variant(spec + ":V")
    with pytest.raises(derive.DeclarationError) as raised:
        derive.register_variant(entry)
    said = str(raised.value)
    assert said.startswith("register_variant takes a derive.Variant, got the entry 'squared_reg'")
    assert len(said) < 300 and "\n" not in said


def test_a_scale_of_an_irrational_coefficient_is_differentiated():
    """Ω̃ = Ω/√(c/2): SymPy's matrix derivative fails on the scalar √2/√c; derive keeps it
    apart and prints Ω̄ = √2 Ω̃̄/√c."""
    scale = declare.step(
        "half_scale",
        sp.Eq(declare.omega_tilde[m, p], declare.omega[m, p] / sp.sqrt(declare.c / 2)),
        shape=(n, n),
        title="Scaled by half",
    )
    derive.register_variant(
        declare.variant(
            "half_scaled", title="Half", replaces=[scale], requires=[declare.Even(declare.c, "")]
        )
    )
    gradients = {g.output: g for g in derive.backward_steps("half_scaled")}
    assert derive.latex(gradients["dOmega"].matrix.rhs) == (
        r"\frac{\sqrt{2} \bar{\tilde{\Omega}}}{\sqrt{c}}"
    )


def test_a_base_step_no_step_reads_has_no_gradient(tmp_path):
    """Weights computed from q and k themselves leave the base's Ω and Ω̃ unread: no gradient
    flows through them (Q̄ reads no Ω̄), and conform reads such a layer (it raised KeyError)."""
    spec = _file(
        tmp_path,
        """
        import math
        def direct(q, k):
            return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).sigmoid()
        w = declare.step("direct_weights", sp.Eq(a[m, p], declare.sigmoid(
            sp.Sum(q[m, j] * k[p, j], (j, 1, c)) / sp.sqrt(c))), shape=(n, n), title="Weights",
            twin=direct)
        V = declare.variant("direct_unread", title="Direct", replaces=[w])
        def layer():
            class Layer(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.W_query = torch.nn.Linear(4, 3, bias=False)
                    self.W_key = torch.nn.Linear(4, 3, bias=False)
                    self.W_value = torch.nn.Linear(4, 3, bias=False)
                def forward(self, x):
                    return direct(self.W_query(x), self.W_key(x)) @ self.W_value(x)
            torch.manual_seed(0)
            return Layer()
        """,
        "unread.py",
    )
    gradients = {g.output: g for g in derive.backward_steps(derive.load_variant(spec + ":V").name)}
    assert "dOmega" not in gradients and "dOmega_scaled" not in gradients
    assert r"\bar{\Omega}" not in derive.latex(gradients["dQ"].matrix.rhs)
    from derive.graph.loading import _from_file

    report = derive.conform(_from_file(Path(spec)).layer(), variant=spec + ":V")
    assert report.conforms, report.table()


def test_a_learnable_scalar_inside_the_context_step(capsys):
    """Differential attention written as its paper writes it, λ inside the context step
    (z = Σ_p (a − λ a₂) v, no difference step): derived, checked, its λ̄ a sum over the
    entries."""
    from derive.graph.loading import _from_file

    example = (
        Path(__file__).resolve().parents[2] / "docs" / "examples" / "differential_attention.py"
    )
    module = _from_file(example)
    lam, a_2, v, z, j = module.LAMBDA, module.A_2, declare.v, declare.z, declare.j

    def natural_context(a, a_2, v, lam):
        return (a - lam * a_2) @ v

    context = declare.step(
        "natural_context",
        sp.Eq(z[m, j], sp.Sum((a[m, p] - lam[1, 1] * a_2[m, p]) * v[p, j], (p, 1, n))),
        shape=(n, declare.c),
        title="Context vectors, of the difference",
        twin=natural_context,
        arguments=("A", "A_2", "V", "Lam"),
    )
    derive.register_variant(
        declare.variant(
            "differential_natural",
            title="Differential, λ in the context",
            inserts=module.STEPS[:3],
            replaces=[context],
            arguments=("X", "W_q", "W_k", "W_v", "W_q2", "W_k2", "Lam"),
            twin=module.differential_attention,
        )
    )
    status, out, err = _run(capsys, "check", "--variant", "differential_natural", "--seed", "5")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    assert re.search(r"dLam · printed\s+1×1 ", out), out


def test_a_causal_module_of_a_variant_whose_weights_are_not_causal_is_told_what_to_declare(
    tmp_path,
):
    """Sigmoid weights declared on self-attention do not combine with causal attention (both
    change A); a causal layer of them is refused with what to declare, where conform crashed
    on the combination."""
    spec = _file(
        tmp_path,
        """
        import math
        def sig(omega_scaled):
            return omega_scaled.sigmoid()
        w = declare.step("sig_only", sp.Eq(a[m, p], declare.sigmoid(omega_tilde[m, p])),
                         shape=(n, n), title="Weights", twin=sig)
        V = declare.variant("sig_noncausal", title="Sigmoid", replaces=[w])
        def layer():
            class Layer(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.W_query = torch.nn.Linear(4, 3, bias=False)
                    self.W_key = torch.nn.Linear(4, 3, bias=False)
                    self.W_value = torch.nn.Linear(4, 3, bias=False)
                def forward(self, x):
                    s = self.W_query(x) @ self.W_key(x).transpose(-2, -1) / math.sqrt(3)
                    future = torch.ones(s.shape[-2:], dtype=torch.bool).triu(1)
                    return s.sigmoid().masked_fill(future, 0.0) @ self.W_value(x)
            torch.manual_seed(0)
            return Layer()
        """,
        "sig_causal.py",
    )
    from derive.graph.loading import _from_file

    with pytest.raises(derive.ConformError, match=r"declare it on causal attention"):
        derive.conform(_from_file(Path(spec)).layer(), variant=spec + ":V")


def test_a_name_registered_again_is_asked_afresh_whether_it_combines_with_causal():
    """Whether a variant combines with causal attention is not kept past a new registration
    of its name (a stale answer made conform fail instead of reading the new variant)."""
    from derive.graph.forms import combines_with_causal

    squared = declare.step(
        "sq_again", sp.Eq(a[m, p], omega_tilde[m, p] ** 2), shape=(n, n), title="Weights"
    )
    derive.register_variant(declare.variant("again_causal", title="Again", replaces=[squared]))
    assert not combines_with_causal("again_causal")  # both change A
    derive.register_variant(declare.variant("again_causal", title="Again"))  # changes nothing
    assert combines_with_causal("again_causal")


#: Head ℓ's logits, every head's scaled scores mixed by a learnt h × h matrix (talking heads,
#: before the softmax only): a step of one head that reads every head.
MIXING = """
ell, ell2, h, r, v = declare.ell, declare.ell2, declare.h, declare.r, declare.v
P = declare.matrix("P_mix", entry="pmix", shape=(h, h), latex="P", entry_latex="P")
S = declare.matrix("S_mix", entry="smix", shape=(n, n), latex="S", entry_latex="s")

def mixed(omega_scaled, p_mix):
    return torch.einsum("gmp,gl->lmp", omega_scaled, p_mix)

def weights(s_mix):
    return s_mix.softmax(-1)

MIX = declare.step("mixed", sp.Eq(S[ell, m, p], sp.Sum(P[ell2, ell] * omega_tilde[ell2, m, p],
                   (ell2, 1, h))), shape=(n, n), title="Mixed", twin=mixed)
SOFTMAX = declare.step("mixed_weights", sp.Eq(a[ell, m, p], sp.exp(S[ell, m, p]) / sp.Sum(
    sp.exp(S[ell, m, r]), (r, 1, n))), shape=(n, n), title="Weights", twin=weights)
V = declare.variant("mixing", title="Mixing", base="multi-head",
                    inserts=[("Omega_scaled", MIX)], replaces=[SOFTMAX])
"""


def test_a_step_that_reads_every_head_is_derived_checked_and_counted(tmp_path, capsys):
    """Head ℓ's gradient gathers every head's (Σ_{ℓ'} P_{ℓ,ℓ'} s̄^{(ℓ')}), P's reads every
    head's scores, the step's twin takes every head's matrices at once, and the mixing counts
    as the product of P and the heads' matrices stacked."""
    spec = _file(tmp_path, MIXING, "mixing.py") + ":V"
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "3")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    assert re.search(r"dP_mix · printed\s+2×2 ", out), out
    variant = derive.load_variant(spec)
    gradients = {g.output: g for g in derive.backward_steps(variant.name)}
    assert derive.latex(gradients["dOmega_scaled_l"].element.rhs) == (
        r"\sum_{\ell'=1}^{h} P_{\ell,\ell'} \bar{s}^{(\ell')}_{m,p}"
    )
    assert derive.latex(gradients["dP_mix"].element) == (
        r"\bar{P}_{\ell,\ell'} = \sum_{m=1}^{n} \sum_{p=1}^{n} \tilde{\omega}^{(\ell)}_{m,p} "
        r"\bar{s}^{(\ell')}_{m,p}"
    )
    from derive.calculus.counts import flop_count

    plain = flop_count(derive.variant("multi-head").graph)
    assert sp.expand(flop_count(variant.graph) - plain) == 2 * declare.h**2 * n**2


def test_a_twin_that_mixes_the_heads_the_wrong_way_fails_check(tmp_path, capsys):
    """P where the formula reads Pᵀ: every head's value differs, and check names the step."""
    body = MIXING.replace('"gmp,gl->lmp"', '"gmp,lg->lmp"')
    spec = _file(tmp_path, body, "mixing_wrong.py") + ":V"
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "3")
    assert status == 1, out + err
    assert re.search(r"^  Omega_mix_1|^  S_mix_1\s.*FAIL$", out, re.M), out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("omega_tilde[ell2, m, p]", "omega_tilde[ell2 + 1, m, p]"),
            r"step mixed \(S_mix_l\): ω̃\^\(ℓ' \+ 1\)\[m,p\] reads head ℓ' \+ 1 = 2 … h \+ 1 of "
            r"Omega_scaled_l, whose heads run 1 … h",
        ),
        (
            ("S[ell, m, p], sp.Sum(P", "S[ell2, m, p], sp.Sum(P"),
            r"step mixed: the left-hand side .* has three indices, so it is an entry of one "
            r"head's matrix, and its first must be the head's index ell \(ℓ\); got l'",
        ),
        (
            ('"S_mix", entry="smix", shape=(n, n), latex="S"', '"J", entry="smix", shape=(n, n)'),
            r"matrix J: J is the all-ones matrix of the derived matrix forms",
        ),
    ],
    ids=["head-range", "head-index", "ones-letter"],
)
def test_a_mistake_in_a_step_across_heads_is_one_line(tmp_path, capsys, change, message):
    spec = _file(tmp_path, MIXING.replace(*change), "mixing_bad.py") + ":V"
    status, out, err = _run(capsys, "latex", "--variant", spec)
    assert status == 2 and out == "", err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(message, err), err


#: A bias by the distance between query and key, δ_{m,p} = m − p, a step of the positions alone
#: (a constant: no gradient flows through it), scaled by a learnt s.
DISTANCES = """
import math
r = declare.r
DIST = declare.letter_base(declare.Letter("Dist", "dist", "\\\\Delta", "\\\\delta", "distance",
                           (), (n, n), constant=True))
S = declare.matrix("S_b", entry="sb", shape=(1, 1), latex="s", entry_latex="s")

def distances(*, n):
    i = torch.arange(n, dtype=torch.float64)
    return i[:, None] - i[None, :]

def biased(omega_scaled, s_b, dist):
    return (omega_scaled - s_b * dist).softmax(-1)

D = declare.step("distances", sp.Eq(DIST[m, p], m - p), shape=(n, n), title="Distances",
                 twin=distances, options={"n": n})
W = declare.step("biased_weights", sp.Eq(a[m, p], sp.exp(omega_tilde[m, p] - S[1, 1] * DIST[m, p])
                 / sp.Sum(sp.exp(omega_tilde[m, r] - S[1, 1] * DIST[m, r]), (r, 1, n))),
                 shape=(n, n), title="Weights", twin=biased, arguments=("Omega_scaled", "S_b", "Dist"))
V = declare.variant("distance_bias", title="Distance bias", inserts=[("Omega_scaled", D)],
                    replaces=[W])
"""


def test_a_step_of_the_positions_alone_is_a_constant_with_no_gradient(tmp_path, capsys):
    """δ_{m,p} = m − p reads no entry: its numbers are fixed by the sizes, checked against its
    twin's numbers (not read as a mask), and no δ̄ is derived (the gradients crashed on the
    constant letter's missing gradient, "unknown entry letter 'ddist'")."""
    spec = _file(tmp_path, DISTANCES, "distances.py") + ":V"
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "3")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    assert re.search(r"^  Dist\s+\d×\d\s+0\s+exact\s+pass$", out, re.M), out
    assert re.search(r"dS_b · printed\s+1×1 ", out), out
    gradients = {g.output for g in derive.backward_steps(derive.load_variant(spec).name)}
    assert "dDist" not in gradients and "dS_b" in gradients
    wrong = _file(tmp_path, DISTANCES.replace("i[:, None] - i[None, :]", "i[None, :] - i[:, None]"))
    status, out, err = _run(capsys, "check", "--variant", wrong + ":V", "--seed", "3")
    assert status == 1 and re.search(r"^  Dist\s+.*FAIL$", out, re.M), out + err


def test_conform_reads_a_variant_whose_context_has_no_matrix_form(tmp_path):
    """C = [Σ_{p=1}^{m} a_{m,p} v_{p,j}]: no matrix form, so conform's formula of C is its
    declared entry (it raised KeyError: 'C'), and the sum up to the query reads positions
    (permutation does not apply)."""
    spec = _file(
        tmp_path,
        """
        import math
        def cut_context(a, v):
            return a.tril() @ v
        CTX = declare.step("cut_context", sp.Eq(z[m, j], sp.Sum(declare.a[m, p] * declare.v[p, j],
                           (p, 1, m))), shape=(n, c), title="Context", twin=cut_context)
        V = declare.variant("cut_context", title="Cut", replaces=[CTX])
        def layer():
            class Layer(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.W_query = torch.nn.Linear(4, 3, bias=False)
                    self.W_key = torch.nn.Linear(4, 3, bias=False)
                    self.W_value = torch.nn.Linear(4, 3, bias=False)
                def forward(self, x):
                    s = self.W_query(x) @ self.W_key(x).transpose(-2, -1) / math.sqrt(3)
                    return cut_context(s.softmax(-1), self.W_value(x))
            torch.manual_seed(0)
            return Layer()
        """,
        "cut.py",
    )
    from derive.graph.loading import _from_file

    report = derive.conform(_from_file(Path(spec)).layer(), variant=spec + ":V")
    assert report.conforms, report.table()
    rows = {check.name: check for check in report.checks}
    assert "[m,j] = Σ_(p=1…m) (a[m,p] v[p,j])" in rows["forward values"].formula, report.table()
    assert rows["permutation"].status == "n/a", report.table()


def test_a_gate_on_the_context_itself_on_the_causal_base(tmp_path, capsys):
    """z = G ∘ (A V) in the context step, on causal attention: derived and checked (issue 47
    reported "Invalid limits given: ((p + 1, 1, n),)" for it)."""
    spec = _file(
        tmp_path,
        """
        x, i = declare.x, declare.i
        W_u = declare.matrix("W_u", entry="wu", shape=(d, c), latex="W_u", entry_latex="w_u")
        G = declare.matrix("G_u", entry="gu", shape=(n, c), latex="G", entry_latex="g")
        def gate(x, w_u):
            return (x @ w_u).sigmoid()
        def gated_context(a, v, g_u):
            return g_u * (a @ v)
        GATE = declare.step("gate_u", sp.Eq(G[m, j], declare.sigmoid(sp.Sum(x[m, i] * W_u[i, j],
                            (i, 1, d)))), shape=(n, c), title="Gate", twin=gate)
        CTX = declare.step("gated_context", sp.Eq(z[m, j], G[m, j] * sp.Sum(a[m, p] * declare.v[p, j],
                           (p, 1, n))), shape=(n, c), title="Gated context", twin=gated_context)
        V = declare.variant("gated_causal_context", title="Gated", base="causal",
                            inserts=[("V", GATE)], replaces=[CTX])
        """,
        "gated.py",
    )
    status, out, err = _run(
        capsys, "latex", "--variant", spec + ":V", "-o", str(tmp_path / "g.tex")
    )
    assert status == 0, err
    status, out, err = _run(capsys, "check", "--variant", spec + ":V", "--seed", "3")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    assert re.search(r"dW_u · printed\s+\d+×\d+ ", out), out


def test_a_step_written_without_its_head_on_a_base_with_heads_is_one_head_s():
    """a[m, p] = σ(ω̃[m, p]) on multi-head attention reads as head ℓ's, a⁽ℓ⁾ = σ(ω̃⁽ℓ⁾)."""
    weights = declare.step(
        "sig_heads_weights",
        sp.Eq(a[m, p], declare.sigmoid(omega_tilde[m, p])),
        shape=(n, n),
        title="Weights",
        twin=lambda omega_scaled: omega_scaled.sigmoid(),
    )
    found = derive.register_variant(
        declare.variant("sig_heads", title="Sigmoid heads", base="multi-head", replaces=[weights])
    )
    step = derive.variant(found.name).graph.step("A_l")
    ell = declare.ell
    assert step.element.rhs == declare.sigmoid(omega_tilde[ell, m, p])
    assert step.element.lhs == a[ell, m, p]
