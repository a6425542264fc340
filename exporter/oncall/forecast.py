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
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.oncall.prom_client import Sample
from exporter.promql import (
    BINDING,
    CONFIG,
    GROWTH,
    HEADROOM,
    LIMIT,
    PEAK_ENVELOPE,
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
    out: dict[Workload, Forecast] = {}
    for k, lim in limits.items():
        if k not in unrecl or lim <= 0:
            continue
        t = ttl.get(k)
        out[k] = Forecast(*k, lim, unrecl[k], binding.get(k, 0.0) >= 1, growth.get(k, {}),
                          envelope.get(k), t[0] if t else None, t[1] if t else None,
                          grower.get(k), RECORDED)
    return out


def by_pod(cgroups: Mapping[Workload, Forecast]) -> dict[tuple[str, str], list[Forecast]]:
    out: dict[tuple[str, str], list[Forecast]] = {}
    for (ns, pod, _), f in sorted(cgroups.items()):
        out.setdefault((ns, pod), []).append(f)
    return out


# --- the local mirror of the rules ---------------------------------------------------------------
# alerts/rules.py records, every evaluation (1 min; the lasting group every 5 min):
#   short  = min_over_time(deriv(u[short_window])[short_sustain]) > 0, once u spans both
#   medium = the same over the medium windows
#   lasting = min(floor rise, envelope rise) per day, above max(min bytes, ratio * limit);
#             floor = the lowest figure over a day, envelope = the highest over the day
#             before the last hour, each against the same one day earlier
#   time to limit per horizon = (limit - level) / rate, level = the peak of the last
#             peak window (short, medium) or the envelope when above it (lasting);
#             the soonest binds
#   top grower = the kind with the largest growth; when it is anon or shmem, the process
#             with the largest positive growth (the kind's otherwise)
# Where this mirror and the rules of the forecast branch (0283219) differ, by design of
# the contract ("the soonest credible forecast"; the grower "at the binding horizon"):
#   - a short or medium forecast counts only beyond the peaks' envelope plus a day of
#     the lasting trend (the page's own confirmation; the rule's time to limit takes
#     any horizon: a daily swing's afternoon then reads as a medium-horizon kill);
#   - the grower's growth is taken at the binding horizon (the rule takes the last
#     hour's deriv: a slow leak under a daily swing names the swing's process).
# Each function below is one of those rules over points read locally.
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

    @classmethod
    def of(cls, config: Config = CONFIG, step: float = 60.0) -> Windows:
        scale = DAY_S / config.baseline_window_s  # CONFIG.scaled() shrinks the hour too
        return cls(config.short_window_s, config.short_sustain_s, config.medium_window_s,
                   config.medium_sustain_s, config.baseline_window_s, step,
                   config.peak_window_s, HOUR_S / scale, config.min_baseline_rise_bytes,
                   config.min_baseline_rise_ratio)


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


def growth(points: Sequence[Point], now: float, w: Windows, limit: float
           ) -> dict[str, float]:
    out = {
        "short": sustained(points, now, w.short, w.short_sustain, w.step),
        "medium": sustained(points, now, w.medium, w.medium_sustain, w.step),
        "lasting": lasting(points, now, w, limit),
    }
    return {h: r for h, r in out.items() if r is not None and r > 0}


def time_to_limit(limit: float, recent_peak: float, rates: Mapping[str, float],
                  peaks: float | None, day: float = DAY_S) -> tuple[float | None, str | None]:
    """The soonest credible forecast and its horizon: short and medium from the recent
    peak, credible only beyond the peaks' envelope plus a day of the lasting trend (a
    climb the recurring peaks already reach is the daily swing's: the page's own
    confirmation); the lasting one from the
    envelope when it is above the recent peak (the next peak is what hits the limit).
    Within ``TIE`` the longer horizon names it."""
    best: tuple[float | None, str | None] = (None, None)
    for h in reversed(HORIZONS):  # a steady leak reads the same at every horizon: the
        r = rates.get(h)          # longest says what it is, a shorter must be sooner
        if r is None or r <= 0:
            continue
        if h != "lasting" and peaks is not None and \
                recent_peak <= peaks + rates.get("lasting", 0.0) * day:
            continue
        level = max(recent_peak, peaks or 0.0) if h == "lasting" else recent_peak
        t = max(0.0, limit - level) / r
        if best[0] is None or t < TIE * best[0]:
            best = (t, h)
    return best


TIE = 0.95  # forecasts within 5% of each other are one forecast


def top_grower(kinds: Mapping[str, Sequence[Point]], processes: Mapping[str, Sequence[Point]],
               now: float, w: Windows, limit: float, horizon: str | None) -> Grower | None:
    """The kind with the largest growth at the horizon that binds (the lasting rise for a
    slow leak: a daily swing's afternoon is not what grows) and, when it is a process's
    (anon, shmem), the process that grows most; the last hour's slope when no horizon
    forecasts a kill."""
    def rate(points: Sequence[Point]) -> float | None:
        if horizon is None:
            return slope(points, now - w.hour, now)
        return growth(points, now, w, limit).get(horizon, 0.0)

    kind_rates = {k: r for k in GROWER_KINDS if k in kinds
                  and (r := rate(kinds[k])) is not None}
    proc_rates = {n: r for n, p in processes.items() if (r := rate(p)) is not None}
    kind = max(kind_rates, key=lambda k: kind_rates[k], default="")
    if kind in ("shmem", "hidden") and kind_rates.get("dev_shm", 0.0) >= \
            0.9 * kind_rates[kind] > 0:
        kind = "dev_shm"  # what grows is /dev/shm's files (shmem, unmapped): say where
    proc = max(proc_rates, key=lambda n: proc_rates[n], default="")
    proc_grows = bool(proc) and proc_rates[proc] > 0
    if kind in ("anon", "shmem") and proc_grows:
        return Grower(kind, proc, proc_rates[proc])
    if kind:
        return Grower(kind, "", kind_rates[kind])
    return Grower("anon", proc, proc_rates[proc]) if proc_grows else None


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
    """The recorded series' definition over points read locally (see the module doc)."""
    w = w or Windows.of()
    if not h.unreclaimable or h.limit <= 0:
        return None
    u = h.unreclaimable[-1][1]
    rates = growth(h.unreclaimable, now, w, h.limit)
    peak = envelope(h.unreclaimable, now, w)
    recent = _extreme(h.unreclaimable, now - w.peak, now, "max") or u
    ttl, horizon = time_to_limit(h.limit, recent, rates, peak, w.baseline)
    kinds = {**h.kinds, "hidden": hidden(h)}
    return Forecast(h.namespace, h.pod, h.container, h.limit, u, False, rates, peak, ttl,
                    horizon, top_grower(kinds, h.processes, now, w, h.limit, horizon), LOCAL)


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
    return [Forecast(f.namespace, f.pod, f.container, f.limit, f.unreclaimable,
                     f.key in chosen, f.growth, f.envelope, f.time_to_limit, f.horizon,
                     f.grower, f.source) for f in fs]


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
        # The highest point, and the last lowest point before it: where the climb began
        # (a flat stretch before a climb is not part of it).
        top = max(range(len(win)), key=lambda i: win[i][1])
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
