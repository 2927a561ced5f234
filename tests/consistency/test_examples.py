"""The published variants of docs/examples/, each a complete user file, run as a user runs them:
`derive latex`, `derive html` (explicit, as the page shows them), `derive check` (every step and
gradient against the file's twins) and `derive conform` on the file's own plain-torch layer,
with no adapter written; and conform fails on a copy of that layer with the variant's one
mistake, naming the check."""

from pathlib import Path

import pytest
import torch

from derive.cli import main
from derive.graph.loading import _from_file

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

#: file, variant, what its document must derive
CASES = [
    ("scalable_softmax.py", "SSMAX", r"\big|_{s_{1,1} = \frac{1}{\log{\left(n \right)}}}"),
    ("differential_attention.py", "DIFFERENTIAL", r"&= 1 - \lambda_{1,1}"),
    ("cosine_attention.py", "COSINE", r"\sum_{j=1}^{c} \hat{q}_{m,j}^{2} &="),
    ("forgetting_transformer.py", "FOX", r"\prod_{\ell=p + 1}^{m} f_{\ell,1}"),
    ("stick_breaking.py", "STICK_BREAKING", r"&= \sum_{p=1}^{m - 1} \sigma\left("),
    ("softpick.py", "SOFTPICK", r"$\theta(0) = 0$"),
    (
        "talking_heads.py",
        "TALKING_HEADS",
        r"\sum_{\ell'=1}^{h} (P_L)_{\ell,\ell'} \bar{\check{\omega}}^{(\ell')}_{m,p}",
    ),
]

#: where a file's layer holds what conform does not find by name (``--param``)
PARAMS = {"FOX": {"B_f": "W_f.bias"}}


def _run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(("file", "name", "derived"), CASES, ids=[c[1] for c in CASES])
def test_the_example_goes_through_every_command(tmp_path, capsys, file, name, derived):
    spec = f"{EXAMPLES / file}:{name}"
    tex, page = tmp_path / "d.tex", tmp_path / "d.html"
    status, _, err = _run(capsys, "latex", "-q", "--variant", spec, "-o", str(tex))
    assert status == 0, err
    assert derived in tex.read_text()
    assert "does not hold" not in err and "Traceback" not in err
    status, _, err = _run(capsys, "html", "-q", "--variant", spec, "--n", "3", "-o", str(page))
    assert status == 0 and "<table" in page.read_text(), err
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "7")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    params = [f"--param={k}={v}" for k, v in PARAMS.get(name, {}).items()]
    status, out, err = _run(
        capsys, "conform", f"{EXAMPLES / file}:layer", "--variant", spec, *params
    )
    assert status == 0, out + err
    assert out.rstrip().splitlines()[-1].startswith("conforms")
    for raw in ("Entries(", "Sigmoid(", "Abs(", "Max(", "Product("):  # the report's words
        assert raw not in out, out
    if name in ("STICK_BREAKING", "SOFTPICK"):  # the rows show the variant's weights, not softmax
        assert "a[m,p] = exp(ω̃[m,p])/" not in out, out


