"""Wires the OOM watcher, the flight recorder, the kernel log and the document store to
the sampler thread (``on_sample``) and to each scrape (``collect``: the kills as a source's
result, joined like the others; ``observe``: the scrape's labels and processes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from exporter.collectors.kmsg import KmsgReader
from exporter.contract.source import Result
from exporter.exposition.join import Snapshot, VllmView
from exporter.host.workloads import workload_of
from exporter.model import CgroupRef, PodDirectory, ProcessStatus, Workload
from exporter.oom.tally import KillTally
from exporter.oom.watcher import CgroupLabels, OomKill, OomWatcher, ProcessEntry
from exporter.postmortem.documents import DocumentStore, kill_document
from exporter.postmortem.recorder import EngineRecord, FlightRecorder, ScrapeRecord
from exporter.sampling.sampler import Sample

TOP_PROCESSES = 5  # process names kept per scrape record


def scrape_records(snapshot: Snapshot) -> list[ScrapeRecord]:
    """The flight recorder's view of one scrape: each cgroup with memory figures."""
    engines: dict[Workload, list[EngineRecord]] = {}
    for v in snapshot.vllm:
        engines.setdefault(v.workload, []).extend(_engines(v))
    out = []
    for ws in snapshot.workloads:
        m = ws.memory
        if m is None:
            continue
        top = sorted(ws.processes, key=lambda g: -(g.rss_anon + g.rss_shmem))[:TOP_PROCESSES]
        out.append(ScrapeRecord(
            cgroup=ws.ref.path, usage=m.usage, limit=m.limit, unreclaimable=m.unreclaimable,
            working_set=m.working_set, kinds=m.kinds, events=m.events,
            processes=tuple(top), tmpfs=ws.tmpfs, vllm=tuple(engines.get(ws.workload, ())),
        ))
    return out


def _engines(v: VllmView) -> list[EngineRecord]:
    if v.stats is None:
        return []
    return [EngineRecord(e.model_name, e.engine, e.usage_ratio, e.requests)
            for e in v.stats.engines]


def cgroup_labels(ref: CgroupRef, pods: PodDirectory | None) -> CgroupLabels:
    """The labels of a cgroup no scrape has seen yet (found by the sampler)."""
    workload = workload_of(ref, pods)
    if ref.pod_uid is None or ref.is_pod_level:
        return CgroupLabels(workload, workload)
    pod = CgroupRef(path=ref.path.rsplit("/", 1)[0], pod_uid=ref.pod_uid, qos=ref.qos)
    return CgroupLabels(workload, workload_of(pod, pods))


class PostMortem:
    def __init__(self, watcher: OomWatcher, recorder: FlightRecorder, store: DocumentStore,
                 kmsg: KmsgReader | None = None, pods: PodDirectory | None = None) -> None:
        self.watcher = watcher
        self.recorder = recorder
        self.store = store
        self.kmsg = kmsg
        self.pods = pods

    # On the sampler thread; True while a kill waits to be named (pass again soon).
    def on_sample(self, sample: Sample) -> bool:
        self.recorder.record_usage(sample.usage)
        if sample.added or sample.removed or sample.found:
            self.watcher.track(
                {path: (d.pod, d.young) for path, d in sample.added.items()}, sample.removed,
                {r.path: cgroup_labels(r, self.pods) for r in sample.found})
        victims = self.kmsg.read_victims() if self.kmsg is not None else []
        self.watcher.check(sample.counters, victims, sample.members, sample.departed,
                           publish=self._publish)
        return self.watcher.waiting()

    # On the event loop, after every scrape.
    def observe(self, snapshot: Snapshot, processes: Mapping[str, Sequence[ProcessStatus]],
                live: Sequence[str]) -> None:
        """``live``: every tracked cgroup path this scrape (what is not is forgotten)."""
        pod_of = snapshot.pod_of()
        labels = {ws.ref.path: CgroupLabels(ws.workload, pod_of.get(ws.ref.path, ws.workload))
                  for ws in snapshot.workloads}
        table = {path: [ProcessEntry(p.pid, p.name, p.rss) for p in procs]
                 for path, procs in processes.items()}
        self.watcher.observe(labels, table)
        self.watcher.forget(live)
        self.recorder.record_scrape(scrape_records(snapshot), live)

    # On the event loop, before every join.
    def collect(self) -> Result[KillTally]:
        """The kills counted so far, as a source's result (held in memory: it cannot
        fail, and it is not a collector of its own)."""
        return Result(self.watcher.tally())

    def _publish(self, k: OomKill) -> None:
        pod_path = self.watcher.pod_cgroup(k.pod_workload, besides=k.cgroup)
        pod_level: dict[str, Any] | None = None
        if pod_path is not None:
            pod_level = {"cgroup": "/" + pod_path, **self.recorder.history(pod_path)}
        self.store.publish(k, kill_document(k, self.recorder.window,
                                            self.recorder.history(k.cgroup), pod_level))

    def list_documents(self) -> list[str]:
        return self.store.names()

    def get_document(self, name: str) -> dict[str, Any] | None:
        return self.store.get(name)

    def close(self) -> None:
        if self.kmsg is not None:
            self.kmsg.close()
