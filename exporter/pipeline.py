"""One scrape: discover cgroups, run each collector in a worker thread with a time limit,
join the results. Nothing here blocks the event loop.

A collector that fails, times out or raises is reported with
``headroom_collector_success{collector} 0`` and one log line per distinct error; its
series are missing from that scrape, everything else is served. A collector still running
from an earlier scrape (stuck on a hung file) is not started again until it returns, so
threads cannot pile up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from exporter.collectors.cgroup import CgroupGone, node_memory_bytes, read_cgroup
from exporter.collectors.procfs import (
    CMDLINE_MAX_BYTES,
    ProcfsCollector,
    ProcfsResult,
    ProcfsSettings,
    is_vllm_process,
    split_cmdline,
)
from exporter.collectors.tmpfs import TmpfsCollector, TmpfsResult
from exporter.config import Config
from exporter.extensions import Extension, ScrapeInputs
from exporter.join import Snapshot, join
from exporter.model import (
    CgroupMemory,
    CgroupRef,
    CollectorResult,
    PartialFailure,
    PodDirectory,
)
from exporter.paths import (
    CgroupLayoutError,
    HostPaths,
    MemoryHierarchy,
    OpenFiles,
    cgroupns_root,
    read_bytes,
    resolve_cgroup,
    self_memory_cgroup,
)
from exporter.postmortem import FlightRecorder, KmsgReader, PostMortem
from exporter.render import SectionRenderer
from exporter.sampler import PeakSampler
from exporter.workloads import dedupe, find_kubepods, tracked_refs, walk_kubepods

log = logging.getLogger(__name__)
T = TypeVar("T")

HOST_SCAN_INTERVAL = 30.0  # seconds between scans of /proc for vLLM command lines


@dataclass
class _Guard:
    """Per-collector state: in-flight flag and the last error logged."""

    running: bool = False
    last_error: str = ""


@dataclass(frozen=True)
class Discovery:
    refs: tuple[CgroupRef, ...]
    kubepods: str | None


def kill_domains(refs: Sequence[CgroupRef], version: int) -> list[str]:
    """The cgroups whose oom_kill counters count each kill once: on v2 the pod-level
    cgroup (memory.events is hierarchical and outlives a killed container); on v1 each
    container (v1 counts only in the victim's own cgroup). Tracked cgroups as they are."""
    out = []
    for r in refs:
        if r.pod_uid is None or (r.is_pod_level if version == 2 else not r.is_pod_level):
            out.append(r.path)
    return out


def scan_vllm_processes(paths: HostPaths, ns_root: str | None = None) -> dict[str, list[int]]:
    """vLLM processes on the host by command line -> their memory cgroups (resolved
    against our cgroup namespace's root, see paths.cgroupns_root)."""
    found: dict[str, list[int]] = {}
    try:
        entries = [e for e in paths.procfs.iterdir() if e.name.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            argv = split_cmdline(read_bytes(entry / "cmdline", limit=CMDLINE_MAX_BYTES))
            if not is_vllm_process(argv):
                continue
            cgroup = resolve_cgroup(self_memory_cgroup(paths.procfs, entry.name), ns_root)
        except (OSError, CgroupLayoutError):
            continue  # exited, or a kernel thread
        found.setdefault(cgroup, []).append(int(entry.name))
    return found


class Pipeline:
    def __init__(
        self,
        config: Config,
        paths: HostPaths,
        pods: PodDirectory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.paths = paths
        self.pods = pods
        self._clock = clock
        self._guards: dict[str, _Guard] = {}
        self._inflight: asyncio.Task[Snapshot] | None = None
        self._hierarchy: MemoryHierarchy | None = None
        self._procfs: ProcfsCollector | None = None
        self._tmpfs: TmpfsCollector | None = None
        self.sampler: PeakSampler | None = None
        self.postmortem: PostMortem | None = None
        self._host_scan_at = -1e18
        self._host_vllm: dict[str, list[int]] = {}
        self._cgroupns: tuple[str | None] | None = None
        self._cgroup_files = OpenFiles()
        self._node_memory: tuple[int, int] | None = None
        self.extensions: list[Extension] = []

    # --- setup -------------------------------------------------------------------------

    def hierarchy(self) -> MemoryHierarchy:
        if self._hierarchy is None:
            self._hierarchy = self.paths.detect_memory_hierarchy()
            log.info("memory cgroup controller: v%d at %s", self._hierarchy.version,
                     self._hierarchy.root)
            h = self._hierarchy
            self._procfs = ProcfsCollector(self.paths, h, ProcfsSettings(
                max_processes=self.config.procfs_max_processes,
                pss_interval=self.config.procfs_pss_interval,
                pss_max_rss=self.config.procfs_pss_max_rss,
            ), clock=self._clock)
            self._tmpfs = TmpfsCollector(self.paths, h)
            self.sampler = PeakSampler(h, self.config.sampler_interval,
                                       self.config.sampler_window, clock=self._clock)
            self.postmortem = PostMortem(
                FlightRecorder(self.config.flight_recorder_window),
                directory=self.config.flight_recorder_dir,
                procfs=self.paths.procfs,
                kmsg=KmsgReader(self.config.kmsg),
            )
            self.sampler.usage_sink = self.postmortem.recorder.record_usage
            self.sampler.kill_sink = self._check_kills
            self.sampler.start()
        return self._hierarchy

    def _ns_root(self, h: MemoryHierarchy) -> str | None:
        """Our cgroup namespace root, found once and said once (paths.cgroupns_root)."""
        if self._cgroupns is None:
            root = cgroupns_root(self.paths.procfs, h)  # CgroupLayoutError: discovery fails
            if root is not None:
                log.warning("headroom runs in its own cgroup namespace, rooted at /%s: "
                            "host processes' cgroup paths are resolved against it", root)
            self._cgroupns = (root,)
        return self._cgroupns[0]

    def _check_kills(self, counters: Mapping[str, int]) -> None:
        if self.postmortem is not None:
            self.postmortem.check(counters)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.postmortem is not None and self.postmortem.kmsg is not None:
            self.postmortem.kmsg.close()

    async def aclose(self) -> None:
        for ext in self.extensions:
            aclose = getattr(ext, "aclose", None)
            if aclose is not None:
                await aclose()
            close = getattr(ext, "close", None)
            if close is not None:
                close()
        self.close()

    def sections(self) -> list[SectionRenderer]:
        """Renderers of the extensions' data, for render()."""
        def section(ext: Extension) -> SectionRenderer:
            return lambda snap: ext.render(snap.extra.get(ext.name))

        return [section(ext) for ext in self.extensions]

    # --- one scrape --------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """Concurrent scrapes share one collection (two Prometheus replicas, a curl)."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._collect())
        return await asyncio.shield(self._inflight)

    async def _run(
        self, name: str, fn: Callable[[], T], results: list[CollectorResult]
    ) -> T | None:
        guard = self._guards.setdefault(name, _Guard())
        start = time.perf_counter()
        if guard.running:
            # The earlier failure (a time-out) was logged; this is the same condition.
            if not guard.last_error:
                self._fail(name, guard, "still running from an earlier scrape", start, results)
            else:
                results.append(CollectorResult(name, False, time.perf_counter() - start,
                                               "still running from an earlier scrape"))
            return None
        guard.running = True
        future = asyncio.get_running_loop().run_in_executor(None, fn)

        def done(_: object) -> None:
            guard.running = False

        future.add_done_callback(done)
        # Shielded: on a time-out the thread cannot be stopped; the guard waits for it.
        return await self._run_async(name, asyncio.shield(future), results, start)

    def _fail(self, name: str, guard: _Guard, error: str, start: float,
              results: list[CollectorResult]) -> None:
        if error != guard.last_error:
            log.error("collector %s failed: %s", name, error)
        guard.last_error = error
        results.append(CollectorResult(name, False, time.perf_counter() - start, error))

    async def _collect(self) -> Snapshot:
        results: list[CollectorResult] = []
        discovery = await self._run("discovery", self._discover, results)
        refs: Sequence[CgroupRef] = discovery.refs if discovery else ()
        if self.sampler is not None:
            self.sampler.set_tracked(r.path for r in refs)
        cfg = self.config
        tasks: dict[str, Awaitable[Any]] = {}
        if cfg.enabled("cgroup") and discovery:
            tasks["cgroup"] = self._run("cgroup", lambda: self._read_cgroups(refs), results)
        if cfg.enabled("procfs") and discovery and self._procfs is not None:
            tasks["procfs"] = self._run("procfs", lambda: self._read_procfs(refs), results)
        names = list(tasks)
        # One after another: they are CPU-bound Python, and running them in parallel threads
        # only adds GIL hand-offs (measured: about 2x the CPU per scrape).
        values = [await t for t in tasks.values()]
        got = dict(zip(names, values, strict=True))
        if cfg.enabled("tmpfs") and discovery and self._tmpfs is not None:
            known: ProcfsResult | None = got.get("procfs")
            got["tmpfs"] = await self._run(
                "tmpfs", lambda: self._read_tmpfs(refs, known), results)
        memory: Mapping[str, CgroupMemory] = got.get("cgroup") or {}
        procfs_result: ProcfsResult | None = got.get("procfs")
        tmpfs_result: TmpfsResult | None = got.get("tmpfs")
        peaks = {}
        if self.sampler is not None:
            for r in refs:
                p = self.sampler.peak(r.path)
                if p is not None:
                    peaks[r.path] = p
        snapshot = join(
            refs, self.pods, memory, peaks,
            procfs_result.groups if procfs_result else {},
            tmpfs_result.mounts if tmpfs_result else {},
            results,
        )
        if got.get("cgroup") is not None:
            snapshot = replace(snapshot, node_memory=self._node_memory)
        if self.extensions:
            inputs = ScrapeInputs(snapshot, procfs_result,
                                  {ws.ref.path: ws.workload for ws in snapshot.workloads})
            extra: dict[str, object] = {}
            for ext in self.extensions:
                extra[ext.name] = await self._run_async(ext.name, ext.collect(inputs), results)
            snapshot = replace(snapshot, extra=extra,
                               collectors=tuple(sorted(results, key=lambda r: r.name)))
        return self._post_mortem(snapshot, refs, procfs_result)

    def _post_mortem(self, snapshot: Snapshot, refs: Sequence[CgroupRef],
                     procfs: ProcfsResult | None) -> Snapshot:
        """Feed the OOM watcher and flight recorder; report the kills counted so far."""
        pm, sampler, h = self.postmortem, self.sampler, self._hierarchy
        if pm is None or sampler is None or h is None:
            return snapshot
        processes = {
            path: [(p.pid, p.name, p.rss) for p in procs]
            for path, procs in (procfs.processes.items() if procfs else ())
        }
        pm.observe_scrape(snapshot, processes)
        pm.forget(r.path for r in refs)
        sampler.set_kill_domains(kill_domains(refs, h.version))
        return replace(snapshot, oom_kills=dict(pm.counts))

    async def _run_async(self, name: str, coro: Awaitable[T],
                         results: list[CollectorResult], start: float | None = None) -> T | None:
        """Await a source with a time limit: a failure, time-out or partial result is
        recorded (and logged once per distinct error), never raised."""
        guard = self._guards.setdefault(name, _Guard())
        start = time.perf_counter() if start is None else start
        try:
            value = await asyncio.wait_for(coro, self.config.collector_timeout)
        except asyncio.TimeoutError:
            self._fail(name, guard, f"timed out after {self.config.collector_timeout:g}s",
                       start, results)
            return None
        except PartialFailure as exc:
            self._fail(name, guard, str(exc), start, results)
            return exc.data  # type: ignore[return-value]
        except Exception as exc:
            self._fail(name, guard, f"{type(exc).__name__}: {exc}", start, results)
            return None
        if guard.last_error:
            log.info("collector %s recovered", name)
            guard.last_error = ""
        results.append(CollectorResult(name, True, time.perf_counter() - start))
        return value

    # --- the blocking parts, run in worker threads -------------------------------------

    def _discover(self) -> Discovery:
        h = self.hierarchy()
        kubepods = self.config.kubepods_path
        if kubepods is None:
            kubepods = find_kubepods(h)
        refs: list[CgroupRef] = []
        if kubepods is not None:
            kubepods = kubepods.strip("/")
            if not h.dir(kubepods).is_dir():
                raise FileNotFoundError(f"kubepods cgroup {h.dir(kubepods)} does not exist")
            refs.extend(walk_kubepods(h, kubepods))
        now = self._clock()
        if now - self._host_scan_at >= HOST_SCAN_INTERVAL:
            self._host_scan_at = now
            self._host_vllm = scan_vllm_processes(self.paths, self._ns_root(h))
        outside = [
            cg for cg in self._host_vllm
            if kubepods is None or not (cg + "/").startswith(kubepods + "/")
        ]
        refs.extend(tracked_refs([*self.config.track, *outside]))
        return Discovery(refs=tuple(dedupe(refs)), kubepods=kubepods)

    def _read_cgroups(self, refs: Sequence[CgroupRef]) -> dict[str, CgroupMemory]:
        h = self.hierarchy()
        meminfo = self.paths.proc("meminfo").read_text()
        node_memory = node_memory_bytes(meminfo)
        self._node_memory = (node_memory, node_memory_bytes(meminfo, "MemAvailable"))
        out: dict[str, CgroupMemory] = {}
        errors: list[str] = []
        read = self._cgroup_files.read_text
        for ref in refs:
            try:
                out[ref.path] = read_cgroup(h, ref.path, node_memory, read)
            except CgroupGone:
                continue  # a container exiting: not an error
            except (OSError, ValueError) as exc:
                errors.append(f"{ref.path}: {type(exc).__name__}: {exc}")
        self._cgroup_files.sweep()
        if errors:
            raise PartialFailure(
                f"{len(errors)} of {len(refs)} cgroups unreadable, first: {errors[0]}", out
            )
        return out

    def _read_procfs(self, refs: Sequence[CgroupRef]) -> ProcfsResult:
        assert self._procfs is not None
        result = self._procfs.collect(refs)
        if result.hidden:
            raise PartialFailure(
                f"{result.hidden} processes of tracked cgroups are in another pid namespace "
                "(cgroup.procs lists them as 0): run headroom with the host's pid namespace "
                "(hostPID: true) and --path.procfs pointing at the host's /proc", result,
            )
        return result

    def _read_tmpfs(
        self, refs: Sequence[CgroupRef], known: ProcfsResult | None = None
    ) -> TmpfsResult:
        assert self._tmpfs is not None
        owners: dict[str, list[CgroupRef]] = {}
        pod_level = {r.pod_uid: r.path for r in refs if r.is_pod_level}
        for r in refs:
            if r.pod_uid is None:
                owners.setdefault(r.path, []).append(r)
            elif r.container_id is not None and r.pod_uid in pod_level:
                owners.setdefault(pod_level[r.pod_uid], []).append(r)
        pids = None
        if known is not None:
            pids = {path: [p.pid for p in procs] for path, procs in known.processes.items()}
        result = self._tmpfs.collect(owners, pids)
        if result.errors:
            raise PartialFailure(
                f"{len(result.errors)} pods unreadable, first: {result.errors[0]}", result
            )
        return result
