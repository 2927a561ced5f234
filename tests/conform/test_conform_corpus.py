"""The proof of `derive conform` on its corpus: every correct implementation conforms, every
broken one fails with its own id, and a catalogue whose formulas are swapped fails this test."""

import dataclasses

import broken
import correct
import ported
import pytest
import torch

from derive import conform
from derive.graph.mistakes import MISTAKES, mistake

#: name in correct.py -> (kind, convention, causal)
CORRECT = {
    "sdpa_torch": ("sdpa", None, False),  # torch's own
    "sdpa_written": ("sdpa", None, False),  # written out, zero weights for an empty row
    "sdpa_lowest": ("sdpa", None, False),  # masked with the dtype's lowest number
    "book_v1": ("module", "book", False),  # W_query a Parameter, takes (n, d) only
    "book_v2": ("module", "book", False),  # nn.Linear with biases
    "book_causal": ("module", "book", True),
    "book_wrapper": ("module", "book", True),  # heads side by side, no W_o
    "book_mha": ("module", "book", True),
    "ours_v1": ("self", "book", False),
    "ours_v2": ("self", "book", False),
    "ours_causal": ("self", "book", True),  # takes a mask
    "ours_wrapper": ("self", "book", True),
    "ours_mha": ("self", "book", True),
    "nanogpt": ("module", "nanogpt", True),  # the fused kernel
    "nanogpt_written": ("module", "nanogpt", True),  # the written-out path, attn_dropout
    "gpt2": ("module", "gpt2-own-mask", True),  # Conv1D, a tuple returned, its own causal buffer
    "timm": ("module", "timm", False),  # takes attn_mask
    "timm_written": ("module", "timm", False),
    "torch_mha": ("module", "torch-mha", False),  # batch_first, attn_mask True = masked
    "torch_mha_sequence_first": ("module", "torch-mha", False),
}


def test_the_corpus_lists_every_correct_implementation():
    assert set(CORRECT) == set(correct.FUNCTIONS + correct.MODULES)


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_every_correct_implementation_conforms(name):
    report = conform(getattr(correct, name))
    assert report.conforms, report.table()
    assert (report.kind, report.convention, report.causal) == CORRECT[name]
    assert report.diagnosis is None
    assert {row.status for row in report.checks} <= {"PASS", "n/a"}
    assert [row.name for row in report.checks if row.status == "PASS"][0] == "forward values"


def test_the_corpus_breaks_every_id_of_the_catalogue():
    assert set(broken.BROKEN) == {m.id for m in MISTAKES}


def diagnosed(id, mistakes=MISTAKES):
    """The corpus's claim for one id: its broken implementation fails, named by that id (NaN
    for a query with no key is a convention, a failure only when strict)."""
    strict = id == "nan-on-empty-rows"
    told = broken.OPTIONS.get(id, {})
    report = conform(broken.implementation(id), mistakes=mistakes, strict=strict, **told)
    assert not report.conforms
    assert report.diagnosis is not None and report.diagnosis.id == id, report.table()
    return report


@pytest.mark.parametrize("id", sorted(broken.BROKEN))
def test_every_broken_implementation_fails_with_its_own_id(id):
    report = diagnosed(id)
    found = report.diagnosis
    assert found.title == mistake(id).title
    if id != "nan-on-empty-rows":  # the one that changes no formula, only how 0/0 reads
        assert found.wrong and found.right and found.wrong != found.right
        assert found.wrong_latex != found.right_latex
    assert f"diagnosis: {id}" in report.table()


def _swapped(first, second):
    """The catalogue with the formulas (the changes) of two ids exchanged."""
    changes = {m.id: m.change for m in MISTAKES}
    swap = {first: changes[second], second: changes[first]}
    return tuple(dataclasses.replace(m, change=swap.get(m.id, m.change)) for m in MISTAKES)


@pytest.mark.parametrize(
    "first, second",
    [
        ("no-scale", "scale-by-model-width"),  # two scalings
        ("mask-inverted", "mask-after-softmax"),  # two mask conventions
        ("values-are-keys", "heads-mixed"),  # two steps far apart
    ],
)
def test_a_catalogue_with_two_formulas_swapped_fails_the_corpus(first, second):
    swapped = _swapped(first, second)
    for id in (first, second):
        with pytest.raises(AssertionError):
            diagnosed(id, swapped)


