"""The OOM watcher: the one place kills are counted. Kill-counter increases and kernel-log
victims become named kills, each counted once.

Fed on the sampler thread with the kill counters it read (``collectors/kill_counters.
read_kill_counters``), the kernel-log victims read since (``collectors/kmsg.py``) and the
kill domains it follows; after every scrape with each cgroup's labels and process table.

- **Kill domains.** A pod-level cgroup on v2 (``memory.events`` is hierarchical: it
  outlives the container the kernel killed in), each container cgroup on v1 (v1 counts a
  kill only in the victim's own cgroup), a tracked cgroup outside Kubernetes as it is.
- **One kill, one count.** v2 with ``memory.oom.group`` (Kubernetes sets it on v2 nodes)
  kills every process of the container: ``oom_kill`` rises once per process signalled (the
  chosen victim twice: 3 for 2 processes on 6.1) and ``oom_group_kill`` by one. A rise of
  ``oom_group_kill`` is one kill per group. The kernel counts the chosen victim's
  ``oom_kill``, then the group, then each member's: a read in between (a busy node, a
  slow CPU) sees a rise of ``oom_kill`` alone before the group's or after it. So a rise of
  the group absorbs the lone rises counted within ``GROUP_SETTLE`` before it, and lone
  rises within ``GROUP_SETTLE`` after it are its members (two kills of one container that
  close together, the first without a group, count as one).
- **History is not news** (docs/threats.md: restart-recount). A domain's counters at its
  first read are the baseline, unless the domain appeared after the exporter's first
  listing of the node (``young``): its counters then started at zero after headroom did,
  and a kill read at the first look is counted (a container killed before any scrape:
  docs/threats.md, kill-before-first-scrape).
- **The victim** comes from the kernel log when readable (its pid confirmed, never parsed
  from a process name: docs/threats.md, victim-name-spoof), its full name from the member
  tables (comm is cut at 15 characters); without the log, it is the largest process (by
  last-known RSS) that left the domain since its kill counter last read lower, marked as a
  guess: the sampler's member tables (``oom/members.py``, every pass) say who left, the
  scrapes' process tables add the processes they saw that are dead now. While none has
  left yet (a victim can take seconds to die on a busy node) the kill waits, up to
  ``GUESS_WAIT`` and ``GUESS_PASSES`` sampler passes; then it is "unknown". A log victim
  whose counter was never seen to move (the runtime removed a v1 container's cgroup first)
  is counted from the log, and a later rise of that counter is then the same kill, not
  another.
- **The document before the count**: ``check`` hands each kill to ``publish`` (the
  flight-recorder document, written and kept) before it adds it to ``counts`` and the pod
  count, so a scrape that shows the kill finds its document too.
- **The pod-level count on v1**: the kernel counts nothing there, so the watcher keeps it:
  the containers' counters at first read plus every kill counted since; a container's
  kills stay in its pod's count after the runtime removes its cgroup.

Time and liveness are injected: every path is tested without a kernel
(tests/test_postmortem.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors.kill_counters import KillCounters
from exporter.collectors.kmsg import KernelVictim
from exporter.model import Workload
from exporter.oom.tally import KillTally

log = logging.getLogger(__name__)

UNKNOWN = "unknown"
GUESS_WAIT = 2.0  # seconds to wait for the kernel log to name a counted kill
GUESS_PASSES = 3  # ... and sampler passes (a starved sampler thread may not have run)
VICTIM_GRACE = 2.0  # a log victim whose counter was not seen to move by then is counted
RECENT = 30.0  # seconds a removed domain, a victim or a log-counted kill is remembered
GROUP_SETTLE = 5.0  # seconds a group kill's lone oom_kill rises may come before or after it


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


def rises_between(before: KillCounters, after: KillCounters) -> tuple[int, int]:
    """(group kills, lone process kills) between two reads of one domain (a fresh cgroup
    under the same path restarts at 0): a group kill is one, whatever the number of
    processes it took, and its processes' rises are not lone kills."""
    if after.oom_kill < before.oom_kill or after.oom_group_kill < before.oom_group_kill:
        before = KillCounters(0, 0)
    groups = after.oom_group_kill - before.oom_group_kill
    return (groups, 0) if groups > 0 else (0, after.oom_kill - before.oom_kill)


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


