"""The local mirror of the recording rules: the forecast of one cgroup from points a
surface read itself, the rules' definition in Python."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.catalog import KIND_ANON, KIND_KERNEL, KIND_SHMEM, KIND_SOCK
from exporter.oncall.forecast.data import (
    GROWER_KINDS,
    HORIZONS,
    LOCAL,
    Forecast,
    Grower,
    Point,
    Workload,
    tolerance,
)
from exporter.oncall.forecast.series import (
    Windows,
    above_pattern,
    between,
    envelope,
    floor,
    floor_rise,
    greatest_recent_pattern_rise,
    growth,
    highest,
    min_rise,
    pattern_rise,
    pattern_signs,
    quiet_swing,
    ramp_growth,
    recent_pattern_rise,
    slope,
    teeth,
    tooth_crest,
    week_peaks,
)
from exporter.promql import (
    CONFIG,
    KIND_DEV_SHM,
    KIND_HIDDEN,
    Config,
)

# One function per recorded series of alerts/rules.py, named after it, over points a
# surface read itself; :func:`local_forecast` chains them in the rules' order. The rules
# are evaluated every minute (the lasting group every 5 min); the mirror at the moment
# asked. tests/test_one_answer.py compares the two on the same series (promtool
# evaluates the real rules), so a rule that changes without its mirror fails there.
#   GROWTH{short,medium}      growth: min_over_time(deriv(u[w])[sustain]) > 0 while
#                             climbing (short) or climbing_medium (new highs)
#   GROWTH{lasting}           lasting: the smaller of the floor's and the envelope's
#                             rise per envelope window, above the rules' minimum
#   PEAK_ENVELOPE             envelope: the highest figure over the window before the
#                             last hour
#   ABOVE_PATTERN             above_pattern
#   TIME_TO_LIMIT_BY_HORIZON  time_to_limit_by_horizon
#   TIME_TO_LIMIT             soonest: bottomk(1) of the above, with its horizon
#   PEAK_HEADROOM_SWINGS      peak_headroom_swings (QUIET_SWING its unit)
#   KIND_GROWTH               kind_growth: the last hour's deriv per kind
#   PROCESS_GROWTH            process_growth: the last hour's deriv per process
#   TOP_GROWER                top_grower (on the binding cgroup only: mark_binding)
#   BINDING                   mark_binding


def pattern_time_to_limit(points: Sequence[Point], now: float, w: Windows, limit: float,
                          lasting_rate: float | None) -> float | None:
    """The daily pattern (PATTERN_PEAK, then the lasting part of
    TIME_TO_LIMIT_BY_HORIZON): the first window ahead whose highest figure one period
    ago, lifted by a period of lasting growth or by the recent hours' least rise above
    theirs where that is more (at most ``pattern_recent_max_trends`` periods of it,
    unless that rise grew by more than ``pattern_ramp_share`` of itself over
    ``pattern_ramp`` and the pattern has no teeth: a young leak's), reaches the limit
    now (its length)."""
    if lasting_rate is None or lasting_rate <= 0:
        return None
    lift = lasting_rate * w.pattern_period
    recent = recent_pattern_rise(points, now, w)
    if recent is not None:
        # A ramp: the rise now (it grows by the hour), at most a period of its own
        # growth (a step's rise grows by the leak after it alone); else the recent
        # hours' least, at most the cap, where it is more than a period of the trend.
        # Teeth that drift through the day are no ramp.
        before = greatest_recent_pattern_rise(points, now - w.pattern_ramp, w)
        latest = pattern_rise(points, now, w)
        if (before is not None and latest is not None
                and (1 - w.pattern_ramp_share) * recent > before
                and not teeth(points, now, w, limit)):
            growth = ramp_growth(points, now, w)
            lift = max(lift, latest if growth is None else min(latest, growth))
        elif recent > lift:
            lift = min(recent, w.pattern_recent_max_trends * lift)
    back = now - w.pattern_period
    for ahead in w.pattern_ahead:
        # max_over_time(HOURLY_MAX[ahead - 1h + 3 intervals] offset (period - ahead))
        top = highest(points, back - 3 * w.lasting_interval, back + ahead)
        if top is not None and top + lift >= limit:
            return ahead
    return None


def time_to_limit_by_horizon(limit: float, now_value: float, recent_peak: float,
                             rates: Mapping[str, float], peaks: float | None,
                             w: Windows, pattern: float | None = None,
                             points: Sequence[Point] = (), now: float = 0.0,
                             pattern_unread: bool = False) -> dict[str, float]:
    """TIME_TO_LIMIT (per horizon, before ``soonest``): seconds to the limit in force now.

    * lasting: the sooner of the envelope (when it is above the recent peak: the next
      peak is what hits the limit; else the recent peak) at the lasting rate and the
      daily pattern (``pattern``, :func:`pattern_time_to_limit`);
    * short, medium: from the recent peak, and only where the climb goes beyond the
      pattern (CLIMB_BEYOND_PATTERN): above the peaks' envelope by a margin plus an
      envelope window of the lasting trend, or by ``beyond_trend`` of it while the
      lasting horizon reaches the limit within an envelope window, or by anything
      where the last hour rose above its daily pattern by more than the lasting trend
      explains (ABOVE_PATTERN: the leak speeds up), or no envelope yet;
      where the pattern is not known (the figure has only climbed since it appeared),
      only above the unknown-pattern ratio of the limit.

    ``pattern_unread``: the surface began reading after the series appeared and has not
    read a whole envelope window of it (``headroom top`` just started), so what it has
    not seen is not "only climbed": the climb is read against what it has seen, as the
    rules read a series whose pattern they know. With no points, the same.
    """
    out: dict[str, float] = {}
    lasting_rate = rates.get("lasting")
    if lasting_rate is not None and lasting_rate > 0:
        level = peaks if peaks is not None and peaks > recent_peak else recent_peak
        out["lasting"] = max(0.0, limit - level) / lasting_rate
    if pattern is not None:
        out["lasting"] = min(out.get("lasting", math.inf), pattern)
    trend = lasting_rate or 0.0
    known, released = pattern_signs(points, now, w, limit) if points else (False, False)
    unread = not known and (pattern_unread or not points)
    if not known and not unread:
        # Only climbed since it appeared: no pattern to read the climb against.
        beyond = now_value > w.unknown_ratio * limit
    elif peaks is None:
        beyond = unread  # no envelope yet: every climb is beyond what was seen
    else:
        # The floor's rise (a day of points) is read once, and only where asked.
        rise = functools.cache(lambda: floor_rise(points, now, w, limit))
        margin = w.beyond_ratio * limit
        crest = tooth_crest(points, now, w, limit)  # None unless the pattern has teeth
        before = envelope(points, now - w.release_window, w)  # a release window ago
        if released:
            # The next tooth: the margin (or a share of the teeth's height, less a
            # window of the trend, where more and the floor is known not to rise or
            # the pattern has teeth) plus the envelope's own rise since, at most a
            # release window of the trend where it exists.
            low = floor(points, now, w)
            if low is not None and (((r := rise()) is not None and r <= min_rise(w, limit))
                                    or crest is not None):
                margin = max(margin, w.teeth_share
                             * (peaks - low - w.baseline * max(trend, 0.0)))
            rose = max(0.0, peaks - before) if before is not None else 0.0
            if lasting_rate is not None:
                rose = min(rose, w.release_window * max(lasting_rate, 0.0))
            margin += rose
        else:
            # No margin where the envelope is the climb's own last hours (a steady leak).
            climb = highest(points, now - 2 * w.hour - 3 * w.lasting_interval,
                            now - w.hour) if points else None
            margin = 0.0 if climb is not None and peaks <= climb else margin
        above = peaks + margin
        week = week_peaks(points, now, w)
        if week is not None and before is not None and week > before:
            # Last week's peaks stood above the day's before this climb (a weekend, a
            # quiet day): they are the peaks that recur, and a climb beyond them by the
            # margin is not the pattern, however the day's envelope and its margins
            # ride the climb.
            above = min(above, week + w.beyond_ratio * limit)
        if crest is not None:
            # Teeth: up to the tooth's expected crest and a few of their spreads where
            # that is higher (a tall tooth on a floor the trend under-reads).
            tooth, spread = crest
            above = max(above, tooth + w.teeth_beyond_spreads * spread)
        # By less than a day of the trend only where the floor rises too (a leak): the
        # peaks of a batch that grows while its floor stays rise a day of it each day.
        beyond = now_value > above + w.baseline * trend or (
            lasting_rate is not None and now_value > above + w.beyond_trend * trend
            and out.get("lasting", math.inf) < w.baseline
            and (r := rise()) is not None and r > min_rise(w, limit)) or (
            now_value > above and above_pattern(points, now, w, limit, lasting_rate))
    for h in ("short", "medium"):
        r = rates.get(h)
        if r is not None and r > 0 and beyond:
            out[h] = max(0.0, limit - recent_peak) / r
    return out


def peak_headroom_swings(points: Sequence[Point], now: float, w: Windows, limit: float
                         ) -> float | None:
    """PEAK_HEADROOM_SWINGS: the headroom above the peaks (the envelope, or the last
    hour's highest figure above it) in quiet-hour swings: QUIET_SWING,
    the lower quartile of HOURLY_NOISE (four deviations of the hour's figures from their
    least-squares line) at the lasting evaluations of the envelope window. None without
    noise."""
    unit = quiet_swing(points, now, w)
    recent = highest(points, now - w.hour, now)
    peaks = envelope(points, now, w)
    level = peaks if peaks is not None and (recent is None or peaks > recent) else recent
    if unit <= 0 or level is None:
        return None
    return max(0.0, limit - level) / unit


def soonest(by_horizon: Mapping[str, float]) -> tuple[float | None, str | None]:
    """TIME_TO_LIMIT: ``bottomk by (cgroup) (1, TIME_TO_LIMIT_BY_HORIZON)``. On an exact
    tie (bottomk's pick is arbitrary) the longer horizon: it says what the growth is."""
    if not by_horizon:
        return None, None
    h = min(reversed(HORIZONS), key=lambda x: by_horizon.get(x, math.inf))
    return by_horizon[h], h


def day_over_day(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """The lasting growth of one kind or process (KIND_LASTING_GROWTH,
    PROCESS_LASTING_GROWTH): the last hour's mean minus the same hour's one period ago,
    per second."""
    def mean(end: float) -> float | None:
        vs = [v for _, v in between(points, end - w.hour, end)]
        return sum(vs) / len(vs) if vs else None

    a, b = mean(now), mean(now - w.pattern_period)
    return None if a is None or b is None else (a - b) / w.pattern_period


def peaks_day_over_day(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """KIND_PEAK_GROWTH, PROCESS_PEAK_GROWTH: the highest figure over the envelope window
    minus the highest over the window before, per second (the rules read it once an
    hour; this reads it now)."""
    a = highest(points, now - w.baseline, now)
    b = highest(points, now - 2 * w.baseline, now - w.baseline)
    return None if a is None or b is None else (a - b) / w.baseline


def _hour_slope(points: Sequence[Point], now: float, w: Windows) -> float | None:
    return slope(points, now - w.hour, now)


def _rate_of(lasting: bool, peaks: bool) -> Callable[[Sequence[Point], float, Windows],
                                                    float | None]:
    if not lasting:
        return _hour_slope
    return peaks_day_over_day if peaks else day_over_day


def kind_growth(kinds: Mapping[str, Sequence[Point]], now: float, w: Windows,
                lasting: bool = False, peaks: bool = False) -> dict[str, float]:
    """KIND_GROWTH (KIND_LASTING_GROWTH with ``lasting``): deriv over the last hour (the
    day-over-day rise; of the peaks with ``peaks``) of anon and shmem, of kernel + sock
    summed (as "kernel"), of the pod's /dev/shm ("dev_shm") and of the hidden memory."""
    rate = _rate_of(lasting, peaks)
    out: dict[str, float] = {}
    for kind, parts in ((KIND_ANON, (KIND_ANON,)), (KIND_SHMEM, (KIND_SHMEM,)),
                        (KIND_KERNEL, (KIND_KERNEL, KIND_SOCK)),
                        (KIND_DEV_SHM, (KIND_DEV_SHM,)), (KIND_HIDDEN, (KIND_HIDDEN,))):
        rates = [r for p in parts if p in kinds
                 and (r := rate(kinds[p], now, w)) is not None]
        if rates:
            out[kind] = sum(rates)
    return out


def process_growth(processes: Mapping[str, Sequence[Point]], now: float, w: Windows,
                   lasting: bool = False, peaks: bool = False) -> dict[str, float]:
    """PROCESS_GROWTH (PROCESS_LASTING_GROWTH with ``lasting``): deriv over the last hour
    (the day-over-day rise; of the peaks with ``peaks``) of each process's anon + mapped
    shmem."""
    rate = _rate_of(lasting, peaks)
    return {n: r for n, pts in processes.items() if (r := rate(pts, now, w)) is not None}


def _top(rates: Mapping[str, float], order: Sequence[str] = ()) -> str | None:
    """topk(1): the largest. Within ``TIE`` of it (topk's pick among equals is arbitrary;
    /dev/shm files are shmem and hidden too, growing at the same rate) the first in
    ``order``: the more specific name says where to look."""
    if not rates:
        return None
    best = max(rates.values())
    rank = {k: i for i, k in enumerate(order)}
    near = [k for k, r in rates.items() if r >= best - TIE * abs(best)]
    return min(near, key=lambda k: (rank.get(k, len(rank)), -rates[k], k))


TIE = 1e-6  # relative: rates this close are one rate read twice


def top_grower(kinds: Mapping[str, float], processes: Mapping[str, float]
               ) -> Grower | None:
    """TOP_GROWER from KIND_GROWTH and PROCESS_GROWTH of one cgroup: the process that
    grows most (when it grows), unless the kind that grows most is no process's memory
    (dev_shm, kernel, hidden, growing); named with the faster of anon and shmem (anon
    when neither is reported). Otherwise the kind that grows most, whatever its sign."""
    top_kind = _top(kinds, GROWER_KINDS)
    top_proc = _top(processes)
    not_a_process = top_kind is not None and top_kind not in (KIND_ANON, KIND_SHMEM) \
        and kinds[top_kind] > 0
    if top_proc is not None and processes[top_proc] > 0 and not not_a_process:
        kind = _top({k: kinds[k] for k in (KIND_ANON, KIND_SHMEM) if k in kinds}) or KIND_ANON
        return Grower(kind, top_proc, processes[top_proc])
    if top_kind is not None:
        return Grower(top_kind, "", kinds[top_kind])
    return None


@dataclass(frozen=True)
class History:
    """What a surface read of one cgroup: its unreclaimable figure over time, and the
    kinds (anon, shmem, kernel, dev_shm) and processes (anon + mapped shmem) that may
    explain its growth."""

    namespace: str
    pod: str
    container: str
    limit: float
    unreclaimable: Sequence[Point]
    kinds: Mapping[str, Sequence[Point]] = field(default_factory=dict)
    processes: Mapping[str, Sequence[Point]] = field(default_factory=dict)
    # When the surface began reading (top's first read). A series already there then was
    # not seen from its start: until a whole envelope window is read, its pattern is
    # unread, not unknown. None where the points begin with the series itself
    # (Prometheus's history, which the rules read too).
    watched_since: float | None = None


def pattern_unread(h: History, now: float, w: Windows) -> bool:
    """The series was there before the surface began reading it, less than an envelope
    window ago."""
    return (h.watched_since is not None and bool(h.unreclaimable)
            and h.unreclaimable[0][0] <= h.watched_since
            and now - h.watched_since < w.baseline)


def hidden(h: History) -> Sequence[Point]:
    """Unreclaimable memory no process accounts for, where the reads line up in time."""
    if not h.processes:
        return ()
    held: dict[float, float] = {}
    for pts in h.processes.values():
        for t, v in pts:
            held[t] = held.get(t, 0.0) + v
    return tuple((t, max(0.0, u - held[t])) for t, u in h.unreclaimable if t in held)


def floor_rises(h: History, now: float, w: Windows) -> bool:
    """UNRECLAIMABLE_BASELINE_RISE above the rules' minimum: the cgroup's floor rises (a
    leak), so what grows is not in its peaks alone."""
    if not h.unreclaimable or h.limit <= 0:
        return False
    rise = floor_rise(h.unreclaimable, now, w, h.limit)
    return rise is not None and rise > min_rise(w, h.limit)


def local_forecast(h: History, now: float, w: Windows | None = None,
                   pod_floor_rises: Callable[[], bool] | None = None) -> Forecast | None:
    """The recorded series' rules, in their order, over points read locally (see the
    comment above the mirror). BINDING (and with it TOP_GROWER's restriction to the
    binding cgroup) needs the pod's other cgroups: :func:`mark_binding`; so does the
    peaks-only growth (``pod_floor_rises``: whether any cgroup of the pod has a rising
    floor, asked only where the lasting horizon binds; without it, this cgroup's):
    :func:`pod_forecasts` passes both."""
    w = w or Windows.of()
    if not h.unreclaimable or h.limit <= 0:
        return None
    u = h.unreclaimable[-1][1]
    rates = growth(h.unreclaimable, now, w, h.limit)  # GROWTH
    peaks = envelope(h.unreclaimable, now, w)  # PEAK_ENVELOPE
    recent = highest(h.unreclaimable, now - w.peak, now) or u
    pattern = pattern_time_to_limit(h.unreclaimable, now, w, h.limit,
                                    rates.get("lasting"))  # PATTERN_PEAK
    by_horizon = time_to_limit_by_horizon(h.limit, u, recent, rates, peaks, w, pattern,
                                          h.unreclaimable, now,
                                          pattern_unread(h, now, w))
    ttl, horizon = soonest(by_horizon)  # TIME_TO_LIMIT
    all_kinds = {**h.kinds, KIND_HIDDEN: hidden(h)}
    kinds = kind_growth(all_kinds, now, w)  # KIND_GROWTH
    procs = process_growth(h.processes, now, w)  # PROCESS_GROWTH
    # TOP_GROWER reads the growth of the horizon that binds: day over day for lasting
    # (over what either rule records: KIND_LASTING_GROWTH and KIND_GROWTH).
    if horizon == "lasting":
        # Where no floor of the pod rises, what grows is in the peaks (KIND_PEAK_GROWTH
        # asks it of every cgroup of the pod).
        peaks_only = not (pod_floor_rises() if pod_floor_rises is not None
                          else floor_rises(h, now, w))
        grower = top_grower(
            {**kinds, **kind_growth(all_kinds, now, w, lasting=True, peaks=peaks_only)},
            {**procs, **process_growth(h.processes, now, w, lasting=True,
                                       peaks=peaks_only)})
    else:
        grower = top_grower(kinds, procs)
    swings = peak_headroom_swings(h.unreclaimable, now, w, h.limit)
    return Forecast(h.namespace, h.pod, h.container, h.limit, u, False, rates, peaks, ttl,
                    horizon, grower, LOCAL, kinds, procs, swings)


def pod_forecasts(histories: Iterable[History], now: float, w: Windows | None = None
                  ) -> list[Forecast]:
    """:func:`local_forecast` of each cgroup read, with what the rules read across a
    pod's cgroups: whether any floor of the pod rises, and which cgroup binds."""
    w = w or Windows.of()
    hs = list(histories)
    pods: dict[tuple[str, str], list[History]] = {}
    for h in hs:
        pods.setdefault((h.namespace, h.pod), []).append(h)
    rises: dict[tuple[str, str], bool] = {}

    def asker(pod: tuple[str, str]) -> Callable[[], bool]:
        def ask() -> bool:  # once per pod, and only where a lasting horizon binds
            if pod not in rises:
                rises[pod] = any(floor_rises(o, now, w) for o in pods[pod])
            return rises[pod]
        return ask

    return mark_binding(f for h in hs if (f := local_forecast(
        h, now, w, asker((h.namespace, h.pod)))) is not None)


def mark_binding(forecasts: Iterable[Forecast], config: Config = CONFIG) -> list[Forecast]:
    """The binding rule's mirror: a container whose headroom is within the tolerance of
    the pod cgroup's binds (or any container, without a pod-level series); the pod-level
    cgroup binds when one of its containers does not (pod-level resources), or it has no
    container series."""
    fs = list(forecasts)
    pods: dict[tuple[str, str], list[Forecast]] = {}
    for f in fs:
        pods.setdefault((f.namespace, f.pod), []).append(f)
    chosen: set[Workload] = set()
    for cs in pods.values():
        pod = next((f for f in cs if f.container == ""), None)
        conts = [f for f in cs if f.container]
        if pod is None:
            chosen |= {f.key for f in conts}
            continue
        slack = tolerance(pod.limit, config)
        within = [f for f in conts if f.headroom <= pod.headroom + slack]
        chosen |= {f.key for f in within}
        if len(within) < len(conts) or not conts:
            chosen.add(pod.key)
    # TOP_GROWER is recorded "and on (cgroup) BINDING == 1": none on the others.
    return [dataclasses.replace(f, binding=f.key in chosen,
                                grower=f.grower if f.key in chosen else None) for f in fs]

