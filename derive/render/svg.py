"""Figures as SVG, drawn by derive's own code (no matplotlib): the worked example's heatmap of
attention weights and the softmax-saturation plot, for the HTML page and for notebooks.

They plot the same numbers as the PNGs of `derive.render.figures` (`saturation_data`, the
example's weights). Text, axes and lines use ``currentColor``, so that a figure takes the colour
of the page around it (light or dark); only the heatmap's cells carry colours of their own, a
ramp through five colours of matplotlib's viridis. Coordinates are printed with fixed decimals:
the same numbers give the same bytes.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from .figures import KEYS, QK_WIDTH, qk_norm_data, saturation_data
from .rounding_data import FLOOR, ROUTES, bound_column, rounding_data

__all__ = [
    "Svg",
    "heatmap",
    "saturation_plot",
    "heatmap_svg",
    "saturation_svg",
    "qk_norm_svg",
    "rounding_svg",
    "compatibility_svg",
]

#: viridis at 0, 1/4, 1/2, 3/4, 1 (the colour map of the PNG heatmap).
RAMP = (
    (0x44, 0x01, 0x54),
    (0x3B, 0x52, 0x8B),
    (0x21, 0x91, 0x8C),
    (0x5E, 0xC9, 0x62),
    (0xFD, 0xE7, 0x25),
)
FONT = 'font-family="sans-serif" font-size="11" fill="currentColor"'


@dataclass(frozen=True)
class Svg:
    """An SVG figure; notebooks show it (``_repr_svg_``), pages inline `text`."""

    title: str
    text: str

    def _repr_svg_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<SVG figure: {self.title}>"


def _n(value: float) -> str:
    """A coordinate: two decimals, trailing zeros dropped."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _text(x: float, y: float, words: str, anchor: str = "middle", extra: str = "") -> str:
    return (
        f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}"{extra}>{html.escape(words)}</text>'
    )


def _power(x: float, y: float, power: int, anchor: str = "middle") -> str:
    """A tick label 10^power, written as a power (10⁻⁴, with the true minus sign), not 1e-4."""
    exponent = f"{power}".replace("-", "\u2212")
    return (
        f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}">10<tspan dy="-5" '
        f'font-size="8">{exponent}</tspan></text>'
    )


def colour(value: float) -> str:
    """The ramp's colour at `value` in [0, 1], as ``#rrggbb``."""
    value = min(max(value, 0.0), 1.0) * (len(RAMP) - 1)
    low = min(int(value), len(RAMP) - 2)
    part = value - low
    rgb = (round(a + (b - a) * part) for a, b in zip(RAMP[low], RAMP[low + 1], strict=True))
    return "#" + "".join(f"{channel:02x}" for channel in rgb)


def _svg(title: str, width: int, height: int, body: list[str]) -> str:
    label = html.escape(title)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{label}">'
        f"<title>{label}</title>" + "".join(body) + "</svg>"
    )


