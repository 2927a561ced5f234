"""The catalogue of mistakes is data: each entry one declaration changed in the correct graph,
printed from SymPy, the ids those the issue names."""

import pytest

from derive.graph.forms import RHO, Form, reference
from derive.graph.mistakes import MISTAKES, mistake
from derive.notation import latex
from derive.notation.plain import plain

IDS = (
    "no-scale",
    "scale-by-c",
    "scale-by-model-width",
    "scale-by-head-width",
    "softmax-over-queries",
    "values-are-keys",
    "causal-diagonal-masked",
    "causal-leaks-future",
    "mask-inverted",
    "mask-filled-with-zero",
    "mask-after-softmax",
    "dropout-before-softmax",
    "heads-mixed",
    "heads-split-without-transpose",
    "gqa-repeat-order",
    "rope-pairing",
    "rope-not-on-keys",
    "rope-offset",
    "window-off-by-one",
    "softcap-missing",
    "sink-missing",
    "qk-norm-per-head",
    "nan-on-empty-rows",
)

FORMS = (
    Form(),
    Form(heads=True),
    Form(causal=True),
    Form(masked=True),
    Form(dropout=True),
    Form(heads=True, causal=True, variant="gqa+rope+sliding-window+softcap+sinks"),
    Form(heads=True, causal=True, variant="gqa+whole-qk-norm"),
    Form(heads=True, causal=True, variant="gqa+rope", cached=(2, 4)),
)

#: id -> (the step it changes, its mistaken formula) in the first form above that it changes
WRONG = {
    "no-scale": ("Omega_scaled", "ω̃[m,p] = ω[m,p]"),
    "scale-by-c": ("Omega_scaled", "ω̃[m,p] = ω[m,p]/c"),
    "scale-by-model-width": ("Omega_scaled_l", "ω̃⁽ˡ⁾[m,p] = ω⁽ˡ⁾[m,p]/√c"),
    "scale-by-head-width": ("Omega_scaled", "ω̃[m,p] = ω[m,p]/c"),  # c_h = c, with one head
    "softmax-over-queries": ("A", "a[m,p] = exp(ω̃[m,p])/Σ_(r=1…n) exp(ω̃[r,p])"),
    "values-are-keys": ("C", "z[m,j] = Σ_(p=1…n) (a[m,p] k[p,j])"),
    "causal-diagonal-masked": ("M", "M[m,p] = (0 if p < m, −∞ otherwise)"),
    "causal-leaks-future": ("M", "M[m,p] = (0 if p ≤ m + 1, −∞ otherwise)"),
    "mask-inverted": ("Omega_masked", "ω̂[m,p] = ω̃[m,p] + (−∞ if M[m,p] = 0, 0 otherwise)"),
    "mask-after-softmax": ("A", "a[m,p] = exp(ω̂[m,p])/Σ_(r=1…n) exp(ω̃[m,r])"),
    "dropout-before-softmax": ("A", "a[m,p] = exp(ω̃[m,p]/(1 − ρ))/Σ_(r=1…n) exp(ω̃[m,r]/(1 − ρ))"),
    "mask-filled-with-zero": ("Omega_masked", "ω̂[m,p] = (ω̃[m,p] if M[m,p] = 0, 0 otherwise)"),
    "rope-not-on-keys": ("K_rot_l", "k̊⁽ˡ⁾[p,j] = k⁽ˡ⁾[p,j]"),
    "rope-offset": (
        "Phi",
        "φ[m,j] = (β^((2 − 2 j)/c_h) ((m − 4 if 4 < m, m − 2 if 2 < m, m "
        "otherwise) − 1) if j ≤ c_h/2, β^((c_h − 2 j + 2)/c_h) ((m − 4 if 4 < m, "
        "m − 2 if 2 < m, m otherwise) − 1) otherwise)",
    ),
    "window-off-by-one": ("M", "M[m,p] = (0 if p ≤ m and m − w ≤ p, −∞ otherwise)"),
    "softcap-missing": ("Omega_capped_l", "ω̆⁽ˡ⁾[m,p] = ω̃⁽ˡ⁾[m,p]"),
    "sink-missing": ("A_l", "a⁽ˡ⁾[m,p] = exp(ω̂⁽ˡ⁾[m,p])/Σ_(r=1…n) exp(ω̂⁽ˡ⁾[m,r])"),
    "heads-mixed": (
        "C_concat",
        "ẑ[m,i] = z^(⌊(c (m − 1) + i − 1)/(c_h n)⌋ + 1)[(⌊(c (m − 1) + "
        "i − 1)/c_h⌋ mod n) + 1,(c (m − 1) + i − 1 mod c_h) + 1]",
    ),
}


