"""Builds the whole exporter from a Config, eagerly and once: the sources of the registry,
discovery, the peak sampler, the OOM post-mortem and the scrape pipeline. ``start`` starts
the sampler thread and the sources' background work exactly once; a scrape never builds or
starts anything."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.assembly.config import ExporterConfig
from exporter.assembly.discovery import Discovery
from exporter.assembly.pipeline import Named, Pipeline
from exporter.assembly.registry import SOURCES
from exporter.collectors.kmsg import KmsgReader
from exporter.contract.source import Source
from exporter.exposition.join import Snapshot
from exporter.exposition.selfmetrics import SelfMetrics
from exporter.host.paths import HostPaths
from exporter.model import PodDirectory
from exporter.oom.members import MemberTable
from exporter.oom.watcher import OomWatcher, pid_alive
from exporter.postmortem.documents import DocumentStore
from exporter.postmortem.recorder import FlightRecorder
from exporter.postmortem.wiring import PostMortem
from exporter.sampling.sampler import PeakSampler

log = logging.getLogger(__name__)


@dataclass
class Exporter:
    config: ExporterConfig
    pipeline: Pipeline
    sampler: PeakSampler
    postmortem: PostMortem
    self_metrics: SelfMetrics = field(default_factory=SelfMetrics)
    _started: bool = False
    _background: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def sources(self) -> tuple[Named, ...]:
        return self.pipeline.sources

    async def snapshot(self) -> Snapshot:
        return await self.pipeline.snapshot()

    def start(self) -> None:
        """Start the sampler thread and the sources' background tasks (idempotent)."""
        if self._started:
            return
        self._started = True
        self.sampler.start()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a synchronous test): no background tasks
        self._background = [loop.create_task(s.source.run(), name=f"source {s.name}")
                            for s in self.sources]

    def close(self) -> None:
        """The synchronous part of shutting down: the sampler thread and the kernel log."""
        self.sampler.stop()
        self.postmortem.close()

    async def aclose(self) -> None:
        for t in self._background:
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for s in self.sources:
            await s.source.aclose()
        self.close()


def build_sources(config: ExporterConfig, paths: HostPaths,
                  replace: Mapping[str, Source[object]]) -> list[Named]:
    out = []
    for spec in SOURCES:
        if not config.enabled(spec.name):
            continue
        source = replace.get(spec.name) or spec.make(config.settings(spec.settings), paths)
        if source is None:
            log.info("collector %s: not available on this host", spec.name)
            continue
        out.append(Named(spec, source))
    return out


def build(config: ExporterConfig, replace: Mapping[str, Source[object]] | None = None,
          pods: PodDirectory | None = None) -> Exporter:
    """``replace``: a source by name instead of the registry's (tests: recorded NVML, a
    fixture statvfs); ``pods``: a pod directory when no source provides one."""
    paths = HostPaths(procfs=config.paths.procfs, cgroupfs=config.paths.cgroupfs)
    sources = build_sources(config, paths, replace or {})
    for s in sources:
        if isinstance(s.source, PodDirectory):
            pods = s.source
    kmsg = KmsgReader(config.paths.kmsg)
    postmortem = PostMortem(
        OomWatcher(pid_alive(paths.procfs), kmsg_available=kmsg.available),
        FlightRecorder(config.recorder.window),
        DocumentStore(config.recorder.dir),
        kmsg,
        pods,
    )
    discovery = Discovery(paths, config.discovery.kubepods_path, config.discovery.track,
                          host_vllm=config.discovery.host_vllm)
    sampler = PeakSampler(config.sampler.interval, config.sampler.window,
                          listener=postmortem.on_sample, watch_root=discovery.watch_root,
                          members=MemberTable(paths))
    pipeline = Pipeline(discovery, sources, config.scrape.collector_timeout, pods=pods,
                        sampler=sampler, postmortem=postmortem)
    return Exporter(config, pipeline, sampler, postmortem)
