"""The OOM watcher: turns kill-counter increases and kernel-log victims into named kills.

Fed on the sampler thread (about once a second) with each kill domain's ``oom_kill``
counter (``collectors/cgroup.read_oom_kills``) and the kernel-log victims read since
(``collectors/kmsg.py``), and after every scrape with each cgroup's labels and process
table. A kill domain is a pod-level cgroup on v2 (hierarchical: it outlives the container
the kernel killed in) and a container cgroup on v1 (v1 counts only in the victim's own
cgroup). The victim comes from the kernel log when readable, its full name from the last
process tables (comm is cut at 15 characters); without the kernel log, the largest process
of that cgroup that is gone is named, marked as a guess. Time and liveness are injected,
so every path is tested without a kernel (tests/test_postmortem.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors.kmsg import KernelVictim
from exporter.model import Workload

UNKNOWN = "unknown"
GUESS_WAIT = 2.0  # seconds to wait for a killed process to vanish before naming none
VICTIM_GRACE = 2.0  # a log victim whose counter was not seen by then is counted from the log
RECENT = 30.0  # seconds a published kill is remembered, to match its log line once


@dataclass(frozen=True)
class ProcessEntry:
    """One process of a cgroup as the last scrapes saw it."""

    pid: int
    name: str
    rss: int


@dataclass(frozen=True)
class CgroupLabels:
    workload: Workload
    pod: Workload  # the pod-level labels the kill counter is reported on


@dataclass(frozen=True)
class OomKill:
    time: float
    cgroup: str
    workload: Workload
    pod_workload: Workload
    process: str
    pid: int | None
    victim_source: str  # "kmsg", "guess" or "unknown"


def kill_domains(refs: Iterable[tuple[str, str | None, bool]], version: int) -> list[str]:
    """(path, pod uid, is pod level) -> the cgroups whose counters count each kill once."""
    return [path for path, pod_uid, pod_level in refs
            if pod_uid is None or (pod_level if version == 2 else not pod_level)]


def _within(path: str, domain: str) -> bool:
    return path == domain or path.startswith(domain + "/")


def pid_alive(procfs: Path) -> Callable[[int], bool]:
    """A zombie (killed, not yet reaped by its parent) counts as gone."""
    def alive(pid: int) -> bool:
        try:
            stat = (procfs / str(pid) / "stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])
    return alive


class OomWatcher:
    """Thread-safe: ``observe`` runs on the event loop, ``check`` on the sampler thread."""

    def __init__(self, is_alive: Callable[[int], bool], kmsg_available: bool,
                 clock: Callable[[], float] = time.time) -> None:
        self._is_alive = is_alive
        self._kmsg = kmsg_available
        self._clock = clock
        self._lock = threading.Lock()
        self.counts: dict[tuple[Workload, str], int] = {}
        self._last: dict[str, int] = {}  # cgroup -> last oom_kill count
        self._baselined = False
        self._pending: list[tuple[str, float]] = []  # kills to name: (domain, seen)
        self._recent: list[tuple[float, str, str, int | None]] = []  # time, cgroup, src, pid
        self.labels: dict[str, CgroupLabels] = {}
        self._processes: dict[str, tuple[ProcessEntry, ...]] = {}
        self._previous: dict[str, tuple[ProcessEntry, ...]] = {}
        self._victims: deque[tuple[float, KernelVictim]] = deque(maxlen=256)

    def observe(self, labels: Mapping[str, CgroupLabels],
                processes: Mapping[str, Sequence[ProcessEntry]]) -> None:
        with self._lock:
            self.labels.update(labels)
            for path, procs in processes.items():
                # Keep the previous scrape's processes too: the victim of a kill being
                # named right now is already missing from the newest table.
                self._previous[path] = self._processes.get(path, ())
                self._processes[path] = tuple(procs)

    def forget(self, live: Iterable[str]) -> None:
        keep = set(live)
        with self._lock:
            for d in (self._last, self.labels, self._processes, self._previous):
                for path in [p for p in d if p not in keep]:
                    del d[path]

    def check(self, counters: Mapping[str, int],
              victims: Sequence[KernelVictim] = ()) -> list[OomKill]:
        """``counters``: kill domain -> its oom_kill count. Kernel-log victims are matched
        to the domain they belong to; one whose cgroup vanished before its counter was
        read is still counted from the log after a short grace period."""
        now = self._clock()
        kills: list[OomKill] = []
        with self._lock:
            self._victims.extend((now, v) for v in victims)
            for path, count in counters.items():
                before = self._last.get(path)
                if before is None:
                    # Kills from before the exporter started are history; a cgroup that
                    # appears later started from 0 (a kill right after its creation, before
                    # our first read, still counts).
                    before = count if not self._baselined else 0
                self._last[path] = count
                self._pending.extend((path, now) for _ in range(max(0, count - before)))
            still: list[tuple[str, float]] = []
            for path, seen in self._pending:
                kill = self._kill(path, now, give_up=now - seen >= GUESS_WAIT)
                if kill is None:
                    still.append((path, seen))
                else:
                    kills.append(kill)
            self._pending = still
            kills.extend(self._unmatched_victims(now))
            for k in kills:
                key = (k.pod_workload, k.process)
                self.counts[key] = self.counts.get(key, 0) + 1
                self._recent.append((k.time, k.cgroup, k.victim_source, k.pid))
            self._recent = [r for r in self._recent if now - r[0] < RECENT]
            self._baselined = True
        return kills

    def _unmatched_victims(self, now: float) -> list[OomKill]:
        kills = []
        for seen, v in list(self._victims):
            if now - seen < VICTIM_GRACE or not v.memcg:
                continue
            self._victims.remove((seen, v))
            domain = self._domain_of(v.memcg)
            if domain is None:
                continue
            if any(pid == v.pid or (_within(d, domain) and src != "kmsg")
                   for _, d, src, pid in self._recent):
                # The counter saw this kill first and it was named by a guess: the log
                # line is the same kill, not another.
                self._recent = [r for r in self._recent if not _within(r[1], domain)]
                continue
            kills.append(self._from_victim(domain, v, now))  # cgroup gone before read
        return kills

    def _domain_of(self, memcg: str) -> str | None:
        best = None
        for path in self.labels:
            if _within(memcg, path) and (best is None or len(path) > len(best)):
                best = path
        return best

    def _names(self, domain: str) -> dict[int, tuple[str, int, str]]:
        """pid -> (name, rss, cgroup) of the last scrapes' processes in the domain."""
        out = {}
        for table in (self._previous, self._processes):  # newest wins
            for path, procs in table.items():
                if _within(path, domain):
                    for p in procs:
                        out[p.pid] = (p.name, p.rss, path)
        return out

    def _labels_of(self, path: str, domain: str) -> CgroupLabels:
        fallback = Workload("", "/" + domain, "")
        return self.labels.get(path, self.labels.get(domain, CgroupLabels(fallback, fallback)))

    def _from_victim(self, domain: str, v: KernelVictim, now: float) -> OomKill:
        names = self._names(domain)
        cgroup = names[v.pid][2] if v.pid in names else (v.memcg or domain)
        labels = self._labels_of(cgroup, domain)
        name = names[v.pid][0] if v.pid in names else v.comm
        return OomKill(now, cgroup, labels.workload, labels.pod, name, v.pid, "kmsg")

    def _kill(self, domain: str, now: float, give_up: bool) -> OomKill | None:
        """The kill in ``domain``: from the kernel log, else the largest process that is
        gone; None while the victim may still be exiting (the counter moves first)."""
        for seen, v in reversed(self._victims):
            if now - seen < RECENT and (_within(v.memcg, domain)
                                        or (not v.memcg and v.pid in self._names(domain))):
                # The kernel logs one kill on two lines (oom-kill: and Killed process):
                # consume both.
                for entry in [e for e in self._victims if e[1].pid == v.pid]:
                    self._victims.remove(entry)
                return self._from_victim(domain, v, now)
        if not give_up and self._kmsg:
            return None  # the kernel log names the victim within moments: wait for it
        gone = [(rss, pid, name, path) for pid, (name, rss, path) in self._names(domain).items()
                if not self._is_alive(pid)]
        if not gone and not give_up:
            return None
        if gone:
            _, pid, name, path = max(gone)
            labels = self._labels_of(path, domain)
            return OomKill(now, path, labels.workload, labels.pod, name, pid, "guess")
        labels = self._labels_of(domain, domain)
        return OomKill(now, domain, labels.workload, labels.pod, UNKNOWN, None, "unknown")
