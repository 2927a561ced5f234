"""Train a small model whose attention is this package's `MultiHeadAttention` with
DistributedDataParallel on two CPU processes (the gloo backend), and show that the two ranks
end with the same weights as one process trained on the whole batch.

    python docs/examples/train_ddp.py

FSDP2 (`torch.distributed.fsdp.fully_shard`) takes the same modules: see the tests in
tests/attention/test_distributed.py, which also run the book's GPT and Llama 3 models.
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from attention import MultiHeadAttention

WORLD, PER_RANK, N, D = 2, 4, 8, 16


def model():
    torch.manual_seed(0)  # the same initial weights in every process
    return torch.nn.Sequential(
        MultiHeadAttention(D, D, context_length=N, dropout=0.0, num_heads=4), torch.nn.Linear(D, 1)
    ).double()


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(WORLD * PER_RANK, N, D, generator=g, dtype=torch.float64)


def train(net, x, steps=3):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        net(x).square().mean().backward()  # DDP averages the ranks' gradients
        optimizer.step()
    return net


def rank_main(rank, folder):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    half = data()[rank * PER_RANK : (rank + 1) * PER_RANK]
    net = train(DistributedDataParallel(model()), half)
    torch.save(net.module.state_dict(), os.path.join(folder, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(rank_main, args=(folder,), nprocs=WORLD)
        ranks = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(WORLD)]
    whole = train(model(), data()).state_dict()
    worst = max((ranks[r][k] - whole[k]).abs().max().item() for r in range(WORLD) for k in whole)
    print(f"largest difference from one process on the whole batch: {worst:.1e}")
    assert worst < 1e-12, worst
