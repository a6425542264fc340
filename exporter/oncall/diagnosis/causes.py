"""The likely causes of what grows (a stale /dev/shm, vLLM's KV-offload tier, the
multimodal cache, pinned host memory, an anon leak, kernel memory), ranked by the growth
each explains, and the limit advice."""

from __future__ import annotations

import math

from exporter.catalog import KIND_KERNEL, KIND_SHMEM, MEDIUM_CPU
from exporter.oncall.diagnosis.evidence import CgroupEvidence, Evidence, Trend
from exporter.oncall.diagnosis.growth import in_scope, rate_of
from exporter.oncall.diagnosis.verdict import (
    AT_RISK_HORIZON,
    LIMIT_MARGIN,
    MIN_STALE_SHM,
    VLLM_PROCESS_PREFIXES,
    Cause,
    Closeness,
    Growth,
)
from exporter.oncall.units import DAY, GiB, MiB, fmt_bytes, fmt_duration, fmt_rate, where


def _is_vllm(process: str) -> bool:
    return process.startswith(VLLM_PROCESS_PREFIXES)


def runbook(base: str, alert: str) -> str:
    return f"{base.rstrip('/')}/{alert}.md"


def causes_of(ev: Evidence, cg: CgroupEvidence, close: Closeness, growth: list[Growth],
            sustained: bool, thr: float, base: str) -> list[Cause]:
    # (weight, cause): the weight is the growth the cause explains (bytes/s); causes are
    # ranked by it, and one explaining under a fifth of the growth is dropped (a step in
    # /dev/shm beside an anon ramp is not the story). Causes that kill without growth
    # (a KV tier that cannot fit) weigh infinitely; stale files are kept at any rate.
    causes: list[tuple[float, Cause]] = []
    u_rate = rate_of(cg.unreclaimable, sustained) or 0.0

    def rate(t: Trend | None) -> float:
        return max(0.0, rate_of(t, sustained) or 0.0)
    grows = {(g.what, g.name) for g in growth}
    shmem_grows = ("kind", KIND_SHMEM) in grows
    tmpfs = list(ev.tmpfs)  # pod-level series: the pod's mounts, shared by its containers
    kv_cpu = [k for k in ev.kv if k.medium == MEDIUM_CPU and k.capacity_bytes
              and in_scope(k.container, cg.container)]

    stale = [t for t in tmpfs if t.orphaned is not None and t.orphaned.now >= MIN_STALE_SHM]
    for t in stale:
        assert t.orphaned is not None
        causes.append((max(rate(t.orphaned), 1.0), Cause(
            "stale_shm", f"files left in {t.mount} by a dead process",
            f"{fmt_bytes(t.orphaned.now)} of {t.mount} belongs to files no live process of "
            f"the pod has open or mapped (a killed container's message queues, "
            f"multimodal cache or KV-offload region). They stay charged to the pod: a "
            f"container restart keeps the pod's {t.mount}.",
            (), runbook(base, "HeadroomStaleSharedMemory"))))

    for k in kv_cpu:
        assert k.capacity_bytes is not None
        pending = k.capacity_bytes * (1 - min(1.0, max(0.0, k.usage_ratio or 0.0)))
        shm_rate = max((rate_of(t.used, sustained) or 0.0) for t in tmpfs) if tmpfs else 0.0
        worker_shm = any(_is_vllm(p.process) and (rate_of(p.shmem, sustained) or 0) > thr
                         for p in ev.processes if in_scope(p.container, cg.container))
        wont_fit = pending > close.headroom
        if wont_fit or shmem_grows or shm_rate > thr or worker_shm:
            use = f"{(k.usage_ratio or 0) * 100:.0f}%" if k.usage_ratio is not None else "?"
            weight = math.inf if wont_fit else max(shm_rate, rate(cg.kinds.get(KIND_SHMEM)))
            causes.append((weight, Cause(
                "kv_offload", "vLLM's CPU KV-offload tier fills",
                f"the CPU KV-offload tier holds {fmt_bytes(k.capacity_bytes)} "
                f"({use} in use; /dev/shm/vllm_offload_*.mmap); "
                f"{fmt_bytes(pending)} still to fill against {fmt_bytes(close.headroom)} of "
                "headroom" + (": the pod is killed when the tier fills, however slowly"
                              if wont_fit else "") + ". Where the tier is pinned host "
                "memory, torch's allocator rounds each buffer up to a power of two: host "
                "memory can reach up to twice the size set.",
                ("--kv-offloading-size",), runbook(base, "HeadroomKVOffloadWillNotFit"))))

    shm_mounts = [t for t in tmpfs if (rate_of(t.used, sustained) or 0.0) > thr]
    live_shm = [t for t in shm_mounts if t.orphaned is None
                or (rate_of(t.orphaned, sustained) or 0.0) <= thr]
    if live_shm and not kv_cpu and not stale:
        causes.append((rate(live_shm[0].used), Cause(
            "mm_shm_cache", "shared memory in /dev/shm grows (multimodal cache?)",
            f"{', '.join(t.mount for t in live_shm)} grows "
            f"{fmt_rate(rate_of(live_shm[0].used, sustained))} while its files are held by "
            "live processes. vLLM's multimodal processor cache of type shm lives there, one "
            "per API server and engine: mm_processor_cache_gb x (api_server_count + "
            "data_parallel_size) in all.",
            ("--mm-processor-cache-gb", "--mm-processor-cache-type",
             "VLLM_MM_INPUT_CACHE_GIB (older vLLM)"),
            runbook(base, "HeadroomSharedMemoryFillingUp"))))

    procs = [g for g in growth if g.what == "process"]
    by_name = {(p.container, p.process): p for p in ev.processes}
    for g in procs[:2]:
        p = by_name[(g.container, g.name)]
        anon_r = rate_of(p.anon, sustained) or 0.0
        shm_r = rate_of(p.shmem, sustained) or 0.0
        if shm_r > thr and shm_r >= anon_r and not shm_mounts and not kv_cpu:
            causes.append((shm_r, Cause(
                "pinned_host", f"{g.name} maps more and more shared memory (pinned host "
                "memory?)",
                f"{g.name} grows {fmt_rate(shm_r)} of mapped shmem with no tmpfs growing: "
                "CUDA pinned host memory is counted as shmem, and torch rounds pinned "
                "buffers up to a power of two (up to 1.9x what was asked).",
                ("--kv-offloading-size", "--cpu-offload-gb"),
                runbook(base, "HeadroomMemoryFillingUp"))))
        elif anon_r > thr:
            speed = "slow " if anon_r * DAY < 24 * GiB else ""
            title = (f"{speed}anon leak in vLLM's {g.name}" if _is_vllm(g.name)
                     else f"{speed}anon leak in {g.name} (not a vLLM process)")
            prefix = [k for k in ev.kv if k.prefix_blocks is not None
                      and (rate_of(k.prefix_blocks, sustained) or 0.0) > 0]
            settings: tuple[str, ...] = ("--enable-prefix-caching",) if prefix else ()
            causes.append((anon_r, Cause(
                "anon_leak", title,
                f"{g.name} ({where(g.container)}) grows {fmt_rate(anon_r)} of private "
                "memory and does not give it back" + (
                    "; prefix-cache entries grow with it" if prefix else
                    ". No vLLM setting bounds it: plan restarts before the limit and "
                    "report it upstream with the vLLM version" if _is_vllm(g.name) else ""
                ) + ".", settings, runbook(base, "HeadroomMemoryFillingUp"))))

    if ("kind", KIND_KERNEL) in grows:
        causes.append((rate(cg.kinds.get(KIND_KERNEL)), Cause(
            KIND_KERNEL, "kernel memory grows",
            "socket buffers, page tables or slab the kernel cannot free",
            (), runbook(base, "HeadroomHiddenMemoryGrowth"))))
    hidden = [g.rate for g in growth if g.what == "no_owner"]
    if hidden and not causes:
        causes.append((hidden[0], Cause(
            "no_owner", "memory no process owns grows",
            "unmapped files in /dev/shm or an emptyDir of medium Memory, or kernel "
            "memory; `ls -la /dev/shm` in the pod shows the files",
            (), runbook(base, "HeadroomHiddenMemoryGrowth"))))
    floor = 0.2 * u_rate if u_rate > thr else 0.0
    ranked = sorted(causes, key=lambda wc: -wc[0])
    return [c for w, c in ranked if w >= floor or c.code == "stale_shm"]


