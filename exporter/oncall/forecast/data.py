"""The forecast contract as data: one cgroup's forecast (recorded, or computed by the
local mirror), its top grower, and the binding cgroup a surface shows for a pod."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.catalog import KIND_ANON, KIND_KERNEL, KIND_SHMEM
from exporter.promql import (
    BINDING,
    CONFIG,
    GROWTH,
    HEADROOM,
    KIND_DEV_SHM,
    KIND_HIDDEN,
    LIMIT,
    PEAK_ENVELOPE,
    TIME_TO_LIMIT,
    TOP_GROWER,
    UNRECLAIMABLE,
    Config,
)
from exporter.promql import HORIZONS as PROMQL_HORIZONS

# --- the contract's names (declared once, in exporter.promql, with the rules) ---------------
CONTRACT = (LIMIT, UNRECLAIMABLE, HEADROOM, BINDING, GROWTH, PEAK_ENVELOPE, TIME_TO_LIMIT,
            TOP_GROWER)
HORIZONS = PROMQL_HORIZONS
# The page's noise band (alerts.memory): the peaks fewer quiet-hour swings below the
# limit than this page, whatever the trend's time to limit says.
NOISE_BAND_SWINGS = CONFIG.fill_noise_band_swings
# In order of preference on a tie: /dev/shm files are shmem too, and the more specific
# name says where to look.
GROWER_KINDS = (KIND_DEV_SHM, KIND_ANON, KIND_SHMEM, KIND_KERNEL, KIND_HIDDEN)

RECORDED, LOCAL = "recorded", "local"

Point = tuple[float, float]  # (unix seconds, value)
Workload = tuple[str, str, str]  # namespace, pod, container


@dataclass(frozen=True)
class Grower:
    """What explains most of a cgroup's growth: a kind and a process ("" if none)."""

    kind: str
    process: str
    rate: float  # B/s of the process (of the kind when process == "")


@dataclass(frozen=True)
class Forecast:
    namespace: str
    pod: str
    container: str  # "" = the pod-level cgroup
    limit: float
    unreclaimable: float
    binding: bool = False
    growth: Mapping[str, float] = field(default_factory=dict)  # horizon -> B/s (> 0 only)
    envelope: float | None = None
    time_to_limit: float | None = None  # seconds
    horizon: str | None = None  # the horizon that gave time_to_limit
    grower: Grower | None = None
    source: str = RECORDED
    # KIND_GROWTH and PROCESS_GROWTH of this cgroup (B/s, any sign): the rows of "what
    # grows" the top grower was chosen from. The pod-level cgroup holds every container's
    # processes.
    kind_growth: Mapping[str, float] = field(default_factory=dict)
    process_growth: Mapping[str, float] = field(default_factory=dict)
    # PEAK_HEADROOM_SWINGS: the headroom above the peaks in quiet-hour swings (where the
    # memory has noise); the page fires below Config.fill_noise_band_swings.
    peak_swings: float | None = None

    @property
    def key(self) -> Workload:
        return self.namespace, self.pod, self.container

    @property
    def headroom(self) -> float:
        return max(0.0, self.limit - self.unreclaimable)

    @property
    def in_noise_band(self) -> bool:
        """The peaks within the page's noise band of the limit (PEAK_HEADROOM_SWINGS)."""
        return self.peak_swings is not None and self.peak_swings < NOISE_BAND_SWINGS

    @property
    def ratio(self) -> float:
        return self.unreclaimable / self.limit if self.limit > 0 else 1.0

    @property
    def rate(self) -> float | None:
        """The growth at the horizon that binds (else the fastest there is)."""
        if self.horizon is not None and self.horizon in self.growth:
            return self.growth[self.horizon]
        return max(self.growth.values(), default=None)


def grower_text(g: Grower | None) -> str:
    """One wording on every surface: "EngineCore anon", "/dev/shm (no process)"."""
    if g is None:
        return "-"
    kind = "/dev/shm" if g.kind == KIND_DEV_SHM else g.kind
    return f"{g.process} {kind}" if g.process else f"{kind} (no process)"


def growing(g: Grower | None) -> Grower | None:
    """The grower as a surface shows it: only while it grows (the rule names one on
    every binding cgroup, a falling kind included)."""
    return g if g is not None and g.rate > 0 else None


def tightest(cgroups: Iterable[Forecast], config: Config = CONFIG) -> Forecast | None:
    """The binding cgroup of one pod, for a surface that shows one: of the cgroups the
    binding rule marks (a container within the tolerance and the pod level may both be),
    the container first; with none marked (the rule's mirror) the smallest headroom, a
    container within the owner tolerance of the pod-level cgroup's headroom winning the
    tie (a single-container pod's pod cgroup is its container plus a few MiB)."""
    cs = list(cgroups)
    marked = [f for f in cs if f.binding]
    if marked:
        return min(marked, key=lambda f: (f.container == "", f.headroom))
    best = min(cs, key=lambda f: (f.headroom, f.container == ""), default=None)
    if best is None or best.container != "":
        return best
    slack = tolerance(best.limit, config)
    near = [f for f in cs if f.container and f.headroom <= best.headroom + slack]
    return min(near, key=lambda f: f.headroom, default=best)


def tolerance(pod_limit: float, config: Config = CONFIG) -> float:
    """How much more headroom than the pod cgroup a container may have and still bind."""
    return max(config.owner_tolerance_ratio * pod_limit, config.owner_tolerance_bytes)