def heatmap_svg(tokens: tuple[str, ...], weights: list[list[float]]) -> str:
    """The attention weights as an n × n grid (row: query token, column: key token), each cell
    coloured by its weight and labelled with it, and a colour bar from 0 to 1."""
    n, size = len(tokens), 44
    labels = [f"{token} ({index + 1})" for index, token in enumerate(tokens)]
    left, top = 96, 12
    grid = n * size
    body = [f"<g {FONT}>"]
    for m in range(n):
        for p in range(n):
            value, x, y = weights[m][p], left + p * size, top + m * size
            body.append(
                f'<rect x="{x}" y="{y}" width="{size}" height="{size}" '
                f'fill="{colour(value)}"><title>{labels[m]} → {labels[p]}: '
                f"{value:.4f}</title></rect>"
            )
            ink = "#000000" if value > 0.6 else "#ffffff"
            body.append(
                _text(
                    x + size / 2,
                    y + size / 2 + 4,
                    f"{value:.2f}",
                    extra=f' fill="{ink}" font-size="10"',
                )
            )
        body.append(_text(left - 6, top + m * size + size / 2 + 4, labels[m], "end"))
    for p in range(n):
        x, y = left + p * size + size / 2, top + grid + 10
        body.append(_text(x, y, labels[p], "end", f' transform="rotate(-45 {_n(x)} {_n(y)})"'))
    body.append(_text(left + grid / 2, top + grid + 84, "key token p"))
    y = top + grid / 2
    body.append(_text(14, y, "query token m", extra=f' transform="rotate(-90 14 {_n(y)})"'))
    bar = left + grid + 16
    stops = "".join(
        f'<stop offset="{_n(k / (len(RAMP) - 1))}" stop-color="{colour(1 - k / 4)}"/>'
        for k in range(len(RAMP))
    )
    body.append(
        f'<defs><linearGradient id="derive-ramp" x1="0" y1="0" x2="0" y2="1">{stops}'
        "</linearGradient></defs>"
    )
    body.append(f'<rect x="{bar}" y="{top}" width="12" height="{grid}" fill="url(#derive-ramp)"/>')
    for tick in (0.0, 0.5, 1.0):
        y = top + grid * (1 - tick)
        body.append(
            f'<line x1="{bar + 12}" y1="{_n(y)}" x2="{bar + 16}" y2="{_n(y)}" '
            'stroke="currentColor"/>'
        )
        body.append(_text(bar + 19, y + 4, f"{tick:.1f}", "start"))
    body.append("</g>")
    return _svg("Attention weights of the worked example", bar + 44, top + grid + 96, body)


def saturation_svg(data: list[tuple[int, float, float]] | None = None) -> str:
    """The mean largest softmax weight of a row against the width c (a log axis), unscaled and
    scaled by 1/√c, with the uniform weight 1/KEYS dotted (`saturation_data` by default)."""
    data = saturation_data() if data is None else data
    series = (
        ("softmax(q·k)", 1, "#1f77b4", "circle"),
        ("softmax(q·k / √c)", 2, "#e8710a", "square"),
    )
    return _curves("Softmax saturation", data, series, 4, "width c of queries and keys")


def qk_norm_svg() -> str:
    """`qk_norm_data` as SVG: the largest weight against the scale of the inputs, without and
    with QK-norm, and the most the derived bound allows (dashed)."""
    series = (
        ("softmax(q·k / √c)", 1, "#e8710a", "square"),
        ("QK-norm, then / √c", 2, "#2ca02c", "circle"),
        ("the most |ω̃| ≤ √c allows", 3, "currentColor", "dashed"),
    )
    label = f"scale s of the queries and keys (c = {QK_WIDTH})"
    return _curves("Softmax saturation with QK-norm", qk_norm_data(), series, 2, label)


def _curves(title: str, data: list[tuple], series: tuple, base: int, label: str) -> str:
    """Curves of the columns `series` names against the first column (a log axis of `base`),
    with the uniform weight 1/KEYS dotted and a legend."""
    width, height, left, right, top, bottom = 540, 330, 58, 520, 14, 270
    first = math.log(data[0][0], base)
    steps = (math.log(data[-1][0], base) - first) or 1.0

    def x(value: float) -> float:
        return left + (right - left) * (math.log(value, base) - first) / steps

    def y(value: float) -> float:
        return bottom - (bottom - top) * value / 1.02

    body = [
        f"<g {FONT}>",
        f'<path d="M{left} {top}V{bottom}H{right}" fill="none" stroke="currentColor"/>',
    ]
    for c, *_ in data:
        body.append(
            f'<line x1="{_n(x(c))}" y1="{bottom}" x2="{_n(x(c))}" y2="{bottom + 4}" '
            'stroke="currentColor"/>'
        )
        body.append(_text(x(c), bottom + 17, f"{c:g}"))
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(
            f'<line x1="{left - 4}" y1="{_n(y(tick))}" x2="{left}" y2="{_n(y(tick))}" '
            'stroke="currentColor"/>'
        )
        body.append(_text(left - 7, y(tick) + 4, f"{tick:.2f}", "end"))
    uniform = y(1 / KEYS)
    body.append(
        f'<line x1="{left}" y1="{_n(uniform)}" x2="{right}" y2="{_n(uniform)}" '
        'stroke="currentColor" stroke-dasharray="2 3" opacity="0.6"/>'
    )
    for _, column, ink, mark in series:
        points = [(x(row[0]), y(row[column])) for row in data]
        path = "M" + "L".join(f"{_n(px)} {_n(py)}" for px, py in points)
        dash = ' stroke-dasharray="6 4"' if mark == "dashed" else ""
        body.append(f'<path d="{path}" fill="none" stroke="{ink}" stroke-width="1.8"{dash}/>')
        body += [_mark(mark, px, py, ink) for px, py in points] if mark != "dashed" else []
    legend = [*series, (f"uniform (1/{KEYS})", 0, "currentColor", "dotted")]
    for row, (name, _, ink, mark) in enumerate(legend):  # the legend, clear of the curves
        ly = y(0.62) + 18 * row
        dash = {
            "dashed": ' stroke-dasharray="6 4"',
            "dotted": ' stroke-dasharray="2 3" opacity="0.6"',
        }.get(mark, "")
        stroke = "" if mark == "dotted" else ' stroke-width="1.8"'
        body.append(
            f'<line x1="{right - 170}" y1="{_n(ly)}" x2="{right - 146}" y2="{_n(ly)}" '
            f'stroke="{ink}"{stroke}{dash}/>'
        )
        if mark in ("circle", "square"):
            body.append(_mark(mark, right - 158, ly, ink))
        body.append(_text(right - 140, ly + 4, name, "start"))
    body.append(_text((left + right) / 2, bottom + 40, label))
    middle = (top + bottom) / 2
    body.append(
        _text(
            16,
            middle,
            "mean largest weight in a row",
            extra=f' transform="rotate(-90 16 {_n(middle)})"',
        )
    )
    body.append("</g>")
    return _svg(title, width, height, body)


