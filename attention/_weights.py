"""The weights of the modules: the book's d×c view of them, copying them, reading them fast.

`SelfAttentionV1` stores Wq as the book writes it (`W_query`: d×c); the `nn.Linear` classes store
Wqᵀ (`W_query.weight`: c×d). `BookWeights` gives both the same view (`w_q`, `w_k`, `w_v`: d×c,
sharing storage and gradients), and `copy_weights` moves the matrices between any two classes,
transposing where needed (the book's exercise 3.1). The `*_weights` functions give each module's
tensors to the checks of its `forward` (`attention._checks.Weights`), named as in the state_dict.
"""

import functools
import typing
from typing import Any

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from ._checks import Weights
from ._shapes import ShapeError

if typing.TYPE_CHECKING:  # for annotations only: attention.modules imports this module
    from .modules._common import MultiHeadModule

__all__ = [
    "BookWeights",
    "copy_weights",
    "parameter",
    "submodule",
    "v1_weights",
    "v2_weights",
    "multi_head_weights",
    "cross_weights",
    "heads_weights",
    "named_weights",
]


def submodule(module: nn.Module, name: str) -> nn.Module:
    """`module.name` for a registered submodule, without nn.Module.__getattr__'s cost (a dict
    look-up instead of about 0.5 µs: the checks read the weights at every call)."""
    found = module._modules.get(name)
    return found if found is not None else getattr(module, name)


def parameter(module: nn.Module, name: str) -> Tensor | None:
    """`module.name` for a registered parameter (None if registered as None), fast likewise."""
    parameters = module._parameters
    return parameters[name] if name in parameters else getattr(module, name, None)


class BookWeights:
    """The book's d×c matrices (and biases) of a single-head module, whatever its storage:
    `W_query`, `W_key`, `W_value` are nn.Parameters (d×c) or nn.Linears, as each class declares
    them (read here by name)."""

    def _seed(self, name: str) -> Tensor:
        stored = getattr(self, name)
        return stored if isinstance(stored, nn.Parameter) else stored.weight.mT  # (c, d) -> (d, c)

    def _bias(self, name: str) -> Tensor | None:
        stored = getattr(self, name)
        return None if isinstance(stored, nn.Parameter) else stored.bias

    @property
    def w_q(self) -> Float[Tensor, "d c"]:
        """Wq as the book writes it (d×c), a view sharing storage (and gradients)."""
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
def copy_weights(source: BookWeights, target: BookWeights) -> None:
    """Copy Wq, Wk, Wv (and biases) from one single-head module into another, in place.

    Works between any two of SelfAttentionV1, SelfAttentionV2 and CausalAttention, transposing
    where the storage differs (V1: `W_query` is d×c; the others: `W_query.weight` is c×d). A
    target with biases gets the source's, or zeros if the source has none (the same function);
    a source with biases into a target without raises ValueError (it would change the function).
    Between two multi-head modules of as many heads (MultiHeadAttention, MultiHeadAttentionWithSWA,
    CrossAttention), `out_proj` is copied too.

    Args:
        source: the module to copy from.
        target: the module to copy into.

    Raises:
        TypeError: when source or target is not a module with the book's Wq, Wk, Wv.
        ValueError: when the two have different numbers of heads (or one has a single head and
            the other several), or source has a nonzero bias where target has none.
        ShapeError: when their Wq differ in shape (d, c).

    >>> from attention import SelfAttentionV1, SelfAttentionV2
    >>> v1, v2 = SelfAttentionV1(3, 2), SelfAttentionV2(3, 2)
    >>> copy_weights(v2, v1)  # now v1(x) equals v2(x)
    """
    for name, module in (("source", source), ("target", target)):
        if not isinstance(module, BookWeights):
            raise TypeError(
                f"copy_weights: {name} must be an attention module with the book's Wq, Wk, Wv "
                f"(SelfAttentionV1, SelfAttentionV2, CausalAttention), "
                f"got {type(module).__name__}"
            )
    where = f"copy_weights({type(source).__name__} -> {type(target).__name__})"
    heads = [getattr(module, "num_heads", None) for module in (source, target)]
    if heads[0] != heads[1]:  # a multi-head module's out_proj has nowhere to go, or no source
        said = ["one head, no out_proj" if h is None else f"num_heads={h}" for h in heads]
        raise ValueError(
            f"{where}: source has {said[0]} but target has {said[1]}; copying would change "
            f"the function"
        )
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
    if heads[0] is not None:  # two multi-head modules: their output projections too
        # (the classes with num_heads are MultiHeadModules, each with an out_proj)
        source_out = typing.cast("MultiHeadModule", source).out_proj
        typing.cast("MultiHeadModule", target).out_proj.load_state_dict(source_out.state_dict())


# ---------------------------------------------------------------------------------------------
# The weights the checks of each forward read (at every call: read from the modules' own
# dictionaries, what nn.Module.__getattr__ reads at 0.5 µs a look-up, attributes as fallback)

