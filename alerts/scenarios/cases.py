"""Adversarial scenarios: exporter series the way a real cluster delivers them.

Each ``Case`` is one failure class the rules must page on (or a healthy pattern that must
stay silent), made harder than a clean recording of it: 30 s scrapes, seeded noise,
diurnal load, scrape gaps with Prometheus' staleness markers, exporter pods replaced (a
new ``instance``), container restarts, counters that reset or are re-reported.

Series are built per exporter timeline: at each sample the exporter is scraped by one
``instance`` (or none), and a failed scrape writes ``up == 0`` and a staleness marker on
every series it had, exactly what Prometheus does. ``evaluate`` replays a case through a
rules file with promtool and counts notifications.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporter import catalog as c
from exporter.promql import DAY, HOUR, MINUTE

GiB = 1024**3
MiB = 1024**2
NS = "llm"
STALE = "stale"
Value = float | str | None  # a sample, a staleness marker, or no sample
Key = tuple[str, str, str, str]  # alertname, severity, pod, container ("" = pod level)
Fn = Callable[[int], float | None]


@dataclass(frozen=True)
class Scrape:
    """Who scrapes the exporter at one instant: ``instance`` None = no target at all
    (between an old exporter pod and its replacement); ``ok`` False = the target is
    there but unreachable (a scrape gap)."""

    instance: str | None
    ok: bool = True


def steady(instance: str = "node-1:9847") -> Callable[[int], Scrape]:
    return lambda t: Scrape(instance)


def with_gaps(base: Callable[[int], Scrape], every_s: int, length_s: int,
              first_s: int = 0, extra: Sequence[int] = ()) -> Callable[[int], Scrape]:
    """Scrapes fail for ``length_s`` every ``every_s`` (from ``first_s``) and at each
    start time in ``extra``."""
    def at(t: int) -> Scrape:
        s = base(t)
        in_gap = (t >= first_s and (t - first_s) % every_s < length_s) or any(
            e <= t < e + length_s for e in extra)
        return Scrape(s.instance, ok=s.ok and not in_gap)
    return at


def rollouts(at_s: Sequence[int], gap_s: int = MINUTE) -> Callable[[int], Scrape]:
    """The exporter pod is replaced at each time: ``gap_s`` without a target, then a
    new ``instance`` (a new pod IP)."""
    def at(t: int) -> Scrape:
        n = sum(1 for r in at_s if t >= r)
        if any(r <= t < r + gap_s for r in at_s):
            return Scrape(None)
        return Scrape(f"10.0.0.{10 + n}:9847")
    return at


class Recorder:
    """Series selector -> values at each sample, written per exporter instance."""

    def __init__(self, times: range, scrape: Callable[[int], Scrape]) -> None:
        self.times = times
        self.scrapes = [scrape(t) for t in times]
        self.out: dict[str, list[Value]] = {}
        for i, s in enumerate(self.scrapes):
            if s.instance is not None:
                self._set(f'up{{instance="{s.instance}", job="headroom"}}', i,
                          1.0 if s.ok else 0.0)
        self._stale_gone("up")

    def _set(self, key: str, i: int, v: Value) -> None:
        self.out.setdefault(key, [None] * len(self.times))[i] = v

    def _stale_gone(self, prefix: str) -> None:
        # A series whose target disappears gets a staleness marker at the next sample.
        for key, vals in self.out.items():
            if not key.startswith(prefix + "{"):
                continue
            for i in range(1, len(vals)):
                if vals[i] is None and isinstance(vals[i - 1], float):
                    vals[i] = STALE

    def put(self, name: str, labels: Mapping[str, str], fn: Fn) -> None:
        """One exporter series: ``fn(t)`` is its value (None: not exported then)."""
        body = "".join(f'{k}="{v}", ' for k, v in sorted(labels.items()))
        last: dict[str, bool] = {}  # key -> last sample was a value
        for i, (t, s) in enumerate(zip(self.times, self.scrapes, strict=True)):
            v = fn(t) if s.instance is not None and s.ok else None
            for key, had in list(last.items()):
                mine = s.instance is not None and key.endswith(f'instance="{s.instance}"}}')
                if had and (v is None or not mine):
                    self._set(key, i, STALE)
                    last[key] = False
            if v is None or s.instance is None:
                continue
            key = f'{name}{{{body}instance="{s.instance}", job="headroom"}}'
            self._set(key, i, float(round(v)) if abs(v) >= 1000 else round(v, 9))
            last[key] = True


def cgroup(rec: Recorder, pod: str, container: str, limit: Fn, unrecl: Fn,
           cache: Fn | None = None, events_max: Fn | None = None,
           oom_kill: Fn | None = None) -> None:
    """The memory series of one cgroup (container "" = the pod level)."""
    w = {"namespace": NS, "pod": pod, "container": container}

    def alive(f: Fn) -> Fn:
        return lambda t: None if unrecl(t) is None else f(t)

    def usage(t: int) -> float | None:
        u = unrecl(t)
        return None if u is None else u + (cache(t) or 0.0 if cache else 0.0)

    def ws(t: int) -> float | None:
        u = usage(t)
        return None if u is None else u - ((cache(t) or 0.0) / 2 if cache else 0.0)

    rec.put(c.MEMORY_LIMIT_BYTES.name, w, alive(limit))
    rec.put(c.MEMORY_UNRECLAIMABLE_BYTES.name, w, unrecl)
    rec.put(c.MEMORY_USAGE_BYTES.name, w, usage)
    rec.put(c.MEMORY_WORKING_SET_BYTES.name, w, ws)
    rec.put(c.MEMORY_EVENTS_TOTAL.name, {**w, "event": "max"},
            alive(events_max or (lambda t: 0.0)))
    rec.put(c.MEMORY_EVENTS_TOTAL.name, {**w, "event": "oom_kill"},
            alive(oom_kill or (lambda t: 0.0)))


def process(rec: Recorder, pod: str, container: str, name: str, anon: Fn,
            shmem: Fn) -> None:
    w = {"namespace": NS, "pod": pod, "container": container, "process": name}
    rec.put(c.PROCESS_MEMORY_BYTES.name, {**w, "kind": "rss_anon"}, anon)
    rec.put(c.PROCESS_MEMORY_BYTES.name, {**w, "kind": "rss_shmem"}, shmem)


# --- shapes ------------------------------------------------------------------------------------
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


def _level(level: float, amplitude: float, t: int) -> float:
    return level + diurnal(t, amplitude)


def _plus(fn: Fn, extra: float, t: int) -> float | None:
    v = fn(t)
    return None if v is None else v + extra


# --- the case --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    cls: str  # the failure class (or "healthy")
    title: str
    step_s: int
    end_s: int  # the kill, or the end of a healthy run
    series: Mapping[str, list[Value]]
    killed: bool = False
    # Alerts that must notify; nothing else may (``allow``: may notify or not).
    expect: frozenset[Key] = frozenset()
    allow: frozenset[Key] = frozenset()
    min_lead_s: Mapping[Key, int] = field(default_factory=dict)
    # No page (critical) earlier than this before the kill.
    max_page_lead_s: int | None = None
    # Notifications allowed per expected alert (hysteresis: one incident, few pages).
    max_episodes: int = 1
    # Nothing notifies after this time (a limit raised: the pages clear).
    quiet_after_s: int | None = None
    # Samples fall half way between evaluations (the second evaluation phase).
    phase_shifted: bool = False
    # The rules' evaluation interval (0: the scrape interval, step_s).
    eval_s: int = 0

    @property
    def evaluation_s(self) -> int:
        return self.eval_s or self.step_s

    @property
    def times(self) -> range:
        return range(0, self.end_s + 1, self.step_s)


def _case(name: str, cls: str, title: str, step_s: int, end_s: int, rec: Recorder,
          **kw: object) -> Case:
    return Case(name, cls, title, step_s, end_s, dict(rec.out), **kw)  # type: ignore[arg-type]


def _k(alert: str, severity: str, pod: str, container: str = "vllm") -> Key:
    return (alert, severity, pod, container)


# A slow leak under diurnal load and noise (a 1.5-2 % daily swing, 0.3 % jitter) is killed
# by the first afternoon peak that reaches the limit; a page the hour's peaks already
# justify may come up to this long before it. A page earlier than that is early.
SLOW_PAGE_MAX_LEAD_S = 4 * HOUR

FILL, NEAR, RECLAIM = "HeadroomMemoryFillingUp", "HeadroomMemoryNearLimit", \
    "HeadroomMemoryReclaimAtLimit"


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


# --- the original scenarios, as cases ----------------------------------------------------------
def from_scenario(s: object) -> Case:
    """An ``alerts.scenarios.series.Scenario`` (the first wave's clean series) as a case:
    the FillingUp ticket and page on the killed cgroup are required with their lead
    times, any other memory alert of the pod is allowed; healthy ones stay silent."""
    from . import series as sc

    assert isinstance(s, sc.Scenario)
    series: dict[str, list[Value]] = {
        k: [None if x is None else float(round(x)) if abs(x) >= 1000 else float(round(x, 9))
            for x in v]
        for k, v in sc.render(s).items()}
    expect: set[Key] = set()
    leads: dict[Key, int] = {}
    if s.kill_s is not None:
        ticket = (s.warning_alert, "warning", s.pod, s.kill_container)
        page = (FILL, "critical", s.pod, s.kill_container)
        expect = {ticket, page}
        leads = {ticket: s.min_warning_lead_s, page: s.min_critical_lead_s}
    allow = {(a, sev, s.pod, ctr) for a in (FILL, NEAR, RECLAIM, "HeadroomHiddenMemoryGrowth",
                                            "HeadroomKVOffloadWillNotFit")
             for sev in ("warning", "critical") for ctr in ("", *s.containers)}
    return Case(s.name, "first wave", s.title, s.step_s, s.end_s, series,
                killed=s.kill_s is not None, expect=frozenset(expect),
                allow=frozenset(allow) if s.kill_s is not None else frozenset(),
                min_lead_s=leads)


def first_wave() -> list[Case]:
    from . import first_wave as fw

    return [from_scenario(s) for s in fw.all_scenarios()]


# --- a recorded real run ------------------------------------------------------------------------
def recorded(path: Path) -> tuple[Case, int]:
    """The raw series of a real end-to-end run (``tests/e2e/test_e2e_alerting.py`` with
    ``HEADROOM_RECORD_E2E``) as a case, and the scale its rules were shrunk by. A sample
    missing after one that was there is a staleness marker: Prometheus wrote one there
    (a failed scrape, the exporter restarting), which is why the range query has none."""
    doc = json.loads(path.read_text())
    step, kill = int(doc["step_s"]), int(doc["kill_s"])
    n = kill // step + 1
    series: dict[str, list[Value]] = {}
    for s in doc["series"]:
        m = dict(s["metric"])
        name = m.pop("__name__")
        key = name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(m.items())) + "}"
        vals: list[Value] = [None] * n
        for t, v in s["values"]:
            if 0 <= int(t) // step < n:
                vals[int(t) // step] = float(v)
        for i in range(1, n):
            if vals[i] is None and isinstance(vals[i - 1], float):
                vals[i] = STALE
        series[key] = vals
    pod = str(doc["pod"])
    ctr = next(s["metric"]["container"] for s in doc["series"]
               if s["metric"]["__name__"] == c.MEMORY_LIMIT_BYTES.name
               and s["metric"].get("container"))
    page = (FILL, "critical", pod, ctr)  # the container's limit binds (it is the pod's)
    case = Case("recorded-e2e", "replay", str(doc["about"]), step, kill, series,
                killed=True, expect=frozenset({page}),
                allow=frozenset({(a, sev, pod, x)
                                 for a in (FILL, NEAR, RECLAIM, "HeadroomHiddenMemoryGrowth")
                                 for sev in ("warning", "critical") for x in ("", ctr)}),
                min_lead_s={page: 1})
    return case, int(doc["scale"])
