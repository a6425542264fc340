"""The forecast every surface shows: the recorded series of the forecast contract, and the
local mirror of their rules for a surface that has no Prometheus.

The contract (docs: README "The forecast (recorded series)"; names in
``exporter/promql.py``) records per cgroup (namespace, pod, container; container="" is
the pod-level cgroup): the limit, the unreclaimable figure, the headroom, which cgroup of
the pod binds, the growth at three horizons (short: minutes, medium: hours, lasting:
days), the peaks' envelope, the time to limit at the horizon that binds, and the top
grower (kind and process). ``explain``, ``top --prometheus``, the dashboards' first
screen and the post-mortem page read those and nothing else, so they give one answer.

:func:`local_forecast` is the same definition in Python, over the points a surface read
itself (``top`` without Prometheus, the post-mortem's sampler points, explain when the
rules are not loaded). It mirrors ``alerts/rules.py``; when one changes, change the other
(tests/test_one_answer.py feeds both the same series).

Pure: no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.oncall.prom_client import Sample
from exporter.promql import (
    BINDING,
    CONFIG,
    GROWTH,
    HEADROOM,
    KIND_GROWTH,
    LIMIT,
    PEAK_ENVELOPE,
    PROCESS_GROWTH,
    TIME_TO_LIMIT,
    TOP_GROWER,
    UNRECLAIMABLE,
    Config,
)

MiB = 1 << 20

# --- the contract's names (declared once, in exporter.promql, with the rules) ---------------
CONTRACT = (LIMIT, UNRECLAIMABLE, HEADROOM, BINDING, GROWTH, PEAK_ENVELOPE, TIME_TO_LIMIT,
            TOP_GROWER)
HORIZONS = ("short", "medium", "lasting")
# In order of preference on a tie: /dev/shm files are shmem too, and the more specific
# name says where to look.
GROWER_KINDS = ("dev_shm", "anon", "shmem", "kernel", "hidden")

RECORDED, LOCAL = "recorded", "local"

Point = tuple[float, float]  # (unix seconds, value)
Workload = tuple[str, str, str]  # namespace, pod, container


@dataclass(frozen=True)
class Grower:
    """What explains most of a cgroup's growth: a kind and a process ("" if none)."""

    kind: str
    process: str
    rate: float  # B/s of the process (of the kind when process == "")


@dataclass(frozen=True)
class Forecast:
    namespace: str
    pod: str
    container: str  # "" = the pod-level cgroup
    limit: float
    unreclaimable: float
    binding: bool = False
    growth: Mapping[str, float] = field(default_factory=dict)  # horizon -> B/s (> 0 only)
    envelope: float | None = None
    time_to_limit: float | None = None  # seconds
    horizon: str | None = None  # the horizon that gave time_to_limit
    grower: Grower | None = None
    source: str = RECORDED
    # KIND_GROWTH and PROCESS_GROWTH of this cgroup (B/s, any sign): the rows of "what
    # grows" the top grower was chosen from. The pod-level cgroup holds every container's
    # processes.
    kind_growth: Mapping[str, float] = field(default_factory=dict)
    process_growth: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> Workload:
        return self.namespace, self.pod, self.container

    @property
    def headroom(self) -> float:
        return max(0.0, self.limit - self.unreclaimable)

    @property
    def ratio(self) -> float:
        return self.unreclaimable / self.limit if self.limit > 0 else 1.0

    @property
    def rate(self) -> float | None:
        """The growth at the horizon that binds (else the fastest there is)."""
        if self.horizon is not None and self.horizon in self.growth:
            return self.growth[self.horizon]
        return max(self.growth.values(), default=None)


def grower_text(g: Grower | None) -> str:
    """One wording on every surface: "EngineCore anon", "/dev/shm (no process)"."""
    if g is None:
        return "-"
    kind = "/dev/shm" if g.kind == "dev_shm" else g.kind
    return f"{g.process} {kind}" if g.process else f"{kind} (no process)"


def growing(g: Grower | None) -> Grower | None:
    """The grower as a surface shows it: only while it grows (the rule names one on
    every binding cgroup, a falling kind included)."""
    return g if g is not None and g.rate > 0 else None


