"""The peak of each tracked cgroup over a trailing window, from the sampler's readings.

A reading is usage, raised to the kernel's lifetime peak (v2 ``memory.peak``, v1
``memory.max_usage_in_bytes``, read without resetting it) when that rose since the
previous reading: the cgroup then reached the new high in between, so a burst shorter
than the pace is caught whenever it sets a new high. The window, not "since the last
scrape", is what is exported, so two Prometheus replicas see the same value.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Container, Mapping


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


class Peaks:
    """Thread-safe: the sampler records, scrapes read ``peak``."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._lock = threading.Lock()
        self._windows: dict[str, WindowMax] = {}
        self._lifetime: dict[str, int] = {}
        self.samples_taken = 0

    def record(self, now: float, readings: Mapping[str, int], lifetimes: Mapping[str, int],
               tracked: Container[str] | None = None) -> dict[str, int]:
        """One pass's readings; each cgroup's value as recorded. ``tracked``: when the
        set changed, what is still followed (the rest is forgotten)."""
        values: dict[str, int] = {}
        with self._lock:
            if tracked is not None:
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
        return values

    def peak(self, path: str, now: float) -> int | None:
        with self._lock:
            w = self._windows.get(path)
            return w.max(now) if w is not None else None
