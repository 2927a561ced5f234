"""How the fast path cuts its work: blocks of query rows (`plan`), packs of (batch, group) slices
without copies (`packs`), and the threads that run the packs (`each`)."""

import math

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode

__all__ = ["ROW_ENTRIES", "MIN_ROWS", "BLOCK_ENTRIES", "PACK_THREADS", "plan", "packs", "each"]

#: Scores per query block of one slice: 2¹⁷ float32 entries, 512 KiB (a core's L2 cache holds
#: the block's four such matrices at n ≤ 1024).
ROW_ENTRIES = 2**17
#: Fewer query rows than this make the block's matrix products slow: dV and dK sum over the
#: block's rows (one thread, backward alone against torch's: 64 rows 1.45×, 128 rows 1.32×,
#: 256 rows 1.41× at n = 4096; 1.27×, 1.25×, 1.46× at n = 1024).
MIN_ROWS = 128
#: Scores per block across slices: several (batch, group) slices go through each batched matrix
#: product, so that the threads work on slices of their own (forward + backward against torch's
#: at batch 4, 12 heads, n = 1024, two threads: one slice per block 1.28×, two 1.18×, four 1.11×,
#: six 1.07-1.09×, twelve 1.08-1.16×). 2¹⁹ is four slices of 128 rows at n = 1024.
BLOCK_ENTRIES = 2**19


def plan(
    slices: int, n: int, keys: int | None = None, reach: int | None = None, heads: int = 1
) -> tuple[int, int]:
    """(slices per block, query rows per block) for n queries of `heads` heads each against
    `keys` keys (n if None): about ROW_ENTRIES scores per slice and BLOCK_ENTRIES per block, at
    least MIN_ROWS rows of scores (or all n). A query that reads at most `reach` keys before its
    own (a window of w: w − 1) makes a block of b rows read at most b + reach keys."""
    keys = n if keys is None else keys
    least = -(-MIN_ROWS // heads)  # the heads' rows together make the products' rows
    if reach is None:
        rows = min(n, max(least, ROW_ENTRIES // (heads * keys)))
        span = keys
    else:  # the largest b with heads · b (b + reach) ≤ ROW_ENTRIES
        area = ROW_ENTRIES / heads
        fit = (math.sqrt(reach**2 + 4 * area) - reach) / 2
        rows = min(n, max(least, int(fit)))
        span = min(keys, rows + reach)
    group = max(1, BLOCK_ENTRIES // (heads * rows * span))
    return min(group, slices), rows


def packs(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor | None, pack: int) -> tuple:
    """How to cut the (batch, group) slices into packs without copying: (the tensors as views
    whose first axes a pack indexes, each pack's index and its slices' batch entries and groups).

    Contiguous tensors are flattened to (B·g, h/g, ·, c_h), a pack any run of slices. Split
    heads are views into (B, n, h, c_h) that cannot be flattened without a copy each, so they go
    one batch entry at a time, `pack` groups at a time, as (B, g, h/g, ·, c_h) views.
    """
    batch, heads, n, width = q.shape
    groups, total = k.shape[1], k.shape[2]
    r = heads // groups
    tensors = (q, k, v) if grad_out is None else (q, k, v, grad_out)
    shapes = [
        (groups, r, n, width),
        (groups, total, width),
        (groups, total, width),
        (groups, r, n, width),
    ]
    if all(t.is_contiguous() for t in tensors):
        flat = tuple(t.view(-1, *shape[1:]) for t, shape in zip(tensors, shapes, strict=False))
        slices = batch * groups
        where = []
        for t0 in range(0, slices, pack):
            index = torch.arange(t0, min(slices, t0 + pack), device=q.device)
            where.append(((slice(t0, t0 + len(index)),), index // groups, index % groups))
        return flat, where
    split = tuple(t.view(batch, *shape) for t, shape in zip(tensors, shapes, strict=False))
    where = []
    for b in range(batch):
        for j0 in range(0, groups, pack):
            index = torch.arange(j0, min(groups, j0 + pack), device=q.device)
            entry = torch.full_like(index, b)
            where.append(((b, slice(j0, j0 + len(index))), entry, index))
    return split, where


#: Threads that run the packs side by side, each thread's products single-threaded (None: as
#: many as torch has; 1: one pack after the other, each product on torch's threads). `each`.
PACK_THREADS: int | None = None
_POOLS: dict = {}  # thread count -> its ThreadPoolExecutor, made on first use


def each(work, packs: list, device: torch.device) -> None:
    """`work(pack)` for every pack.

    On the CPU, the packs go to a pool of as many threads as torch has (`PACK_THREADS`), torch's
    own intra-op threads set to 1 meanwhile and restored after: each thread takes the next pack
    when it is done with its last. A thread slowed by another process on its core then takes
    fewer packs, where torch's threads, splitting every product evenly, each wait for the
    slowest at the end of every one of the blocks' many small products (forward + backward at
    batch 4, 12 heads, n = 1024, beside a one-core busy loop: 2.3× torch's fused kernel with
    torch's threads, 1.1× with the pool; docs/benchmarks.md). While the pool runs, other threads
    of the process see torch set to one thread.

    In the calling thread, one pack after the other: with one thread, on other devices, under
    torch.compile, and under a dispatch mode (tracing or recording operations), whose state is
    the calling thread's own."""
    threads = torch.get_num_threads() if PACK_THREADS is None else PACK_THREADS
    threads = min(threads, len(packs))
    serial = (
        device.type != "cpu"
        or torch.compiler.is_compiling()
        or _get_current_dispatch_mode() is not None
    )
    if threads <= 1 or serial:
        for pack in packs:
            work(pack)
        return
    from concurrent.futures import ThreadPoolExecutor

    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="attention")
    grad = torch.is_grad_enabled()  # thread-local: the pool's threads take the caller's

    def run(pack: tuple) -> None:
        with torch.set_grad_enabled(grad):
            work(pack)

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        list(_POOLS[threads].map(run, packs))
    finally:
        torch.set_num_threads(before)