def test_the_ids_are_the_issues():
    assert tuple(m.id for m in MISTAKES) == IDS


@pytest.mark.parametrize("id", sorted(WRONG))
def test_each_mistake_changes_one_declaration_and_prints_from_sympy(id):
    found = mistake(id)
    form = next(f for f in FORMS if found.changed(f) is not None)
    right, wrong = found.changed(form)
    changed = [
        (r.output, w.output)
        for r, w in zip(reference(form).declarations, found.graph(form).declarations, strict=True)
        if r.element != w.element
    ]
    assert changed == [(right.output, wrong.output)]  # one declaration, the same step
    assert (wrong.output, plain(wrong.element)) == WRONG[id]
    assert latex(wrong.element) != latex(right.element)


#: the mistakes that change several declarations: the steps, in order
SEVERAL = {
    "heads-split-without-transpose": ["Q_l", "K_l", "V_l"],
    "gqa-repeat-order": ["K_l", "V_l"],
    "rope-pairing": ["Phi", "R"],
    "qk-norm-per-head": ["Q_norm", "K_norm"],
}


@pytest.mark.parametrize("id", sorted(SEVERAL))
def test_a_mistake_of_several_steps_changes_those_and_no_other(id):
    found = mistake(id)
    form = next(f for f in FORMS if found.changed(f) is not None)
    changed = [
        r.output
        for r, w in zip(reference(form).declarations, found.graph(form).declarations, strict=True)
        if r.element != w.element
    ]
    assert changed == SEVERAL[id]


def test_a_variant_s_mistake_changes_nothing_where_its_variant_is_absent():
    for id in (
        "gqa-repeat-order",
        "rope-pairing",
        "rope-not-on-keys",
        "window-off-by-one",
        "softcap-missing",
        "sink-missing",
        "qk-norm-per-head",
        "rope-offset",
    ):
        assert all(mistake(id).graph(form) == reference(form) for form in FORMS[:5]), id


def test_nan_on_empty_rows_changes_no_formula_only_how_0_over_0_reads():
    found = mistake("nan-on-empty-rows")
    assert found.rows == "nan" and all(m.rows == "zero" for m in MISTAKES if m is not found)
    assert all(found.graph(form) == reference(form) for form in FORMS)


@pytest.mark.parametrize(
    "id, form",
    [
        ("scale-by-model-width", Form()),  # with one head, c_h = c
        ("heads-mixed", Form()),  # one head: nothing to mix
        ("causal-leaks-future", Form()),  # no causal mask to get wrong
        ("mask-inverted", Form(causal=True)),  # no mask given
        ("dropout-before-softmax", Form(heads=True)),  # no dropout observed
        ("rope-offset", Form(heads=True, causal=True, variant="gqa+rope")),  # no cache
    ],
)
def test_a_mistake_leaves_a_form_it_has_nothing_to_change_in(id, form):
    assert mistake(id).graph(form) == reference(form)


def test_on_a_mask_with_causality_folded_in_the_diagonal_can_be_hidden_not_revealed():
    """A given mask folds the causal one in: hiding the diagonal besides is declared (−∞ added
    where p = m); letting the next token in cannot be (the given M is −∞ there already), nor a
    window one key wider."""
    form = Form(causal=True, masked=True)
    right, wrong = mistake("causal-diagonal-masked").changed(form)
    assert plain(wrong.element) == "ω̂[m,p] = ω̃[m,p] + M[m,p] + (−∞ if m = p, 0 otherwise)"
    assert mistake("causal-leaks-future").graph(form) is None
    windowed = Form(heads=True, causal=True, masked=True, variant="sliding-window")
    assert mistake("window-off-by-one").graph(windowed) is None


def test_dropout_is_declared_on_the_weights_of_the_reference():
    weights = reference(Form(dropout=True)).step("A").element.rhs
    assert RHO in weights.free_symbols
    assert RHO not in reference(Form()).step("A").element.rhs.free_symbols


def test_an_unknown_id_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown mistake 'no-sqrt'; known: no-scale, scale-by-c"):
        mistake("no-sqrt")
