"""Synthetic but realistic exporter series for the rules' scenario tests and the
side-by-side comparison (``alerts.sidebyside``).

A scenario describes one pod over days as functions of time; ``render`` turns it into
exporter series sampled every ``step_s`` (promtool input_series text, compressed with
promtool's expanding notation ``a+bxN``). Memory of a cgroup is modelled as the kernel
accounts it: process anon and mapped shmem, shmem no process maps, kernel memory, and
page cache that fills what is left below the limit, squeezed out as the rest grows.
The scenarios themselves are in ``first_wave``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter import catalog as c
from exporter.promql import DAY, HOUR

GiB = 1024**3
MiB = 1024**2
NAMESPACE = "llm"
INSTANCE = "node-1:9105"
Values = list[float | None]


@dataclass(frozen=True)
class Cgroup:
    """One cgroup at one instant. Unreclaimable = process anon + process shmem +
    unmapped shmem + kernel; usage adds page cache."""

    limit: float
    procs: Mapping[str, tuple[float, float]]  # process -> (rss_anon, rss_shmem)
    shmem_unmapped: float = 0.0
    kernel: float = 512 * MiB
    file_active: float = 0.0
    file_inactive: float = 0.0
    events_max: float = 0.0  # cumulative memory.events max / memory.failcnt
    oom_kills: float = 0.0  # cumulative

    @property
    def unreclaimable(self) -> float:
        return (
            sum(a + s for a, s in self.procs.values()) + self.shmem_unmapped + self.kernel
        )

    @property
    def usage(self) -> float:
        return self.unreclaimable + self.file_active + self.file_inactive

    @property
    def working_set(self) -> float:
        return self.usage - self.file_inactive


def with_page_cache(cg: Cgroup, wanted: float, active_ws: float, slack: float = 256 * MiB
                    ) -> Cgroup:
    """Page cache fills up to ``wanted`` bytes but only what is left below the limit;
    the active part is what keeps the working set at ``active_ws`` (the kernel squeezes
    active pages first as unreclaimable memory grows)."""
    room = max(0.0, cg.limit - cg.unreclaimable - slack)
    total = min(wanted, room)
    active = min(total, max(0.0, active_ws - cg.unreclaimable))
    return Cgroup(cg.limit, cg.procs, cg.shmem_unmapped, cg.kernel, active, total - active,
                  cg.events_max, cg.oom_kills)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    step_s: int
    duration_s: int
    pod: str
    # container name -> state at time t (None: the container is not running).
    containers: Mapping[str, Callable[[int], Cgroup | None]]
    pod_limit: Callable[[int], float]
    # Charged to the pod cgroup only: shmem left by a dead container (reparented).
    pod_extra_shmem: Callable[[int], float] = lambda t: 0.0
    # Extra exporter series: series selector -> value at time t.
    extra: Mapping[str, Callable[[int], float | None]] = field(default_factory=dict)
    kill_s: int | None = None  # when unreclaimable memory reaches the limit
    # Exactly the alerts (alertname, severity, container) that fire at some point before
    # the kill (or in the whole run, for healthy scenarios).
    fires: frozenset[tuple[str, str, str]] = frozenset()
    # Lead-time requirements: `warning_alert` (warning) and HeadroomMemoryFillingUp
    # (critical) must fire on `kill_container` ("" = the pod-level cgroup) this long
    # before the kill.
    warning_alert: str = "HeadroomMemoryFillingUp"
    min_warning_lead_s: int = 0
    min_critical_lead_s: int = 0
    kill_container: str = "vllm"

    @property
    def times(self) -> range:
        end = self.kill_s if self.kill_s is not None else self.duration_s
        return range(0, end + 1, self.step_s)

    @property
    def end_s(self) -> int:
        return self.times[-1]


# --- time shapes ---------------------------------------------------------------------------
def ramp(t: float, start: float, end: float) -> float:
    """0 before start, 1 after end, linear between."""
    return min(1.0, max(0.0, (t - start) / (end - start)))


def per_second(per_day: float) -> int:
    """A growth rate as whole bytes per second, so sampled values step evenly."""
    return round(per_day / DAY)


def nightly(t: int, per_night: float, start_h: float = 2, end_h: float = 4) -> float:
    """Growth of about per_night bytes between start_h and end_h each night, flat by
    day (a whole number of bytes per second while it grows)."""
    days, rest = divmod(t, DAY)
    span = (end_h - start_h) * HOUR
    rate = round(per_night / span)
    return rate * span * days + rate * span * ramp(rest, start_h * HOUR, end_h * HOUR)


def diurnal(t: int, low: float, high: float, peak_h: float = 15) -> float:
    """Low at night, high in the afternoon: piecewise linear between hourly knots."""
    def knot(h: float) -> float:
        return low + (high - low) * (0.5 + 0.5 * math.cos(2 * math.pi * (h - peak_h) / 24))

    # Knots on multiples of 3600 bytes: with 1 or 5 minute steps every step is a whole
    # number of bytes, so promtool's a+bxN notation writes each hour as one run.
    def knot_q(h: float) -> float:
        return round(knot(h) / 3600) * 3600.0

    h0, rest = divmod(t, HOUR)
    return knot_q(h0) + (knot_q(h0 + 1) - knot_q(h0)) * rest / HOUR


# --- rendering --------------------------------------------------------------------------------
def _labels(**kv: str) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in kv.items())


def _series(name: str, **kv: str) -> str:
    return f"{name}{{{_labels(job='headroom', instance=INSTANCE, **kv)}}}"


def _pod_cgroup(sc: Scenario, t: int, members: list[Cgroup]) -> Cgroup:
    procs: dict[str, tuple[float, float]] = {}
    shm = sc.pod_extra_shmem(t) + sum(m.shmem_unmapped for m in members)
    return Cgroup(
        limit=sc.pod_limit(t),
        procs={},
        shmem_unmapped=shm + sum(sum(a + s for a, s in m.procs.values()) for m in members),
        kernel=sum(m.kernel for m in members) + 16 * MiB,
        file_active=sum(m.file_active for m in members),
        file_inactive=sum(m.file_inactive for m in members),
        events_max=sum(m.events_max for m in members),
        oom_kills=sum(m.oom_kills for m in members),
    ) if members else Cgroup(limit=sc.pod_limit(t), procs=procs, shmem_unmapped=shm)


def _cgroup_series(out: dict[str, Values], i: int, n: int, container: str, pod: str,
                   cg: Cgroup | None) -> None:
    def put(key: str, v: float | None) -> None:
        out.setdefault(key, [None] * n)[i] = v

    w = {"namespace": NAMESPACE, "pod": pod, "container": container}
    g = (lambda f: None) if cg is None else (lambda f: f(cg))
    put(_series(c.MEMORY_LIMIT_BYTES.name, **w), g(lambda x: x.limit))
    put(_series(c.MEMORY_USAGE_BYTES.name, **w), g(lambda x: x.usage))
    put(_series(c.MEMORY_WORKING_SET_BYTES.name, **w), g(lambda x: x.working_set))
    put(_series(c.MEMORY_UNRECLAIMABLE_BYTES.name, **w), g(lambda x: x.unreclaimable))
    put(_series(c.MEMORY_EVENTS_TOTAL.name, **w, event="max"), g(lambda x: x.events_max))
    put(_series(c.MEMORY_EVENTS_TOTAL.name, **w, event="oom_kill"), g(lambda x: x.oom_kills))
    if cg is None:
        return
    for proc, (anon, shm) in cg.procs.items():
        put(_series(c.PROCESS_MEMORY_BYTES.name, **w, process=proc, kind="rss_anon"), anon)
        put(_series(c.PROCESS_MEMORY_BYTES.name, **w, process=proc, kind="rss_shmem"), shm)


def render(sc: Scenario) -> dict[str, Values]:
    """Series selector -> values at sc.times (None = no sample)."""
    times = sc.times
    n = len(times)
    out: dict[str, Values] = {}
    for i, t in enumerate(times):
        members = []
        for name, fn in sc.containers.items():
            cg = fn(t)
            _cgroup_series(out, i, n, name, sc.pod, cg)
            if cg is not None:
                members.append(cg)
        _cgroup_series(out, i, n, "", sc.pod, _pod_cgroup(sc, t, members))
        out.setdefault(_series("up"), [None] * n)[i] = 1
        for key, f in sc.extra.items():
            out.setdefault(key, [None] * n)[i] = f(t)
    return out


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def _norm(v: float | None) -> float | None:
    """Bytes as integers, ratios to 9 decimals: steps then compare exactly."""
    if v is None:
        return None
    return float(round(v)) if abs(v) >= 1000 else round(v, 9)


def compress(values: Values) -> str:
    """promtool input_series text: runs with a constant step as a+bxN, gaps as _xN."""
    vals = [_norm(v) for v in values]
    parts: list[str] = []
    i = 0
    while i < len(vals):
        v = vals[i]
        if v is None:
            j = i
            while j + 1 < len(vals) and vals[j + 1] is None:
                j += 1
            parts.append("_" if j == i else f"_x{j - i + 1}")
            i = j + 1
            continue
        j = i
        nxt = vals[i + 1] if i + 1 < len(vals) else None
        if nxt is not None:
            step = round(nxt - v, 9)
            j = i + 1
            while j + 1 < len(vals):
                b = vals[j + 1]
                if b is None or round(b - vals[j], 9) != step:  # type: ignore[operator]
                    break
                j += 1
            if j - i >= 2:
                sign = "+" if step >= 0 else "-"
                parts.append(f"{_fmt(v)}{sign}{_fmt(abs(step))}x{j - i}")
                i = j + 1
                continue
        parts.append(_fmt(v))
        i += 1
    return " ".join(parts)


def first_full(fn: Callable[[int], Cgroup | None], step_s: int, horizon_s: int) -> int:
    """The first sample time at which the cgroup's unreclaimable memory reaches its
    limit: when the kernel OOM-kills."""
    for t in range(0, horizon_s + 1, step_s):
        cg = fn(t)
        if cg is not None and cg.unreclaimable >= cg.limit:
            return t
    raise ValueError("the cgroup never reaches its limit")
