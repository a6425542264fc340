"""Snapshot -> Prometheus metric families, built fresh on each scrape.

client_python's custom-collector pattern: nothing is registered globally and nothing is
mutated between scrapes, so a series that disappears from the host disappears here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import (
    CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE,
)
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from exporter import __version__
from exporter import catalog as c
from exporter.catalog import MetricSpec
from exporter.join import Snapshot

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Extra renderers (GPU, vLLM) plug in here: each gets the snapshot, yields families.
SectionRenderer = Callable[[Snapshot], Iterable[Metric]]


def family(spec: MetricSpec) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.type == "counter":
        return CounterMetricFamily(spec.family, spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(spec.family, spec.help, labels=list(spec.labels))


def render(snapshot: Snapshot, sections: Sequence[SectionRenderer] = ()) -> list[Metric]:
    f = {spec.name: family(spec) for spec in (
        c.MEMORY_LIMIT_BYTES, c.MEMORY_USAGE_BYTES, c.MEMORY_WORKING_SET_BYTES,
        c.MEMORY_BYTES, c.MEMORY_UNRECLAIMABLE_BYTES, c.MEMORY_PEAK_BYTES,
        c.MEMORY_EVENTS_TOTAL, c.MEMORY_PRESSURE_SECONDS_TOTAL, c.MEMORY_SWAP_BYTES,
        c.TMPFS_USED_BYTES, c.TMPFS_SIZE_BYTES,
        c.PROCESS_MEMORY_BYTES, c.PROCESS_MEMORY_PSS_BYTES, c.PROCESS_COUNT,
        c.OOM_KILLS_TOTAL,
    )}

    def add(spec: MetricSpec, labels: Sequence[str], value: float) -> None:
        f[spec.name].add_metric(list(labels), value)

    for ws in snapshot.workloads:
        w = list(ws.workload.labels())
        m = ws.memory
        if m is not None:
            add(c.MEMORY_LIMIT_BYTES, w, m.limit)
            add(c.MEMORY_USAGE_BYTES, w, m.usage)
            add(c.MEMORY_WORKING_SET_BYTES, w, m.working_set)
            add(c.MEMORY_UNRECLAIMABLE_BYTES, w, m.unreclaimable)
            for kind in c.MEMORY_KINDS:
                if kind in m.kinds:
                    add(c.MEMORY_BYTES, [*w, kind], m.kinds[kind])
            for event, count in sorted(m.events.items()):
                add(c.MEMORY_EVENTS_TOTAL, [*w, event], count)
            for level, seconds in sorted(m.pressure.items()):
                add(c.MEMORY_PRESSURE_SECONDS_TOTAL, [*w, level], seconds)
            if m.swap is not None:
                add(c.MEMORY_SWAP_BYTES, w, m.swap)
            # The window maximum can never be below what we just read.
            add(c.MEMORY_PEAK_BYTES, w, max(ws.peak or 0, m.usage))
        for t in ws.tmpfs:
            add(c.TMPFS_USED_BYTES, [*w, t.mount], t.used)
            add(c.TMPFS_SIZE_BYTES, [*w, t.mount], t.size)
        for g in ws.processes:
            pw = [*w, g.name]
            add(c.PROCESS_COUNT, pw, g.count)
            add(c.PROCESS_MEMORY_BYTES, [*pw, "rss_anon"], g.rss_anon)
            add(c.PROCESS_MEMORY_BYTES, [*pw, "rss_file"], g.rss_file)
            add(c.PROCESS_MEMORY_BYTES, [*pw, "rss_shmem"], g.rss_shmem)
            add(c.PROCESS_MEMORY_BYTES, [*pw, "swap"], g.swap)
            if g.pss is not None:
                add(c.PROCESS_MEMORY_PSS_BYTES, [*pw, "anon"], g.pss.anon)
                add(c.PROCESS_MEMORY_PSS_BYTES, [*pw, "file"], g.pss.file)
                add(c.PROCESS_MEMORY_PSS_BYTES, [*pw, "shmem"], g.pss.shmem)
    for (workload, process), count in sorted(snapshot.oom_kills.items()):
        add(c.OOM_KILLS_TOTAL, [*workload.labels(), process], count)

    out: list[Metric] = list(f.values())
    for section in sections:
        out.extend(section(snapshot))
    success = family(c.COLLECTOR_SUCCESS)
    duration = family(c.COLLECTOR_DURATION_SECONDS)
    for r in snapshot.collectors:
        success.add_metric([r.name], 1.0 if r.success else 0.0)
        duration.add_metric([r.name], r.duration_seconds)
    build = family(c.BUILD_INFO)
    build.add_metric([__version__], 1.0)
    out.extend([success, duration, build])
    return out


class _Families:
    """The one-method object prometheus_client's encoders ask for."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def encode(families: list[Metric], accept: str | None) -> tuple[bytes, str]:
    """Prometheus text by default; OpenMetrics when the scraper asks for it."""
    registry: CollectorRegistry = _Families(families)  # type: ignore[assignment]
    if accept and "application/openmetrics-text" in accept:
        body: bytes = generate_openmetrics(registry)  # type: ignore[no-untyped-call]
        return body, OPENMETRICS_CONTENT_TYPE
    return generate_latest(registry), TEXT_CONTENT_TYPE
