"""Immutable data that flows from the collectors through the join to the renderer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from exporter import catalog

CgroupVersion = Literal[1, 2]


@dataclass(frozen=True, order=True)
class Workload:
    """The label set W of the metric contract."""

    namespace: str
    pod: str
    container: str  # "" for the pod-level cgroup (cAdvisor's convention)

    def labels(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)


@dataclass(frozen=True)
class CgroupRef:
    """A memory cgroup headroom tracks.

    ``path`` is relative to the memory controller's root (``kubepods/burstable/pod.../abc``),
    with no leading slash, as in /proc/PID/cgroup minus the slash.
    """

    path: str
    pod_uid: str | None = None  # None outside Kubernetes
    container_id: str | None = None  # None for a pod-level cgroup or a tracked cgroup
    runtime: str | None = None  # containerd, cri-o, docker (None when unknown)
    qos: str | None = None  # guaranteed, burstable, besteffort

    @property
    def is_pod_level(self) -> bool:
        return self.pod_uid is not None and self.container_id is None


@dataclass(frozen=True)
class CgroupMemory:
    """What the kernel says about one memory cgroup, already reduced to the contract."""

    usage: int
    limit: int  # effective: the smallest limit on the path to the root, or node memory
    working_set: int
    kinds: Mapping[str, int]  # a partition of usage (sums to usage exactly)
    unreclaimable: int
    swap: int | None  # None where the kernel does not account swap
    events: Mapping[str, int]  # event -> count (only what the kernel offers)
    pressure: Mapping[str, float]  # level -> seconds stalled (empty without PSI)
    # v2 MemoryQoS knobs where set (memory.high below "max", memory.min/low above 0)
    high: int | None = None
    min: int | None = None
    low: int | None = None


@dataclass(frozen=True)
class ProcessStatus:
    """One process, from /proc/PID/status and cmdline. Bytes."""

    pid: int
    name: str
    rss_anon: int
    rss_file: int
    rss_shmem: int
    swap: int

    @property
    def rss(self) -> int:
        return self.rss_anon + self.rss_file + self.rss_shmem


@dataclass(frozen=True)
class ProcessPss:
    """PSS split of one process from /proc/PID/smaps_rollup. Bytes."""

    anon: int
    file: int
    shmem: int

    def by_kind(self) -> tuple[tuple[str, int], ...]:
        """(kind of catalog.PSS_KINDS, bytes)."""
        return ((catalog.PSS_ANON, self.anon), (catalog.PSS_FILE, self.file),
                (catalog.PSS_SHMEM, self.shmem))


@dataclass(frozen=True)
class ProcessGroup:
    """Processes of one name in one cgroup, summed (``other`` collects the tail)."""

    name: str
    count: int
    rss_anon: int
    rss_file: int
    rss_shmem: int
    swap: int
    pss: ProcessPss | None  # None when no member has a PSS reading yet

    def memory_by_kind(self) -> tuple[tuple[str, int], ...]:
        """(kind of catalog.PROCESS_MEMORY_KINDS, bytes)."""
        return ((catalog.RSS_ANON, self.rss_anon), (catalog.RSS_FILE, self.rss_file),
                (catalog.RSS_SHMEM, self.rss_shmem), (catalog.SWAP, self.swap))


@dataclass(frozen=True)
class TmpfsMount:
    mount: str  # the mount point inside the pod, e.g. /dev/shm
    used: int
    size: int


@dataclass(frozen=True)
class ContainerInfo:
    name: str
    container_id: str  # bare hex id, runtime prefix removed
    ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class PodInfo:
    """What the Kubernetes API told us about a pod on this node."""

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerInfo, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_ip: str = ""

    def container_name(self, container_id: str) -> str | None:
        for c in self.containers:
            if c.container_id == container_id:
                return c.name
        return None


@runtime_checkable
class PodDirectory(Protocol):
    """Pod UID -> pod names. Implemented by the Kubernetes API watcher."""

    def lookup(self, pod_uid: str) -> PodInfo | None: ...


@dataclass(frozen=True)
class CollectorResult:
    """Outcome of one collector on one scrape."""

    name: str
    success: bool
    duration_seconds: float
    error: str = ""
