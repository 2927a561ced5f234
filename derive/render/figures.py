"""Figures (matplotlib, the optional extra ``figures``): the example's heatmap, softmax saturation
(and, for QK-norm's documents, saturation with normalised queries and keys against its bound;
for FlashAttention's, the derived rounding bounds of the two backward routes against measured
errors).

Each figure comes as two files: the PNG the documents include, and a CSV of the numbers it plots.
Both are deterministic (fixed seeds; the PNG's only metadata is matplotlib's version, no date).
The drift test compares the CSVs always and the PNG bytes when the installed matplotlib is the
version that drew them (rendering may change between matplotlib releases; the data may not).
"""

from __future__ import annotations

import io
import math

import numpy as np

from .rounding_data import FLOOR, ROUNDING_SERIES, ROUTES, bound_column, rounding_data

__all__ = [
    "HEATMAP",
    "SATURATION",
    "SATURATION_QK_NORM",
    "saturation_data",
    "qk_norm_data",
    "qk_norm_figure",
    "heatmap_figure",
    "saturation_figure",
    "missing_matplotlib_message",
    "FLASH_ROUNDING",
    "rounding_figure",
]

HEATMAP = "attention-heatmap"
SATURATION = "softmax-saturation"
SATURATION_QK_NORM = "softmax-saturation-qk-norm"
FLASH_ROUNDING = "flash-rounding"
#: QK-norm's figure: its ε (the book's RMSNorm), one width, the scales of the inputs.
EPS = 1e-6
QK_WIDTH = 16
SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)

#: Widths c and the setting of the saturation figure: 16 keys, 200 seeded rows per width.
WIDTHS = (1, 4, 16, 64, 256, 1024)
KEYS = 16
ROWS = 200
SEED = 0


def missing_matplotlib_message() -> str:
    return "figures need matplotlib: pip install 'attention-derive[figures]'"


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise RuntimeError(missing_matplotlib_message()) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "derive", "font.size": 10})
    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": _software()})
    return buffer.getvalue()


def _software() -> str:
    import matplotlib

    return f"matplotlib {matplotlib.__version__}"


def saturation_data() -> list[tuple[int, float, float]]:
    """(c, mean largest weight unscaled, mean largest weight scaled by 1/√c) per width c.

    For each c: ROWS queries and KEYS keys with independent standard normal components (seeded),
    the scores q·k, and the largest softmax weight of each row, averaged over the rows.
    """
    rng = np.random.default_rng(SEED)
    data = []
    for width in WIDTHS:
        q = rng.standard_normal((ROWS, 1, width))
        k = rng.standard_normal((ROWS, KEYS, width))
        scores = (q * k).sum(axis=-1)  # (ROWS, KEYS): the dot products q·k
        data.append((width, _largest(scores), _largest(scores / math.sqrt(width))))
    return data


def qk_norm_data() -> list[tuple[float, float, float, float]]:
    """(s, largest weight scaled by 1/√c, the same after QK-norm, the most the bound allows) per
    scale s of the queries and keys (s times standard normal components; c = QK_WIDTH, gains 1).

    Without QK-norm the scores grow like s² and the softmax saturates; after it they do not
    depend on s, and no row can pass the bound |ω̃| ≤ √c (one key at +√c, the others at −√c).
    """
    rng = np.random.default_rng(SEED)
    q = rng.standard_normal((ROWS, 1, QK_WIDTH))
    k = rng.standard_normal((ROWS, KEYS, QK_WIDTH))
    root = math.sqrt(QK_WIDTH)
    bound = 1 / (1 + (KEYS - 1) * math.exp(-2 * root))
    data = []
    for scale in SCALES:
        a, b = scale * q, scale * k
        u, v = (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS) for x in (a, b))
        plain = (a * b).sum(axis=-1) / root
        normed = (u * v).sum(axis=-1) / root
        data.append((scale, _largest(plain), _largest(normed), bound))
    return data


def _largest(z: np.ndarray) -> float:
    """The largest softmax weight of each row, averaged over the rows."""
    z = z - z.max(axis=-1, keepdims=True)
    weights = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    return float(weights.max(axis=-1).mean())


