"""Snapshot -> metric families, one small function per family group, in one table
(``RENDERERS``, the exposition order). Each function renders one field of the join's
``Snapshot``: the only road from a source's data to the exposition. Label names come from
the catalogue's specs; label values from its enums."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from exporter import __version__
from exporter import catalog as c
from exporter.exposition.encode import Family, escape_label, extend, label_pairs
from exporter.exposition.join import GpuUse, Snapshot, VllmView, WorkloadSnapshot
from exporter.model import Workload

Renderer = Callable[[Snapshot], Iterable[Family]]


def _w(ws: WorkloadSnapshot) -> str:
    """A workload's three labels, rendered once per scrape (not once per sample)."""
    return label_pairs(c.WORKLOAD_LABELS, ws.workload.labels())


def _last(spec: c.MetricSpec) -> str:
    return spec.labels[-1]


# The hot loops below append pre-rendered label pairs directly (thousands of samples per
# scrape on a busy node): a workload's labels once, then the last label by its name in
# the spec. Values from the catalogue's enums need no escaping; the kernel's keys do.
_KIND, _EVENT, _LEVEL = _last(c.MEMORY_BYTES), _last(c.MEMORY_EVENTS_TOTAL), _last(
    c.MEMORY_PRESSURE_SECONDS_TOTAL)
_MOUNT, _PROC_KIND, _PSS_KIND = _last(c.TMPFS_USED_BYTES), _last(c.PROCESS_MEMORY_BYTES), _last(
    c.PROCESS_MEMORY_PSS_BYTES)


def memory_families(snapshot: Snapshot) -> list[Family]:
    limit, usage, working_set = (Family(c.MEMORY_LIMIT_BYTES), Family(c.MEMORY_USAGE_BYTES),
                                 Family(c.MEMORY_WORKING_SET_BYTES))
    kinds, unreclaimable, peak = (Family(c.MEMORY_BYTES), Family(c.MEMORY_UNRECLAIMABLE_BYTES),
                                  Family(c.MEMORY_PEAK_BYTES))
    events, pressure, swap = (Family(c.MEMORY_EVENTS_TOTAL),
                              Family(c.MEMORY_PRESSURE_SECONDS_TOTAL), Family(c.MEMORY_SWAP_BYTES))
    high, low, min_ = (Family(c.MEMORY_HIGH_BYTES), Family(c.MEMORY_LOW_BYTES),
                       Family(c.MEMORY_MIN_BYTES))
    for ws in snapshot.workloads:
        m = ws.memory
        if m is None:
            continue
        w = _w(ws)
        limit.samples.append((w, m.limit))
        usage.samples.append((w, m.usage))
        working_set.samples.append((w, m.working_set))
        unreclaimable.samples.append((w, m.unreclaimable))
        for kind in c.MEMORY_KINDS:
            if kind in m.kinds:
                kinds.samples.append((f'{w},{_KIND}="{kind}"', m.kinds[kind]))
        for event, count in sorted(m.events.items()):
            events.samples.append((f'{w},{_EVENT}="{escape_label(event)}"', count))
        for level, seconds in sorted(m.pressure.items()):
            pressure.samples.append((f'{w},{_LEVEL}="{escape_label(level)}"', seconds))
        if m.swap is not None:
            swap.samples.append((w, m.swap))
        for family, value in ((high, m.high), (min_, m.min), (low, m.low)):
            if value is not None:
                family.samples.append((w, value))
        # The window maximum can never be below what we just read.
        peak.samples.append((w, max(ws.peak or 0, m.usage)))
    return [limit, usage, working_set, kinds, unreclaimable, peak, events, pressure, swap,
            high, min_, low]


def tmpfs_families(snapshot: Snapshot) -> list[Family]:
    used, size = Family(c.TMPFS_USED_BYTES), Family(c.TMPFS_SIZE_BYTES)
    orphaned = Family(c.TMPFS_ORPHANED_BYTES)
    for ws in snapshot.workloads:
        w = _w(ws) if ws.tmpfs or ws.tmpfs_orphaned else ""
        for t in ws.tmpfs:
            tw = f'{w},{_MOUNT}="{escape_label(t.mount)}"'
            used.samples.append((tw, t.used))
            size.samples.append((tw, t.size))
        for mount, n in sorted(ws.tmpfs_orphaned.items()):
            orphaned.samples.append((f'{w},{_MOUNT}="{escape_label(mount)}"', n))
    return [used, size, orphaned]


