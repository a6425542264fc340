"""Synthetic but realistic exporter series for the rules' scenario tests and the
side-by-side comparison (``alerts.sidebyside``).

A scenario describes one pod over days as functions of time; ``render`` turns it into
exporter series sampled every ``step_s`` (promtool input_series text, compressed with
promtool's expanding notation ``a+bxN``). Memory of a cgroup is modelled as the kernel
accounts it: process anon and mapped shmem, shmem no process maps, kernel memory, and
page cache that fills what is left below the limit, squeezed out as the rest grows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter import catalog as c
from exporter.promql import DAY, HOUR, MINUTE

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


# --- the scenarios ------------------------------------------------------------------------------
def _failcnt(t: int, per_min: float) -> float:
    return per_min * t / MINUTE


def night_shm() -> Scenario:
    """The 3 AM case: /dev/shm files no process maps grow 3 GiB each night between
    02:00 and 04:00 and not by day; active page cache is squeezed so the working set
    stays flat; the kernel OOM-kills at 03:30 on day 4."""
    limit = 32 * GiB
    base = {"APIServer": (1.5 * GiB, 0.0), "EngineCore": (3 * GiB, 0.0),
            "Worker_TP0": (6 * GiB, 4 * GiB)}  # 4 GiB of pinned host memory (shmem)
    per_night = 3 * GiB
    oom_at = 4 * DAY + 3 * HOUR + 30 * MINUTE  # what the numbers below aim at
    start_shm = limit - 15 * GiB - nightly(oom_at, per_night)

    def vllm(t: int) -> Cgroup:
        cg = Cgroup(limit, base, shmem_unmapped=start_shm + nightly(t, per_night),
                    events_max=_failcnt(t, 40))
        return with_page_cache(cg, wanted=20 * GiB, active_ws=0.88 * limit)

    kill = first_full(vllm, 5 * MINUTE, 5 * DAY)
    return Scenario(
        "night-shm", "3 AM: /dev/shm grows each night, working set flat", 5 * MINUTE,
        kill, "vllm-a-0", {"vllm": vllm}, pod_limit=lambda t: limit, kill_s=kill,
        fires=frozenset({
            ("HeadroomMemoryFillingUp", "warning", "vllm"),
            ("HeadroomMemoryFillingUp", "critical", "vllm"),
            ("HeadroomHiddenMemoryGrowth", "warning", ""),
            ("HeadroomMemoryFillingUp", "warning", ""),
            ("HeadroomMemoryFillingUp", "critical", ""),
            ("HeadroomMemoryReclaimAtLimit", "warning", "vllm"),
            ("HeadroomMemoryReclaimAtLimit", "warning", ""),
            ("HeadroomMemoryNearLimit", "critical", "vllm"),
            ("HeadroomMemoryNearLimit", "critical", ""),
        }),
        min_warning_lead_s=18 * HOUR, min_critical_lead_s=45 * MINUTE,
    )


def engine_leak() -> Scenario:
    """A slow anon leak in EngineCore (2 GiB a day) under a mild diurnal load on the
    API server: process memory grows, so it is not hidden memory."""
    limit = 24 * GiB
    leak_per_day = 2 * GiB
    oom_at = 4 * DAY + 21 * HOUR
    start = limit - 14.25 * GiB - per_second(leak_per_day) * oom_at

    def vllm(t: int) -> Cgroup:
        procs = {
            "APIServer": (diurnal(t, 1.25 * GiB, 1.75 * GiB) - 0.25 * GiB, 0.0),
            "EngineCore": (4 * GiB + start + per_second(leak_per_day) * t, 0.0),
            "Worker_TP0": (6 * GiB, 2 * GiB),
        }
        cg = Cgroup(limit, procs, shmem_unmapped=0.25 * GiB, events_max=0)
        cg = with_page_cache(cg, wanted=6 * GiB, active_ws=cg.unreclaimable + 3 * GiB)
        return Cgroup(cg.limit, cg.procs, cg.shmem_unmapped, cg.kernel, cg.file_active,
                      cg.file_inactive, events_max=_failcnt(t, 40) * ramp(t, oom_at - DAY, oom_at))

    kill = first_full(vllm, 5 * MINUTE, 6 * DAY)
    return Scenario(
        "engine-leak", "EngineCore anon leak, 2 GiB/day", 5 * MINUTE, kill, "vllm-b-0",
        {"vllm": vllm}, pod_limit=lambda t: limit, kill_s=kill,
        fires=frozenset({
            ("HeadroomMemoryFillingUp", "warning", "vllm"),
            ("HeadroomMemoryFillingUp", "critical", "vllm"),
            ("HeadroomMemoryFillingUp", "warning", ""),
            ("HeadroomMemoryFillingUp", "critical", ""),
            ("HeadroomMemoryReclaimAtLimit", "warning", "vllm"),
            ("HeadroomMemoryReclaimAtLimit", "warning", ""),
            ("HeadroomMemoryNearLimit", "critical", "vllm"),
            ("HeadroomMemoryNearLimit", "critical", ""),
        }),
        min_warning_lead_s=6 * HOUR, min_critical_lead_s=45 * MINUTE,
    )


def pod_level() -> Scenario:
    """Pod-level resources: the pod cgroup has the only limit (each container's effective
    limit is the pod's). A cache sidecar leaks anon memory; 4 GiB of /dev/shm left by a
    killed container is charged to the pod cgroup only. Each container stays under half
    the limit; the pod reaches it."""
    limit = 40 * GiB
    leak_per_day = 2.5 * GiB
    oom_at = 4 * DAY + 16 * HOUR
    leftover = 4 * GiB
    vllm_u = 18.5 * GiB  # what the vllm container holds, unreclaimable
    side_start = limit - leftover - vllm_u - 16 * MiB - per_second(leak_per_day) * oom_at

    def vllm(t: int) -> Cgroup:
        procs = {"APIServer": (1.5 * GiB, 0.0), "EngineCore": (5 * GiB, 0.0),
                 "Worker_TP0": (7.5 * GiB, 4 * GiB)}
        cg = Cgroup(limit, procs)
        return with_page_cache(cg, wanted=2 * GiB, active_ws=cg.unreclaimable + GiB)

    def sidecar(t: int) -> Cgroup:
        grown = side_start + per_second(leak_per_day) * t
        return Cgroup(limit, {"cache-daemon": (grown, 0.0)}, kernel=0)

    def pod(t: int) -> Cgroup:
        return Cgroup(limit, {}, shmem_unmapped=leftover + vllm(t).unreclaimable
                      + sidecar(t).unreclaimable, kernel=16 * MiB)

    kill = first_full(pod, 5 * MINUTE, 6 * DAY)
    return Scenario(
        "pod-level", "pod cgroup reaches its limit, containers look fine", 5 * MINUTE,
        kill, "vllm-c-0", {"vllm": vllm, "sidecar": sidecar},
        pod_limit=lambda t: limit, pod_extra_shmem=lambda t: leftover, kill_s=kill,
        kill_container="",
        fires=frozenset({
            ("HeadroomMemoryFillingUp", "warning", ""),
            ("HeadroomMemoryFillingUp", "critical", ""),
            ("HeadroomMemoryNearLimit", "critical", ""),
        }),
        min_warning_lead_s=6 * HOUR, min_critical_lead_s=45 * MINUTE,
    )


def healthy_diurnal() -> Scenario:
    """Five days of healthy traffic: EngineCore host memory swings from 8 to 12 GiB
    (half its baseline) every day, the API server with it; page cache churns."""
    limit = 32 * GiB

    def vllm(t: int) -> Cgroup:
        procs = {
            "APIServer": (diurnal(t, 2 * GiB, 3 * GiB), 0.0),
            "EngineCore": (diurnal(t, 8 * GiB, 12 * GiB), 0.0),
            "Worker_TP0": (6 * GiB, 4 * GiB),
        }
        cg = Cgroup(limit, procs)
        return with_page_cache(cg, wanted=diurnal(t, 2 * GiB, 4 * GiB),
                               active_ws=cg.unreclaimable + GiB)

    return Scenario("diurnal", "healthy diurnal load, 5 days", 5 * MINUTE, 5 * DAY,
                    "vllm-d-0", {"vllm": vllm}, pod_limit=lambda t: limit)


def page_cache_full() -> Scenario:
    """Page cache fills the whole limit (weights read over and over): usage sits at the
    limit, the kernel reclaims all the time, nothing is at risk."""
    limit = 32 * GiB

    def vllm(t: int) -> Cgroup:
        procs = {"APIServer": (2 * GiB, 0.0), "EngineCore": (4 * GiB, 0.0),
                 "Worker_TP0": (6 * GiB, 2 * GiB)}
        cg = Cgroup(limit, procs, events_max=_failcnt(t, 300))
        return with_page_cache(cg, wanted=64 * GiB, active_ws=0.95 * limit)

    return Scenario("page-cache", "page cache fills the whole limit", 5 * MINUTE, 3 * DAY,
                    "vllm-e-0", {"vllm": vllm}, pod_limit=lambda t: limit)


def brief_spike() -> Scenario:
    """A 2-minute anon spike to 96% of the limit (a burst of huge requests)."""
    limit = 32 * GiB
    spike_at = 12 * HOUR

    def vllm(t: int) -> Cgroup:
        procs = {"APIServer": (2 * GiB, 0.0), "EngineCore": (4.7 * GiB, 0.0),
                 "Worker_TP0": (6 * GiB, 4 * GiB)}
        if spike_at <= t < spike_at + 2 * MINUTE:  # EngineCore takes it to 96%
            extra = 0.96 * limit - Cgroup(limit, procs).unreclaimable
            procs["EngineCore"] = (4.7 * GiB + extra, 0.0)
        cg = Cgroup(limit, procs)
        return with_page_cache(cg, wanted=4 * GiB, active_ws=cg.unreclaimable + GiB)

    return Scenario("spike", "2-minute spike to 96% of the limit", MINUTE, DAY,
                    "vllm-f-0", {"vllm": vllm}, pod_limit=lambda t: limit)


def restarts() -> Scenario:
    """The container restarts every 20 h (rollouts): counters reset, process series
    pause, memory drops and climbs back while the model loads."""
    limit = 32 * GiB
    every = 20 * HOUR

    def vllm(t: int) -> Cgroup | None:
        since = t % every
        if t >= every and since < 5 * MINUTE:
            return None  # the restart gap: no cgroup, no series
        load = ramp(since, 5 * MINUTE, 30 * MINUTE) if t >= every else 1.0
        procs = {"APIServer": (2 * GiB * load, 0.0), "EngineCore": (8 * GiB * load, 0.0),
                 "Worker_TP0": (6 * GiB * load, 4 * GiB * load)}
        cg = Cgroup(limit, procs, events_max=_failcnt(since, 5))
        return with_page_cache(cg, wanted=4 * GiB * load, active_ws=cg.unreclaimable + GiB)

    return Scenario("restarts", "container restarts: counters reset", 5 * MINUTE, 3 * DAY,
                    "vllm-g-0", {"vllm": vllm}, pod_limit=lambda t: limit)


def kv_offload() -> Scenario:
    """vLLM's CPU KV-offload tier (16 GiB) is 10% in use and fills over two days; only
    10 GiB are left below the limit, so the pod dies when the tier is about 72% full."""
    limit = 48 * GiB
    tier = 16 * GiB
    rate = per_second(0.9 * tier / 2)  # the tier fills over two days

    def resident(t: int) -> float:
        return min(float(tier), 0.1 * tier + rate * t)

    def usage(t: int) -> float:
        return resident(t) / tier

    def vllm(t: int) -> Cgroup:
        procs = {"APIServer": (2 * GiB, 0.0), "EngineCore": (6 * GiB, 0.0),
                 "Worker_TP0": (8 * GiB + resident(t), 4 * GiB)}
        start = 20.5 * GiB + resident(0)
        cg = Cgroup(limit, procs, shmem_unmapped=limit - 10 * GiB - start)
        return with_page_cache(cg, wanted=4 * GiB, active_ws=cg.unreclaimable + GiB)

    kill = first_full(vllm, 5 * MINUTE, 3 * DAY)

    kv = {"namespace": NAMESPACE, "pod": "vllm-h-0", "container": "vllm",
          "model_name": "llama", "engine": "0", "medium": "cpu"}
    return Scenario(
        "kv-offload", "CPU KV-offload tier larger than the headroom", 5 * MINUTE, kill,
        "vllm-h-0", {"vllm": vllm}, pod_limit=lambda t: limit, kill_s=kill,
        extra={
            _series(c.VLLM_KV_CACHE_CAPACITY_BYTES.name, **kv): lambda t: tier,
            _series(c.VLLM_KV_CACHE_USAGE_RATIO.name, **kv): usage,
        },
        fires=frozenset({
            ("HeadroomKVOffloadWillNotFit", "warning", "vllm"),
            ("HeadroomMemoryFillingUp", "warning", "vllm"),
            ("HeadroomMemoryFillingUp", "warning", ""),
            ("HeadroomMemoryFillingUp", "critical", "vllm"),
            ("HeadroomMemoryFillingUp", "critical", ""),
            ("HeadroomMemoryNearLimit", "critical", "vllm"),
            ("HeadroomMemoryNearLimit", "critical", ""),
        }),
        warning_alert="HeadroomKVOffloadWillNotFit", min_warning_lead_s=DAY,
    )


ALL: tuple[Callable[[], Scenario], ...] = (
    night_shm, engine_leak, pod_level, kv_offload,
    healthy_diurnal, page_cache_full, brief_spike, restarts,
)


def all_scenarios() -> list[Scenario]:
    return [f() for f in ALL]
