r"""`derive conform` for attention without the softmax: a Gated DeltaNet layer (Qwen 3.5's,
Qwen3-Next's, the book's ch04/08 class, this package's `GatedDeltaNet`, or any module with the
book's parameter names) checked against the gated delta rule's recurrence on its own weights
(`derive.proofs.linear` derives that the recurrent, chunked and parallel forms are one).

The layer is read into `attention.deltanet.GatedDeltaNet` (`READERS`: one row per kind of
layer), whose rule runs as the recurrence, token by token; its output on the same dyadic inputs
is what the layer must give, in one call, and token by token with its state where the layer
keeps one. When it does not, each port mistake of `MISTAKES` is computed on the same weights,
and the one whose output the layer gives is named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from .report import Check, Diagnosis, Report

__all__ = [
    "recognised",
    "run",
    "judged",
    "dyadic",
    "copied",
    "steps_ours",
    "steps_hugging_face",
    "Rule",
    "Reader",
    "MISTAKES",
    "READERS",
]

_BOOK = ("W_query", "W_key", "W_value", "W_gate", "W_beta", "W_alpha", "dt_bias", "A_log")
RULE = "o_t = S_tᵀ q_t, S_t = α_t S_{t−1} + k_t u_tᵀ, u_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)"
RULE_LATEX = (
    r"o_t = S_t^\top q_t,\; S_t = \alpha_t S_{t-1} + k_t u_t^\top,\; "
    r"u_t = \beta_t (v_t - \alpha_t S_{t-1}^\top k_t)"
)


def _book_like(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module) and all(hasattr(obj, name) for name in _BOOK)


def _hugging_face(obj: Any) -> bool:
    """A layer of transformers whose class `attention.huggingface.LINEAR_FAMILIES` reads
    (`attention` imported only for such a layer: conform imports nothing the target does not)."""
    kind = type(obj)
    if not (kind.__module__.startswith("transformers.") and kind.__name__.endswith("DeltaNet")):
        return False
    from attention.huggingface import LINEAR_FAMILIES

    return kind.__name__ in LINEAR_FAMILIES


def _read_book(layer: Any) -> Any:
    """A module with the book's names: the same weights in a `GatedDeltaNet` (β per channel or
    per head, read off W_beta's rows)."""
    from attention.deltanet import GatedDeltaNet

    heads, d_in = layer.W_alpha.weight.shape
    d_out = layer.W_value.weight.shape[0]
    ours = GatedDeltaNet(
        d_in,
        d_out,
        0.0,
        heads,
        layer.W_query.bias is not None,
        key_dim=layer.W_query.weight.shape[0] // heads,
        beta="channel" if layer.W_beta.weight.shape[0] == d_out else "head",
        out_features=layer.out_proj.weight.shape[0],
        out_bias=layer.out_proj.bias is not None,
        norm_eps=float(getattr(layer.norm, "eps", None) or 1e-6),
    )
    ours.load_state_dict(layer.state_dict())
    return ours.to(layer.W_query.weight.dtype)


def copied(layer: Any) -> Any:
    """A copy of our own module: it is its own reference (checked on a copy, as every target)."""
    import copy

    return copy.deepcopy(layer)


def _read_hugging_face(layer: Any) -> Any:
    from attention.huggingface import from_linear

    return from_linear(layer).linear


@dataclasses.dataclass(frozen=True)
class Reader:
    """How one kind of layer is read: `matches` it, `read` gives our module with its weights;
    `steps` runs it token by token with its own state (None: it keeps none)."""

    name: str
    matches: Callable[[Any], bool]
    read: Callable[[Any], Any]
    steps: Callable[[Any, torch.Tensor], torch.Tensor] | None = None


def steps_ours(layer: Any, x: torch.Tensor) -> torch.Tensor:
    layer.reset_cache()
    rows = [layer(x[:, t : t + 1], use_cache=True) for t in range(x.shape[1])]
    layer.reset_cache()
    return torch.cat(rows, dim=1)


