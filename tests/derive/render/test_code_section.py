"""The section "The generated code" of a document: the forward and backward functions derive
runs (`derive.torch_function`), printed from the declarations as they run, in every format; a
formula with no torch printing says so instead."""

import dataclasses

import sympy as sp

import derive
from derive.bridge.generated import torch_function
from derive.render.blocks import Code
from derive.render.sections.code import code


def test_the_section_prints_the_code_that_runs():
    entry = derive.variant("gqa+rope")
    blocks = code(entry)
    listings = [block.text for block in blocks if isinstance(block, Code)]
    function = torch_function("gqa+rope")
    assert listings == [function.source, function.backward_source]


def test_every_format_shows_it(tmp_path):
    options = derive.DocumentOptions(variant="softcap")
    source = torch_function("softcap").source
    line = next(x.strip() for x in source.splitlines() if "torch.tanh" in x)
    for format in ("latex", "markdown", "html"):
        text = derive.document(options, format=format)
        assert "The generated code" in text, format
        shown = line.replace('"', "&quot;") if format == "html" else line
        assert shown in text, format
    assert "\\begin{verbatim}\ndef forward(" in derive.document(options, format="latex")
    assert "```python\ndef backward(" in derive.document(options, format="markdown")


def test_a_formula_with_no_torch_printing_is_said():
    entry = derive.variant("self-attention")
    omega = entry.graph.step("Omega_scaled").element.rhs
    changed = entry.graph.replace("Omega_scaled", sp.gamma(omega))
    blocks = code(dataclasses.replace(entry, graph=changed, name="gamma scores"))
    assert not any(isinstance(block, Code) for block in blocks)
    assert "cannot print gamma" in blocks[-1].text