WeightDC = Float[Tensor, "d c"]
LinearWeight = Float[Tensor, "c d"]  # nn.Linear(d, c).weight is Wᵀ
LinearBias = Float[Tensor, " c"] | None
OutWeight = Float[Tensor, "c_out c"]  # out_proj.weight is W_oᵀ
OutBias = Float[Tensor, " c_out"]
_QKV = ("W_query", "W_key", "W_value")
_V1_NAMES = tuple((name, WeightDC) for name in _QKV)


@functools.cache
def _qkv_names(prefix: str = "") -> tuple[tuple[str, object], ...]:
    """(name, annotation) of the projections' weights and biases, as in the state_dict."""
    return tuple(
        (f"{prefix}{name}.{part}", annotation)
        for name in _QKV
        for part, annotation in (("weight", LinearWeight), ("bias", LinearBias))
    )


_V2_NAMES = _qkv_names()
_MHA_NAMES = (*_V2_NAMES, ("out_proj.weight", OutWeight), ("out_proj.bias", OutBias))
#: With the output gate, W_query carries each head's queries and its gate's logits (2c × d).
GatedBias = Float[Tensor, " c2"] | None
_GATED_MHA_NAMES = (
    ("W_query.weight", Float[Tensor, "c2 d"]),
    ("W_query.bias", GatedBias),
    *_MHA_NAMES[2:],
)


def _qkv_tensors(module: nn.Module) -> tuple[Tensor | None, ...]:
    """The `nn.Linear` projections' weights and biases, in the order of `_qkv_names`."""
    try:
        modules: dict[str, Any] = module._modules  # None, or not an nn.Linear: caught below
        q = modules["W_query"]._parameters
        k = modules["W_key"]._parameters
        v = modules["W_value"]._parameters
        return (q["weight"], q["bias"], k["weight"], k["bias"], v["weight"], v["bias"])
    except (KeyError, AttributeError):  # replaced by something else than an nn.Linear
        linears = [submodule(module, name) for name in _QKV]
        return tuple(parameter(linear, part) for linear in linears for part in ("weight", "bias"))


def v1_weights(module: nn.Module) -> Weights:
    """SelfAttentionV1: W_query, W_key, W_value (d×c)."""
    try:
        own = module._parameters
        return _V1_NAMES, (own["W_query"], own["W_key"], own["W_value"])
    except KeyError:  # replaced by something else than a parameter
        return _V1_NAMES, tuple(parameter(module, name) for name in _QKV)


def v2_weights(module: nn.Module) -> Weights:
    """The nn.Linear single-head modules: W_query.weight (c×d), W_query.bias (c), …"""
    return _V2_NAMES, _qkv_tensors(module)


def multi_head_weights(module: nn.Module) -> Weights:
    """MultiHeadAttention: the projections, then out_proj.weight (c_out×c) and its bias."""
    out_proj = submodule(module, "out_proj")
    tensors = (*_qkv_tensors(module), parameter(out_proj, "weight"), parameter(out_proj, "bias"))
    return (_GATED_MHA_NAMES if getattr(module, "gate", False) else _MHA_NAMES), tensors


_CROSS_NAMES = (
    ("W_query.weight", LinearWeight),
    ("W_query.bias", LinearBias),
    ("W_key.weight", Float[Tensor, "c d_y"]),
    ("W_key.bias", LinearBias),
    ("W_value.weight", Float[Tensor, "c d_y"]),
    ("W_value.bias", LinearBias),
    ("out_proj.weight", OutWeight),
    ("out_proj.bias", OutBias),
)


def cross_weights(module: nn.Module) -> Weights:
    """CrossAttention: as MultiHeadAttention's, `W_key` and `W_value` reading Y (c×d_y)."""
    out_proj = submodule(module, "out_proj")
    tensors = (*_qkv_tensors(module), parameter(out_proj, "weight"), parameter(out_proj, "bias"))
    return _CROSS_NAMES, tensors


def heads_weights(wrapper: nn.Module) -> Weights:
    """MultiHeadAttentionWrapper: every head's projections, named heads[i].W_query.weight …"""
    # the wrapper's ModuleList holds the CausalAttention heads it built
    heads = typing.cast("list[nn.Module]", list(submodule(wrapper, "heads")._modules.values()))
    names = tuple(item for i in range(len(heads)) for item in _qkv_names(f"heads[{i}]."))
    return names, tuple(tensor for head in heads for tensor in _qkv_tensors(head))


def named_weights(names: tuple[tuple[str, Any], ...]):
    """The weights reader (`attention._checks.Weights`) of a module whose checked tensors are the
    table `names`: each (its state_dict name, ``"sub.weight"`` or ``"A_log"``; its annotation)."""

    def read(module: nn.Module) -> Weights:
        tensors = tuple(
            parameter(submodule(module, name.split(".")[0]), name.split(".")[1])
            if "." in name
            else parameter(module, name)
            for name, _ in names
        )
        return names, tensors

    return read