def steps_hugging_face(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """The layer with a cache of its own kind at its index (transformers' `LinearAttentionLayer`
    for the state and the convolution's inputs), one token a call."""
    from transformers.cache_utils import Cache, LinearAttentionLayer

    index = int(getattr(layer, "layer_idx", 0))
    cache = Cache(layers=[LinearAttentionLayer() for _ in range(index + 1)])
    return torch.cat([layer(x[:, t : t + 1], cache=cache) for t in range(x.shape[1])], dim=1)


def _ours(obj: Any) -> bool:
    kind = type(obj)
    return kind.__module__ == "attention.deltanet" and kind.__name__ == "GatedDeltaNet"


#: The kinds of layer read, in the order they are tried.
READERS = (
    Reader("huggingface", _hugging_face, _read_hugging_face, steps_hugging_face),
    Reader("attention", _ours, copied, steps_ours),
    Reader("book", _book_like, _read_book),
)


def recognised(obj: Any) -> Reader | None:
    """The reader of a linear-attention layer, or None for anything else."""
    return next((reader for reader in READERS if reader.matches(obj)), None)


# ---------------------------------------------------------------------------------------------
# The rule, and each port's mistake, on the parts our module computes from the layer's weights


def _parts(ours: Any, x: torch.Tensor, normalise: bool = True, scale: float = 0.5):
    """q, k, v (*batch, h, n, ·), g (*batch, h, n) and β of our module on x (`parts`, its own
    code), the L2 norm (`normalise`) and the queries' power of 1/√c_k (`scale`) as given."""
    from attention.deltanet import l2_normalised

    q, k, v, g, beta, _ = ours.parts(x)
    if normalise:
        q, k = l2_normalised(q), l2_normalised(k)
    q = q * ours.key_dim ** (-scale)
    beta = ours.heads(beta, ours.head_dim) if ours.beta == "channel" else beta.mT[..., None]
    return q, k, v, g.to(q.dtype), beta.to(q.dtype)


def _recurrence(q, k, v, g, beta, mistake: str = "") -> torch.Tensor:
    """The gated delta rule token by token (β per head (…, n, 1) or per channel (…, n, c_h)),
    with one port mistake: "inclusive-decay" (token t's own write decayed by α_t),
    "beta-on-keys" (u_t = v_t − β_t S ᵀ k_t: β on what is taken out only)."""
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    rows = []
    for t in range(q.shape[-2]):
        alpha = g[..., t, None, None].exp()
        state = alpha * state
        predicted = (k[..., t, None, :] @ state).squeeze(-2)
        if mistake == "beta-on-keys":
            u = v[..., t, :] - beta[..., t, :] * predicted
        else:
            u = beta[..., t, :] * (v[..., t, :] - predicted)
        state = state + k[..., t, :, None] * u[..., None, :]
        if mistake == "inclusive-decay":
            state = state + (alpha - 1) * k[..., t, :, None] * u[..., None, :]
        rows.append((q[..., t, None, :] @ state).squeeze(-2))
    return torch.stack(rows, dim=-2)


def _transposed_solve(q, k, v, g, beta) -> torch.Tensor:
    """The parallel form with the delta rule's triangular system solved transposed (the upper
    solve with (I + L)ᵀ, a port's slip), β per head."""
    from attention.linear import decays

    n = q.shape[-2]
    _, gamma = decays(g, n, q)  # Γ ∘ M, the causal decays e^{G_m − G_p}
    system = (beta * (k @ k.mT) * gamma).tril(-1) + torch.eye(n, dtype=q.dtype, device=q.device)
    u = torch.linalg.solve_triangular(system.mT, beta * v, upper=True)
    return ((q @ k.mT) * gamma) @ u


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A port's mistake: its id, what it does, and its output on our module's weights."""

    id: str
    title: str
    wrong: str
    output: Callable[[Any, torch.Tensor], torch.Tensor]


def _with(mistake: str = "", *, normalise: bool = True, scale: float = 0.5, solve=None):
    def output(ours: Any, x: torch.Tensor) -> torch.Tensor:
        q, k, v, g, beta = _parts(ours, x, normalise, scale)
        if solve is not None:
            o = solve(q, k, v, g, beta)
        else:
            o = _recurrence(q, k, v, g, beta, mistake)
        return ours.finished(x, o)

    return output


#: The mistakes ports of Gated DeltaNet make, each computed on the layer's own weights.
MISTAKES = (
    Mistake(
        "inclusive-decay",
        "the decay taken inclusive: token t's own write decayed by α_t",
        "S_t = α_t (S_{t−1} + k_t u_tᵀ)",
        _with("inclusive-decay"),
    ),
    Mistake(
        "beta-on-keys",
        "β applied to the state's prediction only, not to the value written",
        "u_t = v_t − β_t α_t S_{t−1}ᵀ k_t",
        _with("beta-on-keys"),
    ),
    Mistake(
        "transposed-solve",
        "the triangular system solved with its transpose",
        "U = ((I + L)ᵀ)⁻¹ diag(β) V",
        _with(solve=_transposed_solve),
    ),
    Mistake(
        "l2-norm-forgotten",
        "the queries and keys not normalised to unit length",
        "q_t, k_t as projected, q_t / √c_k",
        _with(normalise=False),
    ),
    Mistake(
        "scale-twice",
        "the queries scaled by 1/√c_k twice",
        "q_t / c_k",
        _with(scale=1.0),
    ),
)


def _matches(mistake: Mistake, ours: Any, x: torch.Tensor, got: torch.Tensor, tol: float) -> bool:
    try:
        return _error(got, mistake.output(ours, x)) <= tol
    except RuntimeError:  # a mistake this layer cannot make (a solve per head, β per channel)
        return False


def _error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected.double()).abs().max())


def run(obj: Any, reader: Reader, *, n: int = 7, seed: int = 0, name: str = "") -> Report:
    """The report of one linear-attention layer: its output against the recurrence on its own
    weights, in one call and token by token with its state; the mistake named if it fails."""
    layer = obj
    ours = reader.read(layer).eval()
    ours.chunk_size = None  # the recurrence: the rule as the derivation states it
    d = ours.W_query.weight.shape[1]
    return judged(
        layer,
        reader,
        ours,
        dyadic(n, d, ours.W_query.weight.dtype, seed),
        Rule("gated-deltanet", "the gated delta rule", RULE, RULE_LATEX, MISTAKES),
        kind="linear attention",
        sizes={"n": n, "d": d, "h": ours.num_heads, "c_k": ours.key_dim, "c_h": ours.head_dim},
        name=name,
    )


def dyadic(n: int, d: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Inputs (2, n, d) of multiples of 1/8 in [−1, 1]: exact in every float type."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(-8, 9, (2, n, d), generator=gen) / 8).to(dtype)


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a recurrent layer is checked against: the variant that derives it, its name in
    words, the rule in plain text and LaTeX, and the mistakes of its ports."""

    variant: str
    title: str
    text: str
    latex: str
    mistakes: tuple[Mistake, ...]


def judged(
    layer: Any,
    reader: Reader,
    ours: Any,
    x: torch.Tensor,
    rule: Rule,
    *,
    kind: str,
    sizes: dict[str, int],
    name: str = "",
) -> Report:
    """The report of a recurrent layer against `ours` (our module on its weights, running the
    recurrence) on x: in one call, and token by token with the layer's state where it keeps
    one; where it fails, the first of the rule's mistakes whose output the layer gives."""
    n, dtype = x.shape[-2], x.dtype
    with torch.no_grad():
        expected = ours(x)
        got = layer(x)
        got = got[0] if isinstance(got, tuple) else got
        stepped = None if reader.steps is None else reader.steps(layer, x)
        error = _error(got, expected)
        step_error = None if stepped is None else _error(stepped, expected)
        worst = max(error, step_error or 0.0)
        computed, precision = dtype, None
        unit = torch.finfo(dtype).eps / 2
        # the rule's own float rounding: a few roundings per token, n tokens, on outputs of
        # the size of the largest; a factor 64 over u n for the norm, gates and projections
        tolerance = 64 * unit * n * float(expected.abs().max())
        if dtype == torch.float64 and worst > tolerance:  # computed in float32 inside?
            coarse = 64 * (torch.finfo(torch.float32).eps / 2) * n * float(expected.abs().max())
            if worst <= coarse:  # within float32's rounding: the finding, not a mistake
                computed, precision = torch.float32, "float32"
                unit, tolerance = torch.finfo(torch.float32).eps / 2, coarse
        named = str(computed).removeprefix("torch.")
        if precision is not None:
            named += f", its inputs {str(dtype).removeprefix('torch.')}"
        checks = [
            Check(
                "forward values",
                "PASS" if error <= tolerance else "FAIL",
                f"the layer's output is {rule.title}'s on its own weights",
                rule.text,
                rule.latex,
                error,
                tolerance,
                f"64 u n max|o|: u = {unit:.1e} ({named}), n = {n}",
            )
        ]
        if step_error is None:
            checks.append(
                Check(
                    "token by token",
                    "n/a",
                    "one token at a time with its state gives the same outputs",
                    "",
                    "",
                    None,
                    None,
                    "the layer keeps no state between calls",
                )
            )
        else:
            checks.append(
                Check(
                    "token by token",
                    "PASS" if step_error <= tolerance else "FAIL",
                    "one token at a time with its state gives the same outputs",
                    "S_t carried from call to call",
                    r"S_t \text{ carried from call to call}",
                    step_error,
                    tolerance,
                    "the same as in one call",
                )
            )
        diagnosis = None
        if error > tolerance:
            found = [m for m in rule.mistakes if _matches(m, ours, x, got, tolerance)]
            diagnosis = (
                Diagnosis(
                    found[0].id,
                    found[0].title,
                    wrong=found[0].wrong,
                    right=rule.text,
                    also=tuple(m.id for m in found[1:]),
                    matched_on=("one call",),
                )
                if found
                else Diagnosis(None, first_difference=f"the outputs differ by {error:.3g} at most")
            )
    return Report(
        target=name or type(layer).__name__,
        kind=f"{kind} ({reader.name})",
        convention=None,
        causal=True,
        causal_how="a recurrence",
        dtype=str(dtype).removeprefix("torch."),
        sizes=sizes,
        checks=tuple(checks),
        diagnosis=diagnosis,
        variant=rule.variant,
        notes=(
            (
                "finding: it computes at float32's precision: given float64, its outputs are "
                "within float32's rounding of the rule's and not within float64's (a layer that "
                "casts to float32 inside)",
            )
            if precision
            else ()
        ),
        precision=precision,
    )