@dataclass
class _WatchedDomain:
    pod: str | None  # the pod-level cgroup on v1 (the count kept there), else None
    young: bool
    read_pass: int = 0  # the pass its counters were last read (or it was first followed)
    last: KillCounters | None = None
    credit: list[float] | None = None  # times of kills counted from the log, not yet read
    removed_at: float | None = None
    lone_at: tuple[float, ...] = ()  # when lone oom_kill rises were counted, lately
    group_at: float | None = None  # when a group kill was last read


class OomWatcher:
    """Thread-safe: ``observe``/``forget`` run on the event loop, ``track``/``check`` on
    the sampler thread."""

    def __init__(self, is_alive: Callable[[int], bool], kmsg_available: bool,
                 clock: Callable[[], float] = time.time) -> None:
        self._is_alive = is_alive
        self._kmsg = kmsg_available
        self._clock = clock
        self._lock = threading.Lock()
        self.counts: dict[tuple[Workload, str], int] = {}
        self._domains: dict[str, _WatchedDomain] = {}
        self._pod_kills: dict[str, int] = {}  # v1 pod-level cgroup -> its kill count
        # Kills to name: (domain, seen, pass seen, pass of the previous lower read).
        self._pending: list[tuple[str, float, int, int]] = []
        self._pass = 0  # sampler passes (``check`` calls)
        self._members: dict[str, tuple[ProcessEntry, ...]] = {}  # the sampler's listing
        # (pass, time, cgroup, process) of processes that left a listed cgroup lately.
        self._departed: deque[tuple[int, float, str, ProcessEntry]] = deque(maxlen=4096)
        self.labels: dict[str, CgroupLabels] = {}
        self._seen: dict[str, float] = {}  # cgroup -> when a scrape or listing last had it
        self._processes: dict[str, tuple[ProcessEntry, ...]] = {}
        self._previous: dict[str, tuple[ProcessEntry, ...]] = {}
        self._victims: deque[tuple[float, KernelVictim]] = deque(maxlen=256)
        self._aging = False  # a removed domain or a log credit waits to expire

    # --- the event loop ------------------------------------------------------------------

    def observe(self, labels: Mapping[str, CgroupLabels],
                processes: Mapping[str, Sequence[ProcessEntry]]) -> None:
        now = self._clock()
        with self._lock:
            self.labels.update(labels)
            self._seen.update(dict.fromkeys(labels, now))
            for path, procs in processes.items():
                # Keep the previous scrape's processes too: the victim of a kill being
                # named right now is already missing from the newest table.
                self._previous[path] = self._processes.get(path, ())
                self._processes[path] = tuple(procs)

    def forget(self, live: Iterable[str]) -> None:
        """Labels and processes of cgroups unseen for ``RECENT``: a kill named from the
        log just after its cgroup was removed still has its labels."""
        now = self._clock()
        with self._lock:
            self._seen.update(dict.fromkeys(live, now))
            for path in [p for p, t in self._seen.items() if now - t > RECENT]:
                del self._seen[path]
                for d in (self.labels, self._processes, self._previous):
                    d.pop(path, None)

    def tally(self) -> KillTally:
        """The counts handed to each scrape: per process, and per v1 pod-level cgroup
        (see the module docstring), read together under the lock."""
        with self._lock:
            return KillTally(dict(self.counts), dict(self._pod_kills))

    # --- the sampler thread --------------------------------------------------------------

    def track(self, added: Mapping[str, tuple[str | None, bool]],
              removed: Iterable[str] = (), labels: Mapping[str, CgroupLabels] | None = None,
              ) -> None:
        """Kill domains followed from now: path -> (its v1 pod-level cgroup or None,
        young); ``labels`` of cgroups no scrape has seen yet; ``removed`` domains are kept
        for ``RECENT`` so a log line about them is still theirs."""
        now = self._clock()
        with self._lock:
            for path, (pod, young) in added.items():
                d = self._domains.get(path)
                if d is None or d.removed_at is not None:
                    self._domains[path] = _WatchedDomain(pod, young, read_pass=self._pass)
                    if pod is not None:
                        self._pod_kills.setdefault(pod, 0)
            for path in removed:
                d = self._domains.get(path)
                if d is not None and d.removed_at is None:
                    d.removed_at = now
                    self._aging = True
            for path, lb in (labels or {}).items():
                self.labels.setdefault(path, lb)
                self._seen.setdefault(path, now)

    def check(self, counters: Mapping[str, KillCounters],
              victims: Sequence[KernelVictim] = (),
              members: Mapping[str, Sequence[ProcessEntry]] | None = None,
              departed: Sequence[tuple[str, ProcessEntry]] = (),
              publish: Callable[[OomKill], None] | None = None) -> list[OomKill]:
        """One sampler pass, on the sampler thread only. ``counters``: the domains read
        this pass (not necessarily all of them); ``members``: the cgroups listed this pass
        and their processes; ``departed``: (cgroup, process) that left them since the
        previous pass; ``publish`` runs for each kill before it is counted."""
        now = self._clock()
        kills: list[OomKill] = []
        with self._lock:
            self._pass += 1
            if members is not None:
                self._members = {p: tuple(m) for p, m in members.items()}
            self._departed.extend((self._pass, now, path, e) for path, e in departed)
            while self._departed and now - self._departed[0][1] > RECENT:
                self._departed.popleft()
            self._victims.extend((now, v) for v in victims)
            for path, c in counters.items():
                self._count(path, c, now)
            found: list[tuple[str, OomKill]] = []
            still: list[tuple[str, float, int, int]] = []
            for path, seen, seen_pass, since in self._pending:
                give_up = now - seen >= GUESS_WAIT and self._pass - seen_pass >= GUESS_PASSES
                kill = self._name(path, since, now, give_up)
                if kill is None:
                    still.append((path, seen, seen_pass, since))
                else:
                    found.append((path, kill))
            self._pending = still
            found.extend(self._log_only(now))
            pods = [self._domains[d].pod if d in self._domains else None for d, _ in found]
            if self._aging:  # else nothing can have aged out: skip the walk
                self._expire(now)
        # The document first, the count after (outside the lock: a scrape's ``observe``
        # does not wait for a disk write): whoever sees the count move finds the document.
        for (_, k), pod in zip(found, pods, strict=True):
            if publish is not None:
                try:
                    publish(k)
                except Exception as exc:  # the kill still counts
                    log.error("OOM kill in %s: its document failed: %s: %s", k.cgroup,
                              type(exc).__name__, exc)
            with self._lock:
                key = (k.pod_workload, k.process)
                self.counts[key] = self.counts.get(key, 0) + 1
                if pod is not None:
                    self._pod_kills[pod] = self._pod_kills.get(pod, 0) + 1
            kills.append(k)
        return kills

    def waiting(self) -> bool:
        """Kills counted but not yet named, or log victims not yet claimed: the sampler
        should pass again soon (naming waits a few passes)."""
        with self._lock:
            return bool(self._pending or self._victims)

    def pod_cgroup(self, pod: Workload, besides: str) -> str | None:
        """A cgroup other than ``besides`` labelled as the pod itself (its pod level)."""
        with self._lock:
            return next((p for p, lb in self.labels.items()
                         if lb.workload == pod and p != besides), None)

    def _count(self, path: str, c: KillCounters, now: float) -> None:
        d = self._domains.get(path)
        if d is None:  # read before ``track`` named it: a tracked cgroup, never young
            d = self._domains[path] = _WatchedDomain(None, young=False, read_pass=self._pass)
        since, d.read_pass = d.read_pass, self._pass
        if d.last is None:
            if not d.young:
                d.last = c  # history: the baseline
                if d.pod is not None:
                    self._pod_kills[d.pod] = self._pod_kills.get(d.pod, 0) + c.oom_kill
                return
            d.last = KillCounters(0, 0)  # born after the exporter started: all news
        groups, lone = rises_between(d.last, c)
        d.last = c
        recent = tuple(t for t in d.lone_at if now - t <= GROUP_SETTLE)
        if groups > 0:  # the lone rises just before were its chosen victim
            n, d.lone_at, d.group_at = max(0, groups - len(recent)), (), now
        elif lone > 0 and d.group_at is not None and now - d.group_at <= GROUP_SETTLE:
            n = 0  # the group's members, signalled after it
        else:
            n, d.lone_at = lone, recent + (now,) * lone
        while n > 0 and d.credit:  # already counted from the kernel log
            d.credit.pop(0)
            n -= 1
        self._pending.extend((path, now, self._pass, since) for _ in range(max(0, n)))

    def _log_only(self, now: float) -> list[tuple[str, OomKill]]:
        """Log victims no counter rise claimed within ``VICTIM_GRACE``: counted from the
        log when they belong to a domain followed now or lately, else dropped after
        ``RECENT`` (not headroom's cgroup, or one it never saw)."""
        kills = []
        for seen, v in list(self._victims):
            if now - seen < VICTIM_GRACE:
                continue
            domain = self._domain_of(v.memcg) if v.memcg else None
            if domain is None:
                if now - seen > RECENT or not v.memcg:
                    self._victims.remove((seen, v))
                continue
            self._victims.remove((seen, v))
            d = self._domains[domain]
            d.credit = [*(d.credit or []), now]
            self._aging = True
            kills.append((domain, self._from_victim(domain, v, now)))
        return kills

    def _expire(self, now: float) -> None:
        aging = False
        for path, d in list(self._domains.items()):
            if d.credit:
                d.credit = [t for t in d.credit if now - t < RECENT]
            if d.removed_at is not None and now - d.removed_at > RECENT:
                del self._domains[path]
            elif d.credit or d.removed_at is not None:
                aging = True
        self._aging = aging
        live_pods = {d.pod for d in self._domains.values() if d.pod is not None}
        for pod in [p for p in self._pod_kills if p not in live_pods]:
            del self._pod_kills[pod]

    def _domain_of(self, memcg: str) -> str | None:
        best = None
        for path in self._domains:
            if _within(memcg, path) and (best is None or len(path) > len(best)):
                best = path
        return best

    def _names(self, domain: str) -> dict[int, tuple[str, int, str]]:
        """pid -> (name, rss, cgroup) of the domain's processes as the last scrapes and the
        sampler's member listing saw them."""
        out = {}
        for table in (self._members, self._previous, self._processes):  # scrapes: RSS
            for path, procs in table.items():
                if _within(path, domain):
                    for p in procs:
                        out[p.pid] = (p.name, p.rss, path)
        return out

    def _labels_of(self, path: str, domain: str) -> CgroupLabels:
        fallback = Workload("", "/" + domain, "")
        return self.labels.get(path, self.labels.get(domain, CgroupLabels(fallback, fallback)))

    def _from_victim(self, domain: str, v: KernelVictim, now: float) -> OomKill:
        # The full name only from a process table of this very cgroup (a pid the log
        # names is checked against the cgroup the log puts it in).
        names = self._names(v.memcg or domain)
        for _, _, path, e in self._departed:  # it may have left the listing already
            if e.pid == v.pid and _within(path, v.memcg or domain):
                names.setdefault(e.pid, (e.name, e.rss, path))
        known = names.get(v.pid)
        cgroup = known[2] if known else (v.memcg or domain)
        labels = self._labels_of(cgroup, domain)
        return OomKill(now, cgroup, labels.workload, labels.pod,
                       known[0] if known else v.comm, v.pid, "kmsg")

    def _gone(self, domain: str, since: int) -> list[tuple[int, int, str, str]]:
        """(rss, pid, name, cgroup) of the domain's processes that left it since pass
        ``since`` (the kill came after that read), or that a table still lists but that
        are dead now; the largest RSS seen for each."""
        gone: dict[int, tuple[int, int, str, str]] = {}
        for seq, _, path, e in self._departed:
            if seq >= since and _within(path, domain):
                gone[e.pid] = max(gone.get(e.pid, (0, 0, "", "")), (e.rss, e.pid, e.name, path))
        for pid, (name, rss, path) in self._names(domain).items():
            if pid not in gone and not self._is_alive(pid):
                gone[pid] = (rss, pid, name, path)
            elif pid in gone and gone[pid][2] == name and rss > gone[pid][0]:
                gone[pid] = (rss, pid, name, gone[pid][3])  # a scrape's fresher figure
        return list(gone.values())

    def _name(self, domain: str, since: int, now: float, give_up: bool) -> OomKill | None:
        """The kill in ``domain``: from the kernel log, else the largest process that left
        since ``since``; None while the log may still name it (the counter can move
        first) or no process has left yet (the victim is still dying)."""
        for entry in self._victims:
            v = entry[1]
            if v.memcg and _within(v.memcg, domain):
                self._victims.remove(entry)
                return self._from_victim(domain, v, now)
        if not give_up and self._kmsg:
            return None
        gone = self._gone(domain, since)
        if not gone and not give_up:
            return None
        if gone:
            _, pid, name, path = max(gone)
            labels = self._labels_of(path, domain)
            return OomKill(now, path, labels.workload, labels.pod, name, pid, "guess")
        labels = self._labels_of(domain, domain)
        return OomKill(now, domain, labels.workload, labels.pod, UNKNOWN, None, "unknown")
