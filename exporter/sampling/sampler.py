"""The background peak sampler: the highest usage of each tracked cgroup in a window, the
cgroups that appear between scrapes, and the kill counters the OOM watcher follows.

Prometheus scrapes every 15-60 s; a burst that lives between two scrapes never shows in
usage. A thread reads usage and the kernel's lifetime peak of each tracked cgroup at its
pace and keeps a trailing window maximum per cgroup (``peaks.py``).

**Fast only where it matters** (``cadence.py``): a cgroup is read every
``interval`` while it is near its limit, ramping, notified or young, once per clock
second otherwise, and once per ``cadence.QUIET`` seconds while it is still, far below its
limit, and the kernel watches its climb (v1: a usage threshold wakes the sampler; v2: its
lifetime peak is below the zone that kills).

**Asleep between** (``wakeups.py``): the thread sleeps on one epoll set until the next
cgroup is due or the kernel says something moved: a cgroup appeared or vanished under
kubepods (``cgroup_watch.CgroupTree``: inotify, else a scan every second), a kill counter
moved (``kill_notify.KillNotifier``: v2 ``memory.events`` inotify, v1 ``oom_control``
eventfd; read as ``kill_domains.py`` says), a v1 usage threshold was crossed, or a scrape
handed it cgroups it did not have (``set_tracked``: their kill counters are read as a
baseline at once, before a kill can move them). An idle
node wakes it once per quiet period; a pass in which no cgroup appeared or vanished
reuses the last pass's sets. Two passes are never closer than ``interval``.

**From the first second.** The sampler does not wait for a scrape: from its first pass
it lists the kubepods tree and keeps it current, so a container is sampled, and its kill
counted and named, within about one tick of its cgroup appearing, even when it is killed
before any scrape.

**Who is in each container** (``oom/members.py``): each pass, after the counters and the
usage readings, the members of each tracked container whose usage moved are listed, so a
kill is named without the kernel log (see the OOM watcher).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from exporter.collectors.cgroup_files import (
    CgroupGone,
    read_lifetime_peak,
    read_own_limit,
    read_usage,
)
from exporter.collectors.kill_counters import KillCounters, read_kill_counters
from exporter.host.paths import MemoryHierarchy, OpenFiles
from exporter.model import CgroupRef
from exporter.oom.members import MemberTable
from exporter.oom.watcher import ProcessEntry
from exporter.sampling import cadence
from exporter.sampling.cadence import Pace
from exporter.sampling.cgroup_watch import CgroupTree
from exporter.sampling.kill_domains import Domain, KillDomains
from exporter.sampling.peaks import Peaks
from exporter.sampling.usage_events import UsageThresholds
from exporter.sampling.wakeups import Wakeups


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


# True: the listener wants the next pass one interval from now (a kill to name).
SampleListener = Callable[[Sample], bool | None]
# Where to watch from, asked on the sampling thread until it answers: the memory
# hierarchy and the kubepods cgroup (None: no Kubernetes here, or not yet).
WatchRoot = Callable[[], tuple[MemoryHierarchy, str | None]]
WATCH_RETRY = 1.0  # seconds between attempts to find the memory hierarchy
KUBEPODS_RETRY = 30.0  # seconds between searches for a kubepods cgroup (a bounded walk)

log = logging.getLogger(__name__)


@dataclass
class _Tracked:
    """The sets one pass works on, rebuilt only when a cgroup appeared or vanished."""

    refs: dict[str, CgroupRef] = field(default_factory=dict)
    containers: list[str] = field(default_factory=list)
    scrape: tuple[CgroupRef, ...] | None = None  # the scrape's refs they were built from


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
        self._peaks = Peaks(window)
        self._thread: threading.Thread | None = None
        self._scrape_refs: tuple[CgroupRef, ...] = ()
        self._listener = listener
        self._watch_root = watch_root
        self._use_inotify = use_inotify
        self._watch_at = -1e18
        self._sweep_at = -1e18
        # The sampling thread's own state:
        self._files = OpenFiles()
        self.tree: CgroupTree | None = None
        self._domains: KillDomains | None = None
        self._thresholds: UsageThresholds | None = None
        self._wakeups = Wakeups()
        self._pace = Pace(cadence.adaptive(interval, window),
                          quiet=cadence.quiet_fits(interval, window))
        self._tracked = _Tracked()
        self._members = members
        self._again = False  # the listener asked for the next pass soon
        self.last_error = ""

    @property
    def samples_taken(self) -> int:
        return self._peaks.samples_taken

    def set_tracked(self, hierarchy: MemoryHierarchy, refs: Iterable[CgroupRef]) -> None:
        """What a scrape's discovery found; sampled with the sampler's own findings."""
        scrape_refs = tuple(refs)
        with self._lock:
            self._hierarchy = hierarchy
            changed = scrape_refs != self._scrape_refs
            if changed:
                self._scrape_refs = scrape_refs
        if changed:
            # A pass now, not at the next due time (up to the quiet pace away): a kill
            # domain's counters are a baseline only if read before the kill, and a
            # tracked cgroup outside kubepods is found by the scrape alone.
            self._wakeups.wake()

    # --- the sampling thread -----------------------------------------------------------

    def _ensure_watch(self, now: float) -> MemoryHierarchy | None:
        with self._lock:
            h = self._hierarchy
        if self.tree is not None or self._watch_root is None or now < self._watch_at:
            if h is not None and self._domains is None:
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
            self._wakeups.watch(self.tree.fileno())
            log.info("sampler: watching %s for new cgroups (%s)", h.dir(kubepods),
                     self.tree.mode)
        else:
            self._watch_at = now + KUBEPODS_RETRY
        return h

    def _arm(self, h: MemoryHierarchy) -> None:
        if self._domains is None:
            self._domains = KillDomains(h)
            self._thresholds = UsageThresholds(h)

    def _refresh(self, domains: KillDomains, now: float,
                 ) -> tuple[bool, list[CgroupRef], dict[str, Domain], tuple[str, ...]]:
        """Whether the tracked set changed, the cgroups newly found by the sampler's
        listing, and the kill domains added and removed; the tracked sets are rebuilt
        only when something changed."""
        changes = self.tree.refresh() if self.tree is not None else None
        with self._lock:
            scrape = self._scrape_refs
        t = self._tracked
        if not changes and scrape is t.scrape:
            return False, [], {}, ()
        refs = {r.path: r for r in scrape}
        if self.tree is not None:
            refs.update(self.tree.refs)
        young = self.tree.young if self.tree is not None else (lambda _: False)
        self._tracked = _Tracked(refs, [r.path for r in refs.values() if not r.is_pod_level],
                                 scrape)
        self._pace.track(refs, now, young)
        if self._thresholds is not None:
            self._thresholds.retain(refs)
        added, removed, fds = domains.update(refs, [p for p in refs if young(p)])
        for fd in fds:
            self._wakeups.watch(fd)
        return True, list(changes.added) if changes else [], added, removed

    def _notified(self, domains: KillDomains) -> tuple[set[str], set[str]]:
        """Domains the kernel said moved since the last pass, and cgroups that crossed
        their usage threshold (one epoll for all)."""
        notified: set[str] = set()
        crossed: set[str] = set()
        tree_fd = self.tree.fileno() if self.tree is not None else None
        for fd in self._wakeups.ready():
            if fd == tree_fd:
                continue  # read by the tree's refresh
            paths = domains.notifier.ready(fd)
            path = self._thresholds.ready(fd) if self._thresholds is not None else None
            if path is not None:
                crossed.add(path)
            elif not paths:
                self._wakeups.unwatch(fd)  # nobody's: it would keep the sampler awake
            notified.update(paths)
        return notified, crossed

    def _read(self, h: MemoryHierarchy, path: str, now: float,
              ) -> tuple[int, int | None] | None:
        """Usage and lifetime peak of one due cgroup, and its pace from them."""
        read = self._files.read_text
        try:
            usage = read_usage(h, path, read)
            lifetime = read_lifetime_peak(h, path, read)
        except (CgroupGone, OSError, ValueError):
            return None  # the cgroup went away
        if self._pace.adaptive:
            limit = self._pace.limit(path, now, lambda p: read_own_limit(h, p, read))
            armed = False
            if self._thresholds is not None:
                self._wakeups.watch(self._thresholds.arm(path, cadence.threshold(limit)))
                armed = self._thresholds.armed(path)
            watched = cadence.kernel_watches(h.version, armed, lifetime, limit)
            self._pace.observe(path, now, usage, lifetime, limit, watched)
        return usage, lifetime

    def sample_once(self) -> None:
        now = self._clock()
        h = self._ensure_watch(now)
        if h is None or self._domains is None:
            return  # no memory controller found yet
        domains = self._domains
        changed, found, added, removed = self._refresh(domains, now)
        # Kill counters first: a peak that led to a kill read below is then in the
        # flight recorder before the kill is published.
        notified, crossed = self._notified(domains)
        counters: dict[str, KillCounters] = {}
        if self._listener is not None:
            for path in domains.due(now, notified, added):
                try:
                    c = read_kill_counters(h, path, self._files.read_text)
                except (CgroupGone, OSError, ValueError):
                    continue
                if c is not None:
                    counters[path] = c
        self._pace.wake(notified | crossed, now)
        readings: dict[str, int] = {}
        lifetimes: dict[str, int] = {}
        for path in self._pace.due(now):
            got = self._read(h, path, now)
            if got is not None:
                readings[path] = got[0]
                if got[1] is not None:
                    lifetimes[path] = got[1]
        if now >= self._sweep_at:  # a quiet cgroup's files are used once a quiet period
            self._sweep_at = now + cadence.QUIET * 2
            self._files.sweep()
        members = departed = None
        # A cgroup not read this pass did not move: nothing to list unless notified.
        if self._members is not None and self._listener is not None and (
                readings or notified):
            listing = self._members.refresh(
                h, self._tracked.containers, usage={**self._pace.usages(), **readings},
                urgent=lambda p: any(p == d or p.startswith(d + "/") for d in notified))
            members, departed = listing.members, listing.departed
            self._again = listing.backlog
        values = self._peaks.record(now, readings, lifetimes,
                                    self._tracked.refs if changed else None)
        if self._listener is not None:  # outside any lock: the watcher takes its own
            again = self._listener(Sample(values, counters, added, removed, tuple(found),
                                          members, departed or ()))
            self._again = self._again or bool(again)

    def _next_at(self, now: float) -> float:
        """When the next pass is needed: the next cgroup due, the kill counters' next
        read, the tree's next scan, a retry, or a tick from now while anything waits."""
        if self._again or self._domains is None or not self._wakeups.notifies:
            return now + self.interval
        at = min(self._pace.next_at(now, self.interval),
                 self._domains.next_at(now, self.interval))
        if self.tree is None and self._watch_root is not None:
            at = min(at, self._watch_at)
        elif self.tree is not None:
            at = min(at, self.tree.next_scan_at())
        return at

    def is_fast(self, path: str) -> bool:
        """Whether ``path`` is read every tick now (a racy glance from another thread)."""
        return self._pace.is_fast(path, self._clock())

    def is_quiet(self, path: str) -> bool:
        """Whether ``path`` is read at the quiet pace now (a racy glance)."""
        return self._pace.is_quiet(path)

    def peak(self, path: str) -> int | None:
        return self._peaks.peak(path, self._clock())

    def run(self) -> None:
        wakeups = self._wakeups
        while not wakeups.stopped:
            started = self._clock()
            try:
                self.sample_once()
                self.last_error = ""
            except Exception as exc:  # keep sampling; one line per distinct error
                msg = f"{type(exc).__name__}: {exc}"
                if msg != self.last_error:
                    log.error("peak sampler failed: %s", msg)
                self.last_error = msg
            wake_at = self._next_at(self._clock())
            # Never two passes closer than one interval: a descriptor that stays ready
            # cannot make the thread spin.
            wakeups.pause(started + self.interval - self._clock())
            wakeups.wait(wake_at - self._clock())

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sampler is already started")
        self._thread = threading.Thread(target=self.run, name="headroom-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._wakeups.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                return
        self._files.close()
        if self.tree is not None:
            self.tree.close()
        if self._domains is not None:
            self._domains.close()
        if self._thresholds is not None:
            self._thresholds.close()
        self._wakeups.close()
