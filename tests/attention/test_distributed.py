"""Training across processes: the book's GPT (ch. 4, `MultiHeadAttention`) and its Llama 3
(`GroupedQueryAttention`) with our classes inside, in DistributedDataParallel and in FSDP2
(`fully_shard`) over two CPU processes (gloo), each rank on half of the batch, end with the
first gradients and the weights of one process trained on the whole batch; a deliberately wrong
gradient sync is caught. Their state_dicts go through torch.distributed.checkpoint (DCP) from
one process into the two sharded ones and back: the causal `mask` buffer travels with them, the
key-value cache (non-persistent buffers, the book's convention) does not and is rebuilt.

All in float64, so that the only difference between one process and two, the order in which the
batch's contributions are summed and averaged, stays at rounding level (unit roundoff 1.1e-16;
measured: at most 1.1e-16 absolute after three steps, against a tolerance of 1e-12), while a
wrong sync or half of the batch moves gradients and weights by 1e-2 or more (measured). The
optimiser is SGD with momentum, not the book's AdamW: AdamW divides each gradient entry by its
size plus ε = 1e-8, which magnifies the rounding of entries near zero up to lr/ε times (the
gradient of W_key.bias is zero in exact arithmetic, a softmax being blind to a constant added to
its row: all rounding), and leaves one process and two 3e-12 apart after three steps, noise that
no sync causes.

One spawn of two processes runs every distributed check (a spawn costs seconds); the tests then
compare what the ranks wrote with one process's training.
"""

import contextlib
import datetime
import os
from pathlib import Path

import book_generation
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn.functional as F
from book_generation import generate_text_simple_cached
from llms_from_scratch import ch04, llama3
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from attention import GroupedQueryAttention, MultiHeadAttention

WORLD, PER_RANK, N, STEPS = 2, 3, 11, 3  # 2 ranks × 3 sequences of 11 tokens, 3 steps
GPT = {
    "vocab_size": 37,
    "context_length": 13,
    "emb_dim": 12,
    "n_heads": 3,
    "n_layers": 2,
    "drop_rate": 0.0,
    "qkv_bias": True,
}
LLAMA = {
    "vocab_size": 37,
    "context_length": 13,
    "emb_dim": 12,
    "n_heads": 2,
    "n_layers": 2,
    "hidden_dim": 20,
    "n_kv_groups": 1,
    "rope_base": 500_000.0,
    "dtype": torch.float64,
    "rope_freq": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_context_length": 8,
    },
}
KINDS = ["gpt", "llama3"]  # ch. 4's GPTModel (MultiHeadAttention), Llama3Model (GQA, RoPE)
#: rounding of a reordered float64 reduction (see the module docstring); what any difference
#: between the batches or a wrong sync must exceed (it is 1e-2 or more)
RTOL = ATOL = 1e-12
WRONG = 1e-6
pytestmark = pytest.mark.filterwarnings(  # DCP without a process group: on purpose, here
    "ignore:torch.distributed is disabled, unavailable or uninitialized:UserWarning"
)


def build(kind, seed=0):
    """The book's model with our attention class swapped in while it is built, in float64.
    The same seed gives the book's parameters (tests/attention/test_grouped_models.py)."""
    with pytest.MonkeyPatch.context() as patch:
        torch.manual_seed(seed)
        if kind == "gpt":
            patch.setattr(ch04, "MultiHeadAttention", MultiHeadAttention)
            model = ch04.GPTModel(dict(GPT))
        else:
            patch.setattr(llama3, "GroupedQueryAttention", GroupedQueryAttention)
            model = llama3.Llama3Model(dict(LLAMA))
    return model.to(torch.float64)


def ours(model):
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention | GroupedQueryAttention)]


def batch(rows=slice(None)):
    """Token ids (2·3, n + 1): the inputs are the first n, the targets the last n."""
    g = torch.Generator().manual_seed(5)
    return torch.randint(0, GPT["vocab_size"], (WORLD * PER_RANK, N + 1), generator=g)[rows]


def half(rank):
    return batch(slice(rank * PER_RANK, (rank + 1) * PER_RANK))


