"""State-space models on this package: the Mamba-2 mixers of Mamba 2, Bamba, Granite 4
(GraniteMoeHybrid), Nemotron-H and Zamba 2 read by `attention.huggingface.from_hf` into
`attention.ssm.Mamba2` (their weights loaded by name), each giving its layer's outputs; a Mamba 2
model whose mixers are ours (`replace_linear_attention`) gives eager's logits and gradients, with
padding, and the same greedy tokens and logits when generating with the cache; what is not read
is refused by name.

Models are built from small configurations with random weights (nothing is downloaded), in
float32: transformers computes the scan and the norm in float32 whatever the model's dtype, and
the two sum in other orders, so the bound is 2⁻¹⁸ of the largest output (2⁻²⁴ a rounding, a
factor 64 for the few that add up; measured: about 2⁻²² on a layer). Each test also shows that
the comparison can fail.
"""

import copy

import pytest
import torch
import transformers as T

import attention.huggingface as hf
from attention import ShapeError
from attention.ssm import Mamba2

BOUND = 2.0**-18
WIDTH, VOCAB = 16, 32
_MAMBA = dict(
    mamba_n_heads=4,
    mamba_d_head=8,
    mamba_d_state=6,
    mamba_n_groups=2,
    mamba_d_conv=3,
    mamba_chunk_size=4,
    mamba_expand=2,
)
_SMALL = dict(
    hidden_size=WIDTH,
    vocab_size=VOCAB,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=24,
)

#: Each family: its config, the sizes that make its mixer 4 heads of 8 in 2 groups, a state of
#: 6, a convolution of 3 and chunks of 4 (each config names them its own way).
FAMILIES = {
    "Mamba2Mixer": lambda: T.Mamba2Config(
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        num_heads=4,
        head_dim=8,
        expand=2,
        state_size=6,
        n_groups=2,
        conv_kernel=3,
        chunk_size=4,
    ),
    "BambaMixer": lambda: T.BambaConfig(**_SMALL, **_MAMBA, attn_layer_indices=[1]),
    "GraniteMoeHybridMambaLayer": lambda: T.GraniteMoeHybridConfig(
        **_SMALL,
        **_MAMBA,
        layer_types=["mamba", "attention"],
        num_local_experts=2,
        num_experts_per_tok=1,
    ),
    "NemotronHMamba2Mixer": lambda: T.NemotronHConfig(
        **_SMALL | dict(num_hidden_layers=2),
        mamba_num_heads=4,
        mamba_head_dim=8,
        ssm_state_size=6,
        n_groups=2,
        conv_kernel=3,
        chunk_size=4,
        hybrid_override_pattern="M*",
    ),
    "Zamba2MambaMixer": lambda: T.Zamba2Config(
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        num_attention_heads=2,
        mamba_d_state=6,
        mamba_ngroups=2,
        mamba_d_conv=3,
        mamba_headdim=8,
        n_mamba_heads=4,
        chunk_size=4,
        layers_block_type=["mamba", "mamba"],
    ),
}


def model_of(family: str, seed: int = 0) -> torch.nn.Module:
    """The family's small model in eval mode, its mixers' weights drawn at a scale that makes
    every part count (initialisation leaves D at 1 and the norm's gains at 1)."""
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(FAMILIES[family]()).eval()
    with torch.no_grad():
        for layer in mixers(model):
            for parameter in layer.parameters():
                parameter.normal_(0, 0.3)
    return model


def mixers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__ in hf.SSM_FAMILIES]


