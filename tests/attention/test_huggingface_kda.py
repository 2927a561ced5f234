"""Kimi Delta Attention layers on this package: `attention.huggingface.from_hf` reads
transformers' `KimiLinearDeltaAttention` (Kimi Linear's) and `BailingHybridDeltaAttention`
(Bailing's hybrid delta layers) into `attention.kimi.KimiDeltaAttention` (their weights loaded by
name), which gives each layer's outputs; a model whose KDA layers are ours
(`replace_linear_attention`) gives eager's logits and gradients, and the same greedy tokens and
logits when generating with the cache.

Models are built from a small configuration with random weights (nothing is downloaded), in
float32: transformers computes KDA in float32 and sums in another order, so the bound is 2⁻¹⁸ of
the largest output (2⁻²⁴ a rounding, a factor 64 for the few that add up). Each test also shows
that the comparison can fail.
"""

import copy

import pytest
import torch
import transformers as T

import attention.huggingface as hf
from attention import ShapeError
from attention.kimi import KimiDeltaAttention

BOUND = 2.0**-18
WIDTH, VOCAB = 32, 64


#: Each family's small config: a KDA layer (4 heads of 8, a convolution of 3), then a full
#: attention one. Bailing's delta layers have whole gate projections and a bounded forget gate.
FAMILIES = {
    "KimiLinearDeltaAttention": lambda: T.KimiLinearConfig(
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,  # its MLA layer runs with as many as it has heads
        intermediate_size=48,
        linear_attn_config={
            "kda_layers": [1],
            "full_attn_layers": [2],
            "num_heads": 4,
            "head_dim": 8,
            "short_conv_kernel_size": 3,
        },
    ),
    "BailingHybridDeltaAttention": lambda: T.BailingHybridConfig(
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=48,
        linear_num_heads=4,
        linear_head_dim=8,
        linear_conv_kernel_dim=3,
        layer_types=["linear_attention", "full_attention"],
    ),
}


def model_of(family: str = "KimiLinearDeltaAttention", seed: int = 0) -> torch.nn.Module:
    """The family's small model, its KDA weights drawn at a scale that makes every part count."""
    torch.manual_seed(seed)
    config = FAMILIES[family]()
    model = T.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for layer in kda_layers(model):
            for parameter in layer.parameters():
                parameter.normal_(0, 0.3)
    return model


def kda_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__ in hf.KDA_FAMILIES]


def test_every_family_read_is_tested():
    assert set(FAMILIES) == set(hf.KDA_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_kda_layer_is_ours_number_for_number(family):
    (layer,) = kda_layers(model_of(family))
    assert type(layer).__name__ == family
    ours = hf.from_hf(layer)
    assert isinstance(ours.linear, KimiDeltaAttention)
    x = torch.randn(2, 7, WIDTH, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs, got = layer(x), ours(x)
        bound = BOUND * theirs.abs().max()
        torch.testing.assert_close(got, theirs, rtol=0, atol=bound)
        ours.linear.forget_gate.A_log.add_(0.1)  # the decays moved: far outside the bound
        assert (ours(x) - theirs).abs().max() > 100 * bound


def _gradients(model, ids):
    model.zero_grad()
    logits = model(ids).logits
    (logits * torch.linspace(-1, 1, VOCAB)).sum().backward()
    grads = {name.replace(".linear.", "."): p.grad for name, p in model.named_parameters()}
    return logits.detach(), grads


@pytest.mark.parametrize("family", FAMILIES)
def test_a_model_on_our_kda_layers_gives_eager_s_logits_and_gradients(family):
    model = model_of(family, seed=2)
    ours = copy.deepcopy(model)
    assert hf.replace_linear_attention(ours) == 1
    ids = torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    theirs, their_grads = _gradients(model, ids)
    got, grads = _gradients(ours, ids)
    torch.testing.assert_close(got, theirs, rtol=0, atol=BOUND * theirs.abs().max())
    assert set(grads) == set(their_grads)
    for name, grad in grads.items():
        expected = their_grads[name]
        if expected is None:  # a parameter the loss does not reach (in both)
            assert grad is None, name
            continue
        assert grad is not None, name
        scale = expected.abs().max()
        grad = grad.reshape(expected.shape)  # A_log: (1, 1, h, 1) here, (h,) in Bailing's
        torch.testing.assert_close(grad, expected, rtol=0, atol=2**-14 * scale, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_with_the_cache_gives_eager_s_tokens_and_logits(family):
    model = model_of(family, seed=4)
    ours = copy.deepcopy(model)
    hf.replace_linear_attention(ours)
    ids = torch.randint(3, VOCAB, (2, 6), generator=torch.Generator().manual_seed(5))
    options = dict(max_new_tokens=6, do_sample=False, output_logits=True)
    theirs = model.generate(ids, **options, return_dict_in_generate=True)
    got = ours.generate(ids, **options, return_dict_in_generate=True)
    assert got.sequences.tolist() == theirs.sequences.tolist()
    for step, (a, b) in enumerate(zip(got.logits, theirs.logits, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=BOUND * b.abs().max(), msg=f"step {step}")


def test_our_module_keeps_its_own_cache_token_by_token():
    torch.manual_seed(6)
    module = KimiDeltaAttention(WIDTH, num_heads=4, head_dim=8, conv_size=3)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0, 0.3)
        x = torch.randn(2, 9, WIDTH, generator=torch.Generator().manual_seed(7))
        whole = module(x)
        module.reset_cache()
        rows = [module(x[:, t : t + 1], use_cache=True) for t in range(9)]
    torch.testing.assert_close(torch.cat(rows, dim=1), whole, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"KimiDeltaAttention.forward: x has batch \(3,\)"):
        module(torch.randn(3, 1, WIDTH), use_cache=True)


def test_what_is_not_read_is_refused_by_name():
    (layer,) = kda_layers(model_of())
    layer.register_buffer("extra", torch.ones(2))
    with pytest.raises(ValueError, match="KimiLinearDeltaAttention holds extra, which KDA does"):
        hf.from_hf(layer)
    with pytest.raises(ValueError, match=r"KimiDeltaAttention.*head_dim.*0"):
        KimiDeltaAttention(WIDTH, num_heads=4, head_dim=0)
    with pytest.raises(
        ValueError, match=r"KimiDeltaAttention: decay_bound must be negative, got 1"
    ):
        KimiDeltaAttention(WIDTH, num_heads=4, head_dim=8, decay_bound=1.0)
