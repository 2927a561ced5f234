"""The variants of the book's later models (RoPE, grouped-query attention, QK-norm, latent
attention): their facts hold, say what they should, and fail when a declaration is changed."""

import pytest
import sympy as sp
from sympy import Eq, Piecewise

import derive
from derive import calculus
from derive.graph import Graph, self_attention
from derive.graph.attention import projection
from derive.graph.claims import CacheAgainst, SameAs, SameForEveryHead
from derive.graph.entries.gqa import grouped
from derive.graph.entries.qk_norm import with_qk_norm
from derive.graph.entries.rope import with_rope
from derive.notation import GroupConcat, latex
from derive.notation import letters as L
from derive.proofs.claims import prove
from derive.proofs.latent import absorption
from derive.proofs.norm import score_bound
from derive.proofs.rope import THETA, relative_position, zero_angles

CAUSAL = self_attention(causal=True)
HEADS = self_attention(causal=True, heads=True)


def grouped_query_attention():
    return derive.variant("gqa").graph


def latent_attention():
    return derive.variant("mla").graph


def _angles(expr: sp.Expr) -> set[sp.Expr]:
    return {e.args[0] for e in expr.atoms(sp.cos, sp.sin)}


def test_the_rotated_score_reads_the_positions_through_p_minus_m_only():
    fact = relative_position(with_rope(CAUSAL))
    assert fact.holds
    last = fact.derivation[-1].rhs
    assert isinstance(last, sp.Sum) and last.limits[0][2] == L.c / 2  # one term per pair
    for angle in _angles(last):
        assert sp.simplify(angle / (THETA[L.j] * (L.p - L.m))) in (1, -1)
    # the pair (j, j + c/2): q_{m,j} k_{p,j} + q_{m,j+c/2} k_{p,j+c/2} multiplies the cosine
    q, k = L.base("q"), L.base("k")
    half = L.j + L.c / 2
    (cos,) = last.function.atoms(sp.cos)
    cosine = sp.expand(last.function, deep=False).coeff(cos)
    assert sp.expand(cosine - (q[L.m, L.j] * k[L.p, L.j] + q[L.m, half] * k[L.p, half])) == 0


def test_an_angle_not_linear_in_the_position_is_not_relative():
    graph = with_rope(CAUSAL)
    angles = graph.step("Phi").element.rhs
    squared = angles.xreplace({L.m - 1: (L.m - 1) ** 2})
    assert squared != angles
    assert not relative_position(graph.replace("Phi", squared)).holds


def test_a_rotation_that_does_not_pair_the_features_is_not_relative():
    graph = with_rope(CAUSAL)
    assert not relative_position(graph.replace("R", sp.S.Zero)).holds


def test_with_every_angle_zero_rope_is_the_base_score():
    graph = with_rope(CAUSAL)
    fact = zero_angles(graph, CAUSAL)
    assert fact.holds
    assert fact.derivation[-1].rhs == CAUSAL.step("Omega").element.rhs
    doubled = graph.step("Q_rot").element.rhs * 2  # q̊ = 2 (…): not the base score at φ = 0
    assert not zero_angles(graph.replace("Q_rot", doubled), CAUSAL).holds


def _partial(graph):
    from derive.graph.entries.partial_rope import with_partial_rope

    return with_partial_rope(with_rope(graph))


def test_partial_rope_pairs_its_first_c_r_features_and_passes_the_others():
    fact = relative_position(_partial(CAUSAL))
    assert fact.holds
    sums = sp.Add.make_args(fact.derivation[-1].rhs)
    pairs = next(s for s in sums if s.limits[0][1] == 1)
    rest = next(s for s in sums if s.limits[0][1] != 1)
    assert pairs.limits[0][1:] == (1, L.c_r / 2)  # one term per rotated pair
    assert rest.limits[0][1:] == (L.c_r + 1, L.c)  # the features not rotated
    q, k = L.base("q"), L.base("k")
    assert rest.function == q[L.m, L.j] * k[L.p, L.j]  # no angle: no position
    for angle in _angles(pairs):
        assert sp.simplify(angle / (THETA[L.j] * (L.p - L.m))) in (1, -1)