def _csv(header: str, rows: list) -> bytes:
    lines = [header] + [",".join(_cell(value) for value in row) for row in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _cell(value: object) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def saturation_figure() -> dict[str, bytes]:
    """softmax-saturation.png and .csv, by file name."""
    plt = _pyplot()
    data = saturation_data()
    widths = [row[0] for row in data]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    ax.plot(widths, [row[1] for row in data], "o-", label=r"softmax$(q \cdot k)$")
    ax.plot(widths, [row[2] for row in data], "s-", label=r"softmax$(q \cdot k / \sqrt{c})$")
    ax.axhline(1 / KEYS, color="grey", linewidth=0.8, linestyle=":", label="uniform (1/16)")
    ax.set_xscale("log", base=4)
    ax.set_xticks(widths, [str(width) for width in widths])
    ax.minorticks_off()
    ax.set_xlabel("width c of queries and keys")
    ax.set_ylabel("mean largest weight in a row")
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    csv = _csv("c,largest_unscaled,largest_scaled", data)
    return {f"{SATURATION}.png": png, f"{SATURATION}.csv": csv}


def qk_norm_figure() -> dict[str, bytes]:
    """softmax-saturation-qk-norm.png and .csv: saturation against the scale of the inputs,
    with and without QK-norm, and the derived bound."""
    plt = _pyplot()
    data = qk_norm_data()
    scales = [row[0] for row in data]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    ax.plot(scales, [row[1] for row in data], "s-", label=r"softmax$(q \cdot k / \sqrt{c})$")
    ax.plot(scales, [row[2] for row in data], "^-", label=r"QK-norm, then $/ \sqrt{c}$")
    ax.plot(
        scales,
        [row[3] for row in data],
        "--",
        color="black",
        linewidth=1,
        label=r"the most $|\tilde\omega| \leq \sqrt{c}$ allows",
    )
    ax.axhline(1 / KEYS, color="grey", linewidth=0.8, linestyle=":", label="uniform (1/16)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(scales, [f"{scale:g}" for scale in scales])
    ax.minorticks_off()
    ax.set_xlabel(f"scale s of the queries and keys (c = {QK_WIDTH})")
    ax.set_ylabel("mean largest weight in a row")
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    csv = _csv("s,largest_scaled,largest_qk_norm,bound", data)
    return {f"{SATURATION_QK_NORM}.png": png, f"{SATURATION_QK_NORM}.csv": csv}


def heatmap_figure(tokens: tuple[str, ...], weights: list[list[float]]) -> dict[str, bytes]:
    """attention-heatmap.png and .csv (the weights, rounded to 6 decimals), by file name."""
    plt = _pyplot()
    n = len(tokens)
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0)
    labels = [f"{token} ({index + 1})" for index, token in enumerate(tokens)]
    ax.set_xticks(range(n), labels, rotation=45, ha="right")
    ax.set_yticks(range(n), labels)
    ax.set_xlabel("key token p")
    ax.set_ylabel("query token m")
    for m in range(n):
        for p in range(n):
            value = weights[m][p]
            color = "black" if value > 0.6 else "white"
            ax.text(p, m, f"{value:.2f}", ha="center", va="center", fontsize=7, color=color)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    rows = [(tokens[m], *[round(v, 6) for v in weights[m]]) for m in range(n)]
    return {f"{HEATMAP}.png": png, f"{HEATMAP}.csv": _csv("query," + ",".join(tokens), rows)}


def rounding_figure() -> dict[str, bytes]:
    """flash-rounding.png and .csv: the two panels, weights and scores' gradient, each with the
    two routes' derived bounds (lines) and measured errors (marks) against s."""
    plt = _pyplot()
    data = rounding_data()
    scales = [row[0] for row in data]
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), sharex=True)
    titles = ("weights $A$", r"scores' gradient $d\tilde\Omega$ (over the largest $\beta$)")
    for panel, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        for k, (label, colour) in enumerate(ROUTES):
            column = bound_column(panel, k)
            ax.plot(
                scales,
                [row[column] for row in data],
                "--",
                color=colour,
                label=f"{label}: derived bound",
            )
            ax.plot(
                scales,
                [max(row[column + 1], FLOOR) for row in data],
                "o",
                color=colour,
                label=f"{label}: measured",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("scale s of the scores")
    axes[0].set_ylabel("largest error (float32)")
    axes[0].legend(frameon=False, fontsize=7)
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    header = "s," + ",".join(
        f"{name.replace(' ', '_')}_{kind}"
        for name in ROUNDING_SERIES
        for kind in ("bound", "measured")
    )
    rows = [tuple(f"{value:.6g}" for value in row) for row in data]
    return {f"{FLASH_ROUNDING}.png": png, f"{FLASH_ROUNDING}.csv": _csv(header, rows)}


#: The figures an entry may show after its facts, by id, as PNG and CSV files.
FIGURES = {
    SATURATION: saturation_figure,
    SATURATION_QK_NORM: qk_norm_figure,
    FLASH_ROUNDING: rounding_figure,
}
