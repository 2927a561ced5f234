"""Every registered variant prints a document: its own declarations, its derived facts, each
display with its provenance; the steps it shares with its base are referenced, not repeated."""

import re

import pytest

import derive
from derive import DocumentOptions
from derive.render.documents import latex_document, markdown_document

VARIANTS = derive.variants()


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_prints_a_document_with_provenance(name):
    tex = latex_document(DocumentOptions(sizes=(4, 3, 2), variant=name))
    title = derive.variant(name).title
    assert rf"\title{{{title}, derived}}" in tex
    lines = tex.splitlines()
    displays = [k for k, line in enumerate(lines) if line == r"\begin{align*}"]
    assert len(displays) > 5
    assert all(lines[k - 1].startswith("% provenance: ") for k in displays)
    assert r"\section*{Explicit: $n = 4$, $d = 3$, $c = 2$" in tex
    md = markdown_document(DocumentOptions(variant=name))
    assert md.startswith(f"# {title}, derived")


def test_shared_steps_are_referenced_not_repeated():
    tex = latex_document(DocumentOptions(variant="sliding-window"))
    assert "declared as in the derivation of causal self-attention" in tex
    declared = re.findall(r"% provenance: declared\n\\begin\{align\*\}\n(.*)\n", tex)
    assert declared == [
        r"M_{m,p} &= \begin{cases} 0 & \text{for}\: p \leq m \wedge m - w < p "
        r"\\-\infty & \text{otherwise} \end{cases} "
        r"\tag*{\footnotesize\textit{declared}}"
    ]
    cross = latex_document(DocumentOptions(variant="cross-attention"))
    assert r"k_{p,j} &= \sum_{i=1}^{d_{y}} y_{p,i} (W_k)_{i,j}" in cross
    assert r"\omega_{m,p} &= \sum_{j=1}^{c} q_{m,j} k_{p,j}" not in cross  # shared: referenced


def test_variant_options_are_checked():
    with pytest.raises(ValueError, match=r"unknown variant 'nope'"):
        DocumentOptions(variant="nope")
    with pytest.raises(ValueError, match=r"flash joins no other variant: its facts"):
        DocumentOptions(variant="flash", heads=2)
    assert DocumentOptions(variant="kv-cache", heads=2).entry.name == "multi-head+kv-cache"
    with pytest.raises(ValueError, match=r"kv-cache has no worked example"):
        DocumentOptions(variant="kv-cache", example=True)
    assert DocumentOptions(variant="kv-cache", causal=True).entry.name == "kv-cache"  # causal
    with pytest.raises(
        ValueError,
        match=r"cross-attention has no size 'w' \(w is a size of "
        r"sliding-window\); its own: s, d_y",
    ):
        DocumentOptions(sizes=(3, 4, 2), variant="cross-attention", extra=(("w", 2),))
    with pytest.raises(ValueError, match=r"self-attention has no size 'w'"):
        DocumentOptions(extra=(("w", 2),))
    options = DocumentOptions(sizes=(3, 4, 2), variant="cross-attention", extra=(("s", 5),))
    assert {str(k): v for k, v in options.variant_sizes().items()} == {
        "n": 3,
        "d": 4,
        "c": 2,
        "s": 5,
        "d_y": 5,
    }


def test_qk_norm_shows_its_bound_on_a_saturation_figure():
    from derive.render.figures import qk_norm_data

    tex = latex_document(DocumentOptions(variant="gqa+qk-norm", figures="figs"))
    assert r"\includegraphics" in tex and "figs/softmax-saturation-qk-norm.png" in tex
    assert "figs/softmax-saturation-qk-norm" not in latex_document(
        DocumentOptions(variant="gqa+rope", figures="figs")
    )
    rows = qk_norm_data()
    normed = [row[2] for row in rows]
    assert max(normed) - min(normed) < 1e-5  # QK-norm: the same weights at every scale (but ε)
    assert rows[0][1] < normed[0] < rows[-1][1]  # without it: from flat to saturated
    assert all(row[2] <= row[3] for row in rows)  # never past what the bound allows


def test_flash_shows_its_rounding_figure_with_derived_bounds():
    from derive.render.rounding_data import (
        ROUNDING_SCALES,
        ROUNDING_SERIES,
        measured,
        rounding_data,
    )

    tex = latex_document(DocumentOptions(variant="flash", figures="figs"))
    assert "figs/flash-rounding.png" in tex
    assert "% provenance: derived" in tex.split("Where float32 breaks it")[1]
    rows = rounding_data()
    assert [row[0] for row in rows] == list(ROUNDING_SCALES)
    stored, maximum = [row[1] for row in rows], [row[3] for row in rows]
    assert stored[-1] / stored[-2] == pytest.approx(10 / 3, rel=0.05)  # grows as u s
    assert max(maximum) / min(maximum) < 1.001  # free of s
    assert set(measured()) == {float(s) for s in ROUNDING_SCALES}  # a point for every scale
    assert len(measured()[1.0]) == len(ROUNDING_SERIES)
