"""What grew before a kill: the series that rose most in a window, and when a climb
began (explain's story of a kill and the post-mortem page read these)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.oncall.forecast.data import Point


@dataclass(frozen=True)
class Rise:
    """What rose most before a moment: its name, by how much, and how fast."""

    name: str
    rise: float  # bytes, from its lowest point in the window to its highest after it
    rate: float  # B/s over that climb
    start: float  # when the climb began (the lowest point)


def rose_most(series: Mapping[str, Sequence[Point]], until: float, window: float,
              min_span: float = 1.0) -> Rise | None:
    """The series (process or kind) that rose most in ``window`` seconds before ``until``:
    explain's "what grew before the kill" and the post-mortem page's headline."""
    best: Rise | None = None
    for name, pts in series.items():
        win = [(t, v) for t, v in pts if until - window <= t <= until and math.isfinite(v)]
        if len(win) < 2:
            continue
        # The first point at the top (within 1 % of the rise: a flat stretch at the top,
        # held at a cap until the kill, is not part of the climb either), and the last
        # lowest point before it: where the climb began.
        high, low_v = max(v for _, v in win), min(v for _, v in win)
        top = next(i for i, (_, v) in enumerate(win) if v >= high - 0.01 * (high - low_v))
        floor = min(v for _, v in win[: top + 1])
        low = max(i for i in range(top + 1) if win[i][1] == floor)
        rise = win[top][1] - floor
        if rise > 0 and (best is None or rise > best.rise):
            best = Rise(name, rise, rise / max(win[top][0] - win[low][0], min_span),
                        win[low][0])
    return best


def climb_start(points: Sequence[Point], until: float, share: float = 0.1) -> float | None:
    """When the last climb to ``until`` began: the last moment the figure was within
    ``share`` of its range above its lowest value (the axis of the post-mortem zooms
    there)."""
    pts = [(t, v) for t, v in points if t <= until and math.isfinite(v)]
    if len(pts) < 2:
        return None
    low = min(v for _, v in pts)
    end = pts[-1][1]
    if end <= low:
        return None
    level = low + share * (end - low)
    start = pts[0][0]
    for t, v in pts:
        if v <= level:
            start = t
    return start