def rounding_svg(data: list[tuple[float, ...]] | None = None) -> str:
    """`rounding_data` as SVG: two log–log panels (the weights; the scores' gradient over the
    largest β), each with both routes' derived bounds (dashed) and measured errors (dots)
    against the scale s; an error of exactly 0 is drawn at FLOOR."""
    data = rounding_data() if data is None else data
    values = [max(v, FLOOR) for row in data for v in row[1:]]
    low = math.floor(math.log10(min(values)))
    high = math.ceil(math.log10(max(values)))
    first, last = math.log10(data[0][0]), math.log10(data[-1][0])
    panel, gap, left, top, bottom = 300, 70, 70, 28, 250
    body = [f"<g {FONT}>"]
    titles = ("weights A", "scores' gradient dΩ̃ / max β")
    for index, title in enumerate(titles):
        x0 = left + index * (panel + gap)

        def x(value: float, x0: float = x0) -> float:
            return x0 + panel * (math.log10(value) - first) / (last - first)

        def y(value: float) -> float:
            return bottom - (bottom - top) * (math.log10(max(value, FLOOR)) - low) / (high - low)

        body.append(
            f'<path d="M{x0} {top}V{bottom}H{x0 + panel}" fill="none" stroke="currentColor"/>'
        )
        body.append(_text(x0 + panel / 2, top - 10, title))
        for power in range(round(first), round(last) + 1):
            px = x(10.0**power)
            body.append(
                f'<line x1="{_n(px)}" y1="{bottom}" x2="{_n(px)}" y2="{bottom + 4}" '
                'stroke="currentColor"/>'
            )
            body.append(_power(px, bottom + 17, power))
        for power in range(low, high + 1, 2):
            py = y(10.0**power)
            body.append(
                f'<line x1="{x0 - 4}" y1="{_n(py)}" x2="{x0}" y2="{_n(py)}" stroke="currentColor"/>'
            )
            body.append(_power(x0 - 7, py + 4, power, "end"))
        body.append(_text(x0 + panel / 2, bottom + 38, "scale s of the scores"))
        for route, (name, ink) in enumerate(ROUTES):
            column = bound_column(index, route)
            path = "M" + "L".join(f"{_n(x(row[0]))} {_n(y(row[column]))}" for row in data)
            body.append(
                f'<path d="{path}" fill="none" stroke="{ink}" stroke-width="1.6" '
                'stroke-dasharray="6 4"/>'
            )
            for row in data:
                body.append(
                    f'<circle cx="{_n(x(row[0]))}" cy="{_n(y(row[column + 1]))}" '
                    f'r="3.2" fill="{ink}"><title>{html.escape(name)}, s = '
                    f"{row[0]:g}: measured {row[column + 1]:.2e}, bound "
                    f"{row[column]:.2e}</title></circle>"
                )
    middle = (top + bottom) / 2
    body.append(
        _text(
            16, middle, "largest error (float32)", extra=f' transform="rotate(-90 16 {_n(middle)})"'
        )
    )
    for row, (name, ink) in enumerate(ROUTES):
        ly = bottom + 62 + 16 * row
        body.append(
            f'<line x1="{left}" y1="{ly}" x2="{left + 24}" y2="{ly}" stroke="{ink}" '
            'stroke-width="1.6" stroke-dasharray="6 4"/>'
        )
        body.append(f'<circle cx="{left + 36}" cy="{ly}" r="3.2" fill="{ink}"/>')
        body.append(
            _text(left + 46, ly + 4, f"{name}: derived bound (dashed), measured (dots)", "start")
        )
    body.append("</g>")
    width = left + 2 * panel + gap + 20
    return _svg("Rounding of the two backward routes", width, bottom + 62 + 16 * 2, body)