def tightest(cgroups: Iterable[Forecast], config: Config = CONFIG) -> Forecast | None:
    """The binding cgroup of one pod, for a surface that shows one: of the cgroups the
    binding rule marks (a container within the tolerance and the pod level may both be),
    the container first; with none marked (the rule's mirror) the smallest headroom, a
    container within the owner tolerance of the pod-level cgroup's headroom winning the
    tie (a single-container pod's pod cgroup is its container plus a few MiB)."""
    cs = list(cgroups)
    marked = [f for f in cs if f.binding]
    if marked:
        return min(marked, key=lambda f: (f.container == "", f.headroom))
    best = min(cs, key=lambda f: (f.headroom, f.container == ""), default=None)
    if best is None or best.container != "":
        return best
    slack = tolerance(best.limit, config)
    near = [f for f in cs if f.container and f.headroom <= best.headroom + slack]
    return min(near, key=lambda f: f.headroom, default=best)


def tolerance(pod_limit: float, config: Config = CONFIG) -> float:
    """How much more headroom than the pod cgroup a container may have and still bind."""
    return max(config.owner_tolerance_ratio * pod_limit, config.owner_tolerance_bytes)


# --- reading the recorded series ---------------------------------------------------------------
def recorded_queries(sel: str) -> dict[str, str]:
    """One instant query per contract series for the selector ``{...}`` (or "")."""
    return {
        "limit": f"{LIMIT}{sel}",
        "unreclaimable": f"{UNRECLAIMABLE}{sel}",
        "binding": f"{BINDING}{sel}",
        "growth": f"{GROWTH}{sel}",
        "envelope": f"{PEAK_ENVELOPE}{sel}",
        "ttl": f"{TIME_TO_LIMIT}{sel}",
        "grower": f"{TOP_GROWER}{sel}",
        "kind_growth": f"{KIND_GROWTH}{sel}",
        "process_growth": f"{PROCESS_GROWTH}{sel}",
    }


def from_recorded(answers: Mapping[str, Sequence[Sample]]) -> dict[Workload, Forecast]:
    """The answers of :func:`recorded_queries` -> one forecast per cgroup. Two exporters
    scraping one cgroup (or two Prometheus replicas) give the same series twice: the
    highest value wins (the nearer kill for time to limit)."""
    def key(r: Sample) -> Workload:
        lb = r.labels
        return lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", "")

    def fin(v: float) -> bool:
        return math.isfinite(v)

    def table(name: str) -> dict[Workload, float]:
        out: dict[Workload, float] = {}
        for r in answers.get(name, ()):
            if fin(r.value):
                out[key(r)] = max(out.get(key(r), -math.inf), r.value)
        return out

    limits, unrecl, binding = table("limit"), table("unreclaimable"), table("binding")
    envelope = table("envelope")
    growth: dict[Workload, dict[str, float]] = {}
    for r in answers.get("growth", ()):
        h = r.labels.get("horizon", "")
        if h in HORIZONS and fin(r.value) and r.value > 0:
            g = growth.setdefault(key(r), {})
            g[h] = max(g.get(h, 0.0), r.value)
    ttl: dict[Workload, tuple[float, str]] = {}
    for r in answers.get("ttl", ()):
        if fin(r.value) and r.value >= 0 and (key(r) not in ttl or r.value < ttl[key(r)][0]):
            ttl[key(r)] = (r.value, r.labels.get("horizon", ""))
    grower: dict[Workload, Grower] = {}
    for r in answers.get("grower", ()):
        if fin(r.value) and (key(r) not in grower or r.value > grower[key(r)].rate):
            grower[key(r)] = Grower(r.labels.get("kind", ""), r.labels.get("process", ""),
                                    r.value)
    kinds: dict[Workload, dict[str, float]] = {}
    for r in answers.get("kind_growth", ()):
        if fin(r.value):
            kinds.setdefault(key(r), {})[r.labels.get("kind", "")] = r.value
    procs: dict[Workload, dict[str, float]] = {}
    for r in answers.get("process_growth", ()):
        if fin(r.value):
            ns, pod, cont = key(r)
            name = r.labels.get("process", "")
            for w in ((ns, pod, cont), (ns, pod, "")):  # the pod level holds them all
                ps = procs.setdefault(w, {})
                ps[name] = max(ps.get(name, -math.inf), r.value)
    out: dict[Workload, Forecast] = {}
    for k, lim in limits.items():
        if k not in unrecl or lim <= 0:
            continue
        t = ttl.get(k)
        out[k] = Forecast(*k, lim, unrecl[k], binding.get(k, 0.0) >= 1, growth.get(k, {}),
                          envelope.get(k), t[0] if t else None, t[1] if t else None,
                          grower.get(k), RECORDED, kinds.get(k, {}), procs.get(k, {}))
    return out