def test_partial_rope_fails_when_its_unrotated_features_turn_or_its_pairs_are_lost():
    """Angles past c_r that are not 0: the rest of the score reads the positions themselves;
    a rotation of zeros: the pairs no longer give cos((m − p) θ_j)."""
    graph = _partial(CAUSAL)
    angles = graph.step("Phi").element.rhs
    turned = Piecewise(*angles.args[:-1], (L.m - 1, True))
    assert turned != angles
    assert not relative_position(graph.replace("Phi", turned)).holds
    assert not relative_position(graph.replace("R", sp.S.Zero)).holds


def test_interleaved_rope_pairs_neighbours_and_fails_with_the_other_rotation():
    from derive.graph.entries.interleaved_rope import with_interleaved_rope

    graph = with_interleaved_rope(with_rope(CAUSAL))
    fact = relative_position(graph)
    assert fact.holds
    by_angle = sp.Add.make_args(fact.derivation[-1].rhs)  # a sum over the pairs per angle
    assert {total.limits[0][1:] for total in by_angle} == {(1, L.c / 2)}
    q, k = L.base("q"), L.base("k")
    summand = sp.Add(*[total.function for total in by_angle])
    (cos,) = summand.atoms(sp.cos)
    cosine = sp.expand(summand, deep=False).coeff(cos)
    odd, even = 2 * L.j - 1, 2 * L.j  # the neighbours (2j − 1, 2j) multiply the cosine
    assert sp.expand(cosine - (q[L.m, odd] * k[L.p, odd] + q[L.m, even] * k[L.p, even])) == 0
    halves = with_rope(CAUSAL).step("R").element.rhs  # the book's rotation, interleaved angles
    assert not relative_position(graph.replace("R", halves)).holds
    partial = with_interleaved_rope(_partial(CAUSAL))
    assert relative_position(partial).holds


def test_llama3_frequencies_keep_the_score_relative_and_a_position_in_them_does_not():
    from derive.graph.entries.llama3_rope import smoothed, with_llama3_rope

    graph = with_llama3_rope(with_rope(CAUSAL))
    assert graph.step("Phi").element.rhs.has(L.eta, L.alpha_l, L.alpha_h, L.L_0)
    fact = relative_position(graph)
    assert fact.holds and fact.name == "smoothed_relative_position"
    angles = graph.step("Phi").element.rhs
    slow = smoothed(L.beta ** (-2 * (L.j - 1) / L.c)).args[0].expr  # ω/η
    moved = angles.xreplace({slow: slow * L.m})  # the slow pairs' frequency reads m
    assert moved != angles
    assert not relative_position(graph.replace("Phi", moved)).holds


def test_rope_rotates_each_head_by_its_own_width():
    graph = with_rope(grouped_query_attention())
    assert graph.shapes["Phi"] == (L.n, L.c_h) and graph.shapes["R"] == (L.c_h, L.c_h)
    assert relative_position(graph).holds
    partial = relative_position(_partial(grouped_query_attention()))  # the first c_r of c_h
    assert partial.holds
    assert {s.limits[0][2] for s in sp.Add.make_args(partial.derivation[-1].rhs)} == {
        L.c_r / 2,
        L.c_h,
    }


def test_gqa_is_multi_head_attention_when_g_is_h_and_multi_query_when_g_is_1():
    graph = grouped_query_attention()
    assert prove(graph, SameAs(HEADS, substitute=((L.g, L.h),))).holds
    assert not prove(graph, SameAs(HEADS, substitute=((L.g, 1),))).holds
    one = prove(graph, SameForEveryHead(("K_l", "V_l"), ((L.g, 1),)))
    assert one.holds and one.derivation[1].rhs == L.base("k")[L.m, L.j]
    assert not prove(graph, SameForEveryHead(("K_l",), ((L.g, 2),))).holds


