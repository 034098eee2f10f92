"""The PNG plots of ``lamella eval aggregate``, drawn with Pillow instead of matplotlib.

A fresh command spends most of its time importing matplotlib (its figure and Agg modules
alone take longer than reading the run logs and every bootstrap together) and laying out its
figures. These functions draw the same plots as :mod:`lamella.eval._src.plots` (same panels,
intervals, point ticks, bands, reference line, grids, titles, axis labels, tick labels,
legends, tab10 colours, figure sizes at the same dpi) from a few rectangles, lines and text
runs: Pillow imports in a few hundredths of a second and draws them in milliseconds. The
shapes are drawn at twice the size and reduced, so edges and lines are anti-aliased. Text
uses matplotlib's own DejaVu Sans where matplotlib is installed (found without importing it).

For publication figures, or other formats than PNG, use the ``plot_*`` functions of
:mod:`lamella.eval` (matplotlib), or ``lamella eval aggregate --matplotlib``.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from lamella.eval._src.estimates import Estimates, ImprovementEstimates

__all__ = [
    "plot_interval_estimates",
    "plot_performance_profiles",
    "plot_probability_of_improvement",
    "plot_sample_efficiency",
]

_LABELS = {"iqm": "IQM", "mean": "Mean", "median": "Median", "optimality_gap": "Optimality gap"}
# matplotlib's tab10 (the colours of plots.py's plots).
_TAB10 = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)
# Plots with curves are drawn at twice the size, then reduced: anti-aliased lines and bands.
# Plots of axis-aligned bars and lines only are drawn at their size (nothing to smooth; text is
# anti-aliased either way), which takes a quarter of the pixels.
_SMOOTH = 2
_GRID = (0.3, (176, 176, 176))  # alpha of matplotlib's grid(alpha=0.3), colour #b0b0b0
_FONTS: dict[float, Any] = {}


def _font(points: float, dpi: float, scale: int) -> Any:
    from PIL import ImageFont

    size = max(1, round(points * dpi / 72.0 * scale))
    if size not in _FONTS:
        _FONTS[size] = _load_font(ImageFont, size)
    return _FONTS[size]


def _load_font(image_font: Any, size: int) -> Any:
    import importlib.util

    spec = importlib.util.find_spec("matplotlib")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, "mpl-data", "fonts", "ttf", "DejaVuSans.ttf")
        if os.path.isfile(path):
            return image_font.truetype(path, size, layout_engine=image_font.Layout.BASIC)
    try:
        return image_font.load_default(size)  # Pillow >= 10.1: a scalable built-in font
    except TypeError:
        return image_font.load_default()


def _plain(text: str) -> str:
    """matplotlib's mathtext in our labels (``$\\tau$``) as plain Unicode."""
    return text.replace("$", "").replace("\\tau", "τ").replace("  ", " ")


def _blend(color: Sequence[float], alpha: float, under: Sequence[float] = (255, 255, 255)) -> tuple[int, ...]:
    return tuple(round(alpha * c + (1.0 - alpha) * u) for c, u in zip(color, under))


def _colors(names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    return {name: _TAB10[i % 10] for i, name in enumerate(names)}


def _ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values inside [low, high], at most ``count`` of them (1-2-2.5-5 steps)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9)
    values = [(first + i) * step for i in range(int((high - low) / step + 1e-9) + 2)]
    return [0.0 if abs(v) < step * 1e-9 else v for v in values if v <= high + step * 1e-9]


def _tick_text(values: list[float]) -> list[str]:
    largest = max((abs(v) for v in values), default=0.0)
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):  # environment steps: 2.5M, not 2500000
        if largest >= size:
            scaled = _tick_text([v / size for v in values])
            return ["0" if v == 0 else f"{text}{suffix}" for v, text in zip(values, scaled)]
    step = min((abs(b - a) for a, b in itertools.pairwise(values)), default=1.0) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(round(step * 10**decimals) - step * 10**decimals) > 1e-6:  # 0.25, 2.5: one more digit
        decimals += 1
    return [f"{v:.{decimals}f}".replace("-", "\u2212") for v in values]


def _limits(values: Any, margin: float = 0.05) -> tuple[float, float]:
    finite = [float(v) for v in values if math.isfinite(float(v))]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if high == low:
        low, high = low - 0.5, high + 0.5
    pad = (high - low) * margin
    return low - pad, high + pad


