"""The first wave's scenarios: eight pods over days in ``series``'s model of a cgroup (four
killed: /dev/shm growing each night, an EngineCore leak, a pod-level limit, a KV-offload
tier; four healthy: diurnal load, page cache at the limit, a brief spike, restarts),
each with the alerts it must fire and their lead times.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter import catalog as c
from exporter.promql import DAY, HOUR, MINUTE

from .series import (
    NAMESPACE,
    Cgroup,
    GiB,
    MiB,
    Scenario,
    _series,
    diurnal,
    first_full,
    nightly,
    per_second,
    ramp,
    with_page_cache,
)


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
