"""What a case is made of: the exporter's scrape timeline, the ``Recorder`` that writes its
series, the memory series of a cgroup and a process, and the ``Case`` (the series and the
alerts that must, or may, notify).

Series are built per exporter timeline: at each sample the exporter is scraped by one
``instance`` (or none), and a failed scrape writes ``up == 0`` and a staleness marker on
every series it had, exactly what Prometheus does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter import catalog as c
from exporter.promql import MINUTE

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


# The memory alerts the cases expect and allow.
FILL, NEAR, RECLAIM = "HeadroomMemoryFillingUp", "HeadroomMemoryNearLimit", \
    "HeadroomMemoryReclaimAtLimit"
