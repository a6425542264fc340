"""The evidence fetched for one pod: its cgroups, processes, tmpfs mounts, KV tiers and
kills, each figure a :class:`Trend` (its value and its slopes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.oncall.forecast import Forecast
from exporter.oncall.units import DAY


@dataclass(frozen=True)
class Trend:
    """One gauge: its value and its slopes (bytes/s) over 1 h, 6 h and 1 d; ``rise1d`` is
    the lowest value in the last day minus the lowest in the day before (bytes)."""

    now: float
    d1h: float | None = None
    d6h: float | None = None
    d1d: float | None = None
    rise1d: float | None = None

    def lasting(self) -> float | None:
        """Growth that lasts (bytes/s): the floor's rise when two days exist, else the
        slope over the longest window with data."""
        if self.rise1d is not None:
            return self.rise1d / DAY
        return next((d for d in (self.d1d, self.d6h, self.d1h) if d is not None), None)

    def __add__(self, other: Trend) -> Trend:
        return Trend(self.now + other.now, _add(self.d1h, other.d1h),
                     _add(self.d6h, other.d6h), _add(self.d1d, other.d1d),
                     _add(self.rise1d, other.rise1d))

    def __neg__(self) -> Trend:
        return Trend(-self.now, _neg(self.d1h), _neg(self.d6h), _neg(self.d1d),
                     _neg(self.rise1d))

    def __sub__(self, other: Trend) -> Trend:
        return self + (-other)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _neg(a: float | None) -> float | None:
    return None if a is None else -a


def total(trends: Iterable[Trend]) -> Trend:
    out = Trend(0.0, 0.0, 0.0, 0.0, 0.0)
    for t in trends:
        out = out + t
    return out


@dataclass(frozen=True)
class CgroupEvidence:
    container: str  # "" = the pod-level cgroup
    limit: float
    unreclaimable: Trend
    usage: float | None = None
    working_set: float | None = None
    peak_unreclaimable_1d: float | None = None
    kinds: Mapping[str, Trend] = field(default_factory=dict)
    reclaim_per_s: float | None = None  # memory.events max (v1 failcnt) over 1 h


@dataclass(frozen=True)
class ProcessEvidence:
    container: str
    process: str
    anon: Trend | None = None  # rss_anon
    shmem: Trend | None = None  # rss_shmem (mapped shmem: /dev/shm maps, pinned memory)

    @property
    def held(self) -> Trend:
        return total(t for t in (self.anon, self.shmem) if t is not None)


@dataclass(frozen=True)
class TmpfsEvidence:
    container: str
    mount: str
    used: Trend
    size: float | None = None
    orphaned: Trend | None = None  # files no live process of the pod has open or mapped


@dataclass(frozen=True)
class KvEvidence:
    container: str
    medium: str
    capacity_bytes: float | None = None
    usage_ratio: float | None = None
    prefix_blocks: Trend | None = None


@dataclass(frozen=True)
class KillEvidence:
    container: str
    process: str
    total: float
    last_day: float
    exporter: str  # the exporter's instance (host:port) that counted them
    when: float | None = None  # the last kill (unix seconds), from the counter's history
    grew: str = ""  # what grew before it and how fast
    grew_rate: float | None = None  # B/s of that growth


@dataclass(frozen=True)
class Evidence:
    namespace: str
    pod: str
    at: float
    cgroups: tuple[CgroupEvidence, ...] = ()
    processes: tuple[ProcessEvidence, ...] = ()
    tmpfs: tuple[TmpfsEvidence, ...] = ()
    kv: tuple[KvEvidence, ...] = ()
    kills: tuple[KillEvidence, ...] = ()
    # The forecast contract's series for the pod's cgroups (recorded, or the local mirror
    # of the rules when they are not loaded); empty: judged from the trends alone.
    forecasts: tuple[Forecast, ...] = ()