def by_pod(cgroups: Mapping[Workload, Forecast]) -> dict[tuple[str, str], list[Forecast]]:
    out: dict[tuple[str, str], list[Forecast]] = {}
    for (ns, pod, _), f in sorted(cgroups.items()):
        out.setdefault((ns, pod), []).append(f)
    return out


# --- the local mirror of the rules ---------------------------------------------------------------
# One function per recorded series of alerts/rules.py, named after it, over points a
# surface read itself; :func:`local_forecast` chains them in the rules' order. The rules
# are evaluated every minute (the lasting group every 5 min); the mirror at the moment
# asked. tests/test_one_answer.py compares the two on the same series (promtool
# evaluates the real rules), so a rule that changes without its mirror fails there.
#   GROWTH{short,medium}      growth_sustained: min_over_time(deriv(u[w])[sustain]) > 0
#   GROWTH{lasting}           lasting: the smaller of the floor's and the envelope's
#                             rise per envelope window, above the rules' minimum
#   PEAK_ENVELOPE             envelope: the highest figure over the window before the
#                             last hour
#   TIME_TO_LIMIT_BY_HORIZON  time_to_limit_by_horizon
#   TIME_TO_LIMIT             soonest: bottomk(1) of the above, with its horizon
#   KIND_GROWTH               kind_growth: the last hour's deriv per kind
#   PROCESS_GROWTH            process_growth: the last hour's deriv per process
#   TOP_GROWER                top_grower (on the binding cgroup only: mark_binding)
#   BINDING                   mark_binding
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

    @classmethod
    def of(cls, config: Config = CONFIG, step: float = 60.0) -> Windows:
        scale = DAY_S / config.baseline_window_s  # CONFIG.scaled() shrinks the hour too
        return cls(config.short_window_s, config.short_sustain_s, config.medium_window_s,
                   config.medium_sustain_s, config.baseline_window_s, step,
                   config.peak_window_s, HOUR_S / scale, config.min_baseline_rise_bytes,
                   config.min_baseline_rise_ratio, config.climbing_lag_s,
                   config.fill_beyond_peaks_ratio, config.fill_beyond_trend_s,
                   config.pattern_period_s, config.lasting_interval_s)

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


def _extreme(points: Sequence[Point], start: float, end: float, pick: str) -> float | None:
    vs = [v for _, v in between(points, start, end)]
    if not vs:
        return None
    return min(vs) if pick == "min" else max(vs)


def envelope(points: Sequence[Point], now: float, w: Windows, days_ago: int = 0
             ) -> float | None:
    """The level the recurring peaks reach: the highest figure over the day before the
    last hour (hourly maxima over a day, offset an hour)."""
    end = now - w.hour - days_ago * w.baseline
    return _extreme(points, end - w.baseline - w.hour, end, "max")


def floor(points: Sequence[Point], now: float, w: Windows, days_ago: int = 0
          ) -> float | None:
    end = now - days_ago * w.baseline
    return _extreme(points, end - w.baseline - w.hour, end, "min")


def lasting(points: Sequence[Point], now: float, w: Windows, limit: float) -> float | None:
    """The days-scale rise: the floor and the envelope of the peaks must both rise day
    over day (the smaller rise counts), by more than the rules' minimum. A daily swing
    moves neither, a leak under it moves both; a sawtooth keeps both; one climb into a
    kill, or a warm-up, moves only one."""
    if not points or points[0][0] > now - (2 * w.baseline - w.hour):
        return None
    fa, fb = floor(points, now, w), floor(points, now, w, 1)
    ea, eb = envelope(points, now, w), envelope(points, now, w, 1)
    rises = [a - b for a, b in ((fa, fb), (ea, eb)) if a is not None and b is not None]
    if not rises:
        return None
    rise = min(rises)
    if rise <= max(w.min_rise_bytes, w.min_rise_ratio * limit):
        return None
    return rise / w.baseline


