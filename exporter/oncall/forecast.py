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
from exporter.promql import CONFIG, Config

MiB = 1 << 20

# --- the contract's names -----------------------------------------------------------------
LIMIT = "headroom:memory_limit:bytes"
UNRECLAIMABLE = "headroom:memory_unreclaimable:bytes"
HEADROOM = "headroom:memory_headroom:bytes"
BINDING = "headroom:memory_binding:bool"
GROWTH = "headroom:memory_growth:rate"
PEAK_ENVELOPE = "headroom:memory_peak_envelope:bytes"
TIME_TO_LIMIT = "headroom:memory_time_to_limit:seconds"
TOP_GROWER = "headroom:memory_top_grower:rate"
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


def tightest(cgroups: Iterable[Forecast], config: Config = CONFIG) -> Forecast | None:
    """The binding cgroup of one pod: the one the recording rule marks, else (a mirror of
    that rule) the smallest headroom, where a container within the owner tolerance of the
    pod-level cgroup's headroom wins the tie (a single-container pod's pod cgroup is its
    container plus a few MiB: its processes explain the growth)."""
    cs = list(cgroups)
    marked = [f for f in cs if f.binding]
    if marked:
        return min(marked, key=lambda f: (f.headroom, f.container == ""))
    best = min(cs, key=lambda f: (f.headroom, f.container == ""), default=None)
    if best is None or best.container != "":
        return best
    slack = max(config.owner_tolerance_ratio * best.limit, config.owner_tolerance_bytes)
    near = [f for f in cs if f.container and f.headroom <= best.headroom + slack]
    return min(near, key=lambda f: f.headroom, default=best)


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
@dataclass(frozen=True)
class Windows:
    """The rules' windows (seconds), from the one config object."""

    short: float
    short_sustain: float
    medium: float
    medium_sustain: float
    baseline: float
    step: float  # the rules' evaluation interval (subquery resolution)
    critical_horizon: float  # a short-horizon forecast counts within this (the page's)
    warning_horizon: float  # a medium-horizon forecast counts within this
    min_rise_bytes: float
    min_rise_ratio: float

    @classmethod
    def of(cls, config: Config = CONFIG, step: float = 60.0) -> Windows:
        return cls(config.short_window_s, config.short_sustain_s, config.medium_window_s,
                   config.medium_sustain_s, config.baseline_window_s, step,
                   config.fill_critical_horizon_s, config.fill_warning_horizon_s,
                   config.min_baseline_rise_bytes, config.min_baseline_rise_ratio)


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


def sustained(points: Sequence[Point], now: float, window: float, sustain: float,
              step: float) -> float | None:
    """``min_over_time(deriv(u[window])[sustain:step])``, once the series spans 90% of
    window + sustain: the slowest slope of the sustain window, so only a climb that
    lasted counts."""
    if not points or now - points[0][0] < 0.9 * (window + sustain):
        return None
    slopes = []
    t = now - sustain + step
    while t <= now + 1e-9:
        s = slope(points, t - window, t)
        if s is not None:
            slopes.append(s)
        t += step
    return min(slopes) if slopes else None


def _extreme(points: Sequence[Point], start: float, end: float, pick: str) -> float | None:
    vs = [v for _, v in between(points, start, end)]
    if not vs:
        return None
    return min(vs) if pick == "min" else max(vs)


def lasting(points: Sequence[Point], now: float, w: Windows, limit: float) -> float | None:
    """The days-scale rise: the floor (lowest figure of the last baseline window against
    the one before) and the envelope of the peaks (highest against highest) must both
    rise, by more than the rules' minimum; the smaller rise over the window, in B/s. A
    daily swing moves neither, a leak under it moves both; one peak (a climb into a kill,
    a batch) moves only the envelope and is no lasting rise."""
    if not points or now - points[0][0] < 1.9 * w.baseline:
        return None
    rises = []
    for pick in ("min", "max"):
        a = _extreme(points, now - w.baseline, now, pick)
        b = _extreme(points, now - 2 * w.baseline, now - w.baseline, pick)
        if a is None or b is None:
            return None
        rises.append(a - b)
    rise = min(rises)
    if rise <= max(w.min_rise_bytes, w.min_rise_ratio * limit):
        return None
    return rise / w.baseline