def _broken(file: str, name: str):
    """The file's layer with the variant's mistake: s left out of the scale (Scalable-Softmax),
    λ added instead of subtracted (differential), the keys not normalised (cosine), the key's
    own gate counted in its decay (forgetting: Σ_{ℓ=p}^{m} where the paper sums from p + 1),
    the query's own break point in the product (stick-breaking: ∏ up to m, not m − 1), the
    negative parts left out of the denominator (softpick: Σ max(0, ·) for Σ |·|), the heads
    mixed by the transposes of P_L and P_W (talking heads: Σ_{ℓ'} P_{ℓ,ℓ'} for P_{ℓ',ℓ})."""
    module = _from_file(EXAMPLES / file)
    layer = module.layer()

    def scores(self, q_, k_):
        return q_ @ k_.transpose(-2, -1) / q_.shape[-1] ** 0.5

    if name == "SSMAX":

        def wrong(self, x):  # the learnt scale left out: softmax(log n · ω̃)
            n = x.shape[-2]
            a = torch.log(torch.tensor(float(n))) * scores(self, self.W_query(x), self.W_key(x))
            return a.softmax(-1) @ self.W_value(x)

    elif name == "DIFFERENTIAL":

        def wrong(self, x):  # A₁ + λ A₂
            first = scores(self, self.W_query(x), self.W_key(x)).softmax(-1)
            second = scores(self, self.W_q2(x), self.W_k2(x)).softmax(-1)
            return (first + self.lam * second) @ self.W_value(x)

    elif name == "STICK_BREAKING":

        def wrong(self, x):  # the query's own break in the product: ∏_{t=p+1}^{m}
            omega = scores(self, self.W_query(x), self.W_key(x))
            n = x.shape[-2]
            before = torch.ones(n, n, dtype=torch.bool).tril(-1)
            logs = (-omega).sigmoid().log() * torch.ones(n, n, dtype=torch.bool).tril()
            after = logs.sum(-1, keepdim=True) - logs.cumsum(-1)
            return ((omega.sigmoid().log() + after).exp() * before) @ self.W_value(x)

    elif name == "SOFTPICK":

        def wrong(self, x):  # the denominator of positive parts only: Σ max(0, e^ω̃ − 1)
            shifted = scores(self, self.W_query(x), self.W_key(x)).exp() - 1
            a = shifted.relu() / (shifted.relu().sum(-1, keepdim=True) + 1e-6)
            return a @ self.W_value(x)

    elif name == "FOX":

        def wrong(self, x):  # D[m, p] = Σ_{ℓ=p}^{m} log f_ℓ: one gate too many
            q_, k_ = self.W_query(x), self.W_key(x)
            logs = self.W_f(x).sigmoid().log().squeeze(-1)
            total = logs.cumsum(-1)
            decay = (total.unsqueeze(-1) - total.unsqueeze(-2) + logs.unsqueeze(-2)).tril()
            n = x.shape[-2]
            future = torch.ones(n, n, dtype=torch.bool).triu(1)
            a = (scores(self, q_, k_).masked_fill(future, float("-inf")) + decay).softmax(-1)
            return a @ self.W_value(x)

    elif name == "TALKING_HEADS":

        def wrong(self, x):  # head ℓ mixed by row ℓ of P, not its column
            batch, n, _ = x.shape
            heads, width = self.num_heads, self.W_query.out_features // self.num_heads

            def split(y):
                return y.view(batch, n, heads, width).transpose(1, 2)

            omega = scores(self, split(self.W_query(x)), split(self.W_key(x)))
            logits = torch.einsum("bgmp,lg->blmp", omega, self.P_L)
            mixed = torch.einsum("bgmp,lg->blmp", logits.softmax(-1), self.P_W)
            context = (mixed @ split(self.W_value(x))).transpose(1, 2)
            return self.out_proj(context.reshape(batch, n, heads * width))

    else:

        def wrong(self, x):  # the keys' length left in
            q_ = module.unit_rows(self.W_query(x))
            return (scores(self, q_, self.W_key(x)) / self.tau).softmax(-1) @ self.W_value(x)

    type(layer).forward = wrong
    return layer


@pytest.mark.parametrize(("file", "name", "derived"), CASES, ids=[c[1] for c in CASES])
def test_conform_fails_on_a_broken_copy(file, name, derived):
    import derive

    report = derive.conform(
        _broken(file, name), variant=f"{EXAMPLES / file}:{name}", params=PARAMS.get(name, {})
    )
    assert not report.conforms
    failing = [check.name for check in report.checks if check.status == "FAIL"]
    assert "forward values" in failing, report.table()
    assert report.table().rstrip().splitlines()[-1].startswith("does not conform")


def test_a_variant_declared_with_no_torch_is_checked_and_conformed(tmp_path, capsys):
    """docs/examples/softmax_one.py declares one step and its variant, and writes no twin and
    no module: derive check computes every step by the generated code, and its `layer` (the
    generated module) conforms; the same module running the plain softmax does not."""
    import derive

    spec = f"{EXAMPLES / 'softmax_one.py'}:SOFTMAX_ONE"
    status, _, err = _run(capsys, "latex", "-q", "--variant", spec, "-o", str(tmp_path / "s.tex"))
    assert status == 0, err
    status, out, err = _run(capsys, "check", "--variant", spec, "--seed", "5")
    assert status == 0 and out.rstrip().endswith("all pass"), out + err
    assert "no twin of the whole is declared" in out and "C · generated" in out
    status, out, err = _run(
        capsys, "conform", f"{EXAMPLES / 'softmax_one.py'}:layer", "--variant", spec
    )
    assert status == 0 and out.rstrip().splitlines()[-1].startswith("conforms"), out + err
    layer = _from_file(EXAMPLES / "softmax_one.py").layer()
    layer.function = derive.torch_function("self-attention")  # Σ e^ω̃ alone below
    report = derive.conform(layer, variant=spec)
    assert not report.conforms
    assert "forward values" in [c.name for c in report.checks if c.status == "FAIL"]
