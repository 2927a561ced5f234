"""The SVG figures: well-formed, plotting the numbers they are given, the same bytes each time."""

import math
import re
import xml.etree.ElementTree as ET

import pytest

from derive.render import svg
from derive.render.figures import KEYS, saturation_data

NS = {"svg": "http://www.w3.org/2000/svg"}
TOKENS = ("the", "fat", "cat")
WEIGHTS = [[0.25, 0.5, 0.25], [0.0, 1.0, 0.0], [0.1, 0.2, 0.7]]


def test_heatmap_draws_each_weight_in_its_colour():
    root = ET.fromstring(svg.heatmap_svg(TOKENS, WEIGHTS))
    cells = [r for r in root.iterfind(".//svg:rect", NS) if r.find("svg:title", NS) is not None]
    assert len(cells) == 9
    titles = [cell.find("svg:title", NS).text for cell in cells]
    assert titles[1] == "the (1) → fat (2): 0.5000" and titles[5] == "fat (2) → cat (3): 0.0000"
    assert [cell.get("fill") for cell in cells[3:6]] == ["#440154", "#fde725", "#440154"]
    labels = [t.text for t in root.iterfind(".//svg:text", NS)]
    assert labels.count("cat (3)") == 2 and "1.00" in labels and "key token p" in labels


@pytest.mark.parametrize(
    ("value", "expected"), [(0.0, "#440154"), (0.5, "#21918c"), (1.0, "#fde725"), (1.5, "#fde725")]
)
def test_the_colour_ramp_passes_through_viridis(value, expected):
    assert svg.colour(value) == expected


def test_saturation_plot_puts_each_point_where_its_number_says():
    data = saturation_data()
    text = svg.saturation_svg(data)
    root = ET.fromstring(text)
    curves = [
        p.get("d") for p in root.iterfind(".//svg:path", NS) if p.get("stroke") != "currentColor"
    ]
    assert len(curves) == 2
    top, bottom = 14, 270  # the plot area of saturation_svg
    for column, curve in zip((1, 2), curves, strict=True):
        ys = [float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", curve)]
        values = [(bottom - y) / (bottom - top) * 1.02 for y in ys]
        assert values == pytest.approx([row[column] for row in data], abs=0.005)
    assert f"uniform (1/{KEYS})" in text
    xs = [float(x) for x in re.findall(r"[ML]([\d.]+) ", curves[0])]
    steps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert steps == pytest.approx([steps[0]] * 5, abs=0.02)  # powers of 4, evenly spaced: log axis
    assert math.isclose(xs[0], 58)


def test_figures_are_deterministic_and_show_in_notebooks():
    assert svg.saturation_svg() == svg.saturation_svg()
    figure = svg.heatmap(TOKENS, WEIGHTS)
    assert figure._repr_svg_() == svg.heatmap_svg(TOKENS, WEIGHTS)
    assert repr(figure) == "<SVG figure: attention weights>"


def test_rounding_plot_puts_each_point_where_its_number_says():
    from derive.render.rounding_data import FLOOR

    data = [
        (1.0, 1e-7, 2e-8, 1e-7, 3e-8, 1e-6, 1e-7, 1e-6, 0.0),
        (100.0, 1e-5, 3e-6, 1e-7, 3e-8, 1e-4, 2e-5, 1e-6, 4e-8),
    ]
    text = svg.rounding_svg(data)
    root = ET.fromstring(text)
    dashed = [p for p in root.iterfind(".//svg:path", NS) if p.get("stroke-dasharray")]
    assert len(dashed) == 4  # two routes in two panels
    marks = [c for c in root.iterfind(".//svg:circle", NS) if c.find("svg:title", NS) is not None]
    measured = [row[column] for column in (2, 4, 6, 8) for row in data]
    assert len(marks) == len(measured)
    ys = [float(c.get("cy")) for c in marks]
    low, high = math.floor(math.log10(FLOOR)), math.ceil(math.log10(1e-4))
    top, bottom = 28, 250  # the plot area of rounding_svg
    back = [10 ** (low + (bottom - y) / (bottom - top) * (high - low)) for y in ys]
    assert back == pytest.approx([max(v, FLOOR) for v in measured], rel=0.02)
    assert "measured 0.00e+00" in text  # an exact 0 is drawn at the floor, and says so


def test_the_rounding_plot_writes_its_ticks_as_powers_of_ten():
    data = [(1.0, 1e-7, 2e-8, 1e-7, 3e-8, 1e-6, 1e-7, 1e-6, 1e-9), (1e4, *[1e-4] * 8)]
    root = ET.fromstring(svg.rounding_svg(data))
    labels = [
        "".join(t.itertext())
        for t in root.iterfind(".//svg:text", NS)
        if t.find("svg:tspan", NS) is not None
    ]
    # the scale's ticks 10⁰ … 10⁴ under each panel, the errors' 10⁻⁹ … beside it
    assert {"100", "104", "10\u22129", "10\u22125"} <= set(labels), labels
    assert not any("e" in label or "-" in label for label in labels)
