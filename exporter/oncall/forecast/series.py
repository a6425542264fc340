"""The rules' windows, and the PromQL functions the mirror of the rules is built from
(``deriv``, ``min_over_time(deriv(...)[...])``, the daily floor and the peaks' envelope),
over points a surface read itself."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.oncall.forecast.data import Point
from exporter.promql import CONFIG, HOUR_SWING_DEVIATIONS, QUIET_QUANTILE, Config

HOUR_S = 3600.0


@dataclass(frozen=True)
class Windows:
    """The rules' windows (seconds), from the one config object."""

    short: float
    short_sustain: float
    medium: float
    medium_sustain: float
    baseline: float
    step: float  # the rules' evaluation interval (subquery resolution)
    peak: float  # short and medium forecasts start from the peak of this window
    hour: float  # the lasting group's hourly minima and maxima; the grower's deriv
    min_rise_bytes: float
    min_rise_ratio: float
    climbing_lag: float = 120.0  # the short horizon only while the figure makes new highs
    beyond_ratio: float = 0.01  # a climb beyond the peaks: by this much of the limit...
    beyond_trend: float = 6 * 3600.0  # ...or this much lasting trend while it binds
    pattern_period: float = 86400.0  # the daily pattern: the same hours one period ago
    lasting_interval: float = 300.0  # the lasting group's interval
    # The daily pattern lifted by the least rise of the hours this recent above theirs, where more
    pattern_recent: float = 3 * 3600.0
    pattern_recent_max_trends: float = 2.0  # ...up to this many periods of the trend
    pattern_ramp: float = 20 * 3600.0  # ...unless the rise grew over this long
    pattern_ramp_share: float = 0.25  # ...by more than this share of itself
    swing_ratio: float = 0.05  # a release or a quiet hour: this much of the limit
    unknown_ratio: float = 0.92  # an unknown pattern's climb counts above this
    release_window: float = 6 * 3600.0  # a release this recent makes a climb a tooth
    fallen_floor: float = 1800.0  # all of this window below the floor by the swing: a fall
    teeth_share: float = 0.3  # ...while within this share of the teeth's height
    # ...over a rising floor too where this many sharp releases (a fall of the swing
    # within sharp_release) came over the envelope window: teeth, not a daily swing.
    teeth_min_releases: int = 3
    # A climb is a tooth's until it passes TOOTH_CREST by this many TOOTH_SPREADs.
    teeth_beyond_spreads: float = 2.0
    sharp_release: float = 600.0
    floor_memory: float = 7 * 86400.0  # the floor rises from the highest floor this far back
    floor_memory_min_cover: float = 22 * 3600.0  # ...of floors read over this much past warm-up
    # The short horizon's new highs count beyond this share of the quiet hours' swing.
    climbing_noise_share: float = 0.5
    # The medium horizon's: the last window's highest above the window before's.
    medium_climbing: float = 15 * 60.0
    medium_climbing_noise_share: float = 0.125
    # A young workload's lasting horizon: its first minutes are no floor, and the part
    # of the earlier window it lived must be this long.
    warm_up: float = 45 * 60.0
    min_cover: float = 6 * 3600.0

    @classmethod
    def of(cls, config: Config = CONFIG, step: float = 60.0) -> Windows:
        scale = DAY_S / config.baseline_window_s  # CONFIG.scaled() shrinks the hour too
        return cls(config.short_window_s, config.short_sustain_s, config.medium_window_s,
                   config.medium_sustain_s, config.baseline_window_s, step,
                   config.peak_window_s, HOUR_S / scale, config.min_baseline_rise_bytes,
                   config.min_baseline_rise_ratio, config.climbing_lag_s,
                   config.fill_beyond_peaks_ratio, config.fill_beyond_trend_s,
                   config.pattern_period_s, config.lasting_interval_s,
                   pattern_recent=config.pattern_recent_s,
                   pattern_recent_max_trends=config.pattern_recent_max_trends,
                   pattern_ramp=config.pattern_ramp_s,
                   pattern_ramp_share=config.pattern_ramp_share,
                   swing_ratio=config.pattern_swing_ratio,
                   unknown_ratio=config.fill_unknown_pattern_ratio,
                   release_window=config.release_window_s,
                   fallen_floor=config.fallen_floor_window_s,
                   teeth_share=config.fill_beyond_teeth_share,
                   teeth_min_releases=config.teeth_min_releases,
                   teeth_beyond_spreads=config.teeth_beyond_spreads,
                   sharp_release=config.sharp_release_window_s,
                   floor_memory=config.floor_memory_s,
                   floor_memory_min_cover=config.floor_memory_min_cover_s,
                   climbing_noise_share=config.climbing_noise_share,
                   medium_climbing=config.medium_climbing_window_s,
                   medium_climbing_noise_share=config.medium_climbing_noise_share,
                   warm_up=config.warm_up_s, min_cover=config.lasting_min_cover_s)

    @property
    def pattern_ahead(self) -> tuple[float, ...]:
        """The daily pattern's windows ahead (``rules.pattern_windows_s``)."""
        return tuple(k * self.hour for k in (1, 2, 3, 6))