def test_every_family_read_is_tested():
    assert set(FAMILIES) == set(hf.SSM_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_s_mixer_is_ours_number_for_number(family):
    layer = mixers(model_of(family))[0]
    assert type(layer).__name__ == family
    ours = hf.from_hf(layer)
    assert isinstance(ours.ssm, Mamba2)
    x = torch.randn(2, 7, WIDTH, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs, got = layer(x), ours(x)
        bound = BOUND * theirs.abs().max()
        torch.testing.assert_close(got, theirs, rtol=0, atol=bound)
        ours.ssm.D.add_(0.01)  # the skip moved: far outside the bound
        assert (ours(x) - theirs).abs().max() > 100 * bound


def _gradients(model, ids):
    model.zero_grad()
    logits = model(ids).logits
    (logits * torch.linspace(-1, 1, VOCAB)).sum().backward()
    return logits.detach(), {
        name.replace(".ssm.", "."): p.grad for name, p in model.named_parameters()
    }


def test_a_mamba2_model_on_our_mixers_gives_eager_s_logits_and_gradients():
    model = model_of("Mamba2Mixer")
    ours = copy.deepcopy(model)
    assert hf.replace_linear_attention(ours) == 2
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    theirs, their_grads = _gradients(model, ids)
    got, grads = _gradients(ours, ids)
    torch.testing.assert_close(got, theirs, rtol=0, atol=BOUND * theirs.abs().max())
    assert set(grads) == set(their_grads)
    for name, grad in grads.items():
        expected = their_grads[name]
        assert grad is not None and expected is not None, name
        scale = expected.abs().max()
        torch.testing.assert_close(grad, expected, rtol=0, atol=2**-14 * scale, msg=name)


def test_padding_writes_nothing_into_the_state():
    """A left-padded row gives the unpadded row's logits on its tokens: the padding's inputs are
    zeroed before and after the convolution, as the layer does."""
    model = model_of("Mamba2Mixer", seed=3)
    ours = copy.deepcopy(model)
    hf.replace_linear_attention(ours)
    ids = torch.randint(1, VOCAB, (2, 8), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        theirs = model(ids, attention_mask=mask).logits
        got = ours(ids, attention_mask=mask).logits
        unmasked = ours(ids).logits
    torch.testing.assert_close(got, theirs, rtol=0, atol=BOUND * theirs.abs().max())
    assert (unmasked[1, 3:] - got[1, 3:]).abs().max() > 1e-3  # the mask is read


def test_generation_with_the_cache_gives_eager_s_tokens_and_logits():
    model = model_of("Mamba2Mixer", seed=5)
    ours = copy.deepcopy(model)
    hf.replace_linear_attention(ours)
    ids = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(6))
    options = dict(max_new_tokens=6, do_sample=False, output_logits=True)
    theirs = model.generate(ids, **options, return_dict_in_generate=True)
    got = ours.generate(ids, **options, return_dict_in_generate=True)
    assert got.sequences.tolist() == theirs.sequences.tolist()
    for step, (a, b) in enumerate(zip(got.logits, theirs.logits, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=BOUND * b.abs().max(), msg=f"step {step}")
    assert got.sequences.shape[-1] == 12


def test_a_bfloat16_model_keeps_the_state_in_float32_as_transformers_does():
    model = model_of("Mamba2Mixer", seed=9).to(torch.bfloat16)
    ours = copy.deepcopy(model)
    hf.replace_linear_attention(ours)
    ids = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        theirs = model(ids, use_cache=True).past_key_values.get_recurrent_state(0)
        got = ours(ids, use_cache=True).past_key_values.get_recurrent_state(0)
    assert theirs.dtype == got.dtype == torch.float32
    torch.testing.assert_close(got, theirs, rtol=0, atol=2**-6 * theirs.abs().max())


def test_our_module_keeps_its_own_cache_token_by_token():
    torch.manual_seed(7)
    module = Mamba2(WIDTH, num_heads=4, head_dim=8, state_size=6, n_groups=2, conv_kernel=3)
    x = torch.randn(2, 9, WIDTH, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        whole = module(x)
        module.reset_cache()
        rows = [module(x[:, t : t + 1], use_cache=True) for t in range(9)]
    torch.testing.assert_close(torch.cat(rows, dim=1), whole, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"Mamba2.forward: x has batch \(3,\).*reset_cache"):
        module(torch.randn(3, 1, WIDTH), use_cache=True)


def test_what_is_not_read_is_refused_by_name():
    class FalconH1Mixer(torch.nn.Module):
        pass

    with pytest.raises(TypeError, match="from_hf: FalconH1Mixer is not read"):
        hf.from_hf(FalconH1Mixer())
    layer = mixers(model_of("Mamba2Mixer"))[0]
    layer.register_buffer("mup_vector", torch.ones(3))  # a multiplier Mamba2 has no place for
    with pytest.raises(ValueError, match="Mamba2Mixer holds mup_vector, which Mamba2 does not"):
        hf.from_hf(layer)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_heads=3, n_groups=2), r"Mamba2: num_heads=3 is not a multiple of n_groups=2"),
        (dict(state_size=0), r"Mamba2.*state_size.*0"),
        (dict(time_step_limit=(1.0, 0.5)), r"Mamba2: time_step_limit must be .*\(1.0, 0.5\)"),
    ],
)
def test_bad_sizes_are_named(options, message):
    sizes = dict(num_heads=4, head_dim=8) | options
    with pytest.raises(ValueError, match=message):
        Mamba2(WIDTH, **sizes)