class _Canvas:
    """One figure: an RGB image at ``scale`` times the final size, sizes in final pixels."""

    def __init__(self, figsize: tuple[float, float], dpi: int, scale: int = 1) -> None:
        from PIL import Image, ImageDraw

        self.dpi, self.scale = dpi, scale
        self.width, self.height = round(figsize[0] * dpi), round(figsize[1] * dpi)
        self.image = Image.new("RGB", (self.width * self.scale, self.height * self.scale), "white")
        self.draw = ImageDraw.Draw(self.image)
        self.font = _font(10, dpi, scale)
        self.title_font = _font(12, dpi, scale)

    def points(self, value: float) -> float:
        """Points to final pixels."""
        return value * self.dpi / 72.0

    def text_size(self, text: str, font: Any = None) -> tuple[float, float]:
        box = self.draw.textbbox((0, 0), text, font=font or self.font)
        return (box[2] - box[0]) / self.scale, self.line_height(font)

    def line_height(self, font: Any = None) -> float:
        box = self.draw.textbbox((0, 0), "Ag", font=font or self.font)
        return box[3] / self.scale

    def text(self, xy: tuple[float, float], text: str, anchor: str, font: Any = None) -> None:
        """``anchor``: Pillow's two letters (horizontal l/m/r, vertical t/m/b as a line box)."""
        font = font or self.font
        vertical = {"t": "a", "m": "m", "b": "d"}[anchor[1]]  # ascender, middle, descender
        self.draw.text(
            (xy[0] * self.scale, xy[1] * self.scale),
            text,
            fill="black",
            font=font,
            anchor=anchor[0] + vertical,
        )

    def vertical_text(self, xy: tuple[float, float], text: str) -> None:
        """Text turned 90 degrees counter-clockwise, centred on ``xy``."""
        from PIL import Image, ImageDraw

        width, height = self.text_size(text)
        strip = Image.new("L", (round(width * self.scale) + 2, round(height * self.scale) + 2), 0)
        ImageDraw.Draw(strip).text((1, 1), text, fill=255, font=self.font)
        strip = strip.transpose(Image.Transpose.ROTATE_90)
        corner = (round(xy[0] * self.scale - strip.width / 2), round(xy[1] * self.scale - strip.height / 2))
        self.image.paste((0, 0, 0), corner, mask=strip)

    def fill(self, polygon: Sequence[tuple[float, float]], color: Sequence[int], alpha: float) -> None:
        """A polygon in final pixels, blended over what is drawn (alpha)."""
        from PIL import Image, ImageDraw

        scaled = [(x * self.scale, y * self.scale) for x, y in polygon]
        left = max(0, math.floor(min(x for x, _ in scaled)))
        top = max(0, math.floor(min(y for _, y in scaled)))
        right = min(self.image.width, math.ceil(max(x for x, _ in scaled)) + 1)
        bottom = min(self.image.height, math.ceil(max(y for _, y in scaled)) + 1)
        if right <= left or bottom <= top:
            return
        mask = Image.new("L", (right - left, bottom - top), 0)  # only the polygon's bounding box
        ImageDraw.Draw(mask).polygon([(x - left, y - top) for x, y in scaled], fill=round(alpha * 255))
        self.image.paste(tuple(color), (left, top, right, bottom), mask=mask)

    def line(self, points: Sequence[tuple[float, float]], color: Sequence[int], width_points: float) -> None:
        width = max(1, round(self.points(width_points) * self.scale))
        self.draw.line(
            [(x * self.scale, y * self.scale) for x, y in points],
            fill=tuple(color),
            width=width,
            joint="curve",
        )

    def rectangle(self, box: tuple[float, float, float, float], color: Sequence[int]) -> None:
        x0, y0, x1, y1 = (v * self.scale for v in box)
        left, top, right, bottom = min(x0, x1), min(y0, y1), max(x0, x1) - 1, max(y0, y1) - 1
        if right >= left and bottom >= top:  # a zero-width interval draws nothing, as in matplotlib
            self.draw.rectangle((left, top, right, bottom), fill=tuple(color))

    def save(self, path: str | os.PathLike[str]) -> str:
        path = os.fspath(path)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        image = self.image.reduce(self.scale) if self.scale > 1 else self.image
        image.save(path, format="PNG", compress_level=1, dpi=(self.dpi, self.dpi))
        return path


