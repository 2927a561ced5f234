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


def test_a_long_line_of_code_is_broken_where_python_allows_and_still_compiles():
    """The PDF's code breaks a line past CODE_WIDTH inside its brackets (after a comma, before
    + or *), so that it fits the page and runs as printed."""
    from derive.render.blocks import CODE_WIDTH, code_lines

    long = (
        "    Iota_f = X0.new_tensor(max(0, (1/2)*c*(1 - tau)*math.log((1/2)*L_0/(math.pi*beta_f))"
        "/math.log(beta) + tau*math.floor((1/2)*c*math.log((1/2)*L_0/(math.pi*beta_f))"
        "/math.log(beta)))).expand(*batch, n, c)"
    )
    pieces = code_lines(long)
    assert len(pieces) > 1 and "".join(p.strip() for p in pieces).replace(" ", "") == (
        long.strip().replace(" ", "")
    )
    assert all(piece.startswith("        ") for piece in pieces[1:])
    compile("def f():\n" + "\n".join(pieces), "code", "exec")
    assert max(len(piece) for piece in pieces[:-1]) <= CODE_WIDTH
    assert code_lines("x = 1") == ["x = 1"]
    assert code_lines('s = "' + "a, b " * 30 + '"') == ['s = "' + "a, b " * 30 + '"']  # a string
