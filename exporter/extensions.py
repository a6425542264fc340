"""Sources joined onto the cgroup/process snapshot: GPU memory (NVML), vLLM's own
statistics (/metrics and KV cache events), and the Kubernetes API's health.

Each extension has an async ``collect`` (run by the pipeline with a time limit, after the
host collectors, so it can map pids and cgroups to workloads) and a pure ``render``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from exporter import catalog as c
from exporter.collectors import nvml as nv
from exporter.collectors import vllm as vl
from exporter.collectors.kv_events import KvEventsHub
from exporter.collectors.procfs import ProcfsResult
from exporter.join import Snapshot
from exporter.model import PartialFailure, PodDirectory, Workload
from exporter.paths import HostPaths, read_text
from exporter.render import Family

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScrapeInputs:
    """What the host collectors found, for the extensions to join onto."""

    snapshot: Snapshot
    procfs: ProcfsResult | None
    workloads: Mapping[str, Workload]  # cgroup path -> labels


class Extension(Protocol):
    name: str

    async def collect(self, inputs: ScrapeInputs) -> object: ...

    def render(self, data: object) -> Iterable[Family]: ...


def _pid_index(inputs: ScrapeInputs) -> dict[int, tuple[Workload, str]]:
    out: dict[int, tuple[Workload, str]] = {}
    if inputs.procfs is None:
        return out
    for path, procs in inputs.procfs.processes.items():
        w = inputs.workloads.get(path)
        if w is not None:
            for p in procs:
                out[p.pid] = (w, p.name)
    return out


# --- GPU -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuData:
    devices: tuple[nv.GpuDevice, ...]
    # (workload, process, gpu, uuid) -> bytes, summed over processes of that name
    processes: Mapping[tuple[Workload, str, str, str], int]


def join_gpu(snap: nv.NvmlSnapshot, pids: Mapping[int, tuple[Workload, str]]) -> GpuData:
    """Pure: NVML's per-pid use -> per workload and process name. GPU processes outside
    the tracked cgroups (another node agent, a host process) are left out."""
    per: dict[tuple[Workload, str, str, str], int] = {}
    for pid, uses in snap.processes().items():
        owner = pids.get(pid)
        if owner is None:
            continue
        for use in uses:
            if use.used_bytes is None:
                continue  # NVML does not know: absent, not 0
            key = (owner[0], owner[1], use.gpu, use.uuid)
            per[key] = per.get(key, 0) + use.used_bytes
    return GpuData(snap.devices, per)


class GpuExtension:
    name = "nvml"

    def __init__(self, collector: nv.NvmlCollector | None = None) -> None:
        self._nvml = collector or nv.NvmlCollector()
        self._busy = False

    async def collect(self, inputs: ScrapeInputs) -> GpuData | None:
        # NVML calls block (a lost GPU can hang them): a worker thread, one at a time.
        if self._busy:
            raise RuntimeError("an earlier NVML call has not returned")
        self._busy = True
        try:
            snap = await asyncio.get_running_loop().run_in_executor(None, self._nvml.collect)
        finally:
            self._busy = False
        if not snap.available:
            return None  # no driver on this node: no data, not a failure
        data = join_gpu(snap, _pid_index(inputs))
        if snap.errors:
            raise PartialFailure("; ".join(snap.errors), data)
        return data

    def render(self, data: object) -> Iterable[Family]:
        if not isinstance(data, GpuData):
            return []
        total = Family(c.GPU_MEMORY_TOTAL_BYTES)
        used = Family(c.GPU_MEMORY_USED_BYTES)
        for d in data.devices:
            total.add((d.gpu, d.uuid), d.total_bytes)
            used.add((d.gpu, d.uuid), d.used_bytes)
        per = Family(c.PROCESS_GPU_MEMORY_BYTES)
        for (w, process, gpu, uuid), value in sorted(data.processes.items()):
            per.add((*w.labels(), process, gpu, uuid), value)
        return [total, used, per]

    def close(self) -> None:
        self._nvml.close()


# --- vLLM ------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmTarget:
    workload: Workload
    url: str  # /metrics
    host: str  # where its KV-event endpoints are reached
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class VllmResult:
    target: VllmTarget
    stats: vl.VllmStats | None  # None: the read failed
    error: str = ""
    prefix_blocks: Mapping[tuple[str, str], int] = field(default_factory=dict)


def pod_ip_from_fib_trie(text: str) -> str | None:
    """The pod's own IPv4 address from /proc/PID/net/fib_trie (its network namespace):
    the first ``/32 host LOCAL`` entry that is not loopback. Used when the Kubernetes API
    is not available to give the pod IP."""
    last = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("|--", "+--")):
            last = stripped[3:].strip()
        elif stripped == "/32 host LOCAL" and last and not last.startswith("127."):
            return last
    return None


def find_targets(
    inputs: ScrapeInputs,
    pods: PodDirectory | None,
    paths: HostPaths,
    explicit: Sequence[str],
) -> tuple[list[VllmTarget], list[str]]:
    """vLLM API servers found among the tracked processes (plus explicit URLs); and the
    ones that cannot be reached, as error lines."""
    targets: list[VllmTarget] = []
    problems: list[str] = []
    procfs = inputs.procfs
    refs = {ws.ref.path: ws.ref for ws in inputs.snapshot.workloads}
    for path, argv in sorted((procfs.vllm_argv if procfs else {}).items()):
        ref = refs.get(path)
        w = inputs.workloads.get(path)
        if ref is None or w is None:
            continue
        if ref.pod_uid is None:  # a bare host: the command line says where
            url = vl.metrics_url_from_argv(argv)
            if url is not None:
                targets.append(VllmTarget(w, url, "127.0.0.1", argv))
            continue
        info = pods.lookup(ref.pod_uid) if pods is not None else None
        pod_ip = info.pod_ip if info is not None else ""
        ports: tuple[int, ...] = ()
        annotations: Mapping[str, str] = {}
        if info is not None:
            annotations = info.annotations
            for ci in info.containers:
                if ci.container_id == ref.container_id:
                    ports = ci.ports
        if not pod_ip and procfs is not None:
            pids = [p.pid for p in procfs.processes.get(path, ())]
            for pid in pids[:1]:
                try:
                    fib = read_text(paths.proc_file(pid, "net/fib_trie"))
                except OSError:
                    continue
                pod_ip = pod_ip_from_fib_trie(fib) or ""
        if not pod_ip:
            problems.append(f"{w.namespace}/{w.pod}/{w.container}: no pod IP to reach vLLM")
            continue
        url = vl.metrics_url_for_pod(pod_ip, annotations, ports, argv)
        targets.append(VllmTarget(w, url, pod_ip, argv))
    for url in explicit:
        host = vl.base_url(url).split("://", 1)[1]
        targets.append(VllmTarget(Workload("", host, ""), url,
                                  host.rsplit(":", 1)[0].strip("[]")))
    return targets, problems


KV_SOURCES_RETRY = 60.0  # seconds before asking a vLLM for its KV-event endpoints again


class VllmExtension:
    name = "vllm"

    def __init__(self, pods: PodDirectory | None, paths: HostPaths, explicit: Sequence[str],
                 timeout: float, max_bytes: int, kv_events: bool = True) -> None:
        self._pods = pods
        self._paths = paths
        self._explicit = tuple(explicit)
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._session: aiohttp.ClientSession | None = None
        self._hub = KvEventsHub() if kv_events else None
        self._kv_asked: dict[str, float] = {}  # url -> when endpoints were last looked up

    async def collect(self, inputs: ScrapeInputs) -> list[VllmResult]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        targets, problems = find_targets(inputs, self._pods, self._paths, self._explicit)
        results = list(await asyncio.gather(*(self._scrape(t) for t in targets)))
        await self._follow_kv_events(targets, results)
        errors = problems + [r.error for r in results if r.error]
        if errors:
            raise PartialFailure(f"{len(errors)} vLLM unreadable, first: {errors[0]}", results)
        return results

    async def _scrape(self, t: VllmTarget) -> VllmResult:
        assert self._session is not None
        try:
            stats = await vl.scrape_vllm(self._session, t.url, timeout=self._timeout,
                                         max_bytes=self._max_bytes)
        except (vl.VllmScrapeError, vl.VllmParseError) as exc:
            return VllmResult(t, None, str(exc) if isinstance(exc, vl.VllmScrapeError)
                              else f"{t.url}: {exc}")
        return VllmResult(t, stats)

    async def _follow_kv_events(self, targets: Sequence[VllmTarget],
                                results: list[VllmResult]) -> None:
        if self._hub is None:
            return
        hub = self._hub
        live = {t.url for t in targets}
        known = set(hub.keys())  # KvEventsHub is not a mapping
        for key in known:
            if key not in live:
                hub.ensure(key, ())  # that vLLM is gone: stop listening
                self._kv_asked.pop(key, None)
        now = time.monotonic()
        for i, r in enumerate(results):
            t = r.target
            if r.stats is None:
                if t.url in set(hub.keys()):
                    # Down (or restarting at the same address): the blocks it held are
                    # gone with it; follow the new engine from scratch once it is back.
                    hub.ensure(t.url, ())
                    self._kv_asked.pop(t.url, None)
                continue
            if t.url not in set(hub.keys()) and now - self._kv_asked.get(t.url, -1e9) >= (
                KV_SOURCES_RETRY
            ):
                self._kv_asked[t.url] = now
                endpoints: tuple[vl.KvEventEndpoint, ...] = ()
                try:
                    assert self._session is not None
                    endpoints = await vl.fetch_kv_event_sources(
                        self._session, vl.base_url(t.url), t.host, timeout=self._timeout)
                except Exception as exc:  # older vLLM: no such route; try its flags
                    log.debug("GET /kv_event_sources of %s: %s", t.url, exc)
                if not endpoints and t.argv:
                    endpoints = vl.kv_event_endpoints_from_argv(t.argv, t.host)
                if endpoints:
                    log.info("following KV cache events of %s at %s", t.url,
                             ", ".join(e.endpoint for e in endpoints))
                    hub.ensure(t.url, endpoints)
            if t.url in set(hub.keys()):
                results[i] = VllmResult(t, r.stats, r.error, hub.prefix_cache_blocks(t.url))

    def render(self, data: object) -> Iterable[Family]:
        fams = {s.name: Family(s) for s in (
            c.VLLM_UP, c.VLLM_KV_CACHE_CAPACITY_BYTES, c.VLLM_KV_CACHE_CAPACITY_BLOCKS,
            c.VLLM_KV_CACHE_USAGE_RATIO, c.VLLM_PREFIX_CACHE_BLOCKS, c.VLLM_REQUESTS,
            c.VLLM_PREEMPTIONS_TOTAL)}
        results: list[VllmResult] = data if isinstance(data, list) else []
        seen: set[Workload] = set()
        for r in results:
            w = r.target.workload.labels()
            if r.target.workload not in seen:  # one up series per workload
                seen.add(r.target.workload)
                fams[c.VLLM_UP.name].add(w, 1.0 if r.stats is not None else 0.0)
            if r.stats is None:
                continue
            for e in r.stats.engines:
                base = (*w, e.model_name, e.engine)
                for medium, cap in sorted(e.capacity.items()):
                    if cap.bytes is not None:
                        fams[c.VLLM_KV_CACHE_CAPACITY_BYTES.name].add((*base, medium), cap.bytes)
                    if cap.blocks is not None:
                        fams[c.VLLM_KV_CACHE_CAPACITY_BLOCKS.name].add(
                            (*base, medium), cap.blocks)
                for medium, ratio in sorted(e.usage_ratio.items()):
                    fams[c.VLLM_KV_CACHE_USAGE_RATIO.name].add((*base, medium), ratio)
                for state, n in sorted(e.requests.items()):
                    fams[c.VLLM_REQUESTS.name].add((*base, state), n)
                if e.preemptions_total is not None:
                    fams[c.VLLM_PREEMPTIONS_TOTAL.name].add(base, e.preemptions_total)
            engines = {e.engine: e.model_name for e in r.stats.engines}
            for (engine, medium), n in sorted(r.prefix_blocks.items()):
                model = engines.get(engine) or (r.stats.engines[0].model_name
                                                if r.stats.engines else "")
                fams[c.VLLM_PREFIX_CACHE_BLOCKS.name].add((*w, model, engine, medium), n)
        return list(fams.values())

    async def aclose(self) -> None:
        if self._hub is not None:
            await self._hub.close()
        if self._session is not None:
            await self._session.close()


# --- Kubernetes ---------------------------------------------------------------------------


class KubeHealth:
    """``headroom_collector_success{collector="kubernetes"}`` from the pod watcher's state."""

    name = "kubernetes"

    def __init__(self, watcher: Any) -> None:
        self._watcher = watcher

    async def collect(self, inputs: ScrapeInputs) -> None:
        w = self._watcher
        if not w.synced:
            raise RuntimeError(f"pods not listed yet: {w.last_error or 'in progress'}")
        if not w.healthy:
            raise RuntimeError(w.last_error or "watch interrupted")

    def render(self, data: object) -> Iterable[Family]:
        return []