class _Axes:
    """A data rectangle: x and y limits mapped to a box of the canvas (final pixels)."""

    def __init__(self, canvas: _Canvas, box: tuple[float, float, float, float]) -> None:
        self.canvas, self.box = canvas, box
        self.xlim, self.ylim = (0.0, 1.0), (0.0, 1.0)

    def x(self, value: float) -> float:
        (x0, _, x1, _), (low, high) = self.box, self.xlim
        return x0 + (float(value) - low) / (high - low) * (x1 - x0)

    def y(self, value: float) -> float:
        (_, y0, _, y1), (low, high) = self.box, self.ylim
        return y1 - (float(value) - low) / (high - low) * (y1 - y0)

    def grid(self, xticks: Sequence[float] = (), yticks: Sequence[float] = ()) -> None:
        alpha, grey = _GRID
        color = _blend(grey, alpha)
        x0, y0, x1, y1 = self.box
        for value in xticks:
            self.canvas.line([(self.x(value), y0), (self.x(value), y1)], color, 0.8)
        for value in yticks:
            self.canvas.line([(x0, self.y(value)), (x1, self.y(value))], color, 0.8)

    def frame(
        self,
        xticks: Sequence[float],
        yticks: Sequence[float],
        xlabels: Sequence[str] | None,
        ylabels: Sequence[str] | None,
    ) -> None:
        """The four spines, outward ticks and their labels (``None``: no labels)."""
        canvas, (x0, y0, x1, y1) = self.canvas, self.box
        length, pad = canvas.points(3.5), canvas.points(3.5)
        no_labels: list[str | None] = [None] * max(len(xticks), len(yticks))
        for value, label in zip(xticks, xlabels or no_labels):
            x = self.x(value)
            canvas.line([(x, y1), (x, y1 + length)], (0, 0, 0), 0.8)
            if label is not None:
                canvas.text((x, y1 + length + pad), label, "mt")
        for value, label in zip(yticks, ylabels or no_labels):
            y = self.y(value)
            canvas.line([(x0 - length, y), (x0, y)], (0, 0, 0), 0.8)
            if label is not None:
                canvas.text((x0 - length - pad, y), label, "rm")
        canvas.line([(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)], (0, 0, 0), 0.8)


def _margins(
    canvas: _Canvas, ylabels: Sequence[str], *, ylabel: bool = False, title: bool = False, right: str = ""
) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) edges of the data area: room for tick labels, axis labels,
    title, and half of the last x tick label (``right``)."""
    pad = canvas.points(4.0)
    tick = canvas.points(3.5) * 2
    line = canvas.line_height()
    left = pad + tick + max((canvas.text_size(label)[0] for label in ylabels), default=0.0)
    if ylabel:
        left += line + pad
    top = pad + (canvas.line_height(canvas.title_font) + canvas.points(6.0) if title else line / 2)
    bottom = pad + tick + 2 * line + canvas.points(3.5)
    right_edge = canvas.width - pad - max(line / 2, canvas.text_size(right)[0] / 2)
    # Labels too long for the figure: keep a third of it for the data (the labels are clipped).
    left = min(left, right_edge - canvas.width / 3)
    return left, top, right_edge, max(canvas.height - bottom, top + 1.0)


def _xlabel(canvas: _Canvas, axes: _Axes, text: str) -> None:
    x0, _, x1, _ = axes.box
    canvas.text(((x0 + x1) / 2, canvas.height - canvas.points(4.0)), _plain(text), "mb")


def _intervals(
    axes: _Axes,
    rows: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    point: np.ndarray,
    colors: Any,
    alpha: float,
) -> None:
    canvas = axes.canvas
    for row, lo, hi, pt, color in zip(rows, low, high, point, colors):
        canvas.rectangle((axes.x(lo), axes.y(row - 0.3), axes.x(hi), axes.y(row + 0.3)), _blend(color, alpha))
        canvas.line([(axes.x(pt), axes.y(row - 0.3)), (axes.x(pt), axes.y(row + 0.3))], (0, 0, 0), 1.5)


def plot_interval_estimates(
    estimates: Estimates,
    path: str | os.PathLike[str],
    *,
    xlabel: str = "score",
    figsize: tuple[float, float] | None = None,
    dpi: int = 100,
) -> str:
    """One panel per statistic: each algorithm's confidence interval as a bar, the point
    estimate as a tick; the algorithms on the first panel's y axis. Returns the path (PNG)."""
    algorithms = list(estimates.point)
    panels = len(estimates.labels)
    figsize = figsize or (3.2 * panels, 0.45 * len(algorithms) + 1.2)
    canvas = _Canvas(figsize, dpi)
    colors = _colors(algorithms)
    rows = np.arange(len(algorithms), dtype=np.float64)
    left, top, right, bottom = _margins(canvas, algorithms, title=True, right="0.00")
    gap = canvas.points(12.0)
    width = (right - left - gap * (panels - 1)) / panels
    for k, label in enumerate(estimates.labels):
        low = np.array([estimates.lower[a][k] for a in algorithms], dtype=np.float64).reshape(-1)
        high = np.array([estimates.upper[a][k] for a in algorithms], dtype=np.float64).reshape(-1)
        point = np.array([estimates.point[a][k] for a in algorithms], dtype=np.float64).reshape(-1)
        x0 = left + k * (width + gap)
        axes = _Axes(canvas, (x0, top, x0 + width, bottom))
        axes.xlim = _limits([*low, *high, *point])
        axes.ylim = (len(algorithms) - 0.5 + 0.1, -0.5 - 0.1)  # first algorithm on top
        xticks = _ticks(*axes.xlim, count=max(2, min(6, int(width / canvas.points(40)))))
        axes.grid(xticks=xticks)
        _intervals(axes, rows, low, high, point, [colors[a] for a in algorithms], 0.75)
        axes.frame(xticks, list(rows), _tick_text(xticks), algorithms if k == 0 else None)
        canvas.text(
            ((axes.box[0] + axes.box[2]) / 2, top - canvas.points(6.0)),
            _plain(_LABELS.get(str(label), str(label))),
            "mb",
            canvas.title_font,
        )
        _xlabel(canvas, axes, xlabel)
    return canvas.save(path)