def full(tensor):
    """A DTensor (FSDP2's sharded parameters and gradients) gathered; a tensor as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def train(model, tokens, *, named=None):
    """STEPS steps of SGD with momentum on the mean next-token cross-entropy.
    Returns the first step's gradients and the final weights and buffers, full tensors,
    named as in the unwrapped model (`named`)."""
    named = named or model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    grads = None
    for _ in range(STEPS):
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])  # (b, n) -> (b, n, vocab)
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        if grads is None:
            grads = {
                name: None if p.grad is None else full(p.grad).clone()
                for name, p in named.named_parameters()
            }
        optimizer.step()
    weights = {name: full(p.detach()).clone() for name, p in named.named_parameters()}
    buffers = {name: b.clone() for name, b in named.named_buffers()}
    return {"grads": grads, "weights": weights, "buffers": buffers}


def initial_checkpoint(root, kind):
    return str(Path(root) / f"initial-{kind}")


def sharded_checkpoint(root, kind):
    return str(Path(root) / f"fsdp-{kind}")


def results(root, kind, mode, rank):
    return Path(root) / f"{kind}-{mode}-{rank}.pt"


# --- what each of the two processes runs -----------------------------------------------------


def _unsynced(state, bucket):
    """A wrong DDP sync: each rank keeps its own gradients."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _summed(state, bucket):
    """A wrong DDP sync: the gradients all-reduced but not divided by the world size."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


@torch.no_grad()
def scramble_masks(model):
    """Our modules' `mask` buffers overwritten, so that a load that leaves them is seen."""
    for module in ours(model):
        if hasattr(module, "mask"):
            module.mask.fill_(7.0)


def _the_parents_mutant():
    """The deliberately broken `attention` that tests/conftest.py swaps into this run
    (ATTENTION_MUTANT, tests/mutants.py), swapped into a rank too: the ranks import `attention`
    afresh, and both sides of each comparison must run the same code."""
    name = os.environ.get("ATTENTION_MUTANT")
    if not name:
        return contextlib.nullcontext()
    from mutants import mutant

    return mutant(name)


def _ranks(rank, root):
    """One rank: DDP (right, unsynced, summed) and FSDP2 on each model, its half of the batch."""
    with _the_parents_mutant():
        _rank(rank, root)


def _rank(rank, root):
    """The FSDP2 run starts from other weights and loads the initial checkpoint (one process's)
    into its shards, and saves its trained shards for one process to load."""
    torch.set_num_threads(1)  # two processes on two cores
    store = dist.FileStore(str(Path(root) / "store"), WORLD)
    dist.init_process_group(
        "gloo", rank=rank, world_size=WORLD, store=store, timeout=datetime.timedelta(seconds=120)
    )
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        for kind in KINDS:
            for mode, hook in [("ddp", None), ("unsynced", _unsynced), ("summed", _summed)]:
                model = build(kind)
                wrapped = DistributedDataParallel(model)
                if hook is not None:
                    wrapped.register_comm_hook(None, hook)
                torch.save(train(wrapped, half(rank), named=model), results(root, kind, mode, rank))
            model = build(kind, seed=1)  # other weights, then the initial ones loaded
            scramble_masks(model)
            for block in model.trf_blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            state = get_model_state_dict(model)
            dcp.load(state, checkpoint_id=initial_checkpoint(root, kind))  # resharded
            set_model_state_dict(model, state)
            torch.save(train(model, half(rank)), results(root, kind, "fsdp", rank))
            dcp.save(get_model_state_dict(model), checkpoint_id=sharded_checkpoint(root, kind))
    finally:
        dist.destroy_process_group()


# --- the tests -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each model's initial weights saved by one process (DCP), then the two ranks spawned once;
    returns the folder where they wrote their results and checkpoints."""
    root = tmp_path_factory.mktemp("distributed")
    for kind in KINDS:
        dcp.save(build(kind).state_dict(), checkpoint_id=initial_checkpoint(root, kind))
    mp.spawn(_ranks, args=(str(root),), nprocs=WORLD, join=True)
    return root


@pytest.fixture(scope="module")
def one_process():
    """The references: one process trained on the whole batch, and on each rank's half."""
    return {
        (kind, rows): train(build(kind), tokens)
        for kind in KINDS
        for rows, tokens in [("whole", batch()), (0, half(0)), (1, half(1))]
    }


def gap(actual, expected):
    """The largest absolute difference between two dicts of tensors with the same names."""
    return max((actual[name] - expected[name]).abs().max().item() for name in expected)


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.slow  # the two ranks' spawn, once for the module: seconds
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_ranks_on_halves_equal_one_process_on_the_whole_batch(ranks, one_process, kind, mode):
    assert len(ours(build(kind))) == GPT["n_layers"]  # our classes are inside
    whole = one_process[kind, "whole"]
    for rank in range(WORLD):
        result = torch.load(results(ranks, kind, mode, rank))
        close(result["grads"], whole["grads"])
        close(result["weights"], whole["weights"])
        # in FSDP's run, the masks scrambled before its load came back from the checkpoint
        torch.testing.assert_close(result["buffers"], whole["buffers"], rtol=0, atol=0)
    # not vacuous: a rank's half alone trains other weights, by far more than the tolerance
    assert gap(one_process[kind, 0]["weights"], whole["weights"]) > WRONG
    assert gap(one_process[kind, 1]["grads"], whole["grads"]) > WRONG


