"""Where a module keeps the matrices of the book's formulas: one adapter per convention.

An adapter recognises a module and returns its `Weights`: W_q, W_k, W_v (d × c, so that
Q = X W_q), the output projection W_o (c × c_out) if there is one, the biases, and the number of
heads. Return views of the module's parameters (``module.qkv.weight.mT[:, :c]``) where you can:
the check that heads are kept separate writes through them, on conform's own copy of the module.

Your own convention, in a few lines::

    from derive.testing import Weights, register_adapter

    @register_adapter("fused-qkv", recognises=lambda module: hasattr(module, "wqkv"))
    def fused_qkv(module):
        w_q, w_k, w_v = module.wqkv.weight.mT.chunk(3, dim=1)  # (3c, d) -> three (d, c)
        return Weights(w_q, w_k, w_v, W_o=module.wo.weight.mT, heads=module.n_heads)

A module called otherwise than ``module(x)``, with a mask of its own convention::

    def attend(module, x, allowed):  # allowed: None, or (n, n) bool, True = may attend
        bias = None if allowed is None else torch.where(allowed, 0.0, -1e4)  # no NaN
        return module(x, x, attn_bias=bias)  # (batch, n, d) -> (batch, n, c_out)

    register_adapter("mine", recognises=..., call=attend, mask="attn_bias")(read_weights)

Every argument is described in `register_adapter`. Adapters registered last are tried first,
the built-in ones (`derive.conformance.read.conventions`) after them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .target import ConformError

__all__ = [
    "Weights",
    "Adapter",
    "register_adapter",
    "registered",
    "Observe",
    "linear_weights",
    "per_head_parts",
    "norm_gains",
    "norm_width",
    "forward_takes",
]


def forward_takes(module: Any, *names: str) -> bool | None:
    """Whether the module's forward takes a parameter of one of `names`; None where its
    signature cannot be read (a builtin, a C extension)."""
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return None
    return any(name in parameters for name in names)


@dataclass
class Weights:
    """The book's matrices of one module, and the variant it computes.

    Args:
        W_q: `(d, c)`; Q = X W_q (+ b_q).
        W_k: `(d, c)`, or `(d, g c_h)` with g groups of keys and values shared by h / g
            heads each (grouped-query attention, the book's ``repeat_interleave`` order);
            never repeat them to c columns: a shared weight is compared as one. None where
            the variant computes K and V otherwise (multi-head latent attention: from the
            latent, its ``inputs`` W_dkv, W_uk, W_uv).
        W_v: as W_k, the same shape.
        W_o: `(c, c_out)`, C = Ĉ W_o (+ b_o); None without an output projection.
        b_q: `(c,)`, or None for none.
        b_k: as wide as W_k, or None for none.
        b_v: as wide as W_v, or None for none.
        b_o: `(c_out,)`, or None for none.
        heads: h; each head reads c_h = c / h columns of Q, in order.
        variant: the registered variants (``derive variants``) the module computes besides
            heads and causality, joined by ``+``: ``"rope+qk-norm"``; ``"gqa"`` is added when
            W_k is narrower than W_q.
        values: the numbers those variants read, by their symbol's name: RoPE's base
            ``beta``, the softcap ``kappa``, the window ``w``, QK-norm's ``epsilon`` (each
            variant's default where absent; ``derive variants --show NAME`` lists them).
        inputs: the other matrices those variants read, by letter: QK-norm's gains ``G_q``,
            ``G_k`` `(1, c_h)`; ALiBi's slopes ``Mu`` and the sinks' logits ``Zeta`` `(1, h)`;
            the gate's ``W_g`` `(d, c)`. Views, like the W's: their gradients are compared too.
    """

    W_q: Any
    W_k: Any
    W_v: Any
    W_o: Any = None
    b_q: Any = None
    b_k: Any = None
    b_v: Any = None
    b_o: Any = None
    heads: int = 1
    variant: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def groups(self) -> int:
        """g: the groups of keys and values (h where W_k is as wide as W_q)."""
        if self.W_k is None:
            return self.heads
        c, width = int(self.W_q.shape[1]), int(self.W_k.shape[1])
        return self.heads * width // c

    @property
    def variants(self) -> str:
        """`variant`, with ``gqa`` where the keys and values have fewer groups than heads."""
        parts = [p for p in self.variant.split("+") if p]
        if self.groups != self.heads and "gqa" not in parts:
            parts.insert(0, "gqa")
        return "+".join(parts)

    def check(self, adapter: str) -> None:
        """Check that the shapes fit together.

        Args:
            adapter: the adapter's name, for the message.

        Raises:
            ConformError: naming the adapter and the shapes, when heads does not divide c, W_k
                or W_v does not fit W_q and heads (or only one of them is given, or neither
                without a variant), or W_o does not have c rows.
        """
        d, c = tuple(self.W_q.shape)
        if not isinstance(self.heads, int) or self.heads < 1 or c % self.heads:
            raise ConformError(
                f"adapter {adapter}: heads={self.heads!r} must be a positive int dividing c={c}"
            )
        c_h = c // self.heads
        if self.W_k is None or self.W_v is None:
            if not self.variant:
                raise ConformError(
                    f"adapter {adapter}: W_k and W_v are None, and no variant "
                    "(Weights.variant) gives K and V otherwise"
                )
            if self.W_k is not None or self.W_v is not None:
                raise ConformError(
                    f"adapter {adapter}: give W_k and W_v, or neither (K and V "
                    "from the variant's inputs)"
                )
            return self._check_output(adapter, c)
        for name in ("W_k", "W_v"):
            shape = tuple(getattr(self, name).shape)
            fits = len(shape) == 2 and shape[0] == d and shape[1] % c_h == 0
            if not fits or shape[1] > c or self.heads % (shape[1] // c_h or 1):
                raise ConformError(
                    f"adapter {adapter}: {name} has shape {shape}, W_q has {(d, c)}: expected "
                    f"({d}, g·c_h) with c_h = {c_h} and g groups dividing heads={self.heads}"
                )
        if tuple(self.W_k.shape) != tuple(self.W_v.shape):
            raise ConformError(
                f"adapter {adapter}: W_k has shape {tuple(self.W_k.shape)}, "
                f"W_v has {tuple(self.W_v.shape)}"
            )
        self._check_output(adapter, c)

    def _check_output(self, adapter: str, c: int) -> None:
        if self.W_o is not None and self.W_o.shape[0] != c:
            raise ConformError(
                f"adapter {adapter}: W_o has shape {tuple(self.W_o.shape)}, expected ({c}, c_out)"
            )


def linear_weights(layer: Any) -> tuple[Any, Any]:
    """(W, b) of an nn.Linear as the book writes them: W = weight.mT (d × c)."""
    return layer.weight.mT, layer.bias


def per_head_parts(tensor: Any, heads: int, parts: int) -> list:
    """A projection whose last axis holds each head's `parts` blocks in turn (GPT-NeoX's and
    BLOOM's q, k, v; Qwen 3.5's queries, then the gate's logits): the blocks as `parts` tensors
    of h blocks each, heads in order (a weight (d, h·parts·c_h) or a bias (h·parts·c_h,))."""
    blocks = tensor.reshape(*tensor.shape[:-1], heads, parts, -1)
    return [blocks[..., i, :].flatten(-2) for i in range(parts)]


def norm_width(norm: Any) -> int:
    """The features an RMS norm's gains (``weight``, or this package's ``scale``) cover."""
    gains = getattr(norm, "weight", getattr(norm, "scale", None))
    if gains is None:
        raise ConformError(f"{type(norm).__name__}: an RMS norm without gains (weight or scale)")
    return int(gains.shape[-1])


def norm_gains(norm: Any, width: int) -> tuple[Any, float]:
    """An RMS norm's gains as the book's G (1, c_h), and its ε (torch's default where it has
    none: the machine epsilon of its dtype): ``weight``, or ``1 + weight`` (Gemma 3, Qwen 3.5),
    told apart by a probe (the norm of a row of ones is its gains, up to ε). Any other norm
    (a LayerNorm, which centres the row) is a ConformError."""
    import math

    gains = getattr(norm, "weight", getattr(norm, "scale", None))  # this package's: scale
    if gains is None:  # no learnable gains (elementwise_affine=False): ones
        like = next(norm.parameters(), None)
        gains = torch.ones(width, dtype=torch.get_default_dtype() if like is None else like.dtype)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if eps is None:
        eps = torch.finfo(gains.dtype).eps
    with torch.no_grad():
        ones = torch.ones(1, width, dtype=gains.dtype, device=gains.device)
        probe = norm(ones).double() * math.sqrt(1 + eps)
    weight = gains.detach().double()
    plain, offset = ((probe - g).abs().max() for g in (weight, 1 + weight))
    if min(plain, offset) > 1e-2 * (1 + float(weight.abs().max())):
        raise ConformError(
            f"{type(norm).__name__}: its output is neither weight · x/rms(x) nor "
            "(1 + weight) · x/rms(x), the RMS norms of the qk-norm variant"
        )
    return ((1 + gains) if offset < plain else gains)[None], float(eps)


#: A submodule whose "input" or "output" is the given letters (several: split equally).
Observe = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True)
class Adapter:
    """How to read (and call) modules of one convention; see the module docstring."""

    name: str
    recognises: Callable[[Any], bool]
    weights: Callable[[Any], Weights]
    call: Callable[[Any, Any, Any], Any] | None = None
    mask: str | None = None
    mask_means: str = "allowed"
    dropout: str | None = None
    observe: tuple[Observe, ...] = ()
    looks_for: str = ""
    conventions: Callable[[Any], dict] | None = None
    note: str = ""
    decode: Callable[..., Any] | None = None

    def read(self, module: Any) -> Weights:
        """The module's weights, checked."""
        try:
            weights = self.weights(module)
        except ConformError:
            raise
        except Exception as error:  # noqa: BLE001 - a user adapter's own failure
            raise ConformError(
                f"adapter {self.name} could not read the weights of "
                f"{type(module).__name__}: {type(error).__name__}: {error}"
            ) from None
        if not isinstance(weights, Weights):
            raise ConformError(
                f"adapter {self.name} returned {type(weights).__name__}, "
                "expected derive.testing.Weights"
            )
        weights.check(self.name)
        return weights


