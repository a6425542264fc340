"""Snapshot -> metric families -> Prometheus text or OpenMetrics, built fresh each scrape.

client_python's custom-collector pattern (nothing registered globally, nothing mutated
between scrapes, so a series that disappears from the host disappears here), with a leaner
representation: a node with 100 containers has thousands of series, and client_python's
Metric objects and generic encoder cost more CPU than reading the host (measured in
benchmarks/scrape_cost.py). The output is checked against client_python's parsers.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporter import __version__
from exporter import catalog as c
from exporter.catalog import MetricSpec
from exporter.join import Snapshot
from exporter.model import Workload

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass
class Family:
    """One metric family: its spec and samples as (rendered label pairs, value).

    Label pairs are rendered once (``a="x",b="y"``, escaped) so that a workload's three
    labels are formatted once per scrape, not once per sample.
    """

    spec: MetricSpec
    samples: list[tuple[str, float]] = field(default_factory=list)

    def add(self, labels: Sequence[str], value: float) -> None:
        self.samples.append((label_pairs(self.spec.labels, labels), value))

    def add_pairs(self, pairs: str, value: float) -> None:
        self.samples.append((pairs, value))


def label_pairs(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join(f'{n}="{_escape_label(v)}"' for n, v in zip(names, values, strict=True))


# Extra renderers (GPU, vLLM) plug in here: each gets the snapshot, yields families.
SectionRenderer = Callable[[Snapshot], Iterable[Family]]


def render(snapshot: Snapshot, sections: Sequence[SectionRenderer] = ()) -> list[Family]:
    f = {spec.name: Family(spec) for spec in (
        c.MEMORY_LIMIT_BYTES, c.MEMORY_USAGE_BYTES, c.MEMORY_WORKING_SET_BYTES,
        c.MEMORY_BYTES, c.MEMORY_UNRECLAIMABLE_BYTES, c.MEMORY_PEAK_BYTES,
        c.MEMORY_EVENTS_TOTAL, c.MEMORY_PRESSURE_SECONDS_TOTAL, c.MEMORY_SWAP_BYTES,
        c.TMPFS_USED_BYTES, c.TMPFS_SIZE_BYTES,
        c.PROCESS_MEMORY_BYTES, c.PROCESS_MEMORY_PSS_BYTES, c.PROCESS_COUNT,
        c.OOM_KILLS_TOTAL,
    )}
    limit, usage, ws_, kinds, unrec, peak, events, pressure, swap = (
        f[s.name].samples for s in (
            c.MEMORY_LIMIT_BYTES, c.MEMORY_USAGE_BYTES, c.MEMORY_WORKING_SET_BYTES,
            c.MEMORY_BYTES, c.MEMORY_UNRECLAIMABLE_BYTES, c.MEMORY_PEAK_BYTES,
            c.MEMORY_EVENTS_TOTAL, c.MEMORY_PRESSURE_SECONDS_TOTAL, c.MEMORY_SWAP_BYTES)
    )
    tmpfs_used, tmpfs_size = f[c.TMPFS_USED_BYTES.name].samples, f[c.TMPFS_SIZE_BYTES.name].samples
    proc_mem = f[c.PROCESS_MEMORY_BYTES.name].samples
    proc_pss = f[c.PROCESS_MEMORY_PSS_BYTES.name].samples
    proc_count = f[c.PROCESS_COUNT.name].samples

    for ws in snapshot.workloads:
        w = label_pairs(c.WORKLOAD_LABELS, ws.workload.labels())
        m = ws.memory
        if m is not None:
            limit.append((w, m.limit))
            usage.append((w, m.usage))
            ws_.append((w, m.working_set))
            unrec.append((w, m.unreclaimable))
            for kind in c.MEMORY_KINDS:
                if kind in m.kinds:
                    kinds.append((f'{w},kind="{kind}"', m.kinds[kind]))
            for event, count in sorted(m.events.items()):
                events.append((f'{w},event="{_escape_label(event)}"', count))
            for level, seconds in sorted(m.pressure.items()):
                pressure.append((f'{w},level="{_escape_label(level)}"', seconds))
            if m.swap is not None:
                swap.append((w, m.swap))
            # The window maximum can never be below what we just read.
            peak.append((w, max(ws.peak or 0, m.usage)))
        for t in ws.tmpfs:
            tw = f'{w},mount="{_escape_label(t.mount)}"'
            tmpfs_used.append((tw, t.used))
            tmpfs_size.append((tw, t.size))
        for g in ws.processes:
            pw = f'{w},process="{_escape_label(g.name)}"'
            proc_count.append((pw, g.count))
            proc_mem.append((f'{pw},kind="rss_anon"', g.rss_anon))
            proc_mem.append((f'{pw},kind="rss_file"', g.rss_file))
            proc_mem.append((f'{pw},kind="rss_shmem"', g.rss_shmem))
            proc_mem.append((f'{pw},kind="swap"', g.swap))
            if g.pss is not None:
                proc_pss.append((f'{pw},kind="anon"', g.pss.anon))
                proc_pss.append((f'{pw},kind="file"', g.pss.file))
                proc_pss.append((f'{pw},kind="shmem"', g.pss.shmem))
    oom = f[c.OOM_KILLS_TOTAL.name]
    for (workload, process), count in sorted(oom_kill_series(snapshot).items()):
        oom.add((*workload.labels(), process), count)

    out: list[Family] = list(f.values())
    if snapshot.node_memory is not None:
        total, available = Family(c.NODE_MEMORY_TOTAL_BYTES), Family(c.NODE_MEMORY_AVAILABLE_BYTES)
        total.add((), snapshot.node_memory[0])
        available.add((), snapshot.node_memory[1])
        out.extend([total, available])
    for section in sections:
        out.extend(section(snapshot))
    success = Family(c.COLLECTOR_SUCCESS)
    duration = Family(c.COLLECTOR_DURATION_SECONDS)
    for r in snapshot.collectors:
        success.add((r.name,), 1.0 if r.success else 0.0)
        duration.add((r.name,), r.duration_seconds)
    build = Family(c.BUILD_INFO)
    build.add((__version__,), 1.0)
    out.extend([success, duration, build, *self_process_families()])
    return out


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


_fd_count: list[float] = [0.0, -1e18]  # count, when counted


def _open_fds() -> int:
    # Listing /proc/self/fd costs milliseconds with the ~1,000 kernel files the collectors
    # keep open: count at most every 10 s.
    now = time.monotonic()
    if now - _fd_count[1] > 10:
        _fd_count[:] = [len(os.listdir("/proc/self/fd")), now]
    return int(_fd_count[0])


def self_process_families() -> list[Family]:
    """The exporter's own RSS, CPU, fds and start time (its memory must stay bounded)."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in
                    Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
        fds = _open_fds()
    except (OSError, StopIteration, IndexError):
        return []
    out = []
    for spec, value in (
        (c.SELF_RESIDENT_MEMORY_BYTES, int(stat[21]) * _PAGE),
        (c.SELF_CPU_SECONDS_TOTAL, (int(stat[11]) + int(stat[12])) / _TICKS),
        (c.SELF_OPEN_FDS, fds),
        (c.SELF_START_TIME_SECONDS, boot + int(stat[19]) / _TICKS),
    ):
        fam = Family(spec)
        fam.add((), value)
        out.append(fam)
    return out