def process_families(snapshot: Snapshot) -> list[Family]:
    memory, pss, count = (Family(c.PROCESS_MEMORY_BYTES), Family(c.PROCESS_MEMORY_PSS_BYTES),
                          Family(c.PROCESS_COUNT))
    for ws in snapshot.workloads:
        w = _w(ws) if ws.processes else ""
        for g in ws.processes:
            # process="..." rendered once per group, then one label per sample
            pw = extend(w, c.PROCESS_COUNT.labels[len(c.WORKLOAD_LABELS):], (g.name,))
            count.samples.append((pw, g.count))
            for kind, value in g.memory_by_kind():
                memory.samples.append((f'{pw},{_PROC_KIND}="{kind}"', value))
            if g.pss is not None:
                for kind, value in g.pss.by_kind():
                    pss.samples.append((f'{pw},{_PSS_KIND}="{kind}"', value))
    return [memory, pss, count]


def oom_kill_series(snapshot: Snapshot) -> dict[tuple[Workload, str], int]:
    """The kills counted, plus a 0 for every process name now running in each pod: a
    counter that appears at 1 hides its first increase from rate() and increase()."""
    series: dict[tuple[Workload, str], int] = {}
    pod_of = snapshot.pod_of()
    for ws in snapshot.workloads:
        owner = pod_of.get(ws.ref.path)
        if owner is not None:
            for g in ws.processes:
                series[(owner, g.name)] = 0
    series.update(snapshot.oom_kills)
    return series


def oom_families(snapshot: Snapshot) -> list[Family]:
    oom = Family(c.OOM_KILLS_TOTAL)
    for (workload, process), count in sorted(oom_kill_series(snapshot).items()):
        oom.add((*workload.labels(), process), count)
    return [oom]


def node_families(snapshot: Snapshot) -> list[Family]:
    if snapshot.node_memory is None:
        return []
    total, available = Family(c.NODE_MEMORY_TOTAL_BYTES), Family(c.NODE_MEMORY_AVAILABLE_BYTES)
    total.add((), snapshot.node_memory.total)
    available.add((), snapshot.node_memory.available)
    return [total, available]


def node_pressure_families(snapshot: Snapshot) -> list[Family]:
    p = snapshot.node_pressure
    if p is None:
        return []
    stall, share = (Family(c.NODE_MEMORY_PRESSURE_SECONDS_TOTAL),
                    Family(c.NODE_MEMORY_PRESSURE_RATIO))
    scanned, reclaimed = (Family(c.NODE_MEMORY_PAGES_SCANNED_TOTAL),
                          Family(c.NODE_MEMORY_PAGES_RECLAIMED_TOTAL))
    for level, s in p.stalls.items():
        stall.add((level,), s.total_seconds)
        for window, ratio in s.averages.items():
            share.add((level, window), ratio)
    for reclaimer, pages in p.scanned.items():
        scanned.add((reclaimer,), pages)
    for reclaimer, pages in p.reclaimed.items():
        reclaimed.add((reclaimer,), pages)
    out = [stall, share, scanned, reclaimed]
    if p.oom_kills is not None:
        kills = Family(c.NODE_OOM_KILLS_TOTAL)
        kills.add((), p.oom_kills)
        out.append(kills)
    return out


def gpu_families(snapshot: Snapshot) -> list[Family]:
    gpu: GpuUse | None = snapshot.gpu
    total, used = Family(c.GPU_MEMORY_TOTAL_BYTES), Family(c.GPU_MEMORY_USED_BYTES)
    per = Family(c.PROCESS_GPU_MEMORY_BYTES)
    if gpu is None:
        return [total, used, per]
    for d in gpu.devices:
        total.add((d.gpu, d.uuid), d.total_bytes)
        used.add((d.gpu, d.uuid), d.used_bytes)
    for (w, process, index, uuid), value in sorted(gpu.processes.items()):
        per.add((*w.labels(), process, index, uuid), value)
    return [total, used, per]