def climbing(points: Sequence[Point], now: float, w: Windows) -> bool:
    """The short horizon's guard: the figure now above every one from the climbing lag
    to the lag plus the short window ago (a batch that stopped drops out)."""
    if not points:
        return False
    before = _extreme(points, now - w.climbing_lag - w.short, now - w.climbing_lag, "max")
    return before is not None and points[-1][1] > before


def growth(points: Sequence[Point], now: float, w: Windows, limit: float
           ) -> dict[str, float]:
    out = {
        "short": sustained(points, now, w.short, w.short_sustain, w.step)
        if climbing(points, now, w) else None,
        "medium": sustained(points, now, w.medium, w.medium_sustain, w.step),
        "lasting": lasting(points, now, w, limit),
    }
    return {h: r for h, r in out.items() if r is not None and r > 0}


def pattern_time_to_limit(points: Sequence[Point], now: float, w: Windows, limit: float,
                          lasting_rate: float | None) -> float | None:
    """The daily pattern (PATTERN_PEAK, then the lasting part of
    TIME_TO_LIMIT_BY_HORIZON): the first window ahead whose highest figure one period
    ago, lifted by a period of lasting growth, reaches the limit now (its length)."""
    if lasting_rate is None or lasting_rate <= 0:
        return None
    back = now - w.pattern_period
    for ahead in w.pattern_ahead:
        # max_over_time(HOURLY_MAX[ahead - 1h + 3 intervals] offset (period - ahead))
        top = _extreme(points, back - 3 * w.lasting_interval, back + ahead, "max")
        if top is not None and top + lasting_rate * w.pattern_period >= limit:
            return ahead
    return None


def time_to_limit_by_horizon(limit: float, now_value: float, recent_peak: float,
                             rates: Mapping[str, float], peaks: float | None,
                             w: Windows, pattern: float | None = None,
                             points: Sequence[Point] = (), now: float = 0.0
                             ) -> dict[str, float]:
    """TIME_TO_LIMIT (per horizon, before ``soonest``): seconds to the limit in force now.

    * lasting: the sooner of the envelope (when it is above the recent peak: the next
      peak is what hits the limit; else the recent peak) at the lasting rate and the
      daily pattern (``pattern``, :func:`pattern_time_to_limit`);
    * short, medium: from the recent peak, and only where the climb goes beyond the
      pattern (CLIMB_BEYOND_PATTERN): above the peaks' envelope by a margin plus an
      envelope window of the lasting trend, or by ``beyond_trend`` of it while the
      lasting horizon reaches the limit within an envelope window, or no envelope yet.
    """
    out: dict[str, float] = {}
    lasting_rate = rates.get("lasting")
    if lasting_rate is not None and lasting_rate > 0:
        level = peaks if peaks is not None and peaks > recent_peak else recent_peak
        out["lasting"] = max(0.0, limit - level) / lasting_rate
    if pattern is not None:
        out["lasting"] = min(out.get("lasting", math.inf), pattern)
    trend = lasting_rate or 0.0
    if peaks is None:
        beyond = True
    else:
        # No margin where the envelope is the climb's own last hours (a steady leak).
        climb = _extreme(points, now - 2 * w.hour - 3 * w.lasting_interval, now - w.hour,
                         "max") if points else None
        margin = 0.0 if climb is not None and peaks <= climb else w.beyond_ratio * limit
        above = peaks + margin
        beyond = now_value > above + w.baseline * trend or (
            lasting_rate is not None and now_value > above + w.beyond_trend * trend
            and out.get("lasting", math.inf) < w.baseline)
    for h in ("short", "medium"):
        r = rates.get(h)
        if r is not None and r > 0 and beyond:
            out[h] = max(0.0, limit - recent_peak) / r
    return out


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


