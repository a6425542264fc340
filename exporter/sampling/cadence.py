"""How often the peak sampler reads each cgroup: every tick only where a peak can matter.

Reading usage of every tracked cgroup every 200 ms is most of what headroom costs an idle
node, yet most cgroups sit still far below their limit. So each cgroup has one of three
paces:

- **fast**, every tick, only while
  - it is near its limit (``NEAR`` of the smallest limit on its tracked path): a spike
    there is the one that kills, and it may not raise the kernel's lifetime peak (a cgroup
    that once hit its limit keeps that peak forever);
  - it is ramping: it rose by ``RISE_SHARE`` of its limit (at least ``RISE_FLOOR``) since
    its previous reading, or its lifetime peak rose that far above that reading (a burst
    between two readings);
  - the kernel said it moved: its kill domain was notified, or (v1) it crossed its usage
    threshold (``usage_events.UsageThresholds``);
  - it is young: it appeared after the sampler's first listing (a model load, a crash
    loop: the most common OOM is the young one).

  Each of the last three keeps it fast for ``FAST_HOLD`` seconds (``YOUNG_HOLD`` for a
  young one).
- **quiet**, once per ``QUIET`` clock seconds, for a cgroup below ``QUIET_SHARE`` of its
  limit whose climb the kernel itself watches: on v1 its usage threshold at ``NEAR`` is
  armed (crossing it wakes the sampler at once); on v2 its lifetime peak
  (``memory.peak``) is still below ``NEAR``, so any excursion into the zone that kills
  raises it and the next quiet reading puts it in the window (and its kill domain's
  ``memory.events`` wakes the sampler at ``high`` and ``max``).
- **slow**, once per clock second, for every other cgroup: a spike lasting a second or
  more is always read; a shorter one is read when it sets a new lifetime peak (the
  kernel's ``memory.max_usage_in_bytes`` / ``memory.peak``, read with usage).

Paces are aligned to the clock (every cgroup of one pace is due at the same moment), so
an idle node wakes the sampler once per ``QUIET`` seconds, not once per tick. A sampler
whose interval or window leaves no room for a slower pace reads everything every tick;
one whose window could miss a quiet reading (under ``2 * QUIET``) has no quiet pace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

NEAR = 0.8  # share of the limit from which a cgroup is read every tick
QUIET_SHARE = 0.5  # below this share of its limit a watched, still cgroup is quiet
RISE_SHARE = 0.02  # a rise of this share of the limit between two readings is a ramp
RISE_FLOOR = 16 << 20  # and at least this many bytes (page cache churn is not a ramp)
FAST_HOLD = 5.0  # seconds a ramp or a notification keeps a cgroup fast
YOUNG_HOLD = 30.0  # seconds a cgroup that appeared after the start is fast
SLOW = 1.0  # seconds: the slow pace, the flight recorder's resolution
QUIET = 5.0  # seconds: the quiet pace
LIMIT_EVERY = 10.0  # seconds between reads of a cgroup's own limit (it rarely changes)


@dataclass
class Cadence:
    """One cgroup's pace, owned by the sampling thread."""

    usage: int | None = None  # the last reading
    lifetime: int | None = None  # the last lifetime peak read
    read_at: float = -1e18
    fast_until: float = -1e18
    quiet: bool = False  # read once per QUIET seconds (else once per SLOW)
    own_limit: int | None = None  # memory.limit_in_bytes / memory.max; None: unlimited
    limit_at: float = -1e18

    def hold(self, until: float) -> None:
        self.fast_until = max(self.fast_until, until)


def adaptive(interval: float, window: float) -> bool:
    """Whether a slow pace fits: ticks faster than it, and a window that always holds a
    slow reading (else ``peak`` could find the window empty between two)."""
    return interval < SLOW and window >= 2 * SLOW


def quiet_fits(interval: float, window: float) -> bool:
    """Whether the quiet pace fits the same way."""
    return adaptive(interval, window) and window >= 2 * QUIET


def is_near(usage: int, limit: int | None) -> bool:
    return limit is not None and usage >= NEAR * limit


def is_ramp(before: int | None, after: int, limit: int | None) -> bool:
    if before is None:
        return False
    step = RISE_FLOOR if limit is None else max(RISE_FLOOR, int(RISE_SHARE * limit))
    return after - before >= step


def kernel_watches(version: int, threshold_armed: bool, lifetime: int | None,
                   limit: int | None) -> bool:
    """Whether the kernel would tell of a climb towards ``limit`` between two quiet
    readings (see the module docstring)."""
    if limit is None:
        return False
    if version == 1:
        return threshold_armed
    return lifetime is not None and lifetime < NEAR * limit


def period(c: Cadence) -> float:
    return QUIET if c.quiet else SLOW


def due(c: Cadence, now: float) -> bool:
    """Read this tick: fast (held), or the first tick of a new clock period (a second,
    or ``QUIET`` seconds) since the last reading."""
    p = period(c)
    return now < c.fast_until or math.floor(now / p) != math.floor(c.read_at / p)