_REGISTERED: list[Adapter] = []


def register_adapter(
    name: str,
    *,
    recognises: Callable[[Any], bool],
    call: Callable[[Any, Any, Any], Any] | None = None,
    mask: str | None = None,
    mask_means: str = "allowed",
    dropout: str | None = None,
    observe: tuple[Observe, ...] = (),
    conventions: Callable[[Any], dict] | None = None,
    decode: Callable[..., Any] | None = None,
) -> Callable[[Callable[[Any], Weights]], Callable[[Any], Weights]]:
    """Register `weights(module) -> Weights` for modules `recognises` accepts (a decorator).

    Args:
        name: how reports name the convention (``--adapter NAME`` picks it); registering a
            name again replaces the adapter of that name.
        recognises: ``recognises(module) -> bool``, True for the modules of this convention;
            one that raises recognises nothing.
        call: ``call(module, x, allowed)``, if the module is not called as ``module(x)``.
            ``module`` is conform's copy (eval mode, in the dtype asked for); ``x`` a tensor
            (batch, n, d) in its dtype and on its device, or one sequence (n, d) when the
            module failed on a batch; ``allowed`` is None, or, when `mask` is given, a boolean
            tensor (n, n), the same for every sequence, where ``allowed[m, p]`` is True when
            query m may attend to key p (derive's convention, whatever `mask_means` says:
            translate it yourself). It returns C (batch, n, c_out), or a tuple whose first
            tensor is C.
        mask: without `call`, the keyword of ``module.forward`` that takes a boolean mask
            (given (n, n), or (batch, n, n) if (n, n) fails); with `call`, any name says that
            `call` uses `allowed`. None: the module takes no mask, the mask checks are n/a
            (and, with `call`, the verdict says they did not run).
        mask_means: what True means to the module's `mask` keyword, ``"allowed"`` (may
            attend) or ``"masked"`` (may not); conform inverts its mask for ``"masked"``.
            Not used with `call`, which is always given `allowed`.
        dropout: the attribute name of the nn.Dropout applied to the attention weights (at
            any depth: every nn.Dropout submodule of that name); conform replaces it with a
            stand-in that keeps every entry. None: the dropout check is n/a.
        observe: submodules whose output or input is Q, K, V or Ĉ, each
            ``(path, "output" or "input", letters)``, e.g. ``("qkv", "output", ("Q", "K",
            "V"))``: the tensor is split equally along its last axis among the letters
            (``"C_concat"`` is Ĉ); a report uses them to say where values first differ.
        conventions: ``conventions(module) -> dict``, what modules of this convention are
            known to do that the derivation leaves open, e.g. ``{"softmax": "float32"}`` for a
            layer whose softmax runs in float32 whatever its dtype (``"tables"``: RoPE's
            tables; ``"empty rows"``: ``"zero"``, ``"nan"`` or ``"any"``). The tolerances
            follow them, and the report states them; ``strict`` ignores them.
        decode: ``decode(module, x, parts)``, how the module takes tokens in turn with a
            cache: ``x[..., part, :]`` for each slice in `parts`, the cache carried from call
            to call, the outputs joined along the tokens (batch, n, c_out); None, or a sentence
            saying why, where a module keeps no cache. It may take ``variant`` and ``values``
            as `call` may. Omitted: the check "after a cache" is n/a (built-in ones:
            `derive.conformance.checks.cached`).

    Returns:
        the decorator, which registers `weights` and returns it unchanged. ``weights(module)``
            returns `Weights`; it is also called with each parameter's gradient in place of its
            value, to read the weights' gradients, so read the parameters, do not cache them.

    Raises:
        ValueError: `mask_means` is neither ``"allowed"`` nor ``"masked"``.
    """
    if mask_means not in ("allowed", "masked"):
        raise ValueError(f"mask_means must be 'allowed' or 'masked', got {mask_means!r}")

    def register(weights: Callable[[Any], Weights]) -> Callable[[Any], Weights]:
        _REGISTERED[:] = [a for a in _REGISTERED if a.name != name]
        adapter = Adapter(
            name,
            recognises,
            weights,
            call,
            mask,
            mask_means,
            dropout,
            observe,
            conventions=conventions,
            decode=decode,
        )
        _REGISTERED.insert(0, adapter)
        return weights

    return register


def registered() -> tuple[Adapter, ...]:
    """The adapters registered so far, the last first."""
    return tuple(_REGISTERED)