# ---------------------------------------------------------------------------------------------
# Mamba's (Mamba-1's) mixers: Mamba, Falcon Mamba (norms without gains), Jamba (with gains)

MAMBA = {
    "MambaMixer": lambda: T.MambaConfig(
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        state_size=4,
        intermediate_size=24,
        conv_kernel=3,
        time_step_rank=3,
    ),
    "FalconMambaMixer": lambda: T.FalconMambaConfig(
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        state_size=4,
        intermediate_size=24,
        conv_kernel=3,
        time_step_rank=3,
    ),
    "JambaMambaMixer": lambda: T.JambaConfig(
        pad_token_id=0,
        hidden_size=WIDTH,
        vocab_size=VOCAB,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=24,
        mamba_d_state=4,
        mamba_d_conv=3,
        mamba_expand=2,
        mamba_dt_rank=3,
        attn_layer_offset=1,
        attn_layer_period=2,
        expert_layer_offset=1,
        expert_layer_period=2,
        num_experts=2,
    ),
}


def mamba_model_of(family: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(MAMBA[family]()).eval()
    with torch.no_grad():
        for layer in [m for m in model.modules() if type(m).__name__ == family]:
            for parameter in layer.parameters():
                parameter.normal_(0, 0.3)
    return model


def test_every_mamba_family_read_is_tested():
    assert set(MAMBA) == set(hf.MAMBA_FAMILIES)


@pytest.mark.parametrize("family", MAMBA)
def test_each_mamba_mixer_is_ours_number_for_number(family):
    model = mamba_model_of(family)
    layer = next(m for m in model.modules() if type(m).__name__ == family)
    ours = hf.from_hf(layer)
    assert type(ours.ssm).__name__ == "Mamba"
    x = torch.randn(2, 7, WIDTH, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        theirs, got = layer(x), ours(x)
        bound = BOUND * theirs.abs().max()
        torch.testing.assert_close(got, theirs, rtol=0, atol=bound)
        ours.ssm.A_log.add_(0.1)  # the decay rates moved: far outside the bound
        assert (ours(x) - theirs).abs().max() > 100 * bound


@pytest.mark.parametrize("family", MAMBA)
def test_a_mamba_model_on_our_mixers_generates_eager_s_tokens_and_logits(family):
    model = mamba_model_of(family, seed=12)
    ours = copy.deepcopy(model)
    assert hf.replace_linear_attention(ours) >= 1
    ids = torch.randint(1, VOCAB, (2, 6), generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        theirs_logits = model(ids).logits
        torch.testing.assert_close(
            ours(ids).logits, theirs_logits, rtol=0, atol=BOUND * theirs_logits.abs().max()
        )
    options = dict(max_new_tokens=5, do_sample=False, output_logits=True)
    theirs = model.generate(ids, **options, return_dict_in_generate=True)
    got = ours.generate(ids, **options, return_dict_in_generate=True)
    assert got.sequences.tolist() == theirs.sequences.tolist()
    for step, (a, b) in enumerate(zip(got.logits, theirs.logits, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=BOUND * b.abs().max(), msg=f"step {step}")


def test_mamba_s_bad_options_are_named():
    from attention.ssm import Mamba

    with pytest.raises(ValueError, match=r"Mamba: norms must be one of .*got norms='layer'"):
        Mamba(WIDTH, inner=24, norms="layer")
    with pytest.raises(ValueError, match=r"Mamba.*state_size.*0"):
        Mamba(WIDTH, inner=24, state_size=0)