@pytest.mark.slow  # the two ranks' spawn, once for the module: seconds
@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_gradient_sync_is_caught(ranks, one_process, kind):
    whole = one_process[kind, "whole"]
    for rank in range(WORLD):
        unsynced = torch.load(results(ranks, kind, "unsynced", rank))
        close(unsynced["weights"], one_process[kind, rank]["weights"])  # its half only
        assert gap(unsynced["weights"], whole["weights"]) > WRONG
        summed = torch.load(results(ranks, kind, "summed", rank))  # not averaged: twice
        close(summed["grads"], {name: 2 * grad for name, grad in whole["grads"].items()})
        assert gap(summed["grads"], whole["grads"]) > WRONG
        assert gap(summed["weights"], whole["weights"]) > WRONG


@pytest.mark.slow  # the two ranks' spawn, once for the module: seconds
@pytest.mark.parametrize("kind", KINDS)
def test_the_sharded_checkpoint_loads_into_one_process(ranks, one_process, kind):
    path = sharded_checkpoint(ranks, kind)
    model = build(kind, seed=2)
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    assert set(saved) == set(model.state_dict())  # every parameter and persistent buffer
    scramble_masks(model)
    state = model.state_dict()
    dcp.load(state, checkpoint_id=path)
    model.load_state_dict(state)
    trained = torch.load(results(ranks, kind, "fsdp", 0))
    torch.testing.assert_close(dict(model.named_parameters()), trained["weights"], rtol=0, atol=0)
    torch.testing.assert_close(dict(model.named_buffers()), trained["buffers"], rtol=0, atol=0)
    reference = build(kind)
    reference.load_state_dict(one_process[kind, "whole"]["weights"], strict=False)
    tokens = batch()[:, :-1]
    with torch.no_grad():
        close(model(tokens), reference(tokens))


CACHED = {**GPT, "context_length": 19}  # ch. 4's GPT with the cache: prompt 11, then 7 tokens


def cached_gpt(seed):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(book_generation, "MultiHeadAttention", MultiHeadAttention)
        torch.manual_seed(seed)
        return book_generation.GPTModel(dict(CACHED)).to(torch.float64)


def test_the_mask_travels_through_dcp_and_the_cache_is_rebuilt(tmp_path):
    """One process: a model in the middle of generation saved and loaded with DCP. The mask
    (persistent, as in ch. 3) is saved and restored; the cache (`cache_k`, `cache_v`,
    non-persistent as in the book's KV-cache class, a function of the weights and the tokens)
    is not saved, the loaded model starts with none, and generating again fills it with the
    same keys and values and gives the same tokens."""
    model = cached_gpt(seed=0)
    prompt = batch()[:, :N]
    generated = generate_text_simple_cached(model, prompt, 7)
    attention = ours(model)
    assert all(m.cache_k is not None and m.ptr_current_pos == N + 7 for m in attention)
    dcp.save(model.state_dict(), checkpoint_id=tmp_path)
    saved = set(dcp.FileSystemReader(tmp_path).read_metadata().state_dict_metadata)
    assert saved == set(model.state_dict())
    assert {f"trf_blocks.{i}.att.mask" for i in range(GPT["n_layers"])} <= saved
    assert not any("cache" in name for name in saved)

    loaded = cached_gpt(seed=1)
    scramble_masks(loaded)
    state = loaded.state_dict()
    dcp.load(state, checkpoint_id=tmp_path)
    loaded.load_state_dict(state)
    torch.testing.assert_close(loaded.state_dict(), model.state_dict(), rtol=0, atol=0)
    assert all(m.cache_k is None and m.ptr_current_pos == 0 for m in ours(loaded))
    assert torch.equal(generate_text_simple_cached(loaded, prompt, 7), generated)
    for mine, theirs in zip(ours(loaded), attention, strict=True):
        assert mine.ptr_current_pos == theirs.ptr_current_pos
        torch.testing.assert_close(mine.cache_k, theirs.cache_k, rtol=0, atol=0)
        torch.testing.assert_close(mine.cache_v, theirs.cache_v, rtol=0, atol=0)
