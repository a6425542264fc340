"""Pure: collector results -> one Snapshot keyed by workload (and process)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.model import (
    CgroupMemory,
    CgroupRef,
    CollectorResult,
    PodDirectory,
    ProcessGroup,
    TmpfsMount,
    Workload,
)
from exporter.workloads import workload_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkloadSnapshot:
    workload: Workload
    ref: CgroupRef
    memory: CgroupMemory | None  # None when the cgroup collector failed or is off
    peak: int | None
    processes: tuple[ProcessGroup, ...] = ()
    tmpfs: tuple[TmpfsMount, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape renders; immutable, built fresh for each scrape."""

    workloads: tuple[WorkloadSnapshot, ...]
    collectors: tuple[CollectorResult, ...]
    oom_kills: Mapping[tuple[Workload, str], int] = field(default_factory=dict)
    node_memory: tuple[int, int] | None = None  # MemTotal, MemAvailable
    extra: Mapping[str, object] = field(default_factory=dict)  # GPU and vLLM sections


def join(
    refs: Sequence[CgroupRef],
    pods: PodDirectory | None,
    memory: Mapping[str, CgroupMemory],
    peaks: Mapping[str, int],
    processes: Mapping[str, tuple[ProcessGroup, ...]],
    tmpfs: Mapping[str, tuple[TmpfsMount, ...]],
    collectors: Sequence[CollectorResult],
    oom_kills: Mapping[tuple[Workload, str], int] | None = None,
) -> Snapshot:
    """Label each cgroup; two cgroups that resolve to the same labels (a restarting
    container whose old cgroup lingers) would make duplicate series: the first by path
    wins, and only cgroups with memory data compete."""
    out: dict[Workload, WorkloadSnapshot] = {}
    for ref in sorted(refs, key=lambda r: r.path):
        w = workload_of(ref, pods)
        mem = memory.get(ref.path)
        if w in out and (out[w].memory is not None or mem is None):
            log.debug("cgroup %s has the same labels as %s; skipped", ref.path, out[w].ref.path)
            continue
        out[w] = WorkloadSnapshot(
            workload=w,
            ref=ref,
            memory=mem,
            peak=peaks.get(ref.path),
            processes=processes.get(ref.path, ()),
            tmpfs=tmpfs.get(ref.path, ()),
        )
    return Snapshot(
        workloads=tuple(out[w] for w in sorted(out)),
        collectors=tuple(sorted(collectors, key=lambda c: c.name)),
        oom_kills=dict(oom_kills or {}),
    )
