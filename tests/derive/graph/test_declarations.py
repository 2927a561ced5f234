"""The declarations and the graphs they form: inputs, readers, shapes, and changing one."""

import pytest
import sympy as sp

import derive
from derive.graph import Declaration, Graph, self_attention
from derive.graph.assumptions import ASSUMPTIONS
from derive.notation import letters as L


def test_the_single_head_graph_reads_x_and_the_weights():
    graph = self_attention()
    assert graph.inputs == ("X", "W_q", "W_k", "W_v")
    assert graph.output == "C"
    assert [s.output for s in graph.declarations] == [
        "Q",
        "K",
        "V",
        "Omega",
        "Omega_scaled",
        "A",
        "C",
    ]
    assert [s.output for s in graph.consumers("X")] == ["Q", "K", "V"]
    assert graph.step("A").inputs == ("Omega_scaled",)
    assert graph.step("C").inputs == ("A", "V")


def test_shapes_follow_the_book():
    n, d, c = L.n, L.d, L.c
    assert self_attention().shapes == {
        "X": (n, d),
        "W_q": (d, c),
        "W_k": (d, c),
        "W_v": (d, c),
        "Q": (n, c),
        "K": (n, c),
        "V": (n, c),
        "Omega": (n, n),
        "Omega_scaled": (n, n),
        "A": (n, n),
        "C": (n, c),
    }
    heads = self_attention(heads=True).shapes
    assert heads["Q_l"] == (n, L.c_h) and heads["W_o"] == (c, c) and heads["A_l"] == (n, n)


def test_causal_graph_declares_the_mask_and_adds_it():
    graph = self_attention(causal=True)
    assert graph.step("M").constant and graph.step("M").inputs == ()
    assert graph.step("Omega_masked").inputs == ("Omega_scaled", "M")
    assert graph.step("A").inputs == ("Omega_masked",)
    assert "M" not in graph.inputs
    assert "M" in self_attention(masked=True).inputs  # a padding mask is given
    with pytest.raises(ValueError, match="choose causal=True or masked=True"):
        self_attention(causal=True, masked=True)


def test_multi_head_graph_declares_the_head_width():
    graph = self_attention(heads=True)
    assert graph.relations == (sp.Eq(L.c_h, L.c / L.h),)
    assert graph.inputs == ("X", "W_q", "W_k", "W_v", "W_o")
    assert graph.step("C").inputs == ("C_concat", "W_o")


def test_replacing_a_declaration_keeps_the_rest():
    graph = self_attention()
    doubled = graph.replace("Omega", 2 * graph.step("Omega").element.rhs)
    assert doubled.step("Omega").element.rhs == 2 * graph.step("Omega").element.rhs
    assert doubled.step("C") == graph.step("C")
    with pytest.raises(KeyError, match=r"no step 'Z'"):
        graph.replace("Z", sp.S.One)


def test_a_graph_refuses_two_producers_and_missing_shapes():
    q = self_attention().step("Q")
    with pytest.raises(ValueError, match="Q is produced twice"):
        Graph("twice", (q, q))
    with pytest.raises(ValueError, match=r"no shape for \['X'\]"):
        Declaration("projection", "Q", "t", q.element, {"Q": (L.n, L.c), "W_q": (L.d, L.c)})


def test_the_stated_assumptions():
    rows = {str(moment): value for moment, _, value in ASSUMPTIONS.rows()}
    assert rows == {"E(q[j])": 0, "Var(q[j])": 1, "E(k[j])": 0, "Var(k[j])": 1}


def test_declarations_display_their_formula():
    assert derive.variant("self-attention").graph.step("Omega")._repr_latex_() == (
        r"$$\omega_{m,p} = \sum_{j=1}^{c} q_{m,j} k_{p,j}$$"
    )
