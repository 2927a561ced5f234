"""The gradients of multi-head attention through the fast or the explicit path, their error
against a float64 reference, and the bound the fast path is held to at any score scale
(tests/attention/test_fused.py says why): error(fast) ≤ 4 · error(explicit) + 8 ε · G, ε the
float32 epsilon and G the largest gradient of the reference."""

import torch

from attention import functional as F

EPSILON = torch.finfo(torch.float32).eps


def gradients(tensors, upstream, options, dtype, explicit):
    """The gradients of `multi_head_attention` with respect to every tensor, in `dtype`, through
    the explicit path (`explicit`, which returning the weights selects) or the fast path."""
    leaves = [t.to(dtype).requires_grad_() for t in tensors]
    out = F.multi_head_attention(*leaves, **options, return_weights=explicit)
    out = out[0] if explicit else out
    return torch.autograd.grad(out, leaves, upstream.to(dtype))


def error(got, reference):
    """The largest absolute difference over all the gradients."""
    return max((g.double() - r).abs().max().item() for g, r in zip(got, reference, strict=True))


def bound(explicit_error, reference):
    """What the fast path may be off by: 4 · error(explicit) + 8 ε · G."""
    return 4 * explicit_error + 8 * EPSILON * max(r.abs().max().item() for r in reference)