def test_gqa_keeps_g_over_h_of_the_cache_and_d_g_c_h_weights_per_projection():
    graph = grouped_query_attention()
    fact = prove(graph, CacheAgainst(("K", "V"), HEADS))
    assert fact.derivation[0].rhs == 2 * L.n * L.g * L.c_h
    assert fact.derivation[-1].rhs == L.g / L.h
    assert graph.shapes["W_k"] == (L.d, L.g * L.c_h)
    assert sp.expand(calculus.flop_count(graph) - calculus.flop_count(HEADS)).has(L.g)


def test_the_grouped_split_reads_the_block_of_its_group():
    (step,) = [s for s in calculus.steps(grouped_query_attention()) if s.output == "K_l"]
    start = step.matrix.rhs.colslice[0]
    values = {L.g: 2, L.h: 4, L.c_h: 3}
    assert [int(start.xreplace(values | {L.ell: head})) for head in range(1, 5)] == [0, 0, 3, 3]


def test_the_gradient_of_a_shared_block_adds_the_heads_of_its_group():
    gradients = {g.output: g for g in calculus.backward(grouped_query_attention())}
    term = gradients["dK"].matrix.rhs
    assert isinstance(term, GroupConcat) and term.count == L.g
    assert (term.first, term.last) == (sp.expand((L.nu - 1) * L.h / L.g + 1), L.h * L.nu / L.g)
    assert isinstance(gradients["dQ"].matrix.rhs, derive.notation.Concat)  # one head, one block


def test_qk_norm_bounds_every_score():
    fact = score_bound(with_qk_norm(CAUSAL))
    assert fact.holds
    s = sp.Sum(L.base("q")[L.m, L.j2] ** 2, (L.j2, 1, L.c))
    assert sp.simplify(fact.derivation[2].rhs - (L.c - L.c**2 * L.eps / (s + L.c * L.eps))) == 0
    assert isinstance(fact.claim, sp.Le) and fact.claim.rhs.has(sp.sqrt(L.c))


def test_a_normalisation_without_its_root_bounds_nothing():
    graph = with_qk_norm(CAUSAL)
    unnormalised = L.base("gq")[1, L.j] * L.base("q")[L.m, L.j]
    assert not score_bound(graph.replace("Q_norm", unnormalised)).holds


def test_whole_qk_norm_normalises_whole_rows_before_the_heads():
    """OLMo's QK-norm: each row of Q over all c features, of K over all g·c_h, and the heads
    split from the normalised rows; it and Qwen 3's per-head QK-norm exclude each other."""
    graph = derive.variant("gqa+whole-qk-norm").graph
    width = {letter: graph.step(letter).shapes[letter][1] for letter in ("Q_norm", "K_norm")}
    assert width == {"Q_norm": L.c, "K_norm": L.c_h * L.g}
    for letter, source in (("Q_norm", "q"), ("K_norm", "k")):
        (total,) = graph.step(letter).element.rhs.atoms(sp.Sum)
        assert total.limits[0][1:] == (1, width[letter])
        assert total.function == L.base(source)[L.p if source == "k" else L.m, L.j2] ** 2
    assert graph.step("Q_l").inputs == ("Q_norm",) and graph.step("K_l").inputs == ("K_norm",)
    assert graph.step("V_l").inputs == ("V",)
    with pytest.raises(ValueError, match=r"QK-norm per head \(qk-norm\) and over all heads"):
        derive.variant("qk-norm+whole-qk-norm")


def test_latent_attention_scores_read_the_latent_not_the_keys():
    fact = absorption(latent_attention())
    assert fact.holds
    assert latex(fact.claim.rhs) == r"X W_q^{(\ell)} {W_{uk}^{(\ell)}}^\top U^\top"
    graph = latent_attention()
    from_x = projection("k")  # keys from X, not from the latent: no absorption
    broken = Graph(
        graph.name,
        tuple(from_x if s.output == "K" else s for s in graph.declarations),
        graph.relations,
    )
    assert not absorption(broken).holds