def _mark(kind: str, x: float, y: float, ink: str) -> str:
    if kind == "circle":
        return f'<circle cx="{_n(x)}" cy="{_n(y)}" r="3.5" fill="{ink}"/>'
    return f'<rect x="{_n(x - 3.5)}" y="{_n(y - 3.5)}" width="7" height="7" fill="{ink}"/>'


def heatmap(tokens: tuple[str, ...], weights: list[list[float]]) -> Svg:
    """`heatmap_svg` as an object a notebook shows."""
    return Svg("attention weights", heatmap_svg(tuple(tokens), weights))


def saturation_plot() -> Svg:
    """`saturation_svg` as an object a notebook shows."""
    return Svg("softmax saturation", saturation_svg())


#: The figures an entry may show after its facts, by id, as SVG (`derive.render.documents`).
FIGURES = {
    "softmax-saturation": saturation_svg,
    "softmax-saturation-qk-norm": qk_norm_svg,
    "flash-rounding": rounding_svg,
}


def figure(name: str) -> Svg:
    """One of an entry's figures (`FIGURES`) as an object a notebook shows."""
    return Svg(name.replace("-", " "), FIGURES[name]())


def compatibility_svg(names: tuple[str, ...], pairs: dict[tuple[str, str], str]) -> str:
    """The variants against each other: a filled cell where the two combine, an outlined one
    where they are refused, the reason in the cell's tooltip (its <title>)."""
    cell, left, top = 14, 118, 118
    size = len(names)
    width, height = left + size * cell + 80, top + size * cell + 52
    body = []
    for k, name in enumerate(names):
        y = top + k * cell + cell - 3
        body.append(_text(left - 4, y, name, "end"))
        x = left + k * cell + cell - 3
        body.append(
            _text(x, top - 4, name, "start", f' transform="rotate(-60 {_n(x)} {_n(top - 4)})"')
        )
    for i, first in enumerate(names):
        for j, second in enumerate(names):
            if i == j:
                continue
            why = pairs.get((first, second), pairs.get((second, first)))
            if why is None:
                continue
            x, y = left + j * cell, top + i * cell
            said = f"{first} + {second}: " + (why or "they combine")
            shape = (
                f'<rect x="{_n(x + 1)}" y="{_n(y + 1)}" width="{cell - 2}" height="{cell - 2}" '
                + (
                    f'fill="{colour(0.75)}"'
                    if not why
                    else 'fill="none" stroke="currentColor" stroke-opacity="0.35"'
                )
                + f"><title>{html.escape(said)}</title></rect>"
            )
            body.append(shape)
    combine = sum(1 for why in pairs.values() if not why)
    legend_y = top + size * cell + 24
    body.append(
        _text(left, legend_y, f"filled: the two combine ({combine} of {len(pairs)})", "start")
    )
    body.append(
        _text(left, legend_y + 16, "outlined: refused (the rule: the cell's tooltip)", "start")
    )
    return _svg("Which registered variants combine", width, height, [f"<g {FONT}>", *body, "</g>"])