DAY_S = 86400.0


def between(points: Sequence[Point], start: float, end: float) -> Sequence[Point]:
    """The points in (start, end] of points sorted by time (a binary search: top and the
    post-mortem call this for every series on every refresh)."""
    lo = bisect.bisect_right(points, start, key=lambda p: p[0])
    hi = bisect.bisect_right(points, end, key=lambda p: p[0])
    return points[lo:hi]


def slope(points: Sequence[Point], start: float, end: float) -> float | None:
    """PromQL ``deriv``: the least-squares slope of the points in (start, end]."""
    pts = between(points, start, end)
    if len(pts) < 2:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return sum((t - mt) * (v - mv) for t, v in pts) / den if den else None


def sustained(points: Sequence[Point], now: float, span: float, sustain: float,
              step: float) -> float | None:
    """``min_over_time(deriv(u[span])[sustain])`` at the rules' step, once the series
    reaches back span + sustain: the slowest slope of the sustain window, so only a
    climb that lasted counts."""
    if not points or points[0][0] > now - (span + sustain) + step / 2:
        return None
    slopes = []
    t = now - sustain + step
    while t <= now + 1e-9:
        s = slope(points, t - span, t)
        if s is not None:
            slopes.append(s)
        t += step
    return min(slopes) if slopes else None


def highest(points: Sequence[Point], start: float, end: float) -> float | None:
    """``max_over_time`` over (start, end]."""
    return max((v for _, v in between(points, start, end)), default=None)


def lowest(points: Sequence[Point], start: float, end: float) -> float | None:
    """``min_over_time`` over (start, end]."""
    return min((v for _, v in between(points, start, end)), default=None)


def envelope(points: Sequence[Point], now: float, w: Windows, days_ago: int = 0
             ) -> float | None:
    """The level the recurring peaks reach: the highest figure over the day before the
    last hour (hourly maxima over a day, offset an hour)."""
    end = now - w.hour - days_ago * w.baseline
    return highest(points, end - w.baseline - w.hour, end)


def floor(points: Sequence[Point], now: float, w: Windows, days_ago: int = 0
          ) -> float | None:
    """The lowest figure over the envelope window (the hourly minima over a day), past
    the series' warm-up (SETTLED_HOURLY_MIN reads no figure of its first ``warm_up``)."""
    end = now - days_ago * w.baseline
    start = end - w.baseline - w.hour
    if points:
        start = max(start, points[0][0] + w.warm_up - 1e-9)
    return lowest(points, start, end)


