"""Shapes of memory over time for the cases and the drawn classes: a ramp, a diurnal swing,
seeded noise, a sawtooth's tooth, irregular teeth, bursts of traffic, a weekend, two
working sets taking turns, and the first sample at which a shape reaches its limit."""

from __future__ import annotations

import bisect
import math
import random

from exporter.promql import DAY, HOUR, MINUTE

from .recording import Fn


def ramp(t: float, start: float, end: float) -> float:
    """0 before start, 1 after end, linear between."""
    return min(1.0, max(0.0, (t - start) / (end - start)))


def diurnal(t: int, amplitude: float, peak_h: float = 15) -> float:
    """0 at night, ``amplitude`` in the afternoon (a cosine over the day)."""
    h = (t % DAY) / HOUR
    return amplitude * (0.5 + 0.5 * math.cos(2 * math.pi * (h - peak_h) / 24))


class Noise:
    """Seeded Gaussian jitter: the same value for the same (stream, t), one draw per
    15 seconds of scenario time."""

    def __init__(self, seed: int, sigma: float) -> None:
        self.seed, self.sigma = seed, sigma
        self._draws: dict[int, list[float]] = {}

    def __call__(self, t: int, stream: int = 0) -> float:
        draws = self._draws.setdefault(stream, [])
        i = t // 15
        if i >= len(draws):
            rng = random.Random(self.seed * 1000 + stream)
            rng.seed(self.seed * 1000 + stream)
            draws[:] = [rng.gauss(0.0, self.sigma) for _ in range(max(i + 1, 2 * len(draws)))]
        return draws[i]


def first_at_or_above(fn: Fn, limit: Fn, times: range) -> int:
    for t in times:
        v, lim = fn(t), limit(t)
        if v is not None and lim is not None and v >= lim:
            return t
    raise ValueError("never reaches the limit")


def _tooth(t: float, period: float, rise: float) -> float:
    """0 at each release, 1 at the top: a linear fill over ``rise`` of the period,
    then flat until the release."""
    return min(1.0, (t % period) / (rise * period))


class Bursts:
    """Traffic bursts at random times (a Poisson process of ``per_hour``), each lasting
    ``lo``-``hi`` seconds at 0.5-1 of ``size``: 0 between them."""

    def __init__(self, rng: random.Random, per_hour: float, span: int, size: float,
                 lo: float, hi: float) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.heights: list[float] = []
        t = 0.0
        while t < span:
            t += rng.expovariate(per_hour / HOUR)
            self.starts.append(t)
            self.ends.append(t + rng.uniform(lo, hi))
            self.heights.append(rng.uniform(0.5, 1.0) * size)

    def __call__(self, t: int) -> float:
        i = bisect.bisect_right(self.starts, t) - 1
        return self.heights[i] if i >= 0 and t < self.ends[i] else 0.0


class Teeth:
    """A cache filled and flushed at irregular times: each period 0.6-1.4 of ``period``,
    each tooth 0.7-1.3 of ``height``, filled linearly over ``rise`` of its period, then
    flat until its release. ``tallest`` is the highest a tooth can be."""

    def __init__(self, rng: random.Random, period: float, rise: float, height: float,
                 span: int) -> None:
        self.starts: list[float] = []
        self.fills: list[float] = []
        self.heights: list[float] = []
        self.tallest = 1.3 * height
        t = 0.0
        while t < span:
            length = rng.uniform(0.6, 1.4) * period
            self.starts.append(t)
            self.fills.append(rise * length)
            self.heights.append(rng.uniform(0.7, 1.3) * height)
            t += length

    def __call__(self, t: int) -> float:
        i = bisect.bisect_right(self.starts, t) - 1
        return self.heights[i] * min(1.0, (t - self.starts[i]) / self.fills[i])


def weekend(t: float, first_day: int, edge: float) -> float:
    """0 on weekdays, 1 on the weekend, ramped over ``edge`` at both ends, for a replay
    that starts on weekday ``first_day`` (0 = Monday)."""
    d = (t / DAY + first_day) % 7
    if d >= 5:
        return min(1.0, (d - 5) * DAY / edge)
    return max(0.0, 1 - d * DAY / edge) if t >= edge or first_day else 0.0


class Modes:
    """Two working sets taking turns (adapters loaded and dropped, a long-context tenant
    that comes and goes): 0 in the low one, 1 in the high one, low first, each held
    ``dwell_h`` (lo, hi) hours and each switch made over 2-20 minutes."""

    def __init__(self, rng: random.Random, dwell_h: tuple[float, float], span: int) -> None:
        self.starts: list[float] = []  # each switch: low to high at even indexes
        self.spans: list[float] = []
        t = rng.uniform(0.5, 3) * HOUR
        while t < span:
            self.starts.append(t)
            self.spans.append(rng.uniform(2, 20) * MINUTE)
            t += rng.uniform(*dwell_h) * HOUR

    def __call__(self, t: int) -> float:
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return 0.0
        up = ramp(t, self.starts[i], self.starts[i] + self.spans[i])
        return up if i % 2 == 0 else 1.0 - up
