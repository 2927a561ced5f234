"""The backward pass of self-attention, written out by its matrix formulas.

Given the upstream gradient dC = ∂L/∂C of a scalar loss L (same shape as C):

$$dV = A^\\top dC,\\quad dA = dC\\,V^\\top,\\quad
  dS_{m,p} = a_{m,p}\\Big(dA_{m,p} - \\sum_r a_{m,r}\\,dA_{m,r}\\Big),\\quad
  d\\Omega = dS / \\sqrt{c},$$
$$dQ = d\\Omega\\,K,\\quad dK = d\\Omega^\\top Q,\\quad
  dW_q = X^\\top dQ,\\quad dW_k = X^\\top dK,\\quad dW_v = X^\\top dV,\\quad
  dX = dQ\\,W_q^\\top + dK\\,W_k^\\top + dV\\,W_v^\\top$$

where S = Ω/√c and the middle formula is the softmax Jacobian diag(a) − a aᵀ applied to each row.
The row sum Σ_r a_{m,r} dA_{m,r} equals Σ_j dC_{m,j} C_{m,j} (the rowsum identity, which
FlashAttention's backward pass relies on), but we compute it as written, from A and dA: in a row
whose softmax has saturated to one key p (a_{m,p} = 1, every other weight 0, as at large scores)
Σ_r a_{m,r} dA_{m,r} is dA_{m,p} exactly, so dS's row is exactly 0 like its exact value, whereas
Σ_j dC_{m,j} C_{m,j} rounds differently from dA_{m,p} and leaves about ε·|dA| there, which dQ = dΩ K
then multiplies by the (large) keys: at x ×1e19 that gave NaN gradients whose exact values are
about 1. Both sums cost no more than dA itself. Masked entries have a_{m,p} = 0, so they
contribute nothing. With batch dimensions, the weight gradients sum over the batch.

Every dtype is computed in float64 and the gradients returned in x's: this is the readable
reference, and its own derivative (a second-order gradient, autograd through these formulas)
multiplies a saturated row's weights by factors such as dA's row sum times the scores' upstream
gradient, about 1e45 at x ×1e15, beyond float32's range: in float32 that was ∞ − ∞ = NaN where
the exact second-order gradient is about 1; in float64 it is 0 as it should be. A readable
reference, not a fast kernel: tests hold it to `torch.autograd`.
"""

from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from . import _core
from . import mods as M
from ._checks import checked

__all__ = ["Gradients", "self_attention_gradients", "self_attention_backward"]


class Gradients(NamedTuple):
    """Every intermediate gradient of the backward pass, named as in the derivation.

    Args:
        dX: ∂L/∂X, `(*batch, n, d)`.
        dW_q: ∂L/∂W_q, `(d, c)`, summed over the batch.
        dW_k: ∂L/∂W_k, `(d, c)`, summed over the batch.
        dW_v: ∂L/∂W_v, `(d, c)`, summed over the batch.
        dQ: ∂L/∂Q, `(*batch, n, c)`.
        dK: ∂L/∂K, `(*batch, n, c)`.
        dV: ∂L/∂V, `(*batch, n, c)`.
        dA: ∂L/∂A, `(*batch, n, n)`.
        dOmega: ∂L/∂Ω, `(*batch, n, n)`.
    """

    dX: Tensor  # (*batch, n, d)
    dW_q: Tensor  # (d, c)
    dW_k: Tensor  # (d, c)
    dW_v: Tensor  # (d, c)
    dQ: Tensor  # (*batch, n, c)
    dK: Tensor  # (*batch, n, c)
    dV: Tensor  # (*batch, n, c)
    dA: Tensor  # (*batch, n, n)
    dOmega: Tensor  # (*batch, n, n)


def _sum_over_batch(t: Tensor) -> Tensor:
    """(*batch, d, c) -> (d, c): a weight is shared by every sequence of the batch."""
    return t.reshape(-1, *t.shape[-2:]).sum(dim=0)


