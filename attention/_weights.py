"""The seed's d×c weight matrices of the single-head modules, whatever their storage.

`SelfAttentionV1` stores Wq as the seed writes it (`W_query`: d×c); the `nn.Linear` classes store
Wqᵀ (`W_query.weight`: c×d). `SeedWeights` gives both the same view (`w_q`, `w_k`, `w_v`: d×c,
sharing storage and gradients), and `copy_weights` moves the matrices between any two classes,
transposing where needed (the book's exercise 3.1).
"""

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from ._shapes import ShapeError

__all__ = ["SeedWeights", "copy_weights"]


class SeedWeights:
    """The seed's d×c matrices (and biases) of a single-head module, whatever its storage."""

    W_query: nn.Parameter | nn.Linear
    W_key: nn.Parameter | nn.Linear
    W_value: nn.Parameter | nn.Linear

    def _seed(self, name: str) -> Tensor:
        stored = getattr(self, name)
        return stored if isinstance(stored, nn.Parameter) else stored.weight.mT  # (c, d) -> (d, c)

    def _bias(self, name: str) -> Tensor | None:
        stored = getattr(self, name)
        return None if isinstance(stored, nn.Parameter) else stored.bias

    @property
    def w_q(self) -> Float[Tensor, "d c"]:
        """Wq as the seed writes it (d×c), a view sharing storage (and gradients)."""
        return self._seed("W_query")

    @property
    def w_k(self) -> Float[Tensor, "d c"]:
        """Wk (d×c), a view."""
        return self._seed("W_key")

    @property
    def w_v(self) -> Float[Tensor, "d c"]:
        """Wv (d×c), a view."""
        return self._seed("W_value")

    @property
    def b_q(self) -> Float[Tensor, " c"] | None:
        return self._bias("W_query")

    @property
    def b_k(self) -> Float[Tensor, " c"] | None:
        return self._bias("W_key")

    @property
    def b_v(self) -> Float[Tensor, " c"] | None:
        return self._bias("W_value")


@torch.no_grad()
def copy_weights(source: SeedWeights, target: SeedWeights) -> None:
    """Copy Wq, Wk, Wv (and biases) from one single-head module into another, in place.

    Works between any two of SelfAttentionV1, SelfAttentionV2 and CausalAttention, transposing
    where the storage differs (V1: `W_query` is d×c; the others: `W_query.weight` is c×d). A
    target with biases gets the source's, or zeros if the source has none (the same function);
    a source with biases into a target without raises ValueError (it would change the function).

    >>> v1, v2 = SelfAttentionV1(3, 2), SelfAttentionV2(3, 2)
    >>> copy_weights(v2, v1)  # now v1(x) equals v2(x)
    """
    where = f"copy_weights({type(source).__name__} -> {type(target).__name__})"
    if source.w_q.shape != target.w_q.shape:
        raise ShapeError(
            f"{where}: source has (d, c)={tuple(source.w_q.shape)} but target has "
            f"(d, c)={tuple(target.w_q.shape)}"
        )
    for name in ("W_query", "W_key", "W_value"):
        bias = source._bias(name)
        target_bias = target._bias(name)
        if bias is not None and target_bias is None and bool(bias.ne(0).any()):
            raise ValueError(f"{where}: source has a {name} bias but the target has none")
        stored = getattr(target, name)
        if isinstance(stored, nn.Parameter):
            stored.copy_(source._seed(name))
        else:
            stored.weight.copy_(source._seed(name).mT)  # (d, c) -> (c, d)
            if stored.bias is not None:
                stored.bias.copy_(bias if bias is not None else torch.zeros_like(stored.bias))