def _suggested_limit(peak: float) -> float:
    step = GiB if peak >= 8 * GiB else 64 * MiB
    return math.ceil(peak * LIMIT_MARGIN / step) * step


def limit_advice(cg: CgroupEvidence, close: Closeness, killed: bool = False,
                  grew_rate: float | None = None) -> str:
    """The limit that holds the observed peak (and, while it grows, a planning horizon
    of growth): a stopgap, said as one when growth is what kills. After a kill the peak
    is the old limit's (the kernel capped it), so it sizes nothing: the growth does."""
    if killed:
        rate = grew_rate if grew_rate and grew_rate > 0 else close.lasting_rate
        head = (f"the peak before the kill is the {fmt_bytes(cg.limit)} limit itself "
                "(the kernel capped it): it does not say what the pod needs")
        if not rate or rate <= 0:
            return head + "; size the limit from a run without kills"
        day = cg.limit + rate * DAY
        if day > 4 * cg.limit:
            return (head + f"; at {fmt_rate(rate)} no limit holds a day of it: fix the "
                    "growth (restart before the limit meanwhile)")
        return (head + f"; a limit of {fmt_bytes(_suggested_limit(day))} holds one day "
                f"of growth at {fmt_rate(rate)}: a stopgap, the growth must be fixed")
    peak = max(cg.peak_unreclaimable_1d or 0.0, close.unreclaimable)
    growing = close.lasting_rate is not None and close.time_to_limit_s is not None
    need = peak + (close.lasting_rate or 0.0) * AT_RISK_HORIZON if growing else peak
    if growing and need > 4 * cg.limit:  # a climb of MiB/s: no limit holds a week of it
        return (f"at {fmt_rate(close.lasting_rate)} no limit holds "
                f"{fmt_duration(AT_RISK_HORIZON)} of this growth: fix the growth (restart "
                "before the limit meanwhile)")
    limit = _suggested_limit(need)
    what = (f"the last day's unreclaimable peak ({fmt_bytes(peak)})" if not growing else
            f"the peak ({fmt_bytes(peak)}) plus {fmt_duration(AT_RISK_HORIZON)} of growth "
            f"at {fmt_rate(close.lasting_rate)}")
    if limit <= cg.limit and not growing:
        return (f"the {fmt_bytes(cg.limit)} limit holds {what} with "
                f"{LIMIT_MARGIN - 1:.0%} for page cache")
    line = (f"a limit of {fmt_bytes(limit)} (now {fmt_bytes(cg.limit)}) holds {what} "
            f"with {LIMIT_MARGIN - 1:.0%} for page cache")
    if growing:
        line += ": a stopgap, the growth itself must be fixed"
    return line
