"""Hybrid models on this package in both kinds of layer: Qwen 3.5's and Qwen3-Next's Gated DeltaNet
layers read by `attention.huggingface.from_hf` into `attention.deltanet.GatedDeltaNet`, and a
Qwen 3.5 model whose linear layers are ours (`replace_linear_attention`) and whose softmax layers
run on `register()`: the same logits, gradients and greedy tokens with the cache as eager's.

Models are built from small configurations with random weights (nothing is downloaded), in
float64; transformers computes its delta rule in float32 whatever the model's dtype, so the
bound is float32's: 2⁻¹⁸ of the largest output (2⁻²⁴ a rounding, a factor 64 for the few that
add up) for a layer. Through a model the first layer's rounding passes through the three layers
after it, each of which may amplify it: `MODEL`, 2⁻¹⁴, leaves a factor 16 for them (measured:
about 2⁻¹⁶·³ on the logits). Each test also shows that the comparison can fail.
"""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3_5TextConfig, Qwen3NextConfig

import attention.huggingface as hf
from attention.deltanet import GatedDeltaNet

F32, MODEL = 2.0**-18, 2.0**-14
SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    initializer_range=0.3,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    # grouped keys (2 key heads for 4 value heads), keys and values of different widths
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=6,
    linear_conv_kernel_dim=3,
)
CONFIGS = {
    "qwen3_5": Qwen3_5TextConfig(**SIZES),
    "qwen3_next": Qwen3NextConfig(
        **SIZES,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
    ),
}


def model(name, implementation="eager", seed=0):
    torch.manual_seed(seed)
    built = AutoModelForCausalLM.from_config(
        copy.deepcopy(CONFIGS[name]),
        attn_implementation=implementation,
        experts_implementation="eager",
    ).double()
    with torch.no_grad():  # gains and biases away from their initial 1s and 0s
        for layer in built.model.layers:
            if hasattr(layer, "linear_attn"):
                layer.linear_attn.norm.weight.normal_()
                layer.linear_attn.dt_bias.normal_()
    return built.eval()


def assert_within(got, expected, relative=F32):
    expected, got = expected.detach(), got.detach()
    bound = relative * float(expected.abs().max())
    assert float((got - expected).abs().max()) <= bound, float(
        (got - expected).abs().max()
    ) / float(expected.abs().max())
    return bound


@pytest.mark.parametrize("name", CONFIGS)
@torch.no_grad()
def test_a_linear_layer_read_by_from_hf_gives_its_output(name):
    layer = model(name).model.layers[0].linear_attn
    ours = hf.from_hf(layer)
    assert isinstance(ours.linear, GatedDeltaNet)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    expected = layer(x)
    bound = assert_within(ours(x), expected)
    ours.linear.W_beta.weight.copy_(ours.linear.W_alpha.weight)  # β read from the decay's rows
    assert float((ours(x) - expected).abs().max()) > 100 * bound


def pair():
    """(eager, ours): the same Qwen 3.5 model, ours on this package in both kinds of layer."""
    eager = model("qwen3_5")
    ours = model("qwen3_5", hf.register(), seed=1)
    ours.load_state_dict(eager.state_dict())
    assert hf.replace_linear_attention(ours) == 2
    return eager, ours


def test_a_hybrid_model_gives_eager_s_logits_and_gradients():
    eager, ours = pair()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    expected, got = eager(ids).logits, ours(ids).logits
    assert_within(got, expected, MODEL)
    expected.square().mean().backward()
    got.square().mean().backward()
    theirs = dict(eager.named_parameters())
    for name, parameter in ours.named_parameters():
        # our layers' names: linear_attn.linear.W_query …; the same tensors, read from theirs
        if ".linear_attn." in name or parameter.grad is None:
            continue
        assert_within(parameter.grad, theirs[name].grad, MODEL)
    layer, read = eager.model.layers[0].linear_attn, ours.model.layers[0].linear_attn.linear
    qk = read.W_query.weight.shape[0]
    assert_within(read.W_query.weight.grad, layer.in_proj_qkv.weight.grad[:qk], MODEL)
    assert_within(read.A_log.grad, layer.A_log.grad, MODEL)


def test_a_hybrid_model_generates_eager_s_tokens_with_the_cache():
    eager, ours = pair()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(4))
    options = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    expected = eager.generate(ids, **options)
    assert expected.shape[-1] == 15
    torch.testing.assert_close(ours.generate(ids, **options), expected, rtol=0, atol=0)
    # and the cache is used: the tokens of a model that forgets its state differ
    forgetful = ours.model.layers[0].linear_attn
    forgetful.forward = lambda hidden_states, **_: forgetful.linear(hidden_states)
    assert not torch.equal(ours.generate(ids, **options), expected)


def test_a_layer_not_in_the_table_is_refused_by_name():
    with pytest.raises(TypeError, match="GatedDeltaNet is not a linear-attention layer read"):
        hf.from_linear(GatedDeltaNet(8, 8, 0.0, 2))


@torch.no_grad()
def test_an_output_bias_is_read_and_an_input_bias_refused():
    layer = copy.deepcopy(model("qwen3_5").model.layers[0].linear_attn)
    layer.out_proj.bias = torch.nn.Parameter(torch.randn(32, dtype=torch.float64))
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    assert_within(hf.from_hf(layer)(x), layer(x))
    layer.in_proj_z.bias = torch.nn.Parameter(torch.zeros(layer.in_proj_z.out_features))
    with pytest.raises(ValueError, match="bias on in_proj_z"):
        hf.from_hf(layer)