class _Sliding:
    """The lowest (or highest) figure over (start, end] as both edges only move forward:
    a monotonic deque, each point pushed and popped once over a walk of evaluations."""

    def __init__(self, points: Sequence[Point], lowest: bool) -> None:
        self.points, self.lowest, self.i = points, lowest, 0
        self.kept: deque[Point] = deque()

    def over(self, start: float, end: float) -> float | None:
        while self.i < len(self.points) and self.points[self.i][0] <= end:
            p = self.points[self.i]
            while self.kept and (self.kept[-1][1] >= p[1] if self.lowest
                                 else self.kept[-1][1] <= p[1]):
                self.kept.pop()
            self.kept.append(p)
            self.i += 1
        while self.kept and self.kept[0][0] <= start:
            self.kept.popleft()
        return self.kept[0][1] if self.kept else None


def highest_floor(points: Sequence[Point], now: float, w: Windows
                  ) -> tuple[float, float] | None:
    """HIGHEST_FLOOR and HIGHEST_FLOOR_SINCE: the highest floor at the lasting
    evaluations from the floor memory to an envelope window ago, of those read over most
    of a window (WHOLE_BASELINE: the points cover ``floor_memory_min_cover`` of it past
    the warm-up; a surface that read two days sees the floors of a day before the last;
    the rules, a week's), and the latest evaluation that read it."""
    if not points:
        return None
    window = w.baseline + w.hour  # a floor: the hourly minima over the envelope window
    covered = points[0][0] + w.warm_up + w.hour + w.floor_memory_min_cover
    first = max(covered, now - w.floor_memory + w.lasting_interval)
    instants: list[float] = []
    t = now - w.baseline
    while t >= first - 1e-9:
        instants.append(t)
        t -= w.lasting_interval
    best: tuple[float, float] | None = None
    lows = _Sliding(points, lowest=True)
    for t in reversed(instants):
        low = lows.over(t - window, t)
        # The latest of equal floors, as the rule's time of the floor that entered.
        if low is not None and (best is None or low >= best[0]):
            best = (low, t)
    return best


def whole_floor(points: Sequence[Point], now: float, w: Windows, days_ago: int
                ) -> float | None:
    """WHOLE_BASELINE ``days_ago`` windows ago: the floor then, where the points cover
    ``floor_memory_min_cover`` of its window past the warm-up."""
    end = now - days_ago * w.baseline
    if not points or points[0][0] + w.warm_up + w.hour + w.floor_memory_min_cover > end:
        return None
    return floor(points, now, w, days_ago)


