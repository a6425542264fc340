"""Stale shared memory: files in a pod's memory-backed tmpfs that no live process of the
pod has open or mapped.

Pages of /dev/shm and ``emptyDir: {medium: Memory}`` files are shmem charged to the pod
until the file is removed. A process killed with SIGKILL (an OOM kill, a failed liveness
probe) cannot clean up: vLLM's CPU offload region (``vllm_offload_*.mmap``), its
multiprocessing segments (``psm_*``), SGLang's segments stay behind, and the restarted
container pays for them again (vLLM #51579, #54002, llm-d #364, sglang #40723).

A file is found in use by its kernel identity ``(st_dev, st_ino)``, against the open
descriptors and shared mappings of the pod's live processes, never by its name
(``tmpfs_scan`` reads them, within bounds).

A file that is mapped or open counts as live even when the holder is in another pod
(hostIPC): only processes of this pod are checked, so such a file would show as
orphaned here; pods with ``hostIPC`` share the host's /dev/shm and are not scanned.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.collectors import procfs, tmpfs
from exporter.collectors.tmpfs_scan import Orphans, ProcReader, ScanJob, walk
from exporter.contract.settings import Settings, parse_duration, positive, setting
from exporter.contract.source import (
    Context,
    Key,
    Result,
    SourceBase,
    SourceSpec,
    in_thread,
    partial_result,
)
from exporter.host.degraded import CAP_SYS_PTRACE, DEGRADED
from exporter.host.paths import HostPaths
from exporter.model import CgroupRef


@dataclass(frozen=True)
class TmpfsOrphansSettings(Settings):
    interval: float = setting(
        "--tmpfs.orphans-interval", "60s", parse_duration,
        "how often a pod's tmpfs files are checked against its processes' open files and "
        "mappings (sooner when the mount's used bytes change)", check=positive)
    # What one scrape may spend on the scan, all pods together, in descriptor stats (a
    # maps read counts tmpfs_scan.MAPS_COST, a walked file one): a scan that needs more
    # goes on at the next scrape where it stopped (not a flag).
    budget: int = 30_000


@dataclass(frozen=True)
class TmpfsOrphansData:
    # pod-level cgroup path (or tracked cgroup) -> mount point -> orphaned bytes
    orphans: Mapping[str, Mapping[str, int]]
    # pods whose scan of what they hold now is still going on (over several scrapes, as
    # the budget allows): their figure, if any, is the last finished scan's
    stale: frozenset[str] = frozenset()


KEY: Key[TmpfsOrphansData] = Key("tmpfs_orphans")


@dataclass
class _Scan:
    at: float  # when the scan started
    used: tuple[tuple[str, int], ...]  # the mounts' used bytes then (a change: scan again)
    pids: tuple[int, ...]  # the pod's processes then (one gone: its files may be orphans)
    result: tuple[Orphans, ...]


class TmpfsOrphansSource(SourceBase):
    """Per pod: files of its memory-backed tmpfs that none of its live processes holds.

    Runs after procfs (the pod's pids) and tmpfs (its mounts and their used bytes): a pod
    whose mounts are empty costs nothing; the others are scanned again when a mount's
    used bytes change, when one of the pod's processes is gone (what it held may now be
    orphaned) or ``interval`` has passed. A scan is a job carried across scrapes: each
    scrape spends at most ``budget`` on all jobs together, in fair shares, stalest pod
    first, and a pod whose job is unfinished keeps its last figure and is listed in
    ``stale``. A pod sharing the host's IPC namespace (hostIPC: the host's /dev/shm) is
    not looked at: its files are everyone's.
    """

    def __init__(self, settings: TmpfsOrphansSettings, paths: HostPaths,
                 clock: Callable[[], float] = time.monotonic,
                 reader: ProcReader | None = None) -> None:
        self._settings = settings
        self._paths = paths
        self._clock = clock
        self._reader = reader or ProcReader(procfs=str(paths.procfs))
        self._scans: dict[str, _Scan] = {}
        self._jobs: dict[str, ScanJob] = {}

    async def collect(self, ctx: Context) -> Result[TmpfsOrphansData]:
        pf, tf = ctx.get(procfs.KEY), ctx.get(tmpfs.KEY)
        if pf is None or tf is None:
            return Result(None)
        return await in_thread(lambda: self.read(ctx.refs, pf, tf))

    def read(self, refs: Sequence[CgroupRef], pf: procfs.ProcfsData,
             tf: tmpfs.TmpfsData) -> Result[TmpfsOrphansData]:
        now = self._clock()
        out: dict[str, dict[str, int]] = {}
        errors: list[str] = []
        found: list[_Pod] = []
        for owner, members in tmpfs.mount_owners(refs).items():
            mounts = tf.mounts.get(owner, ())
            pids = [p.pid for r in members for p in pf.processes.get(r.path, ())]
            if not pids or not any(m.used for m in mounts):
                self._forget(owner)
                if mounts:
                    out[owner] = {m.mount: 0 for m in mounts}
                continue
            pod = self._locate(owner, pids, {m.mount: m.used for m in mounts})
            if pod is not None:
                found.append(pod)
        # A tmpfs seen by more than one pod (hostIPC pods, a host without mount
        # namespaces) or the host's own /dev/shm is nobody's to judge: left out.
        owners_of = Counter(dev for pod in found for dev in set(pod.devs.values()))
        host = self._host_shm_dev()
        due: list[tuple[float, _Pod, ScanJob]] = []
        for pod in found:
            pod.mounts = {mp: dev for mp, dev in pod.devs.items()
                          if owners_of[dev] == 1 and dev != host}
            if not pod.mounts:
                self._forget(pod.owner)
                continue
            scan, job = self._scans.get(pod.owner), self._jobs.get(pod.owner)
            if scan is not None:
                out[pod.owner] = {o.mount: o.bytes for o in scan.result}
            if job is None and (scan is None or scan.used != pod.used
                                or scan.pids != pod.pid_set
                                or now - scan.at >= self._settings.interval):
                job = self._jobs[pod.owner] = ScanJob(
                    now, pod.used, pod.pid_set, tuple(pod.pids),
                    [(mp, f"{pod.root}{mp}") for mp in sorted(pod.mounts)])
            if job is not None:
                due.append((scan.at if scan is not None else float("-inf"), pod, job))
        stale: set[str] = set()
        budget = self._settings.budget
        due.sort(key=lambda d: d[0])
        for i, (_, pod, job) in enumerate(due):
            share = budget // (len(due) - i)
            if share > 0:
                try:
                    budget -= job.step(self._reader, share, walk)
                except PermissionError as exc:
                    errors.append(f"{pod.owner}: {exc}")
                    DEGRADED.report(KEY.name, CAP_SYS_PTRACE, f"no orphaned tmpfs files: {exc}")
                    del self._jobs[pod.owner]
                    continue
            if not job.done:
                stale.add(pod.owner)  # the next scrape goes on from here
                continue
            del self._jobs[pod.owner]
            result = job.result()
            self._scans[pod.owner] = _Scan(job.started, job.used, job.pid_set, result)
            out[pod.owner] = {o.mount: o.bytes for o in result}
            errors += [f"{pod.owner}: {o.mount} has more files than looked at"
                       for o in result if not o.complete]
        live = set(out) | stale
        for gone in (set(self._scans) | set(self._jobs)) - live:
            self._forget(gone)
        return partial_result(TmpfsOrphansData(out, frozenset(stale)), errors, "pods")

    def _forget(self, owner: str) -> None:
        self._scans.pop(owner, None)
        self._jobs.pop(owner, None)

    def _host_shm_dev(self) -> int | None:
        try:
            return os.stat(f"{self._paths.procfs}/1/root/dev/shm").st_dev
        except OSError:
            return None

    def _locate(self, owner: str, pids: list[int], used: Mapping[str, int]) -> _Pod | None:
        """The pod's mounts as one of its first live processes sees them (its mount
        namespace); None when none of them is alive any more."""
        for pid in pids[:3]:
            root = f"{self._paths.procfs}/{pid}/root"
            try:
                devs = {mp: os.stat(f"{root}{mp}").st_dev for mp in used}
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # exited (or not ours to look into): the next one
            return _Pod(owner, pids, root, devs, tuple(sorted(used.items())))
        return None


@dataclass
class _Pod:
    owner: str
    pids: list[int]
    root: str  # /proc/<pid>/root of the process its mounts are looked at through
    devs: dict[str, int]  # mount point -> st_dev
    used: tuple[tuple[str, int], ...]
    mounts: dict[str, int] = field(default_factory=dict)  # the ones to scan

    @property
    def pid_set(self) -> tuple[int, ...]:
        return tuple(sorted(self.pids))


SPEC = SourceSpec(KEY, "tmpfs files of each pod that no live process of the pod holds "
                  "(stale /dev/shm)", TmpfsOrphansSettings,
                  lambda settings, paths: TmpfsOrphansSource(settings, paths))