def envelope(points: Sequence[Point], now: float, w: Windows) -> float | None:
    """The level the recurring peaks reach: the highest figure of the baseline window."""
    return _extreme(points, now - w.baseline, now, "max")


def growth(points: Sequence[Point], now: float, w: Windows, limit: float
           ) -> dict[str, float]:
    out = {
        "short": sustained(points, now, w.short, w.short_sustain, w.step),
        "medium": sustained(points, now, w.medium, w.medium_sustain, w.step),
        "lasting": lasting(points, now, w, limit),
    }
    return {h: r for h, r in out.items() if r is not None and r > 0}


def time_to_limit(limit: float, unreclaimable: float, rates: Mapping[str, float],
                  peak: float | None, w: Windows) -> tuple[float | None, str | None]:
    """The soonest credible forecast and its horizon: a short-horizon climb counts within
    the page's horizon, a medium one within the warning's, a lasting one always (from the
    peaks' envelope: the next peak is what hits the limit)."""
    best: tuple[float | None, str | None] = (None, None)
    for h in HORIZONS:
        r = rates.get(h)
        if r is None or r <= 0:
            continue
        level = max(unreclaimable, peak or 0.0) if h == "lasting" else unreclaimable
        t = max(0.0, limit - level) / r
        credible = {"short": w.critical_horizon, "medium": w.warning_horizon}.get(h, math.inf)
        if t <= credible and (best[0] is None or t < best[0]):
            best = (t, h)
    return best


def top_grower(kinds: Mapping[str, Sequence[Point]], processes: Mapping[str, Sequence[Point]],
               now: float, w: Windows, limit: float, horizon: str | None) -> Grower | None:
    """The kind and the process whose growth at ``horizon`` is largest (the mirror of the
    top-grower rule)."""
    if horizon is None:
        return None

    def rate(points: Sequence[Point]) -> float:
        return growth(points, now, w, limit).get(horizon, 0.0)

    kind_rates = {k: rate(kinds[k]) for k in GROWER_KINDS if k in kinds}
    kind = max(kind_rates, key=lambda k: kind_rates[k], default="")
    if kind == "shmem" and kind_rates.get("dev_shm", 0.0) >= 0.9 * kind_rates["shmem"] > 0:
        kind = "dev_shm"  # the shmem that grows is /dev/shm's files: say where
    proc_rates = {name: rate(p) for name, p in processes.items()}
    proc = max(proc_rates, key=lambda n: proc_rates[n], default="")
    if proc and proc_rates[proc] > 0:
        return Grower(kind or "anon", proc, proc_rates[proc])
    if kind and kind_rates[kind] > 0:
        return Grower(kind, "", kind_rates[kind])
    return None


@dataclass(frozen=True)
class History:
    """What a surface read of one cgroup: its unreclaimable figure over time, and the
    kinds and processes (anon + mapped shmem) that may explain its growth."""

    namespace: str
    pod: str
    container: str
    limit: float
    unreclaimable: Sequence[Point]
    kinds: Mapping[str, Sequence[Point]] = field(default_factory=dict)
    processes: Mapping[str, Sequence[Point]] = field(default_factory=dict)


def local_forecast(h: History, now: float, w: Windows | None = None) -> Forecast | None:
    """The recorded series' definition over points read locally (see the module doc)."""
    w = w or Windows.of()
    if not h.unreclaimable or h.limit <= 0:
        return None
    u = h.unreclaimable[-1][1]
    rates = growth(h.unreclaimable, now, w, h.limit)
    peak = envelope(h.unreclaimable, now, w)
    ttl, horizon = time_to_limit(h.limit, u, rates, peak, w)
    grower = top_grower(h.kinds, h.processes, now, w, h.limit,
                        horizon or max(rates, key=lambda k: rates[k], default=None))
    return Forecast(h.namespace, h.pod, h.container, h.limit, u, False, rates, peak, ttl,
                    horizon, grower, LOCAL)


def mark_binding(forecasts: Iterable[Forecast]) -> list[Forecast]:
    """The binding rule's mirror: per pod, the tightest cgroup gets ``binding``."""
    fs = list(forecasts)
    pods: dict[tuple[str, str], list[Forecast]] = {}
    for f in fs:
        pods.setdefault((f.namespace, f.pod), []).append(f)
    chosen = {b.key for cs in pods.values() if (b := tightest(cs)) is not None}
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