def vllm_families(snapshot: Snapshot) -> list[Family]:
    up = Family(c.VLLM_UP)
    cap_bytes, cap_blocks = (Family(c.VLLM_KV_CACHE_CAPACITY_BYTES),
                             Family(c.VLLM_KV_CACHE_CAPACITY_BLOCKS))
    usage, prefix = Family(c.VLLM_KV_CACHE_USAGE_RATIO), Family(c.VLLM_PREFIX_CACHE_BLOCKS)
    requests, preemptions = Family(c.VLLM_REQUESTS), Family(c.VLLM_PREEMPTIONS_TOTAL)
    synced, lost = Family(c.VLLM_KV_EVENTS_SYNCED), Family(c.VLLM_KV_EVENTS_LOST_TOTAL)
    seen: set[Workload] = set()
    for v in snapshot.vllm:
        w = label_pairs(c.WORKLOAD_LABELS, v.workload.labels())
        if v.workload not in seen:  # one up series per workload
            seen.add(v.workload)
            up.add_to(w, 1.0 if v.stats is not None else 0.0)
        if v.stats is None:
            continue
        for e in v.stats.engines:
            for medium, cap in sorted(e.capacity.items()):
                if cap.bytes is not None:
                    cap_bytes.add_to(w, cap.bytes, e.model_name, e.engine, medium)
                if cap.blocks is not None:
                    cap_blocks.add_to(w, cap.blocks, e.model_name, e.engine, medium)
            for medium, ratio in sorted(e.usage_ratio.items()):
                usage.add_to(w, ratio, e.model_name, e.engine, medium)
            for state, n in sorted(e.requests.items()):
                requests.add_to(w, n, e.model_name, e.engine, state)
            if e.preemptions_total is not None:
                preemptions.add_to(w, e.preemptions_total, e.model_name, e.engine)
        _kv_events(prefix, synced, lost, w, v)
    return [up, cap_bytes, cap_blocks, usage, prefix, requests, preemptions, synced, lost]


def _kv_events(prefix: Family, synced: Family, lost: Family, w: str, v: VllmView) -> None:
    """KV-event series of one vLLM: an engine's model is the one its /metrics names."""
    assert v.stats is not None
    engines = {e.engine: e.model_name for e in v.stats.engines}
    first = v.stats.engines[0].model_name if v.stats.engines else ""
    for (engine, medium), n in sorted(v.prefix_blocks.items()):
        prefix.add_to(w, n, engines.get(engine) or first, engine, medium)
    for (engine, medium), ok in sorted(v.kv_synced.items()):
        synced.add_to(w, 1.0 if ok else 0.0, engines.get(engine) or first, engine, medium)
    for (engine, reason), n in sorted(v.kv_lost.items()):
        lost.add_to(w, n, engines.get(engine) or first, engine, reason)


def health_families(snapshot: Snapshot) -> list[Family]:
    success, duration = Family(c.COLLECTOR_SUCCESS), Family(c.COLLECTOR_DURATION_SECONDS)
    for r in snapshot.collectors:
        success.add((r.name,), 1.0 if r.success else 0.0)
        duration.add((r.name,), r.duration_seconds)
    degraded = Family(c.COLLECTOR_DEGRADED)
    for collector, reason in snapshot.degraded:
        degraded.add((collector, reason), 1.0)
    build = Family(c.BUILD_INFO)
    build.add((__version__,), 1.0)
    return [success, degraded, duration, build]


# Exposition order (the golden files pin it).
RENDERERS: tuple[Renderer, ...] = (
    memory_families, tmpfs_families, process_families, oom_families, node_families,
    node_pressure_families, gpu_families, vllm_families, health_families,
)


def render(snapshot: Snapshot) -> list[Family]:
    return [fam for renderer in RENDERERS for fam in renderer(snapshot)]