def next_due(c: Cadence, now: float) -> float:
    """When ``c`` is next due: ``now`` while fast, else the start of the next period."""
    if now < c.fast_until or c.usage is None:
        return now
    p = period(c)
    return max(now, (math.floor(c.read_at / p) + 1) * p)


def observe(c: Cadence, now: float, usage: int, lifetime: int | None,
            limit: int | None, watched: bool = False) -> None:
    """A reading: what decides the next ticks' pace. ``watched``: the kernel watches its
    climb (``kernel_watches``)."""
    # A burst between two readings: the lifetime peak rose, to a ramp above the last
    # reading. A peak that creeps a few pages above it (an idle runtime's allocations,
    # kernel memory) is no burst: it must not make a quiet cgroup fast.
    rose = (lifetime is not None and c.lifetime is not None and lifetime > c.lifetime
            and is_ramp(c.usage, lifetime, limit))
    if rose or is_ramp(c.usage, usage, limit):
        c.hold(now + FAST_HOLD)
    if is_near(usage, limit):
        c.hold(now + SLOW)  # read again next tick, and the next, while it stays near
    c.quiet = (watched and limit is not None and usage < QUIET_SHARE * limit
               and not rose)
    c.usage, c.read_at = usage, now
    if lifetime is not None:
        c.lifetime = lifetime


def threshold(limit: int | None) -> int | None:
    """Where the kernel should wake the sampler for a slow cgroup (v1 usage threshold)."""
    return None if limit is None else int(NEAR * limit)


class Pace:
    """Every tracked cgroup's ``Cadence`` (the sampling thread's; ``is_fast`` is a racy
    glance from another thread). ``adaptive`` False: every cgroup is due every tick;
    ``quiet`` False: no quiet pace."""

    def __init__(self, adaptive: bool, quiet: bool = False) -> None:
        self.adaptive = adaptive
        self.quiet = quiet and adaptive
        self._of: dict[str, Cadence] = {}

    def track(self, tracked: Collection[str], now: float,
              young: Callable[[str], bool]) -> None:
        """The cgroups followed from now (called when the set changed); ``young``:
        appeared after the first listing."""
        pace = self._of
        for gone in [p for p in pace if p not in tracked]:
            del pace[gone]
        for path in tracked:
            if path not in pace:
                c = pace[path] = Cadence()
                if young(path):
                    c.hold(now + YOUNG_HOLD)

    def wake(self, woken: Collection[str], now: float) -> None:
        """Cgroups (and their descendants) the kernel just notified: fast for a while."""
        if not woken:
            return
        for path, c in self._of.items():
            if path in woken or any(path.startswith(w + "/") for w in woken):
                c.hold(now + FAST_HOLD)

    def due(self, now: float) -> list[str]:
        """The cgroups to read this tick."""
        if not self.adaptive:
            return list(self._of)
        return [p for p, c in self._of.items() if due(c, now)]

    def next_at(self, now: float, interval: float) -> float:
        """When the next cgroup is due: a tick from now while one is fast."""
        if not self.adaptive:
            return now + interval
        at = min((next_due(c, now) for c in self._of.values()), default=now + QUIET)
        return now + interval if at <= now else at

    def limit(self, path: str, now: float,
              read_limit: Callable[[str], int | None]) -> int | None:
        """The smaller own limit of ``path`` and of its parent when tracked (a container
        and its pod); None: neither has one."""
        limits = [lim for lim in (self._own_limit(path, now, read_limit),
                                  self._own_limit(path.rpartition("/")[0], now, read_limit))
                  if lim is not None]
        return min(limits) if limits else None

    def observe(self, path: str, now: float, usage: int, lifetime: int | None,
                limit: int | None, watched: bool = False) -> None:
        """A reading of ``path`` (due this tick) against ``limit`` (``Pace.limit``)."""
        c = self._of.get(path)
        if c is not None:
            observe(c, now, usage, lifetime, limit, watched and self.quiet)

    def _own_limit(self, path: str, now: float,
                   read_limit: Callable[[str], int | None]) -> int | None:
        c = self._of.get(path)
        if c is None:
            return None  # not tracked: its limit is the scrape's business
        if now - c.limit_at >= LIMIT_EVERY:
            c.limit_at = now
            try:
                c.own_limit = read_limit(path)
            except (OSError, ValueError):
                c.own_limit = None
        return c.own_limit

    def usages(self) -> Mapping[str, int]:
        """Each cgroup's last reading (a cgroup not read this tick did not move)."""
        return {p: c.usage for p, c in self._of.items() if c.usage is not None}

    def is_fast(self, path: str, now: float) -> bool:
        c = self._of.get(path)
        return not self.adaptive or (c is not None and now < c.fast_until)

    def is_quiet(self, path: str) -> bool:
        c = self._of.get(path)
        return self.adaptive and c is not None and c.quiet