def _hour_slope(points: Sequence[Point], now: float, w: Windows) -> float | None:
    return slope(points, now - w.hour, now)


def kind_growth(kinds: Mapping[str, Sequence[Point]], now: float, w: Windows,
                lasting: bool = False) -> dict[str, float]:
    """KIND_GROWTH (KIND_LASTING_GROWTH with ``lasting``): deriv over the last hour (the
    day-over-day rise) of anon and shmem, of kernel + sock summed (as "kernel"), of the
    pod's /dev/shm ("dev_shm") and of the hidden memory."""
    rate = day_over_day if lasting else _hour_slope
    out: dict[str, float] = {}
    for kind, parts in (("anon", ("anon",)), ("shmem", ("shmem",)),
                        ("kernel", ("kernel", "sock")), ("dev_shm", ("dev_shm",)),
                        ("hidden", ("hidden",))):
        rates = [r for p in parts if p in kinds
                 and (r := rate(kinds[p], now, w)) is not None]
        if rates:
            out[kind] = sum(rates)
    return out


def process_growth(processes: Mapping[str, Sequence[Point]], now: float, w: Windows,
                   lasting: bool = False) -> dict[str, float]:
    """PROCESS_GROWTH (PROCESS_LASTING_GROWTH with ``lasting``): deriv over the last hour
    (the day-over-day rise) of each process's anon + mapped shmem."""
    rate = day_over_day if lasting else _hour_slope
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
    not_a_process = top_kind is not None and top_kind not in ("anon", "shmem") \
        and kinds[top_kind] > 0
    if top_proc is not None and processes[top_proc] > 0 and not not_a_process:
        kind = _top({k: kinds[k] for k in ("anon", "shmem") if k in kinds}) or "anon"
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


def hidden(h: History) -> Sequence[Point]:
    """Unreclaimable memory no process accounts for, where the reads line up in time."""
    if not h.processes:
        return ()
    held: dict[float, float] = {}
    for pts in h.processes.values():
        for t, v in pts:
            held[t] = held.get(t, 0.0) + v
    return tuple((t, max(0.0, u - held[t])) for t, u in h.unreclaimable if t in held)


def local_forecast(h: History, now: float, w: Windows | None = None) -> Forecast | None:
    """The recorded series' rules, in their order, over points read locally (see the
    comment above the mirror). BINDING (and with it TOP_GROWER's restriction to the
    binding cgroup) needs the pod's other cgroups: :func:`mark_binding`."""
    w = w or Windows.of()
    if not h.unreclaimable or h.limit <= 0:
        return None
    u = h.unreclaimable[-1][1]
    rates = growth(h.unreclaimable, now, w, h.limit)  # GROWTH
    peaks = envelope(h.unreclaimable, now, w)  # PEAK_ENVELOPE
    recent = _extreme(h.unreclaimable, now - w.peak, now, "max") or u
    pattern = pattern_time_to_limit(h.unreclaimable, now, w, h.limit,
                                    rates.get("lasting"))  # PATTERN_PEAK
    by_horizon = time_to_limit_by_horizon(h.limit, u, recent, rates, peaks, w, pattern,
                                          h.unreclaimable, now)
    ttl, horizon = soonest(by_horizon)  # TIME_TO_LIMIT
    all_kinds = {**h.kinds, "hidden": hidden(h)}
    kinds = kind_growth(all_kinds, now, w)  # KIND_GROWTH
    procs = process_growth(h.processes, now, w)  # PROCESS_GROWTH
    # TOP_GROWER reads the growth of the horizon that binds: day over day for lasting
    # (over what either rule records: KIND_LASTING_GROWTH and KIND_GROWTH).
    if horizon == "lasting":
        grower = top_grower({**kinds, **kind_growth(all_kinds, now, w, lasting=True)},
                            {**procs, **process_growth(h.processes, now, w, lasting=True)})
    else:
        grower = top_grower(kinds, procs)
    return Forecast(h.namespace, h.pod, h.container, h.limit, u, False, rates, peaks, ttl,
                    horizon, grower, LOCAL, kinds, procs)


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


# --- what grew before a kill --------------------------------------------------------------------
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
