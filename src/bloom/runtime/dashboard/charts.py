"""Charts as inline SVG geometry, computed on the server: no chart library, nothing to load.

A chart is a fixed 600 by 160 view box that scales with its container; bars and lines carry CSS
classes, so colours follow the theme (dark mode included).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from bloom.domain.history import Overview

WIDTH = 600
HEIGHT = 160
TOP = 8  # room above the highest value


@dataclass(frozen=True, slots=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Line:
    points: str
    css: str


@dataclass(slots=True)
class Chart:
    peak: int
    """The value of the top of the view box (a round number at or above the highest value)."""
    bars: list[Rect] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def empty(self) -> bool:
        return not self.bars and not self.lines


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2 or 5 times 10^k at or above `value` (at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def _y(value: float, peak: int) -> float:
    return HEIGHT - (HEIGHT - TOP) * value / peak


def stacked_bars(columns: Sequence[tuple[int, int, str]], *, lower: str, upper: str) -> Chart:
    """One bar per column, `(lower, upper, title)` stacked: e.g. succeeded under failed."""
    peak = nice_ceiling(max((a + b for a, b, _ in columns), default=0))
    chart = Chart(peak)
    if not columns:
        return chart
    slot = WIDTH / len(columns)
    gap = min(2.0, slot / 4)
    for index, (low, high, title) in enumerate(columns):
        x = round(index * slot + gap / 2, 2)
        stacked = 0
        for value, css in ((low, lower), (high, upper)):
            if value <= 0:
                continue
            bottom, stacked = _y(stacked, peak), stacked + value
            top = _y(stacked, peak)
            chart.bars.append(
                Rect(x, round(top, 2), round(slot - gap, 2), round(bottom - top, 2), css, title)
            )
    return chart


def lines(
    series: Sequence[tuple[str, Sequence[tuple[int, int]]]], *, start: int, end: int
) -> Chart:
    """Step-free polylines of `(at, value)` points over the time span `start`..`end` (epoch ms),
    one per `(css, points)` series, on a shared scale."""
    highest = max((value for _, points in series for _, value in points), default=0)
    chart = Chart(nice_ceiling(highest))
    span = max(1, end - start)
    for css, points in series:
        if not points:
            continue
        coords = " ".join(
            f"{round(WIDTH * (at - start) / span, 2)},{round(_y(value, chart.peak), 2)}"
            for at, value in points
        )
        chart.lines.append(Line(coords, css))
    return chart


def throughput(summary: Overview) -> Chart:
    """The overview's attempts per bucket: succeeded below, failed above."""
    columns = [
        (b.succeeded, b.failed, f"{b.succeeded} succeeded, {b.failed} failed")
        for b in summary.throughput
    ]
    return stacked_bars(columns, lower="ok", upper="bad")


def depth(summary: Overview, now: int) -> Chart:
    """The overview's queued and running tasks over its window."""
    queued = [(s.at, s.queued) for s in summary.depth]
    running = [(s.at, s.running) for s in summary.depth]
    return lines(
        [("line-queued", queued), ("line-running", running)],
        start=now - summary.window_ms,
        end=now,
    )