def _legend(
    axes: _Axes, entries: Sequence[tuple[str, tuple[int, ...]]], curves: Sequence[np.ndarray], markers: bool
) -> None:
    """A framed legend (line swatch, name) in the corner of the data area that covers the
    fewest curve points (matplotlib's ``loc="best"``, simplified)."""
    canvas = axes.canvas
    pad, swatch, line = canvas.points(4.0), canvas.points(20.0), canvas.line_height() * 1.15
    width = pad * 3 + swatch + max(canvas.text_size(name)[0] for name, _ in entries)
    height = pad * 2 + line * len(entries)
    x0, y0, x1, y1 = axes.box
    inset = canvas.points(4.0)
    corners = [
        (x1 - inset - width, y0 + inset),
        (x0 + inset, y0 + inset),
        (x0 + inset, y1 - inset - height),
        (x1 - inset - width, y1 - inset - height),
    ]

    def covered(corner: tuple[float, float]) -> int:
        cx, cy = corner
        return sum(
            int(
                np.sum((c[:, 0] >= cx) & (c[:, 0] <= cx + width) & (c[:, 1] >= cy) & (c[:, 1] <= cy + height))
            )
            for c in curves
        )

    cx, cy = min(corners, key=covered)
    canvas.rectangle((cx, cy, cx + width, cy + height), _blend((204, 204, 204), 1.0))
    canvas.rectangle((cx + 1, cy + 1, cx + width - 1, cy + height - 1), (255, 255, 255))
    for i, (name, color) in enumerate(entries):
        y = cy + pad + line * (i + 0.5)
        canvas.line([(cx + pad, y), (cx + pad + swatch, y)], color, 1.5)
        if markers:
            _marker(canvas, (cx + pad + swatch / 2, y), color)
        canvas.text((cx + pad * 2 + swatch, y), name, "lm")


def _curves_plot(
    canvas: _Canvas,
    series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    xlabel: str,
    ylabel: str,
    ylim: tuple[float, float] | None,
    markers: bool,
) -> None:
    """Lines with confidence bands (x, point, lower, upper per algorithm), grid, legend."""
    xs = np.concatenate([s[0] for s in series.values()])
    ys = np.concatenate([np.concatenate(s[1:]) for s in series.values()])
    xlim = _limits(xs)
    ylim = ylim or _limits(ys)
    yticks = _ticks(*ylim)
    ytext = _tick_text(yticks)
    xticks = _ticks(*xlim)
    left, top, right, bottom = _margins(canvas, ytext, ylabel=True, right=_tick_text(xticks)[-1])
    axes = _Axes(canvas, (left, top, right, bottom))
    axes.xlim, axes.ylim = xlim, ylim
    xticks = _ticks(*xlim, count=max(2, min(8, int((right - left) / canvas.points(45)))))
    axes.grid(xticks, yticks)
    colors = _colors(list(series))
    curves = []
    for algorithm, (x, _, lower, upper) in series.items():
        band = [(axes.x(a), axes.y(b)) for a, b in zip(x, upper)] + [
            (axes.x(a), axes.y(b)) for a, b in zip(x[::-1], lower[::-1])
        ]
        canvas.fill(band, colors[algorithm], 0.2)
    for algorithm, (x, point, _, _) in series.items():
        line = [(axes.x(a), axes.y(b)) for a, b in zip(x, point)]
        canvas.line(line, colors[algorithm], 1.5)
        if markers:
            for xy in line:
                _marker(canvas, xy, colors[algorithm])
        curves.append(np.array(line))
    axes.frame(xticks, yticks, _tick_text(xticks), ytext)
    _xlabel(canvas, axes, xlabel)
    canvas.vertical_text((canvas.points(4.0) + canvas.line_height() / 2, (top + bottom) / 2), _plain(ylabel))
    _legend(axes, [(a, colors[a]) for a in series], curves, markers)


