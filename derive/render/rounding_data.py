"""The numbers of FlashAttention's rounding figure (`derive.render.figures.rounding_figure`,
`derive.render.svg.rounding_svg`): the draws, their exact values, the derived first-order
bounds of both backward routes evaluated on them (`derive.proofs.rounding.bounds`), and the
errors measured on the same draws by tests/benchmarks/bench_flash_rounding.py, read from the
package's data."""

from __future__ import annotations

import numpy as np

__all__ = [
    "ROUNDING_SCALES",
    "ROUNDING_ROWS",
    "ROUNDING_KEYS",
    "ROUNDING_WIDTH",
    "ROUNDING_SEEDS",
    "ROUNDING_SERIES",
    "MEASURED",
    "FLOOR",
    "ROUTES",
    "rounding_inputs",
    "rounding_exact",
    "rounding_data",
    "measured",
    "bound_column",
]

#: The rounding figure: rows of ROUNDING_KEYS keys (ROUNDING_ROWS rows, values and upstream
#: gradient of width ROUNDING_WIDTH), scores s + z with z standard normal (a common size s, a
#: spread of 1), ROUNDING_SEEDS draws per s.
ROUNDING_SCALES = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
ROUNDING_ROWS, ROUNDING_KEYS, ROUNDING_WIDTH, ROUNDING_SEEDS = 8, 4, 8, 20
#: The measured errors (tests/benchmarks/bench_flash_rounding.py writes them: float32 kernels
#: round differently on different CPUs, so they are data, not recomputed with each figure).
MEASURED = "flash-rounding-measured.csv"
#: Where a plotted error of exactly 0 is drawn (a log axis has no 0).
FLOOR = 1e-12


def rounding_inputs(seed: int, s: float) -> dict[str, np.ndarray]:
    """One draw of the rounding figure, float32: the scaled scores s + Z (ROUNDING_ROWS ×
    ROUNDING_KEYS: scores of size s whose rows do not saturate, the spread the same at every s),
    the values V and the upstream gradient dC (Z, V, dC standard normal, seeded)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((ROUNDING_ROWS, ROUNDING_KEYS))
    values = rng.standard_normal((ROUNDING_KEYS, ROUNDING_WIDTH)).astype(np.float32)
    upstream = rng.standard_normal((ROUNDING_ROWS, ROUNDING_WIDTH)).astype(np.float32)
    return {"scores": (s + z).astype(np.float32), "V": values, "dC": upstream}


def rounding_exact(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The exact (float64) quantities of the backward pass from the float32 `inputs`: the
    weights A, the context C, dA = dC Vᵀ, D = rowsum(dC ∘ C), dΩ̃ = A ∘ (dA − D), the log-sum-exp
    L, and β = |dC| |V|ᵀ, β_C = rowsum(|dC| ∘ |C|), what the dot products' roundings are
    relative to."""
    scores, values, upstream = (inputs[k].astype(np.float64) for k in ("scores", "V", "dC"))
    top = scores.max(axis=-1, keepdims=True)
    exps = np.exp(scores - top)
    weights = exps / exps.sum(axis=-1, keepdims=True)
    context = weights @ values
    d_a = upstream @ values.T
    rowsum = (upstream * context).sum(axis=-1)
    return {
        "A": weights,
        "C": context,
        "dA": d_a,
        "D": rowsum,
        "dS": weights * (d_a - rowsum[:, None]),
        "L": (top[:, 0] + np.log(exps.sum(axis=-1))),
        "beta": np.abs(upstream) @ np.abs(values).T,
        "beta_C": (np.abs(upstream) * np.abs(context)).sum(axis=-1),
    }


def _rounding_bounds(inputs: dict[str, np.ndarray], functions: dict) -> dict[str, float]:
    """The derived first-order bounds of one draw: the largest over the entries of each
    weight's (absolute) and each dω̃'s (over the largest β of the draw)."""
    from ..proofs.rounding import evaluate

    exact = rounding_exact(inputs)
    scores = inputs["scores"].astype(np.float64)
    found = {}
    for name, function in functions.items():
        bound = evaluate(
            function,
            scores,
            upstream=exact["dA"],
            beta=exact["beta"],
            rowsum=exact["D"],
            beta_c=exact["beta_C"],
            width=ROUNDING_WIDTH,
        )
        unit = 1.0 if name.startswith("weights") else exact["beta"].max()
        found[name] = float(bound.max() / unit)
    return found


def measured() -> dict[float, dict[str, float]]:
    """The measured errors shipped with the package, by s."""
    from importlib import resources

    text = (resources.files("derive.render") / "assets" / MEASURED).read_text(encoding="utf-8")
    header, *lines = text.strip().splitlines()
    names = header.split(",")[1:]
    rows = (line.split(",") for line in lines)
    return {float(row[0]): dict(zip(names, map(float, row[1:]), strict=True)) for row in rows}


#: The columns of the rounding figure's CSV after s: bound and measured, for each quantity.
ROUNDING_SERIES = ("weights stored", "weights maximum", "gradient stored", "gradient maximum")
#: The two routes, as the figures name and colour them.
ROUTES = (("stored log-sum-exp", "#d62728"), ("recomputed maximum", "#1f77b4"))


def bound_column(panel: int, route: int) -> int:
    """The column of `rounding_data` that holds the bound of `route` (0: stored, 1: maximum)
    in `panel` (0: weights, 1: gradient); the measured error is the next one."""
    return 1 + 2 * (2 * panel + route)


def rounding_data() -> list[tuple[float, ...]]:
    """(s, then for each of ROUNDING_SERIES its derived bound and its measured error) per scale
    s: the largest over ROUNDING_SEEDS draws. Bounds from `derive.proofs.rounding.bounds`,
    evaluated on the draws; measured errors from the package's data."""
    from ..proofs.rounding import bounds

    functions = bounds(ROUNDING_KEYS)
    found = measured()
    data = []
    for s in ROUNDING_SCALES:
        draws = [
            _rounding_bounds(rounding_inputs(seed, s), functions) for seed in range(ROUNDING_SEEDS)
        ]
        row: list[float] = [float(s)]
        for name in ROUNDING_SERIES:
            row += [max(d[name] for d in draws), found[float(s)][name.replace(" ", "_")]]
        data.append(tuple(row))
    return data
