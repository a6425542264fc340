"""Adversarial scenarios: exporter series the way a real cluster delivers them.

Each ``Case`` is one failure class the rules must page on (or a healthy pattern that must
stay silent), made harder than a clean recording of it: 30 s scrapes, seeded noise,
diurnal load, scrape gaps with Prometheus' staleness markers, exporter pods replaced (a
new ``instance``), container restarts, counters that reset or are re-reported.

The cases here are written by hand (``recording`` writes their series, ``shapes`` draws
their memory); ``evaluate`` replays a case through a rules file with promtool and counts
notifications.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from exporter import catalog as c
from exporter.promql import DAY, HOUR, MINUTE

from .recording import (
    FILL,
    NEAR,
    NS,
    Case,
    Fn,
    Key,
    Recorder,
    Scrape,
    cgroup,
    process,
    rollouts,
    steady,
    with_gaps,
)
from .shapes import Noise, diurnal, first_at_or_above, ramp

GiB = 1024**3
MiB = 1024**2


def _level(level: float, amplitude: float, t: int) -> float:
    return level + diurnal(t, amplitude)


def _plus(fn: Fn, extra: float, t: int) -> float | None:
    v = fn(t)
    return None if v is None else v + extra


def _case(name: str, cls: str, title: str, step_s: int, end_s: int, rec: Recorder,
          **kw: object) -> Case:
    return Case(name, cls, title, step_s, end_s, dict(rec.out), **kw)  # type: ignore[arg-type]


def _k(alert: str, severity: str, pod: str, container: str = "vllm") -> Key:
    return (alert, severity, pod, container)


# A slow leak under diurnal load and noise (a 1.5-2 % daily swing, 0.3 % jitter) is killed
# by the first afternoon peak that reaches the limit; a page the hour's peaks already
# justify may come up to this long before it. A page earlier than that is early.
SLOW_PAGE_MAX_LEAD_S = 4 * HOUR


# --- failure classes ------------------------------------------------------------------------------
def gaps() -> Case:
    """An 8-hour climb from 55 % to the limit after a noisy half day, the exporter unreachable
    for 5 minutes every 2 hours and once more 25 minutes before the kill (30 s scrapes)."""
    step, pod, limit = 30, "gap-0", 32 * GiB
    start = 12 * HOUR
    noise = Noise(1, 0.003 * limit)

    def u(t: int) -> float:
        return limit * (0.55 + 0.45 * ramp(t, start, start + 8 * HOUR)) \
            + diurnal(t, 0.02 * limit) * (t < start) + noise(t)

    kill = first_at_or_above(u, lambda t: limit, range(start, 3 * DAY, step))
    scrape = with_gaps(steady(), 2 * HOUR, 5 * MINUTE, first_s=HOUR,
                       extra=[kill - 25 * MINUTE])
    rec = Recorder(range(0, kill + 1, step), scrape)
    cgroup(rec, pod, "vllm", lambda t: limit, u, cache=lambda t: 4 * GiB)
    cgroup(rec, pod, "", lambda t: limit, lambda t: u(t) + 16 * MiB,
           cache=lambda t: 4 * GiB)
    page = _k(FILL, "critical", pod)
    return _case("gaps", "scrape gaps", title=gaps.__doc__ or "", step_s=step,
                 end_s=kill, rec=rec, killed=True, expect=frozenset({page}),
                 allow=frozenset({_k(NEAR, "critical", pod)}),
                 min_lead_s={page: 45 * MINUTE}, max_page_lead_s=2 * HOUR)


def rollout() -> Case:
    """A slow anon leak (3 GiB a day, 24 GiB limit, noise and diurnal load) while the
    exporter DaemonSet is rolled three times, the last 20 hours before the kill."""
    step, pod, limit = MINUTE, "roll-0", 24 * GiB
    noise = Noise(2, 0.003 * limit)
    per_s = 3 * GiB / DAY
    base = limit - 4.2 * DAY * per_s

    def u(t: int) -> float:
        return base + per_s * t + diurnal(t, 0.02 * limit) + noise(t)

    kill = first_at_or_above(u, lambda t: limit, range(0, 6 * DAY, step))
    scrape = rollouts([DAY + 3 * HOUR, 2 * DAY + 9 * HOUR, kill - 20 * HOUR])
    rec = Recorder(range(0, kill + 1, step), scrape)
    cgroup(rec, pod, "vllm", lambda t: limit, u, cache=lambda t: 3 * GiB)
    cgroup(rec, pod, "", lambda t: limit, lambda t: u(t) + 16 * MiB,
           cache=lambda t: 3 * GiB)
    page, ticket = _k(FILL, "critical", pod), _k(FILL, "warning", pod)
    return _case("rollout", "exporter pod replaced", title=rollout.__doc__ or "",
                 step_s=step, end_s=kill, rec=rec, killed=True,
                 expect=frozenset({page, ticket}),
                 min_lead_s={page: 45 * MINUTE, ticket: 12 * HOUR},
                 max_page_lead_s=SLOW_PAGE_MAX_LEAD_S)


def fast_ramp() -> Case:
    """Unreclaimable memory climbs from 60 % to the limit in 20 minutes after six noisy
    hours (30 s scrapes: half the samples of the issue's 15 s)."""
    step, pod, limit = 30, "fast-0", 32 * GiB
    noise = Noise(3, 0.003 * limit)
    start = 6 * HOUR

    def u(t: int) -> float:
        return limit * (0.60 + 0.40 * ramp(t, start, start + 20 * MINUTE)) + noise(t)

    kill = first_at_or_above(u, lambda t: limit, range(start, 2 * DAY, step))
    rec = Recorder(range(0, kill + 1, step), steady())
    cgroup(rec, pod, "vllm", lambda t: limit, u, cache=lambda t: 2 * GiB)
    cgroup(rec, pod, "", lambda t: limit, lambda t: u(t) + 16 * MiB,
           cache=lambda t: 2 * GiB)
    page = _k(FILL, "critical", pod)
    return _case("fast-ramp", "fast ramp", title=fast_ramp.__doc__ or "", step_s=step,
                 end_s=kill, rec=rec, killed=True, expect=frozenset({page}),
                 allow=frozenset({_k(NEAR, "critical", pod)}),
                 min_lead_s={page: 5 * MINUTE}, max_page_lead_s=30 * MINUTE)


def nightly_plateau() -> Case:
    """Every night a batch adds 31 points in 7 minutes (62 % -> 93 %), holds them for
    40 minutes and frees them; noise, 30 s scrapes, three nights. Healthy."""
    step, pod, limit = 30, "batch-0", 32 * GiB
    noise = Noise(4, 0.003 * limit)

    def u(t: int) -> float:
        s = t % DAY - 2 * HOUR
        batch = ramp(s, 0, 7 * MINUTE) - ramp(s, 47 * MINUTE, 50 * MINUTE)
        return limit * (0.62 + 0.31 * batch) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    cgroup(rec, pod, "vllm", lambda t: limit, u, cache=lambda t: 1 * GiB)
    cgroup(rec, pod, "", lambda t: limit, lambda t: u(t) + 16 * MiB,
           cache=lambda t: 1 * GiB)
    return _case("nightly-plateau", "plateau", title=nightly_plateau.__doc__ or "",
                 step_s=step, end_s=3 * DAY, rec=rec)


def restart_leftover() -> Case:
    """The vLLM container restarts on day 2 and leaves 4 GiB of /dev/shm files charged
    to the pod; the new container loads its model in 3 minutes and stays flat for two
    more days. The leftover is named (hidden memory, stale shared memory); nothing
    predicts a kill."""
    step, pod, limit = MINUTE, "restart-0", 32 * GiB
    noise = Noise(5, 0.002 * limit)
    restart = 2 * DAY + 4 * HOUR
    leftover = 4 * GiB

    def anon(t: int) -> float | None:
        if restart <= t < restart + MINUTE:
            return None  # the container is gone for a minute
        load = ramp(t - restart, MINUTE, 4 * MINUTE) if t >= restart else 1.0
        return 1 * GiB + 15 * GiB * load + diurnal(t, 0.02 * limit) + noise(t)

    def vllm(t: int) -> float | None:
        a = anon(t)
        return None if a is None else a + 4 * GiB + 512 * MiB  # + mapped shm + kernel

    def pod_level(t: int) -> float:
        v = vllm(t)
        return (v or 0.0) + 16 * MiB + (leftover if t >= restart else 0.0)

    rec = Recorder(range(0, 4 * DAY + 1, step), steady())
    cgroup(rec, pod, "vllm", lambda t: limit, vllm, cache=lambda t: 3 * GiB)
    cgroup(rec, pod, "", lambda t: limit, pod_level, cache=lambda t: 3 * GiB)
    process(rec, pod, "vllm", "EngineCore", anon, lambda t: 4 * GiB)
    rec.put("headroom_tmpfs_orphaned_bytes",
            {"namespace": NS, "pod": pod, "container": "", "mount": "/dev/shm"},
            lambda t: leftover if t >= restart + 2 * MINUTE else 0.0)
    return _case("restart-leftover", "restart", title=restart_leftover.__doc__ or "",
                 step_s=step, end_s=4 * DAY, rec=rec,
                 expect=frozenset({
                     _k("HeadroomHiddenMemoryGrowth", "warning", pod, ""),
                     _k("HeadroomStaleSharedMemory", "warning", pod, ""),
                 }))


def one_page() -> Case:
    """A node with 14 vLLM pods (container and pod-level cgroup each): one container
    leaks toward its own limit over 6 hours; in another pod (pod-level resources: one
    limit for the pod) a sidecar leaks and the pod's limit binds. One page each, on the
    cgroup whose limit binds."""
    step, limit = MINUTE, 32 * GiB
    noise = Noise(6, 0.003 * limit)
    start = 10 * HOUR
    rec_end = start + 6 * HOUR + 30 * MINUTE

    def leak(t: int) -> float:
        return limit * (0.5 + 0.5 * ramp(t, start, start + 6 * HOUR)) + noise(t)

    kill = first_at_or_above(leak, lambda t: limit, range(start, rec_end, step))
    rec = Recorder(range(0, kill + 1, step), steady())
    for i in range(12):  # healthy neighbours, a few of them with diurnal load
        p = f"vllm-{i}"
        load = functools.partial(_level, (0.4 + 0.04 * i) * limit, GiB if i % 4 == 0 else 0.0)
        cgroup(rec, p, "vllm", lambda t: limit, load)
        cgroup(rec, p, "", lambda t: limit, functools.partial(_plus, load, 16 * MiB))
    cgroup(rec, "leak-0", "vllm", lambda t: limit, leak, cache=lambda t: 2 * GiB)
    cgroup(rec, "leak-0", "", lambda t: limit, lambda t: leak(t) + 16 * MiB,
           cache=lambda t: 2 * GiB)

    # Pod-level resources: 40 GiB for the pod, containers without limits of their own
    # (their effective limit is the pod's); the sidecar grows so the pod fills first.
    pod_limit = 40 * GiB

    def side(t: int) -> float:  # the pod reaches its limit when leak-0 does
        return 4 * GiB + (13.5 * GiB - 16 * MiB) * ramp(t, start - 2 * HOUR, kill) \
            + noise(t, 1)

    def vllm2(t: int) -> float:
        return 22.5 * GiB + noise(t, 2)

    cgroup(rec, "podres-0", "vllm", lambda t: pod_limit, vllm2)
    cgroup(rec, "podres-0", "sidecar", lambda t: pod_limit, side)
    cgroup(rec, "podres-0", "", lambda t: pod_limit,
           lambda t: vllm2(t) + side(t) + 16 * MiB)
    pages = {_k(FILL, "critical", "leak-0"), _k(FILL, "critical", "podres-0", "")}
    return _case("one-page", "one page per problem", title=one_page.__doc__ or "",
                 step_s=step, end_s=kill, rec=rec, killed=True, expect=frozenset(pages),
                 allow=frozenset({_k(NEAR, "critical", "leak-0"),
                                  _k(NEAR, "critical", "podres-0", "")}),
                 min_lead_s={p: 45 * MINUTE for p in pages}, max_page_lead_s=2 * HOUR)


def week_leak() -> Case:
    """A leak that takes a week: 60 % to the limit in 7 days, under diurnal load and
    noise (1 min samples). A ticket at least a day ahead, one page at the end."""
    step, pod, limit = MINUTE, "week-0", 32 * GiB
    noise = Noise(7, 0.003 * limit)
    per_s = 0.40 * limit / (7 * DAY)

    def u(t: int) -> float:
        return 0.60 * limit + per_s * t + diurnal(t, 0.015 * limit) + noise(t)

    kill = first_at_or_above(u, lambda t: limit, range(6 * DAY, 8 * DAY, step))
    rec = Recorder(range(0, kill + 1, step), steady())
    cgroup(rec, pod, "vllm", lambda t: limit, u, cache=lambda t: 4 * GiB)
    cgroup(rec, pod, "", lambda t: limit, lambda t: u(t) + 16 * MiB,
           cache=lambda t: 4 * GiB)
    page, ticket = _k(FILL, "critical", pod), _k(FILL, "warning", pod)
    return _case("week-leak", "slow leak", title=week_leak.__doc__ or "", step_s=step,
                 end_s=kill, rec=rec, killed=True, expect=frozenset({page, ticket}),
                 min_lead_s={page: 45 * MINUTE, ticket: DAY},
                 max_page_lead_s=SLOW_PAGE_MAX_LEAD_S)


def no_limit() -> Case:
    """Three pods without a memory limit (their effective limit is the node's memory)
    and one with a limit of 0 (outside the contract): one pod without a limit grows 40
    GiB in 3 hours and the node's MemAvailable falls toward the kubelet's eviction
    threshold (30 s scrapes)."""
    step, node = 30, 256 * GiB
    noise = Noise(8, 256 * MiB)
    start = 6 * HOUR
    grow = 42 * GiB

    def grower(t: int) -> float:
        return 30 * GiB + grow * ramp(t, start, start + 3 * HOUR) + noise(t)

    def available(t: int) -> float:
        return 0.16 * node + 30 * GiB - grower(t) + diurnal(t, 4 * GiB) * (t < start) \
            + noise(t, 1) / 4

    evicted = first_at_or_above(lambda t: -available(t), lambda t: -100 * MiB,
                                range(start, 2 * DAY, step))
    rec = Recorder(range(0, evicted + 1, step), steady())
    rec.put(c.NODE_MEMORY_TOTAL_BYTES.name, {}, lambda t: node)
    rec.put(c.NODE_MEMORY_AVAILABLE_BYTES.name, {}, available)
    others: list[tuple[str, Fn]] = [
        ("free-0", grower), ("free-1", lambda t: 20 * GiB + noise(t, 2)),
        ("free-2", functools.partial(_level, 50 * GiB, 2 * GiB))]
    for p, fn in others:
        cgroup(rec, p, "app", lambda t: node, fn)
        cgroup(rec, p, "", lambda t: node, functools.partial(_plus, fn, 16 * MiB))
    cgroup(rec, "zero-0", "app", lambda t: 0.0, lambda t: 2 * GiB)
    page = ("HeadroomNodeMemoryPressure", "critical", "", "")
    return _case("no-limit", "no limit", title=no_limit.__doc__ or "", step_s=step,
                 end_s=evicted, rec=rec, killed=True, expect=frozenset({page}),
                 min_lead_s={page: 30 * MINUTE}, max_page_lead_s=2 * HOUR)


def kv_unknown_residency() -> Case:
    """A 16 GiB CPU KV-offload tier while vLLM reports no usage ratio for it (or one
    that means in-flight transfers): 10 GiB are left below the limit. Assume the whole
    tier is still to come."""
    step, pod, limit = MINUTE, "kv-0", 48 * GiB
    rec = Recorder(range(0, 6 * HOUR + 1, step), steady())
    cgroup(rec, pod, "vllm", lambda t: limit, lambda t: limit - 10 * GiB,
           cache=lambda t: 4 * GiB)
    cgroup(rec, pod, "", lambda t: limit, lambda t: limit - 10 * GiB + 16 * MiB,
           cache=lambda t: 4 * GiB)
    kv = {"namespace": NS, "pod": pod, "container": "vllm", "model_name": "llama",
          "engine": "0", "medium": "cpu"}
    rec.put(c.VLLM_KV_CACHE_CAPACITY_BYTES.name, kv, lambda t: 16 * GiB)
    return _case("kv-unknown", "kv offload", title=kv_unknown_residency.__doc__ or "",
                 step_s=step, end_s=6 * HOUR, rec=rec,
                 expect=frozenset({_k("HeadroomKVOffloadWillNotFit", "warning", pod)}))


def oom_reported_again() -> Case:
    """A pod with two past OOM kills. The exporter restarts (the watcher re-reports the
    kills from the kernel log, one under a process name it had not shown), then its pod
    is replaced (a new instance starts at 2); the kernel's v1 counters live in the
    container cgroup only. One real kill at 8 h must page once; the re-reports never."""
    step, pod = 30, "oom-0"
    restart, replaced, kill = 2 * HOUR, 5 * HOUR, 8 * HOUR

    def scrape(t: int) -> Scrape:
        if restart <= t < restart + MINUTE or replaced <= t < replaced + MINUTE:
            return Scrape(None)
        return Scrape("node-1:9847" if t < replaced else "10.0.0.99:9847")

    rec = Recorder(range(0, 10 * HOUR + 1, step), scrape)
    limit = 32 * GiB
    cgroup(rec, pod, "vllm", lambda t: limit, lambda t: 20 * GiB,
           oom_kill=lambda t: 3.0 if t >= kill else 2.0)
    cgroup(rec, pod, "", lambda t: limit, lambda t: 20 * GiB + 16 * MiB)  # v1: stays 0
    w = {"namespace": NS, "pod": pod, "container": ""}
    rec.put(c.OOM_KILLS_TOTAL.name, {**w, "process": "EngineCore"},
            lambda t: 0.0 if restart + MINUTE <= t < restart + 2 * MINUTE
            else 3.0 if t >= kill else 2.0)  # a fresh exporter first shows 0, then 2
    rec.put(c.OOM_KILLS_TOTAL.name, {**w, "process": "Worker_TP0"},
            lambda t: 1.0 if t >= restart + MINUTE else None)  # re-reported, new name
    alert = ("HeadroomPodOOMKilled", "warning", pod, "")
    return _case("oom-reported-again", "oom after exporter restart",
                 title=oom_reported_again.__doc__ or "", step_s=step, end_s=10 * HOUR,
                 rec=rec, expect=frozenset({alert}))


def healthy_operations() -> Case:
    """Three days of a healthy pod as operations see it: diurnal load and noise, scrape
    gaps every 3 hours, two exporter rollouts, a container restart with a 3-minute model
    load, a nightly batch to 85 % for half an hour, page cache filling the limit."""
    step, pod, limit = MINUTE, "ops-0", 32 * GiB
    noise = Noise(9, 0.003 * limit)
    restart = DAY + 14 * HOUR

    def u(t: int) -> float | None:
        if restart <= t < restart + 2 * MINUTE:
            return None
        load = ramp(t - restart, 2 * MINUTE, 5 * MINUTE) if t >= restart else 1.0
        s = t % DAY - 3 * HOUR
        batch = ramp(s, 0, 6 * MINUTE) - ramp(s, 36 * MINUTE, 38 * MINUTE)
        return (0.1 + 0.45 * load) * limit + 0.2 * limit * batch \
            + diurnal(t, 0.1 * limit) + noise(t)

    def cache(t: int) -> float:
        v = u(t)
        return 0.0 if v is None else max(0.0, limit - v - 256 * MiB)

    scrape = with_gaps(rollouts([DAY + 2 * HOUR, 2 * DAY + 7 * HOUR]), 3 * HOUR,
                       5 * MINUTE, first_s=2 * HOUR)
    rec = Recorder(range(0, 3 * DAY + 1, step), scrape)
    cgroup(rec, pod, "vllm", lambda t: limit, u, cache=cache,
           events_max=lambda t: 100.0 * t / MINUTE)  # page cache at the limit: reclaim
    cgroup(rec, pod, "", lambda t: limit,
           lambda t: None if u(t) is None else (u(t) or 0.0) + 16 * MiB, cache=cache)
    return _case("healthy-ops", "healthy", title=healthy_operations.__doc__ or "",
                 step_s=step, end_s=3 * DAY, rec=rec)


ALL: tuple[Callable[[], Case], ...] = (
    gaps, rollout, fast_ramp, nightly_plateau, restart_leftover, one_page, week_leak,
    no_limit, kv_unknown_residency, oom_reported_again, healthy_operations,
)
