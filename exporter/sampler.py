"""The background peak sampler: the highest usage of each tracked cgroup in a window, the
cgroups that appear between scrapes, and the kill counters the OOM watcher follows.

Prometheus scrapes every 15-60 s; a burst that lives between two scrapes never shows in
usage. A thread reads usage of each tracked cgroup every ``interval`` and keeps a trailing
window maximum per cgroup. It also reads the kernel's lifetime peak (v2 ``memory.peak``,
v1 ``memory.max_usage_in_bytes``) without resetting it (cAdvisor reads the v1 one): when
that rose since the previous sample, the cgroup reached the new lifetime peak in between,
so a burst shorter than the interval is caught whenever it sets a new high.

The window, not "since the last scrape", is what is exported, so two Prometheus replicas
see the same value.

**From the first second.** The sampler does not wait for a scrape: from its first tick it
lists the kubepods tree and keeps it current (``cgroup_watch.CgroupTree``: inotify, else a
scan every second), so a container is sampled, and its kill counted and named, within
about one tick of its cgroup appearing, even when it is killed before any scrape. Kill
counters are read when the kernel says they moved (``cgroup_watch.KillNotifier``: v2
``memory.events`` inotify, v1 ``oom_control`` eventfd, one ``epoll_wait`` a tick for all of
them), and every tick only for domains whose notification could not be armed. A notified
domain is read again on the next ``ECHO_READS`` ticks: v1's eventfd fires at the OOM,
before the kill, and a read that races the killer would see the old count.

**Fast only where it matters** (``cadence.py``): a cgroup is read every tick while it is
near its limit, ramping, notified or young, and once per clock second otherwise; on v1
the kernel wakes a slow one that crosses ``cadence.NEAR`` of its limit (a usage
threshold).

**Who is in each container** (``oom/members.py``): each tick, after the counters and the
usage readings, the members of each tracked container whose usage moved (each at least
every second) are listed, so a kill is named without the kernel log (see the OOM
watcher).
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from exporter import cadence
from exporter.cadence import Pace
from exporter.cgroup_watch import CgroupTree, KillNotifier
from exporter.collectors.cgroup import (
    CgroupGone,
    KillCounters,
    read_kill_counters,
    read_lifetime_peak,
    read_own_limit,
    read_usage,
)
from exporter.model import CgroupRef
from exporter.oom.members import MemberTable
from exporter.oom.watcher import ProcessEntry
from exporter.paths import MemoryHierarchy, OpenFiles
from exporter.usage_events import UsageThresholds


@dataclass(frozen=True)
class Domain:
    """A kill domain as the OOM watcher follows it."""

    pod: str | None  # v1: the pod-level cgroup its kills are summed into
    young: bool  # appeared after the sampler's first listing of the node


@dataclass(frozen=True)
class Sample:
    """One pass, handed to the listener on the sampling thread."""

    usage: Mapping[str, int]
    counters: Mapping[str, KillCounters]  # the kill domains read this pass
    added: Mapping[str, Domain] = field(default_factory=dict)  # kill domains, new
    removed: tuple[str, ...] = ()  # kill domains no longer found
    found: tuple[CgroupRef, ...] = ()  # cgroups found between scrapes, this pass
    members: Mapping[str, tuple[ProcessEntry, ...]] | None = None  # listed this pass
    departed: tuple[tuple[str, ProcessEntry], ...] = ()  # (cgroup, process) that left


SampleListener = Callable[[Sample], None]
# Where to watch from, asked on the sampling thread until it answers: the memory
# hierarchy and the kubepods cgroup (None: no Kubernetes here, or not yet).
WatchRoot = Callable[[], tuple[MemoryHierarchy, str | None]]
WATCH_RETRY = 1.0  # seconds between attempts to find the memory hierarchy
KUBEPODS_RETRY = 30.0  # seconds between searches for a kubepods cgroup (a bounded walk)
RESYNC = 30.0  # seconds between reads of every kill counter, notified or not (a safety net)
ECHO_READS = 2  # ticks a notified domain's counters are read again

log = logging.getLogger(__name__)


class WindowMax:
    """Maximum over a trailing time window in O(1) amortised (a monotonic deque)."""

    __slots__ = ("_items", "window")

    def __init__(self, window: float) -> None:
        self.window = window
        self._items: deque[tuple[float, int]] = deque()

    def add(self, t: float, value: int) -> None:
        items = self._items
        while items and items[-1][1] <= value:
            items.pop()
        items.append((t, value))
        self._expire(t)

    def _expire(self, now: float) -> None:
        items = self._items
        while items and items[0][0] < now - self.window:
            items.popleft()

    def max(self, now: float) -> int | None:
        self._expire(now)
        return self._items[0][1] if self._items else None


class PeakSampler:
    """Started once (``start``) by the factory. Each scrape adds what its discovery found
    (``set_tracked``: tracked cgroups outside kubepods too); the sampler's own listing
    keeps kubepods current between scrapes."""

    def __init__(
        self,
        interval: float,
        window: float,
        clock: Callable[[], float] = time.monotonic,
        listener: SampleListener | None = None,
        watch_root: WatchRoot | None = None,
        use_inotify: bool = True,
        members: MemberTable | None = None,
    ) -> None:
        self._hierarchy: MemoryHierarchy | None = None
        self.interval = interval
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, WindowMax] = {}
        self._lifetime: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._files = OpenFiles()  # used by the sampling thread only
        self._scrape_refs: tuple[CgroupRef, ...] = ()
        self._listener = listener
        self._watch_root = watch_root
        self._use_inotify = use_inotify
        self._watch_at = -1e18
        self._resync_at = -1e18
        self._sweep_at = -1e18
        # The sampling thread's own state:
        self.tree: CgroupTree | None = None
        self._notifier: KillNotifier | None = None
        self._thresholds: UsageThresholds | None = None
        self._pace = Pace(cadence.adaptive(interval, window))
        self._epoll: select.epoll | None = None
        self._domains: dict[str, Domain] = {}
        self._echo: dict[str, int] = {}  # notified domain -> reads still due
        self._members = members
        self.samples_taken = 0
        self.last_error = ""

    def set_tracked(self, hierarchy: MemoryHierarchy, refs: Iterable[CgroupRef]) -> None:
        """What a scrape's discovery found; sampled with the sampler's own findings."""
        scrape_refs = tuple(refs)
        with self._lock:
            self._hierarchy = hierarchy
            self._scrape_refs = scrape_refs

    # --- the sampling thread -----------------------------------------------------------

    def _ensure_watch(self, now: float) -> MemoryHierarchy | None:
        with self._lock:
            h = self._hierarchy
        if self.tree is not None or self._watch_root is None or now < self._watch_at:
            if h is not None and self._notifier is None:
                self._arm(h)
            return h
        self._watch_at = now + WATCH_RETRY
        try:
            root, kubepods = self._watch_root()
        except Exception as exc:  # no memory controller yet: the scrapes say so
            log.debug("sampler: no cgroup hierarchy yet: %s", exc)
            return h
        with self._lock:
            if self._hierarchy is None:
                self._hierarchy = root
            h = self._hierarchy
        self._arm(h)
        if kubepods is not None:
            self.tree = CgroupTree(h, kubepods, use_inotify=self._use_inotify)
            log.info("sampler: watching %s for new cgroups (%s)", h.dir(kubepods),
                     self.tree.mode)
        else:
            self._watch_at = now + KUBEPODS_RETRY
        return h

    def _arm(self, h: MemoryHierarchy) -> None:
        if self._notifier is not None:
            return
        self._notifier = KillNotifier(h)
        self._thresholds = UsageThresholds(h)
        try:
            self._epoll = select.epoll()
        except OSError:
            self._epoll = None

    def _refresh(self, h: MemoryHierarchy) -> tuple[list[CgroupRef], dict[str, CgroupRef]]:
        """Cgroups newly found by the sampler's listing, and every cgroup to sample: the
        listing's and the last scrape's."""
        found: list[CgroupRef] = []
        if self.tree is not None:
            found = list(self.tree.refresh().added)
        with self._lock:
            refs = {r.path: r for r in self._scrape_refs}
        if self.tree is not None:
            refs.update(self.tree.refs)
        return found, refs

    def _update_domains(self, h: MemoryHierarchy, refs: Mapping[str, CgroupRef],
                        ) -> tuple[dict[str, Domain], tuple[str, ...]]:
        domains = set(_kill_domains(refs.values(), h.version))
        added: dict[str, Domain] = {}
        for path in domains - set(self._domains):
            ref = refs.get(path)
            pod = None
            if h.version == 1 and ref is not None and ref.container_id is not None:
                pod = path.rsplit("/", 1)[0]
            young = self.tree is not None and self.tree.young(path)
            added[path] = self._domains[path] = Domain(pod, young)
            if self._notifier is not None and self._notifier.register(path):
                for fd in self._notifier.take_new_fds():
                    if self._epoll is not None:
                        self._epoll.register(fd, select.EPOLLIN)
        removed = tuple(sorted(set(self._domains) - domains))
        for path in removed:
            del self._domains[path]
        if removed and self._notifier is not None:
            self._notifier.unregister(removed)  # closed descriptors leave epoll by themselves
        return added, removed

    def _notified(self) -> tuple[set[str], set[str]]:
        """Domains the kernel said moved since the last pass, and cgroups that crossed
        their usage threshold (one epoll_wait for all)."""
        if self._epoll is None or self._notifier is None:
            return set(), set()
        domains: set[str] = set()
        crossed: set[str] = set()
        for fd, _ in self._epoll.poll(0):
            domains.update(self._notifier.ready(fd))
            if self._thresholds is not None and (path := self._thresholds.ready(fd)):
                crossed.add(path)
        return domains, crossed

    def _paced(self, h: MemoryHierarchy, path: str, now: float, usage: int,
               lifetime: int | None) -> None:
        if not self._pace.adaptive:
            return
        limit = self._pace.observe(path, now, usage, lifetime, lambda p: read_own_limit(
            h, p, self._files.read_text))
        if self._thresholds is not None:
            fd = self._thresholds.arm(path, cadence.threshold(limit))
            if fd is not None and self._epoll is not None:
                self._epoll.register(fd, select.EPOLLIN)

    def sample_once(self) -> None:
        now = self._clock()
        h = self._ensure_watch(now)
        if h is None:
            return  # no memory controller found yet
        found, refs = self._refresh(h)
        added, removed = self._update_domains(h, refs)
        # Kill counters first: a peak that led to a kill read below is then in the
        # flight recorder before the kill is published.
        counters: dict[str, KillCounters] = {}
        notified, crossed = self._notified()
        if self._listener is not None:
            notifier = self._notifier
            due = notified | set(added) | set(self._echo)
            self._echo = {p: n - 1 for p, n in self._echo.items() if n > 1}
            self._echo.update(dict.fromkeys(notified, ECHO_READS))
            if now >= self._resync_at:
                self._resync_at = now + RESYNC
                due.update(self._domains)
            else:
                due.update(p for p in self._domains
                           if notifier is None or not notifier.armed(p))
            for path in due:
                try:
                    c = read_kill_counters(h, path, self._files.read_text)
                except (CgroupGone, OSError, ValueError):
                    continue
                if c is not None:
                    counters[path] = c
        tracked = set(refs)
        readings: dict[str, int] = {}
        lifetimes: dict[str, int] = {}
        if self._thresholds is not None:
            self._thresholds.retain(refs)
        young = self.tree.young if self.tree is not None else (lambda _: False)
        for path in self._pace.due(refs, now, notified | crossed, young):
            try:
                readings[path] = read_usage(h, path, self._files.read_text)
                lp = read_lifetime_peak(h, path, self._files.read_text)
            except (CgroupGone, OSError, ValueError):
                continue  # the cgroup went away
            if lp is not None:
                lifetimes[path] = lp
            self._paced(h, path, now, readings[path], lp)
        if now >= self._sweep_at:  # a slow cgroup's files are used once a second
            self._sweep_at = now + cadence.SLOW * 2
            self._files.sweep()
        members = departed = None
        # A cgroup not read this pass did not move: nothing to list unless notified.
        if self._members is not None and self._listener is not None and (
                readings or notified):
            containers = [r.path for r in refs.values() if not r.is_pod_level]
            last = self._pace.usages()
            listing = self._members.refresh(
                h, containers, usage={**last, **readings},
                urgent=lambda p: any(p == d or p.startswith(d + "/") for d in notified))
            members, departed = listing.members, listing.departed
        values: dict[str, int] = {}
        with self._lock:
            for gone in [p for p in self._windows if p not in tracked]:
                del self._windows[gone]
                self._lifetime.pop(gone, None)
            for path, usage in readings.items():
                value = usage
                lp = lifetimes.get(path)
                prev = self._lifetime.get(path)
                if lp is not None:
                    if prev is not None and lp > prev:
                        value = max(value, lp)
                    self._lifetime[path] = lp
                w = self._windows.get(path)
                if w is None:
                    w = self._windows[path] = WindowMax(self.window)
                w.add(now, value)
                values[path] = value
            self.samples_taken += 1
        # Outside the lock: the flight recorder and OOM watcher take their own.
        if self._listener is not None:
            self._listener(Sample(values, counters, added, removed, tuple(found),
                                  members, departed or ()))

    def is_fast(self, path: str) -> bool:
        """Whether ``path`` is read every tick now (a racy glance from another thread)."""
        return self._pace.is_fast(path, self._clock())

    def peak(self, path: str) -> int | None:
        with self._lock:
            w = self._windows.get(path)
            return w.max(self._clock()) if w is not None else None

    def run(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
                self.last_error = ""
            except Exception as exc:  # keep sampling; one line per distinct error
                msg = f"{type(exc).__name__}: {exc}"
                if msg != self.last_error:
                    log.error("peak sampler failed: %s", msg)
                self.last_error = msg
            next_at += self.interval
            delay = next_at - self._clock()
            if delay < 0:  # fell behind (a busy node): skip, don't burst
                next_at = self._clock()
                delay = 0
            self._stop.wait(delay)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sampler is already started")
        self._thread = threading.Thread(target=self.run, name="headroom-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                return
        self._files.close()
        if self.tree is not None:
            self.tree.close()
        if self._notifier is not None:
            self._notifier.close()
        if self._thresholds is not None:
            self._thresholds.close()
        if self._epoll is not None:
            self._epoll.close()


def _kill_domains(refs: Iterable[CgroupRef], version: int) -> list[str]:
    """The cgroups whose counters count each kill once: on v2 the pod-level cgroup
    (memory.events is hierarchical and outlives a killed container), on v1 each container
    (v1 counts a kill only in the victim's own cgroup); a tracked cgroup as it is."""
    return [r.path for r in refs
            if r.pod_uid is None or (r.is_pod_level if version == 2 else not r.is_pod_level)]