def oom_kill_series(snapshot: Snapshot) -> dict[tuple[Workload, str], int]:
    """The kills counted, plus a 0 for every process name now running in each pod: a
    counter that appears at 1 hides its first increase from rate() and increase()."""
    series: dict[tuple[Workload, str], int] = {}
    pods = {ws.ref.pod_uid: ws.workload for ws in snapshot.workloads if ws.ref.is_pod_level}
    for ws in snapshot.workloads:
        owner = pods.get(ws.ref.pod_uid) if ws.ref.pod_uid else ws.workload
        if owner is None:
            continue
        for g in ws.processes:
            series[(owner, g.name)] = 0
    series.update(snapshot.oom_kills)
    return series


def format_value(v: float) -> str:
    """Integers as integers (byte counts read better), other floats shortest round-trip."""
    if isinstance(v, int):
        return str(v)
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _escape_label(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def encode_families(families: Iterable[Family], openmetrics: bool = False) -> bytes:
    """Prometheus text format 0.0.4, or OpenMetrics 1.0 (counter families named without
    ``_total``, a trailing ``# EOF``). Empty families are left out."""
    out: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        spec = fam.spec
        sample_name = spec.name
        family_name = spec.family if openmetrics else spec.name
        out.append(f"# HELP {family_name} {_escape_help(spec.help)}\n"
                   f"# TYPE {family_name} {spec.type if spec.type != 'info' else 'gauge'}\n")
        for pairs, value in fam.samples:
            if pairs:
                out.append(f"{sample_name}{{{pairs}}} {format_value(value)}\n")
            else:
                out.append(f"{sample_name} {format_value(value)}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()


def encode(families: list[Family], accept: str | None) -> tuple[bytes, str]:
    """Prometheus text by default; OpenMetrics when the scraper asks for it."""
    if accept and "application/openmetrics-text" in accept:
        return encode_families(families, openmetrics=True), OPENMETRICS_CONTENT_TYPE
    return encode_families(families), TEXT_CONTENT_TYPE