def _marker(canvas: _Canvas, xy: tuple[float, float], color: Sequence[int]) -> None:
    """A filled circle of matplotlib's ``markersize=3`` (3 points across)."""
    scale = canvas.scale
    radius, (x, y) = canvas.points(1.5) * scale, (xy[0] * scale, xy[1] * scale)
    canvas.draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=tuple(color))


def plot_performance_profiles(
    profiles: Estimates,
    path: str | os.PathLike[str],
    *,
    xlabel: str = r"score $\tau$",
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: int = 100,
) -> str:
    """Fraction of runs with score above tau, per algorithm, with confidence bands."""
    canvas = _Canvas(figsize, dpi, _SMOOTH)
    series = {
        a: tuple(
            np.asarray(v, dtype=np.float64).reshape(-1)
            for v in (profiles.x[a], p, profiles.lower[a], profiles.upper[a])
        )
        for a, p in profiles.point.items()
    }
    _curves_plot(canvas, series, xlabel, r"fraction of runs with score $> \tau$", (0.0, 1.0), markers=False)  # type: ignore[arg-type]
    return canvas.save(path)


def plot_probability_of_improvement(
    improvement: ImprovementEstimates,
    path: str | os.PathLike[str],
    *,
    figsize: tuple[float, float] | None = None,
    dpi: int = 100,
) -> str:
    """P(X > Y) per pair with its confidence interval; 0.5 marked."""
    pairs = improvement.pairs
    figsize = figsize or (6.0, 0.45 * len(pairs) + 1.2)
    canvas = _Canvas(figsize, dpi)
    labels = [f"P({x} > {y})" for x, y in pairs]
    left, top, right, bottom = _margins(canvas, labels, right="1.0")
    axes = _Axes(canvas, (left, top, right, bottom))
    axes.xlim, axes.ylim = (0.0, 1.0), (len(pairs) - 0.5 + 0.1, -0.5 - 0.1)
    xticks = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    axes.grid(xticks=xticks)
    rows = np.arange(len(pairs), dtype=np.float64)
    low, high = np.asarray(improvement.lower, np.float64), np.asarray(improvement.upper, np.float64)
    _intervals(
        axes, rows, low, high, np.asarray(improvement.point, np.float64), [_TAB10[0]] * len(pairs), 0.7
    )
    x = axes.x(0.5)
    dash, gap = canvas.points(3.7), canvas.points(1.6)
    y = top
    while y < bottom:
        canvas.line([(x, y), (x, min(y + dash, bottom))], (128, 128, 128), 1.0)
        y += dash + gap
    axes.frame(xticks, list(rows), _tick_text(xticks), labels)
    _xlabel(canvas, axes, "probability of improvement")
    return canvas.save(path)


def plot_sample_efficiency(
    curves: Estimates,
    path: str | os.PathLike[str],
    *,
    statistic: str | int = 0,
    xlabel: str = "environment steps",
    ylabel: str | None = None,
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: int = 100,
) -> str:
    """An aggregate (``statistic``, a label or an index) against environment steps, with
    confidence bands and markers at the evaluations."""
    k = statistic if isinstance(statistic, int) else list(curves.labels).index(statistic)
    canvas = _Canvas(figsize, dpi, _SMOOTH)
    series = {
        a: (
            np.asarray(curves.x[a], dtype=np.float64).reshape(-1),
            np.asarray(p[k], dtype=np.float64),
            np.asarray(curves.lower[a][k], dtype=np.float64),
            np.asarray(curves.upper[a][k], dtype=np.float64),
        )
        for a, p in curves.point.items()
    }
    label = str(curves.labels[k])
    _curves_plot(canvas, series, xlabel, ylabel or _LABELS.get(label, label), None, markers=True)
    return canvas.save(path)
