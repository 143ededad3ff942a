"""Small inline-SVG charts (line charts with optional bands, horizontal bars) with no dependencies.

Each function returns one ``<svg>`` element as text; every label is HTML-escaped. Points carry
``<title>`` tooltips, so hovering shows exact values without any script.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 30, 44  # TOP grows by one line per legend row
POINT_LIMIT = 60  # draw a dot per point up to this many points per series
# Series i draws with DASHES[i] and MARKERS[i] besides its colour, so a line lying exactly on another
# (actor/clipfrac on clipfrac_lower, kl_loss on kl) still shows through it, also in grey print.
DASHES = ("", "7 4", "2 3", "10 3 2 3")
MARKERS = ("circle", "square", "diamond", "triangle")


@dataclass
class Series:
    """One line: ``ys`` may hold None (a gap); ``lo``/``hi`` (same length) draw a shaded band."""

    name: str
    xs: list[float]
    ys: list[float | None]
    lo: list[float | None] | None = None
    hi: list[float | None] | None = None


def std_band(mean: list, std: list, low: list | None = None, high: list | None = None) -> tuple[list, list]:
    """(lo, hi) of mean ± std, clipped per point to [low, high] (the step's min and max reward) when given.

    Rewards of 0 or 1 have mean ± std outside [0, 1]; no reward was ever there, so the band stops at the range.
    """
    lo, hi = [], []
    for i, (m, s) in enumerate(zip(mean, std)):
        if m is None or s is None:
            lo.append(None)
            hi.append(None)
            continue
        floor = low[i] if low and low[i] is not None else -math.inf
        ceiling = high[i] if high and high[i] is not None else math.inf
        lo.append(max(m - s, floor))
        hi.append(min(m + s, ceiling))
    return lo, hi


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten); whole numbers only
    with `integer` (steps are counted in whole steps: no tick at 0.5)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    if integer:
        raw = max(raw, 1.0)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    digits = max(0, -math.floor(math.log10(step)) + 1)
    ticks = []
    index = first
    while index * step <= hi + step * 1e-9:
        ticks.append(round(index * step, digits) + 0.0)  # + 0.0 turns -0.0 into 0.0
        index += 1
    return ticks


def fmt_number(value: float) -> str:
    """Compact tick/tooltip text: 3 significant digits, scientific only for very small/large values."""
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.2e}"


def _bounds(series: list[Series]) -> tuple[float, float, float, float] | None:
    xs, ys = [], []
    for s in series:
        for i, x in enumerate(s.xs):
            values = [s.ys[i]] + ([s.lo[i]] if s.lo else []) + ([s.hi[i]] if s.hi else [])
            values = [v for v in values if _finite(v)]
            if values and _finite(x):
                xs.append(x)
                ys.extend(values)
    if not xs:
        return None
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        pad = abs(y0) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    else:
        pad = (y1 - y0) * 0.05
        y0, y1 = y0 - pad, y1 + pad
    return x0, x1, y0, y1


def _index_runs(ok: list[bool]) -> list[list[int]]:
    """Runs of consecutive indices where ``ok`` is true."""
    runs: list[list[int]] = []
    for i, good in enumerate(ok):
        if good and runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        elif good:
            runs.append([i])
    return runs


def _segments(xs, ys) -> list[list[tuple[float, float]]]:
    """Runs of consecutive finite points (a None or NaN breaks the line)."""
    ok = [_finite(x) and _finite(y) for x, y in zip(xs, ys)]
    return [[(xs[i], ys[i]) for i in run] for run in _index_runs(ok)]


def _axes(x0, x1, y0, y1, sx, sy, x_label, y_label, top) -> list[str]:
    out = []
    for t in nice_ticks(y0, y1):
        y = sy(t)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt_number(t))}</text>')
    for t in nice_ticks(x0, x1, 6, integer=x_label == "step"):
        if not x0 <= t <= x1:
            continue
        x = sx(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{HEIGHT - BOTTOM}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM + 4}" stroke="#666"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{escape(fmt_number(t))}</text>'
        )
    out.append(
        f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - top - BOTTOM}" '
        'fill="none" stroke="#999"/>'
    )
    out.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(x_label)}</text>'
    )
    if y_label:
        cy = (top + HEIGHT - BOTTOM) / 2
        out.append(
            f'<text x="14" y="{cy}" text-anchor="middle" transform="rotate(-90 14 {cy})">{escape(y_label)}</text>'
        )
    return out


def _legend(series: list[Series]) -> tuple[list[str], int]:
    """Legend entries in rows under the title; returns the marks and the number of rows."""
    out, x, row = [], LEFT, 0
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        width = 28 + 6 * len(s.name)
        if x + width > WIDTH - RIGHT and x > LEFT:
            x, row = LEFT, row + 1
        y = TOP + 2 + 14 * row
        dash = DASHES[i % len(DASHES)]
        out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 18}" y2="{y - 4}" stroke="{color}" stroke-width="1.8"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        out.append(_marker(MARKERS[i % len(MARKERS)], x + 9, y - 4, color))
        out.append(f'<text x="{x + 22}" y="{y}">{escape(s.name)}</text>')
        x += width + 16
    return out, (row + 1 if series else 0)


def _marker(shape: str, x: float, y: float, color: str, tip: str = "") -> str:
    """A point mark: circle, square, diamond or triangle (hollow past the first, so stacked marks show)."""
    title = f"<title>{tip}</title>" if tip else ""
    paint = f'fill="{color}"' if shape == "circle" else f'fill="#fff" stroke="{color}" stroke-width="1.3"'
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" {paint}>{title}</circle>'
    if shape == "square":
        return f'<rect x="{x - 2.8:.1f}" y="{y - 2.8:.1f}" width="5.6" height="5.6" {paint}>{title}</rect>'
    r = 3.6
    points = ([(x, y - r), (x + r, y), (x, y + r), (x - r, y)] if shape == "diamond"
              else [(x, y - r), (x + r, y + r * 0.8), (x - r, y + r * 0.8)])
    coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in points)
    return f'<polygon points="{coords}" {paint}>{title}</polygon>'


def _series_marks(s: Series, index: int, sx, sy, x_label: str) -> list[str]:
    color, dash = PALETTE[index % len(PALETTE)], DASHES[index % len(DASHES)]
    out = []
    if s.lo and s.hi:
        for run in _index_runs(
            [_finite(x) and _finite(a) and _finite(b) for x, a, b in zip(s.xs, s.lo, s.hi)]
        ):
            top = " ".join(f"{sx(s.xs[i]):.1f},{sy(s.hi[i]):.1f}" for i in run)
            bottom = " ".join(f"{sx(s.xs[i]):.1f},{sy(s.lo[i]):.1f}" for i in reversed(run))
            out.append(f'<polygon points="{top} {bottom}" fill="{color}" fill-opacity="0.18" stroke="none"/>')
    for run in _segments(s.xs, s.ys):
        path = " ".join(("M" if j == 0 else "L") + f"{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(run))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.8"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
    points = [(x, y) for x, y in zip(s.xs, s.ys) if _finite(x) and _finite(y)]
    if len(points) <= POINT_LIMIT:
        for x, y in points:
            tip = escape(f"{s.name} — {x_label} {fmt_number(x)}: {fmt_number(y)}")
            out.append(_marker(MARKERS[index % len(MARKERS)], sx(x), sy(y), color, tip))
    return out


def line_chart(series: list[Series], title: str, x_label: str = "step", y_label: str = "") -> str:
    """An SVG line chart of one or more series; an empty chart says there is nothing to plot."""
    head = (
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">'
    )
    out = [head, f'<text x="{LEFT}" y="16" font-size="14" font-weight="bold">{escape(title)}</text>']
    bounds = _bounds(series)
    if bounds is None:
        out.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no finite values to plot</text>'
        )
        return "".join(out) + "</svg>"
    x0, x1, y0, y1 = bounds
    legend, rows = _legend(series)
    top = TOP + 14 * rows

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)

    def sy(y: float) -> float:
        return HEIGHT - BOTTOM - (y - y0) / (y1 - y0) * (HEIGHT - top - BOTTOM)

    out += _axes(x0, x1, y0, y1, sx, sy, x_label, y_label, top)
    for i, s in enumerate(series):
        out += _series_marks(s, i, sx, sy, x_label)
    out += legend
    return "".join(out) + "</svg>"


def bar_chart(items: list[tuple[str, float]], title: str, unit: str = "") -> str:
    """Horizontal bars (label, value), largest first, values written at the bar ends."""
    items = sorted([(k, v) for k, v in items if _finite(v)], key=lambda kv: -kv[1])
    label_w, row_h = 180, 22
    height = TOP + 8 + row_h * max(len(items), 1)
    out = [
        f'<svg viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="{LEFT}" y="16" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    top = max((v for _, v in items), default=0.0)
    span = WIDTH - label_w - RIGHT - 70
    for i, (label, value) in enumerate(items):
        y = TOP + i * row_h
        w = 0 if top <= 0 else max(value, 0) / top * span
        out.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        out.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{PALETTE[0]}"/>'
        )
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 14}">{escape(fmt_number(value) + unit)}</text>')
    return "".join(out) + "</svg>"
