"""The background peak sampler: the highest usage of each tracked cgroup in a window.

Prometheus scrapes every 15-60 s; a burst that lives between two scrapes never shows in
usage. A thread reads usage of each tracked cgroup every ``interval`` and keeps a trailing
window maximum per cgroup. It also reads the kernel's lifetime peak (v2 ``memory.peak``,
v1 ``memory.max_usage_in_bytes``) without resetting it (cAdvisor reads the v1 one): when
that rose since the previous sample, the cgroup reached the new lifetime peak in between,
so a burst shorter than the interval is caught whenever it sets a new high.

The window, not "since the last scrape", is what is exported, so two Prometheus replicas
see the same value.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from exporter.collectors.cgroup import (
    CgroupGone,
    read_lifetime_peak,
    read_oom_kills,
    read_usage,
)
from exporter.paths import MemoryHierarchy, OpenFiles

# Called on the sampling thread after each pass: (usage by cgroup, kill counters by domain).
SampleListener = Callable[[Mapping[str, int], Mapping[str, int]], None]

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

    def __len__(self) -> int:
        return len(self._items)


class PeakSampler:
    """Started once (``start``) by the factory; a scrape only tells it what to track."""

    def __init__(
        self,
        interval: float,
        window: float,
        clock: Callable[[], float] = time.monotonic,
        listener: SampleListener | None = None,
    ) -> None:
        self._hierarchy: MemoryHierarchy | None = None
        self.interval = interval
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._tracked: frozenset[str] = frozenset()
        self._windows: dict[str, WindowMax] = {}
        self._lifetime: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._files = OpenFiles()  # used by the sampling thread only
        self._kill_domains: frozenset[str] = frozenset()
        self._listener = listener
        self.samples_taken = 0
        self.last_error = ""

    def set_tracked(self, hierarchy: MemoryHierarchy, paths: Iterable[str],
                    kill_domains: Iterable[str] = ()) -> None:
        """What to sample, from each scrape's discovery; ``kill_domains`` are the cgroups
        whose oom_kill counter the OOM watcher follows (oom/watcher.py)."""
        tracked = frozenset(paths)
        with self._lock:
            self._hierarchy = hierarchy
            self._kill_domains = frozenset(kill_domains)
            self._tracked = tracked
            for gone in [p for p in self._windows if p not in tracked]:
                del self._windows[gone]
                self._lifetime.pop(gone, None)

    def sample_once(self) -> None:
        now = self._clock()
        with self._lock:
            tracked, domains, h = self._tracked, self._kill_domains, self._hierarchy
        if h is None:
            return  # no scrape has found the memory controller yet
        # Kill counters first: a peak that led to a kill read below is then in the
        # flight recorder before the kill is published.
        kills: dict[str, int] = {}
        if self._listener is not None:
            for path in domains:
                try:
                    count = read_oom_kills(h, path, self._files.read_text)
                except (OSError, ValueError):
                    continue
                if count is not None:
                    kills[path] = count
        readings: dict[str, int] = {}
        lifetimes: dict[str, int] = {}
        for path in tracked:
            try:
                readings[path] = read_usage(h, path, self._files.read_text)
                lp = read_lifetime_peak(h, path, self._files.read_text)
            except (CgroupGone, OSError, ValueError):
                continue  # the cgroup went away; discovery drops it on the next scrape
            if lp is not None:
                lifetimes[path] = lp
        self._files.sweep()
        values: dict[str, int] = {}
        with self._lock:
            for path, usage in readings.items():
                if path not in self._tracked:
                    continue
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
            self._listener(values, kills)

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
            if not self._thread.is_alive():
                self._files.close()