def test_latent_attention_caches_the_latent_only():
    fact = prove(latent_attention(), CacheAgainst(("U",), HEADS))
    assert fact.derivation[0].rhs == L.n * L.d_u
    assert fact.derivation[-1].rhs == L.d_u / (2 * L.c)


def test_combinations_apply_their_layers_in_the_models_order():
    llama = derive.variant("rope+gqa")
    assert llama.name == "gqa+rope" and "Llama 3" in llama.title
    qwen = derive.variant("rope+qk-norm+gqa")
    assert qwen.name == "gqa+qk-norm+rope" and "Qwen 3" in qwen.title
    order = [s.output for s in qwen.graph.declarations]
    assert order.index("K_l") < order.index("K_norm_l") < order.index("K_rot_l")
    assert order.index("K_rot_l") < order.index("Omega_l")
    assert qwen.graph.step("Omega_l").inputs == ("Q_rot_l", "K_rot_l")
    assert qwen.graph.step("Q_rot_l").inputs[0] == "Q_norm_l"
    assert all(prove(stage.graph, claim, stage.before).holds for claim, stage in qwen.claims)
    assert qwen.options["theta_base"] == L.beta and qwen.options["groups"] == L.g
    assert qwen.base == HEADS


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "mla+rope",
            r"mla\+rope: mla joins no other variant: it computes the keys and values \(K, V\) "
            "from a latent U",
        ),
        ("gqa+nope", "unknown variant 'nope'"),
        ("qk-norm+l2-qk-norm", "'l2-qk-norm' cannot be put into the graph with causal, qk-norm"),
    ],
)
def test_what_does_not_combine_is_refused(name, message):
    with pytest.raises(ValueError, match=message):
        derive.variant(name)


def test_a_misspelled_variant_is_told_the_closest_name(capsys):
    with pytest.raises(ValueError, match=r"unknown variant 'casual'; did you mean 'causal'\?"):
        derive.variant("casual")
    with pytest.raises(ValueError, match=r"unknown variant 'xyzzy'; known: "):  # none is close
        derive.variant("xyzzy")
    from derive.cli import main

    assert main(["latex", "--variant", "gqa+rpoe"]) == 2
    assert "did you mean 'rope'?" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["causal", "gqa+rope+sliding-window+sinks", "multi-head"])
def test_what_the_prompt_shows_is_short(name):
    """A variant, its graph and its registry record print in a line at the Python prompt (the
    whole ran to 24,799 characters for causal attention)."""
    entry = derive.variant(name)
    for shown in (repr(entry), repr(entry.graph), repr(entry.parts[-1])):
        assert len(shown) <= 200 and "\n" not in shown, shown
    assert repr(entry).startswith(f"Entry({entry.name!r}: {entry.title[:60]}")
    assert entry.graph.output in repr(entry.graph)


def test_the_transforms_keep_the_steps_they_do_not_touch():
    graph = grouped(HEADS)
    before = {s.output: s for s in HEADS.declarations}
    changed = {
        s.output
        for s in graph.declarations
        if s != before[s.output] or dict(s.shapes) != dict(before[s.output].shapes)
    }
    assert changed == {"K", "V", "K_l", "V_l"}
    assert derive.variant("gqa").graph.declarations == graph.declarations
    assert [s.output for s in graph.declarations] == [s.output for s in HEADS.declarations]


def test_the_declared_angles_pair_j_with_j_plus_half():
    angles = with_rope(CAUSAL).step("Phi").element.rhs
    assert isinstance(angles, Piecewise)
    at = {L.c: 8, L.m: 3, L.beta: 10_000}
    values = [angles.xreplace(at | {L.j: j}) for j in range(1, 9)]
    assert values[:4] == values[4:]
    assert values[0] == 2 and values[1] == sp.Integer(2) / 10
    assert Eq(values[3], 2 * sp.Rational(1, 1000)) == sp.true
