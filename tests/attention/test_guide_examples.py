"""The guides' examples (docs/guides/) give the shapes and numbers they say: grouped-query and
latent attention, the modification objects and the one entry point, linear attention."""

import re
from pathlib import Path

import torch

GUIDES = Path(__file__).parents[2] / "docs" / "guides"


def _run(guide: str, heading: str = "") -> dict:
    """The ```py blocks of a guide (of its section under `heading`), run in order in one
    namespace: its names."""
    section = (GUIDES / guide).read_text(encoding="utf-8")
    section = section.split(heading, 1)[1] if heading else section
    section = section.split("\n## ", 1)[0]
    example = "\n".join(re.findall(r"```py\n(.*?)```", section, re.S))
    namespace: dict = {}
    exec(compile(example, guide, "exec"), namespace)  # noqa: S102 - our own guide
    return namespace


def test_the_variants_example_runs():
    namespace = _run("book-classes.md", "## Llama 3, Qwen 3 and latent attention")
    assert namespace["C"].shape == (2, 10, 64)
    assert namespace["gqa"].q_norm is not None and namespace["cos"].shape == (32, 8)


def test_the_modification_added_end_to_end_runs_and_clamps():
    """The guide's example of adding a modification: its object holds every score within the
    bound, so the layer equals one whose scores are clamped by hand."""
    namespace = _run("modifications.md", "## Adding a modification to the package")
    x, w = namespace["x"], namespace["w"]
    q = (x @ w).view(2, 10, 4, 4).transpose(1, 2)
    s = (q @ q.mT / 2).clamp(-0.5, 0.5)
    s = s.masked_fill(torch.ones(10, 10, dtype=torch.bool).triu(1), float("-inf"))
    by_hand = (s.softmax(-1) @ q).transpose(1, 2).reshape(2, 10, 16) @ w
    torch.testing.assert_close(namespace["held"], by_hand, rtol=1e-5, atol=1e-6)


def test_the_modification_objects_example_runs():
    namespace = _run("modifications.md")
    assert namespace["out"].shape == (2, 10, 16)
    from attention import functional as F

    x, w = namespace["x"], namespace["w"]
    plain = F.multi_head_attention(x, w, w, w, w, heads=4, causal=True)
    assert (namespace["out"] - plain).abs().max() > 1e-4  # the chunks were applied
    # the user's mask stated by its bounds: query m reads its chunk of 4 and the one before
    m, p = torch.arange(10)[:, None], torch.arange(10)[None, :]
    allowed = (p <= m) & (p >= (m // 4) * 4 - 4)
    by_mask = F.multi_head_attention(x, w, w, w, w, heads=4, mask=allowed)
    torch.testing.assert_close(namespace["own"], by_mask)
    assert (namespace["own"] - plain).abs().max() > 1e-4


def test_the_linear_attention_example_runs():
    namespace = _run("linear-attention.md")
    assert namespace["o"].shape == (2, 4, 100, 8) and namespace["S"].shape == (2, 4, 16, 8)
    assert (namespace["o"] - namespace["step"]).abs().max() < 1e-4  # two forms, one result
    assert namespace["y"].shape == (2, 10, 64)