def _gradients(
    x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, grad_c: Tensor, causal: bool
) -> Gradients:
    given = x.dtype
    if given != torch.float64:  # computed in float64, returned in x's dtype (module docstring)
        x, w_q, w_k, w_v, grad_c = (t.to(torch.float64) for t in (x, w_q, w_k, w_v, grad_c))
    c = w_q.shape[-1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    mods = M.modifications(causal=causal)
    _, a = _core.attend_explicitly(q, k, v, scale=_core.scale(c), mods=mods, heads=False)
    d_v = a.mT @ grad_c  # a: (*batch, n, n) -> its transpose
    d_a = grad_c @ v.mT  # v: (*batch, n, c) -> (*batch, c, n)
    row_sums = (a * d_a).sum(dim=-1, keepdim=True)  # Σ_r a_{m,r} dA_{m,r}, (*batch, n, 1)
    d_scaled = a * (d_a - row_sums)
    d_omega = _core.scaled_scores(d_scaled, c)  # dΩ = dS / √c
    d_q = d_omega @ k
    d_k = d_omega.mT @ q  # dΩ: (*batch, n, n) -> its transpose
    x_t = x.mT  # (*batch, n, d) -> (*batch, d, n)
    d_x = d_q @ w_q.T + d_k @ w_k.T + d_v @ w_v.T
    found = Gradients(
        dX=d_x,
        dW_q=_sum_over_batch(x_t @ d_q),
        dW_k=_sum_over_batch(x_t @ d_k),
        dW_v=_sum_over_batch(x_t @ d_v),
        dQ=d_q,
        dK=d_k,
        dV=d_v,
        dA=d_a,
        dOmega=d_omega,
    )
    return found if given == torch.float64 else Gradients(*(t.to(given) for t in found))


@checked
def self_attention_gradients(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c"],
    grad_c: Float[Tensor, "*batch n c"],
    *,
    causal: bool = False,
) -> Gradients:
    """All the gradients of the backward pass (see the module docstring for the formulas).

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: Wq, `(d, c)`.
        w_k: Wk, `(d, c)`.
        w_v: Wv, `(d, c)`.
        grad_c: dC = ∂L/∂C, the upstream gradient, shaped like C, `(*batch, n, c)`.
        causal: the gradients of causal self-attention (token m attends p ≤ m only).

    Returns:
        A `Gradients` tuple: dX `(*batch, n, d)`; dW_q, dW_k, dW_v `(d, c)`; dQ, dK, dV
            `(*batch, n, c)`; dA, dOmega `(*batch, n, n)`; computed in float64, in x's dtype.

    Raises:
        ShapeError: when the weights or grad_c do not fit x or one another.
        DtypeError: when a tensor is not float or not x's dtype.
        DeviceError: when a tensor is not on x's device.
        TypeError: when causal is not a bool.
    """
    return _gradients(x, w_q, w_k, w_v, grad_c, causal)


@checked
def self_attention_backward(
    x: Float[Tensor, "*batch n d"],
    w_q: Float[Tensor, "d c"],
    w_k: Float[Tensor, "d c"],
    w_v: Float[Tensor, "d c"],
    grad_c: Float[Tensor, "*batch n c"],
    *,
    causal: bool = False,
) -> tuple[
    Float[Tensor, "*batch n d"], Float[Tensor, "d c"], Float[Tensor, "d c"], Float[Tensor, "d c"]
]:
    """(dX, dWq, dWk, dWv): the gradients of L with respect to the inputs of `self_attention`,
    from the upstream gradient grad_c = ∂L/∂C, by the matrix formulas of the module docstring.

    Args:
        x: the input X, `(*batch, n, d)`.
        w_q: Wq, `(d, c)`.
        w_k: Wk, `(d, c)`.
        w_v: Wv, `(d, c)`.
        grad_c: dC = ∂L/∂C, the upstream gradient, `(*batch, n, c)`.
        causal: the gradients of causal self-attention (token m attends p ≤ m only).

    Returns:
        The tuple (dX, dWq, dWk, dWv): dX `(*batch, n, d)`, and dWq, dWk, dWv `(d, c)` each,
            summed over the batch; computed in float64, in x's dtype.

    Raises:
        ShapeError: when the weights or grad_c do not fit x or one another.
        DtypeError: when a tensor is not float or not x's dtype.
        DeviceError: when a tensor is not on x's device.
        TypeError: when causal is not a bool.

    >>> import torch
    >>> from attention.functional import self_attention_backward
    >>> x, w = torch.rand(5, 3), torch.rand(3, 2)
    >>> dX, dWq, dWk, dWv = self_attention_backward(x, w, w, w, torch.ones(5, 2))
    >>> dX.shape, dWq.shape
    (torch.Size([5, 3]), torch.Size([3, 2]))
    """
    g = _gradients(x, w_q, w_k, w_v, grad_c, causal)
    return g.dX, g.dW_q, g.dW_k, g.dW_v