def test_with_one_head_scaling_by_c_and_scaling_twice_are_one_formula():
    def scaled_twice(q, k, v):
        q = q / q.shape[-1] ** 0.5  # then the kernel scales again
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    report = conform(scaled_twice)
    assert report.diagnosis.id == "scale-by-c"  # the first of the two in the catalogue
    assert report.diagnosis.also == ("scale-by-head-width",)
    assert "the same values as: scale-by-head-width" in report.table()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_in_half_precision_the_corpus_still_holds(dtype):
    """The tolerances grow with the dtype's rounding; every mistake is still told apart, save
    two in bfloat16 (8 bits of mantissa) at the corpus's sizes (n = 5, d = 16): RoPE's tables
    rounded to 2⁻⁸ leave every entry of C a bound that covers positions restarted 2 tokens
    early (rope-offset passes), and QK-norm per head is as near the output as no scaling is
    (the diagnosis names no-scale, with qk-norm-per-head among "the same values as")."""
    for name in ("sdpa_torch", "nanogpt", "ours_mha", "torch_mha", "gpt2"):
        report = conform(getattr(correct, name), dtype=dtype)
        assert report.conforms, report.table()
        assert report.dtype == str(dtype).removeprefix("torch.")
    named = {
        id: conform(
            broken.implementation(id), dtype=dtype, strict=True, **broken.OPTIONS.get(id, {})
        ).diagnosis
        for id in broken.BROKEN
    }
    blurred = {"rope-offset", "qk-norm-per-head"} if dtype == torch.bfloat16 else set()
    told = {id: found and found.id for id, found in named.items() if id not in blurred}
    assert told == {id: id for id in named if id not in blurred}
    if blurred:
        assert named["rope-offset"] is None
        assert "qk-norm-per-head" in named["qk-norm-per-head"].also


def test_a_causal_mask_hiding_the_diagonal_is_named_whatever_fills_it():
    """x-transformers fills masked scores with −finfo.max: the first query, which sees nothing,
    averages every value instead of getting NaN or zeros; the mistake is named all the same,
    on the calls with a mask too."""
    report = conform(broken.causal_diagonal_masked_finite)
    assert not report.conforms and report.diagnosis.id == "causal-diagonal-masked"
    assert "mask convention" in report.diagnosis.matched_on


def test_a_decoder_layer_that_forgets_its_own_causal_mask_fails():
    """It says is_causal and takes no mask from its caller: its causality is its own, and a
    later token moves an earlier row. A failing row with the mistake's id, not a note (issue
    34: assert_conforms passed it)."""
    report = conform(broken.causal_mask_missing)
    assert not report.causal and not report.conforms
    row = next(check for check in report.checks if check.name == "causality")
    assert row.status == "FAIL"
    assert row.note.startswith(
        "causal-mask-missing: _NoCausalMask says is_causal = True and takes no mask"
    )
    quiet = conform(correct.timm)  # not causal either, and says nothing of it
    assert not quiet.causal and quiet.conforms
    assert not any("causal-mask-missing" in n for n in quiet.notes)


class _MaskFromCaller(broken._NoCausalMask):
    """A decoder's layer whose caller gives the mask (as Hugging Face's layers take theirs)."""

    def forward(self, x, mask=None):
        keys, queries, values = (
            broken.split_heads(layer(x), self.num_heads)
            for layer in (self.W_key, self.W_query, self.W_value)
        )
        scores = queries @ keys.transpose(2, 3) / self.head_dim**0.5
        if mask is not None:  # True = may attend
            scores = scores.masked_fill(~mask, -torch.inf)
        return self.out_proj(broken.merge_heads(torch.softmax(scores, dim=-1) @ values))


def test_a_decoder_layer_whose_caller_gives_the_mask_keeps_the_warning():
    torch.manual_seed(0)
    report = conform(_MaskFromCaller(8, 8, 16, 0.0, 2))
    assert not report.causal and report.conforms
    assert any(n.startswith("warning (causal-mask-missing)") for n in report.notes)


@pytest.mark.parametrize("id", sorted(ported.PORTS))
def test_each_port_without_its_bug_conforms(id):
    """The control of each port's mistake: the same layer, the one line written right."""
    _, told = ported.PORTS[id]
    report = conform(ported.port(id, bug=False), **told)
    assert report.conforms, report.table()


def test_rope_pairing_is_named_both_ways():
    """The interleaved port conforms when told the layout it computes (interleaved-rope); the
    book's layout told interleaved is the same mistake the other way round."""
    interleaved = conform(ported.port("rope-pairing"), variant="rope+interleaved-rope")
    assert interleaved.conforms, interleaved.table()
    reverse = conform(ported.port("rope-pairing", bug=False), variant="rope+interleaved-rope")
    assert not reverse.conforms
    assert reverse.diagnosis is not None and reverse.diagnosis.id == "rope-pairing"