def floor_rise_past_fall(points: Sequence[Point], now: float, w: Windows, limit: float
                         ) -> float | None:
    """FLOOR_RISE_PAST_FALL: the floor now above each whole floor 2-6 windows ago that a
    later whole floor fell below by the peaks' margin and the peaks now reach, over its
    age, scaled to a window: the least."""
    fa, ea = floor(points, now, w), envelope(points, now, w)
    if fa is None or ea is None:
        return None
    days = int(w.floor_memory // w.baseline)
    floors = {k: whole_floor(points, now, w, k) for k in range(1, days)}
    rises = []
    for k in range(2, days):
        fk = floors[k]
        later = [f for j in range(1, k) if (f := floors[j]) is not None]
        if fk is not None and fk <= ea and later and fk - w.beyond_ratio * limit > min(later):
            rises.append((fa - fk) / k)
    return min(rises, default=None)


def floor_rise(points: Sequence[Point], now: float, w: Windows, limit: float
               ) -> float | None:
    """UNRECLAIMABLE_BASELINE_RISE: the floor's rise over the envelope window, from the
    higher of the floor a window ago and the week's highest floor where the peaks still
    reach it (HIGHEST_FLOOR: a weekly pattern's weekday floor comes back to last
    week's; the rise from it spans its age, scaled to a window), or from a floor before
    a fall (FLOOR_RISE_PAST_FALL) where that is less; over the part of the earlier window
    lived, scaled to a window."""
    if not points:
        return None
    covered = _covered(points, now, w)
    if covered < w.min_cover:
        return None
    fa, fb = floor(points, now, w), floor(points, now, w, 1)
    if fa is None or fb is None:
        return None
    ea = envelope(points, now, w)
    highest = highest_floor(points, now, w)
    rise = fa - fb
    if highest is not None and ea is not None and fb < highest[0] <= ea:
        hf, since = highest
        rise = (fa - hf) * w.baseline / max(now - since, w.baseline)
    past_fall = floor_rise_past_fall(points, now, w, limit)
    if past_fall is not None:
        rise = min(rise, past_fall)
    return rise * w.baseline / covered


def week_peaks(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """HIGHEST_ENVELOPE: the highest envelope of the floor memory before the last
    window (a weekly pattern's weekday peaks, seen from its weekend)."""
    return highest(points, now - w.floor_memory - w.baseline - 2 * w.hour,
                   now - w.baseline - w.hour)


def week_peaks_since(points: Sequence[Point], now: float, w: Windows
                     ) -> tuple[float, float] | None:
    """HIGHEST_ENVELOPE and HIGHEST_ENVELOPE_SINCE: the week's highest peak and the last
    time the envelope held it (a window after the latest point of that height, as an
    envelope holds a peak; at most a window ago, the newest envelope the floor memory
    reads)."""
    week = between(points, now - w.floor_memory - w.baseline - 2 * w.hour,
                   now - w.baseline - w.hour)
    if not week:
        return None
    peak = max(v for _, v in week)
    at = max(t for t, v in week if v >= peak)
    return peak, min(at + w.baseline + 2 * w.hour, now - w.baseline)


def fallen_floor(points: Sequence[Point], now: float, w: Windows, limit: float
                 ) -> float | None:
    """FALLEN_FLOOR: the floor as it stood before a window of the memory all below it by
    the pattern's swing (a leak fixed in place), held at each lasting evaluation since
    while the memory stays below it and the envelope still holds a peak above it. (The
    rules also drop it after an OOM kill, which the points do not say.)"""
    margin = w.swing_ratio * limit
    recent = highest(points, now - w.fallen_floor, now)
    peaks = envelope(points, now, w)
    if recent is None or peaks is None or recent + margin >= peaks:
        return None  # the memory is up at its peaks: no fall, nor one held
    held: float | None = None
    floors: deque[float | None] = deque(maxlen=int(2 * w.fallen_floor // w.lasting_interval))
    # floor(), highest() and envelope() at each evaluation of the walk, each window
    # slid forward rather than scanned again (top calls this for every row it shows).
    settled = points[0][0] + w.warm_up - 1e-9
    lows, lasts, tops = (_Sliding(points, True), _Sliding(points, False),
                         _Sliding(points, False))
    t = now - w.baseline - w.hour  # a hold lasts while the envelope holds a peak from before
    while t <= now + 1e-9:
        floors.append(lows.over(max(t - w.baseline - w.hour, settled), t))
        last = lasts.over(t - w.fallen_floor, t)
        # The floor as it stood before: the highest of two windows (a fall only lowers it).
        before = max((f for f in floors if f is not None), default=None)
        top = tops.over(t - w.baseline - 2 * w.hour, t - w.hour)
        if last is not None and before is not None and before > last + margin:
            held = before
        elif not (held is not None and last is not None and top is not None
                  and last + margin < held < top):
            held = None
        t += w.lasting_interval
    return held


def lasting(points: Sequence[Point], now: float, w: Windows, limit: float) -> float | None:
    """The days-scale rise: the floor and the envelope of the peaks must both rise day
    over day (the smaller rise counts), by more than the rules' minimum. A daily swing
    moves neither, a leak under it moves both; a sawtooth keeps both; one climb into a
    kill, or a warm-up, moves only one. Or the peaks alone rose two days running above
    every peak before them: a nightly batch that grows. None below a fallen floor (a
    leak fixed in place: what the day before it read is no pattern to come back to)."""
    if not points or _covered(points, now, w) < w.min_cover:
        return None
    if fallen_floor(points, now, w, limit) is not None:
        return None
    ea, eb = envelope(points, now, w), envelope(points, now, w, 1)
    # The envelope's rise spans a window either way (the peaks sit at the windows' ends).
    rises = [r for r in (floor_rise(points, now, w, limit),
                         None if ea is None or eb is None else ea - eb) if r is not None]
    minimum = min_rise(w, limit)
    if rises and min(rises) > minimum:
        return min(rises) / w.baseline
    # Or the peaks alone, a window running and the window before, above every peak of
    # the floor memory before (HIGHEST_ENVELOPE) by half that rise: a batch or a swing
    # that grows, not a weekly pattern's return to its weekday peaks. The rise is the
    # smaller of that and the rise above the week's highest over its age.
    ec = envelope(points, now, w, 2)
    if ea is None or eb is None or ec is None or _covered(points, now - w.baseline, w) \
            < w.min_cover:
        return None
    rise = min(ea - eb, eb - ec)
    highest = week_peaks_since(points, now, w)
    if highest is not None:
        week, since = highest
        if week + rise / 2 >= ea:
            return None
        # Above last week's highest over its age, where that is less: a leak under a
        # weekly pattern rose from Friday's peaks at its rate, not the weekend's return.
        rise = min(rise, (ea - week) * w.baseline / max(now - since, w.baseline))
    return rise / w.baseline if rise > minimum else None


def min_rise(w: Windows, limit: float) -> float:
    """The least rise per window that is growth, not noise."""
    return max(w.min_rise_bytes, w.min_rise_ratio * limit)


def _covered(points: Sequence[Point], now: float, w: Windows) -> float:
    """FLOOR_COVER: the part of the earlier window past the series' warm-up (from the
    first hourly minimum, an hour past it), a window at most."""
    return min(w.baseline, now - w.baseline - (points[0][0] + w.warm_up + w.hour))


def quantile(phi: float, values: Sequence[float]) -> float:
    """PromQL ``quantile_over_time``: linear between the ranks around phi * (n - 1)."""
    if not values:
        return 0.0
    vs = sorted(values)
    rank = phi * (len(vs) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(vs) - 1)
    return vs[low] + (vs[high] - vs[low]) * (rank - low)


def quiet_swing(points: Sequence[Point], now: float, w: Windows) -> float:
    """QUIET_SWING: the lower quartile of HOURLY_NOISE (four deviations of the hour's
    figures from their least-squares line) at the lasting evaluations of the envelope
    window; 0 without an hour of noise."""
    noise = []
    t = now - w.baseline + w.lasting_interval
    while t <= now + 1e-9:
        pts = between(points, t - w.hour, t)
        trend = slope(points, t - w.hour, t)
        if len(pts) > 1 and trend is not None:
            n = len(pts)
            mean = sum(v for _, v in pts) / n
            var = sum((v - mean) ** 2 for _, v in pts) / n  # stddev_over_time's
            # The points' own var(t): the rules' formula for theirs (evenly spread).
            mt = sum(p for p, _ in pts) / n
            var_t = sum((p - mt) ** 2 for p, _ in pts) / n
            residual = max(0.0, var - trend ** 2 * var_t)
            noise.append(HOUR_SWING_DEVIATIONS * math.sqrt(residual))
        t += w.lasting_interval
    return quantile(QUIET_QUANTILE, noise)


def pattern_rise(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """PATTERN_RISE: the last hour's highest figure above the same hours one period ago
    (the hourly maxima of three lasting intervals)."""
    last = highest(points, now - w.hour, now)
    back = now - w.pattern_period
    before = highest(points, back - 3 * w.lasting_interval - w.hour, back)
    return None if last is None or before is None else last - before


def _recent_pattern_rises(points: Sequence[Point], now: float, w: Windows) -> list[float]:
    """PATTERN_RISE at each lasting interval of the recent hours."""
    count = int(w.pattern_recent // w.lasting_interval)
    return [r for k in range(count)
            if (r := pattern_rise(points, now - k * w.lasting_interval, w)) is not None]


def recent_pattern_rise(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """``min_over_time(PATTERN_RISE[pattern_recent])``: the least rise of the recent
    hours above the same hours one period ago, at each lasting interval."""
    rises = _recent_pattern_rises(points, now, w)
    return min(rises) if rises else None


def greatest_recent_pattern_rise(points: Sequence[Point], now: float, w: Windows
                             ) -> float | None:
    """``max_over_time(PATTERN_RISE[pattern_recent])``: the most of those rises."""
    rises = _recent_pattern_rises(points, now, w)
    return max(rises) if rises else None


def ramp_growth(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """A period of a ramping rise's own growth (the rules' ``_ramp_growth``): the faster
    of the ramp window's two halves (PATTERN_RISE now less half the window ago, that
    less the window ago), scaled from half the window to a period."""
    half = w.pattern_ramp / 2
    rises = [pattern_rise(points, now - back, w) for back in (0.0, half, w.pattern_ramp)]
    if rises[0] is None or rises[1] is None or rises[2] is None:
        return None
    grew = max(rises[0] - rises[1], rises[1] - rises[2])
    return grew * w.pattern_period / half


def above_pattern(points: Sequence[Point], now: float, w: Windows, limit: float,
                  lasting_rate: float | None) -> bool:
    """ABOVE_PATTERN: the last hour's highest figure rose above the same hours one
    period ago (PATTERN_RISE) by more than a period of the lasting trend, the peaks'
    margin and the quiet hours' swing; never where the pattern has teeth (TEETH: they
    drift through the day)."""
    raw = pattern_rise(points, now, w)
    if raw is None:
        return False
    rise = raw - (lasting_rate or 0.0) * w.pattern_period
    margin = w.beyond_ratio * limit
    # quiet_swing and teeth read a day of points: only where the rise clears the
    # margin alone.
    return (rise > margin and rise > margin + quiet_swing(points, now, w)
            and not teeth(points, now, w, limit))


def _new_high(last: float | None, before: float | None, share: float,
              points: Sequence[Point], now: float, w: Windows) -> bool:
    """``last > before + share * QUIET_SWING``: the horizons' guard (the rules'
    ``beyond_noise``)."""
    if last is None or before is None or last <= before:
        return False
    # Read only where the figure made a new high: the swing costs a day of hours.
    return last > before + share * quiet_swing(points, now, w)


def climbing(points: Sequence[Point], now: float, w: Windows) -> bool:
    """The short horizon's guard: the figure now above every one from the climbing lag
    to the lag plus the short window ago by more than a share of the quiet hours'
    swing (a batch that stopped drops out; its plateau's noise is no new high)."""
    if not points:
        return False
    before = highest(points, now - w.climbing_lag - w.short, now - w.climbing_lag)
    return _new_high(points[-1][1], before, w.climbing_noise_share, points, now, w)


def climbing_medium(points: Sequence[Point], now: float, w: Windows) -> bool:
    """The medium horizon's guard: the highest figure of the last window above the
    highest of the window before by a share of the quiet hours' swing (the slowest
    half-hour slope reads a finished ramp for half an hour after it stops)."""
    last = highest(points, now - w.medium_climbing, now)
    before = highest(points, now - 2 * w.medium_climbing, now - w.medium_climbing)
    return _new_high(last, before, w.medium_climbing_noise_share, points, now, w)


def growth(points: Sequence[Point], now: float, w: Windows, limit: float
           ) -> dict[str, float]:
    short = sustained(points, now, w.short, w.short_sustain, w.step)
    medium = sustained(points, now, w.medium, w.medium_sustain, w.step)
    out = {
        # The guard after the slope: it may read a day of noise, the slope rarely holds.
        "short": short if short is not None and short > 0 and climbing(points, now, w)
        else None,
        "medium": medium if medium is not None and medium > 0
        and climbing_medium(points, now, w) else None,
        "lasting": lasting(points, now, w, limit),
    }
    return {h: r for h, r in out.items() if r is not None and r > 0}



def pattern_signs(points: Sequence[Point], now: float, w: Windows, limit: float
                  ) -> tuple[bool, bool]:
    """PATTERN_KNOWN and RELEASED: at each lasting evaluation of the envelope window,
    a release (the last hour's lowest figure below the envelope by the swing) or a
    quiet whole hour (its range under the swing); known if either was seen over the
    window, released if a release was seen over the release window."""
    swing = w.swing_ratio * limit
    known = released = False
    t = now - w.baseline + w.lasting_interval
    while t <= now + 1e-9:
        low, high = lowest(points, t - w.hour, t), highest(points, t - w.hour, t)
        env = envelope(points, t, w)
        release = low is not None and env is not None and low < env - swing
        quiet = low is not None and high is not None and high - low < swing \
            and bool(between(points, t - w.hour - 300.0, t - w.hour))
        if release and t > now - w.release_window:
            released = True
        known = known or release or quiet
        t += w.lasting_interval
    return known, released


@dataclass(frozen=True)
class Release:
    """A lasting evaluation whose sharp-release window held a sharp release
    (SHARP_RELEASE 1): RELEASE_BASE, its lowest figure, and RELEASE_FALL, its highest
    less that."""

    base: float
    fall: float


def _sharp_releases(points: Sequence[Point], now: float, w: Windows, limit: float
                    ) -> tuple[int, list[Release]]:
    """SHARP_RELEASE at the lasting evaluations of the envelope window (the figure now
    below the highest of the sharp-release window by more than the swing: 1, else 0):
    how many times it changed, and the evaluations where it read 1."""
    swing = w.swing_ratio * limit
    flags: list[bool] = []
    releases: list[Release] = []
    t = now - w.baseline + w.lasting_interval
    while t <= now + 1e-9:
        pts = between(points, t - w.sharp_release, t)
        if pts:
            top = max(v for _, v in pts)
            sharp = top - pts[-1][1] > swing
            flags.append(sharp)
            if sharp:
                base = min(v for _, v in pts)
                releases.append(Release(base, top - base))
        t += w.lasting_interval
    return sum(a != b for a, b in itertools.pairwise(flags)), releases


def teeth(points: Sequence[Point], now: float, w: Windows, limit: float) -> bool:
    """TEETH: SHARP_RELEASE changed more than 2n - 2 times over the envelope window: n
    sharp releases at least. A daily swing falls over hours and has none."""
    changes, _ = _sharp_releases(points, now, w, limit)
    return _enough_releases(changes, w)


def _enough_releases(changes: int, w: Windows) -> bool:
    """n sharp releases at least: SHARP_RELEASE changed more than 2n - 2 times."""
    return changes > 2 * w.teeth_min_releases - 2


def tooth_crest(points: Sequence[Point], now: float, w: Windows, limit: float
                ) -> tuple[float, float] | None:
    """TOOTH_CREST and TOOTH_SPREAD where the pattern has teeth, else None: the last
    release's base plus the tallest fall of the envelope window plus the spread, the
    falls' range over their number less one (the window over the teeth's mean period,
    TEETH_PERIOD, less one)."""
    changes, releases = _sharp_releases(points, now, w, limit)
    if not _enough_releases(changes, w) or not releases:
        return None
    period = 2 * w.baseline / changes
    falls = [r.fall for r in releases]
    spread = (max(falls) - min(falls)) * period / (w.baseline - period)
    return releases[-1].base + max(falls) + spread, spread
