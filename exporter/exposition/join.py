"""Pure: the sources' results -> one Snapshot keyed by workload (and process).

This is the one road from a source to the exposition: every source's typed data has a
field here (or in ``WorkloadSnapshot``), and ``render.py`` turns each field into its
families. Cgroup-keyed data (memory, processes, tmpfs, vLLM) is labelled through the
cgroup's workload; NVML's pid-keyed data through procfs's process table (pid -> cgroup ->
workload); node-wide data (node memory and pressure) needs no label. The OOM watcher's
counts arrive as a source's result too (``exporter/oom/tally.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from exporter.catalog import EVENT_OOM_KILL
from exporter.collectors import cgroup, node_pressure, nvml, procfs, tmpfs, tmpfs_orphans
from exporter.collectors.meminfo import NodeMemory
from exporter.collectors.node_pressure import NodePressure
from exporter.collectors.nvml import GpuDevice
from exporter.collectors.vllm import servers as vllm
from exporter.collectors.vllm.metrics import VllmStats
from exporter.contract.source import Results
from exporter.host.workloads import workload_of
from exporter.model import (
    CgroupMemory,
    CgroupRef,
    CollectorResult,
    PodDirectory,
    ProcessGroup,
    TmpfsMount,
    Workload,
)
from exporter.oom import tally
from exporter.oom.tally import KillTally

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkloadSnapshot:
    workload: Workload
    ref: CgroupRef
    memory: CgroupMemory | None  # None when the cgroup source failed or is off
    peak: int | None
    processes: tuple[ProcessGroup, ...] = ()
    tmpfs: tuple[TmpfsMount, ...] = ()
    # mount point -> bytes no live process of the pod holds (pod-level cgroups only)
    tmpfs_orphaned: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuUse:
    devices: tuple[GpuDevice, ...]
    # (workload, process, gpu, uuid) -> bytes, summed over processes of that name
    processes: Mapping[tuple[Workload, str, str, str], int]


@dataclass(frozen=True)
class VllmView:
    """One vLLM instance's reading, labelled."""

    workload: Workload
    stats: VllmStats | None  # None: its /metrics could not be read
    prefix_blocks: Mapping[tuple[str, str], int] = field(default_factory=dict)
    kv_synced: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    kv_lost: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape renders; immutable, built fresh for each scrape."""

    workloads: tuple[WorkloadSnapshot, ...]
    collectors: tuple[CollectorResult, ...]
    node_memory: NodeMemory | None = None
    node_pressure: NodePressure | None = None
    gpu: GpuUse | None = None
    vllm: tuple[VllmView, ...] = ()
    oom_kills: Mapping[tuple[Workload, str], int] = field(default_factory=dict)
    degraded: tuple[tuple[str, str], ...] = ()  # (collector, reason): exporter/host/degraded.py

    def pod_of(self) -> dict[str, Workload]:
        """cgroup path -> the labels of its pod-level cgroup (itself outside Kubernetes)."""
        pods = {ws.ref.pod_uid: ws.workload for ws in self.workloads if ws.ref.is_pod_level}
        out = {}
        for ws in self.workloads:
            owner = pods.get(ws.ref.pod_uid) if ws.ref.pod_uid else ws.workload
            if owner is not None:
                out[ws.ref.path] = owner
        return out


def join(
    refs: Sequence[CgroupRef],
    pods: PodDirectory | None,
    results: Results,
    peaks: Mapping[str, int],
    collectors: Sequence[CollectorResult],
) -> Snapshot:
    workloads = join_workloads(refs, pods, results, peaks)
    by_path = {ws.ref.path: ws.workload for ws in workloads}
    cg, kills = results.get(cgroup.KEY), results.get(tally.KEY)
    return Snapshot(
        workloads=workloads,
        collectors=tuple(sorted(collectors, key=lambda c: c.name)),
        node_memory=cg.node if cg is not None else None,
        node_pressure=results.get(node_pressure.KEY),
        gpu=join_gpu(results.get(nvml.KEY), results.get(procfs.KEY), by_path),
        vllm=join_vllm(results.get(vllm.KEY), by_path),
        oom_kills=kills.by_process if kills is not None else {},
    )


def join_workloads(refs: Sequence[CgroupRef], pods: PodDirectory | None, results: Results,
                   peaks: Mapping[str, int]) -> tuple[WorkloadSnapshot, ...]:
    """Label each cgroup; two cgroups that resolve to the same labels (a restarting
    container whose old cgroup lingers) would make duplicate series: the first by path
    wins, and only cgroups with memory data compete."""
    cg, pf, tf = results.get(cgroup.KEY), results.get(procfs.KEY), results.get(tmpfs.KEY)
    orphans, kills = results.get(tmpfs_orphans.KEY), results.get(tally.KEY)
    memory = cg.memory if cg is not None else {}
    processes = pf.groups if pf is not None else {}
    mounts = tf.mounts if tf is not None else {}
    out: dict[Workload, WorkloadSnapshot] = {}
    for ref in sorted(refs, key=lambda r: r.path):
        w = workload_of(ref, pods)
        mem = memory.get(ref.path)
        if mem is not None and ref.is_pod_level and kills is not None:
            mem = with_pod_kills(mem, kills, ref.path)
        if w in out and (out[w].memory is not None or mem is None):
            log.debug("cgroup %s has the same labels as %s; skipped", ref.path, out[w].ref.path)
            continue
        out[w] = WorkloadSnapshot(
            workload=w,
            ref=ref,
            memory=mem,
            peak=peaks.get(ref.path),
            processes=processes.get(ref.path, ()),
            tmpfs=mounts.get(ref.path, ()),
            tmpfs_orphaned=orphans.orphans.get(ref.path, {}) if orphans is not None else {},
        )
    return tuple(out[w] for w in sorted(out))


def with_pod_kills(memory: CgroupMemory, kills: KillTally, path: str) -> CgroupMemory:
    """A v1 pod-level cgroup's ``oom_kill`` event: its containers' kills, as the OOM
    watcher keeps them (the kernel counts a kill only in the victim's own cgroup there,
    and a container's kills stay counted after its cgroup is removed). On v2 the kernel's
    own pod-level count is hierarchical and the watcher keeps none: unchanged."""
    extra = kills.pod_level.get(path)
    if extra is None:
        return memory
    events = {**memory.events}
    events[EVENT_OOM_KILL] = events.get(EVENT_OOM_KILL, 0) + extra
    return replace(memory, events=events)


def owners(pf: procfs.ProcfsData | None,
           workloads: Mapping[str, Workload]) -> dict[int, tuple[Workload, str]]:
    """pid -> (workload, process name), for the tracked processes."""
    out: dict[int, tuple[Workload, str]] = {}
    for path, procs in (pf.processes.items() if pf is not None else ()):
        w = workloads.get(path)
        if w is not None:
            for p in procs:
                out[p.pid] = (w, p.name)
    return out


def join_gpu(snap: nvml.NvmlSnapshot | None, pf: procfs.ProcfsData | None,
             workloads: Mapping[str, Workload]) -> GpuUse | None:
    """NVML's per-pid use -> per workload and process name. GPU processes outside the
    tracked cgroups (another node agent, a host process) are left out."""
    if snap is None:
        return None
    by_pid = owners(pf, workloads)
    per: dict[tuple[Workload, str, str, str], int] = {}
    for pid, uses in snap.processes().items():
        owner = by_pid.get(pid)
        if owner is None:
            continue
        for use in uses:
            if use.used_bytes is None:
                continue  # NVML does not know: absent, not 0
            key = (owner[0], owner[1], use.gpu, use.uuid)
            per[key] = per.get(key, 0) + use.used_bytes
    return GpuUse(snap.devices, per)


def join_vllm(data: vllm.VllmData | None,
              workloads: Mapping[str, Workload]) -> tuple[VllmView, ...]:
    """Readings by cgroup -> by workload; an explicit --vllm.endpoint is labelled with its
    host:port as the pod."""
    out = []
    for r in data.readings if data is not None else ():
        t = r.target
        w = workloads.get(t.cgroup) if t.cgroup else Workload("", _hostport(t.shown), "")
        if w is not None:
            out.append(VllmView(w, r.stats, r.prefix_blocks, r.kv_synced, r.kv_lost))
    return tuple(out)


def _hostport(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0]
