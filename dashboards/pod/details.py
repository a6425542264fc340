"""The pod dashboard below the first screen: memory by cgroup and kind, processes, vLLM's
KV and prefix cache and requests; kernel signals and bookkeeping in collapsed rows."""

from __future__ import annotations

from dashboards.knobs import Knobs
from dashboards.names import RULE as r
from dashboards.panels import Panel, row, stat, timeseries
from dashboards.pod.queries import (
    ATTRIBUTED_KINDS,
    EVENTS,
    KV_BLOCKS,
    KV_USAGE,
    LINE_STYLES,
    POD_LIMIT,
    PREEMPTIONS,
    PREFIX_BLOCKS,
    RAW,
    RSS_KINDS,
    STACKED_KINDS,
    UNRECL,
    P,
    cgroup_rule,
    kinds_stack,
    memory_lines,
    pod_kind,
    pod_rule,
)
from dashboards.selectors import (
    ANY_CONTAINER,
    CGROUPS,
    CONTAINERS,
    POD_CGROUP,
    RATE,
    W,
    by,
    metric,
    name_pod_cgroup,
    re_,
)
from dashboards.style import (
    DASHED,
    fixed,
    kind_colours,
    legend_only,
    limit_style,
    override,
    override_regex,
    thresholds,
)
from exporter import catalog as c


def details(k: Knobs) -> list[Panel]:
    """The rows below the first screen; the rarely needed ones collapsed."""
    return [
        # --- cgroups and kinds -------------------------------------------------------------
        row("Memory by cgroup and kind"),
        timeseries(
            "Pod cgroup: memory against the limit",
            "The pod-level cgroup (container=\"\"): it contains every container, plus memory "
            "charged to the pod that no live container holds. Unreclaimable is what reaches "
            "the limit; usage and working set include page cache the kernel takes back.",
            memory_lines(POD_CGROUP, ""),
            unit="bytes", legend_table=True, overrides=LINE_STYLES, min_zero=True,
        ),
        timeseries(
            "Pod cgroup: memory by kind",
            "Usage of the pod cgroup by kind, stacked (the kinds sum to usage). Warm: what "
            "the kernel cannot reclaim (anon, shmem, kernel, unaccounted); cool: page cache. "
            "Page cache shrinking while anon or shmem grows is the squeeze before the kill.",
            [*kinds_stack(POD_CGROUP, "max"), (f"max({POD_LIMIT})", "limit")],
            unit="bytes", stack=True, legend_table=True, min_zero=True,
            overrides=[*kind_colours(), limit_style("limit")],
        ),
        timeseries(
            "Containers: memory against the limit",
            "Each selected container's effective limit (its own or the pod's, whichever is "
            "smaller), peak, usage, working set and unreclaimable memory.",
            [(e, "{{container}} " + leg) for e, leg in memory_lines(CONTAINERS, "")],
            unit="bytes", legend_table=True, overrides=LINE_STYLES, min_zero=True,
        ),
        timeseries(
            "Containers: memory by kind",
            "The selected containers, summed, by kind (stacked as on the pod cgroup panel). "
            "The pod cgroup minus this is memory charged to the pod but to no live container.",
            kinds_stack(CONTAINERS, "sum"),
            unit="bytes", stack=True, legend_table=True, min_zero=True, overrides=kind_colours(),
        ),
        timeseries(
            "tmpfs used against the pod's headroom",
            "The pod's tmpfs mounts (/dev/shm, emptyDir medium Memory): bytes used, against "
            "the pod cgroup's headroom (what the files can still grow by before the kill). The "
            "mount's size is in the legend only: a /dev/shm sized like the node would flatten "
            "the axis. Used bytes are shmem charged to the pod and outlive container restarts.",
            [
                (f"max by (mount) ({metric(c.TMPFS_USED_BYTES, *RAW)})", "{{mount}} used"),
                (f"max by (mount) ({metric(c.TMPFS_SIZE_BYTES, *RAW)})", "{{mount}} size"),
                (f"max({pod_rule(r.HEADROOM, POD_CGROUP)})", "pod headroom"),
            ],
            unit="bytes", legend_table=True, min_zero=True,
            overrides=[legend_only(".* size$"),
                       override("pod headroom", color=fixed("green"), custom__lineWidth=2)],
            runbooks=k.runbooks("HeadroomSharedMemoryFillingUp", "HeadroomStaleSharedMemory"),
        ),
        timeseries(
            f"Baseline: unreclaimable floor ({k.baseline}) vs now",
            f"Unreclaimable memory now and its baseline, the lowest value over {k.baseline} "
            f"({r.UNRECLAIMABLE_BASELINE}); the working-set baseline for comparison. Diurnal "
            "load returns to the same floor; a floor that steps up every night is growth. "
            "For a pod younger than the window, the floor since it started.",
            [
                (cgroup_rule(r.UNRECLAIMABLE), "{{container}} unreclaimable"),
                (cgroup_rule(r.UNRECLAIMABLE_BASELINE), "{{container}} unreclaimable baseline"),
                (cgroup_rule(r.WORKING_SET_BASELINE), "{{container}} working set baseline"),
            ],
            unit="bytes", legend_table=True,
            overrides=[override_regex(".*baseline$", custom__lineStyle=DASHED)],
        ),
        timeseries(
            "Growth since baseline, by kind",
            f"Each kind of the pod cgroup minus its own lowest value over {k.baseline} (for a "
            "pod younger than that, since it started): which kind grew. anon up: a process "
            "leaks; shmem up with no process's rss_shmem up: /dev/shm files or pinned memory "
            "no process maps; file going negative: page cache squeezed out.",
            [(f"max by (kind) ({k.growth_since_baseline(pod_kind(kind))})", kind)
             for kind in STACKED_KINDS],
            unit="bytes", legend_table=True, overrides=kind_colours(),
        ),
        # --- processes -------------------------------------------------------------------------
        row("Processes"),
        timeseries(
            "Memory per process (RSS)",
            "Resident memory of each process name in the selected containers (summed over "
            "processes of that name) from /proc/PID/status: rss_anon, rss_shmem, rss_file. "
            "Shared pages count once per process that maps them, so the stack can exceed "
            "the cgroup; see PSS.",
            [(
                f"sum by (process, kind) (max by {by(*P, 'kind')} "
                f"({metric(c.PROCESS_MEMORY_BYTES, *RAW, CONTAINERS, re_('kind', RSS_KINDS))}))",
                "{{process}} {{kind}}",
            )],
            unit="bytes", stack=True, legend_table=True, h=10,
        ),
        timeseries(
            "Memory per process (PSS)",
            "Proportional set size per process name (anon, shmem, file) from smaps_rollup: "
            "shared pages split between the processes that map them, so this stack adds up. "
            "Read at a low rate and skipped above the exporter's size gate.",
            [(
                f"sum by (process, kind) (max by {by(*P, 'kind')} "
                f"({metric(c.PROCESS_MEMORY_PSS_BYTES, *RAW, CONTAINERS)}))",
                "{{process}} {{kind}}",
            )],
            unit="bytes", stack=True, legend_table=True, h=10,
        ),
        timeseries(
            f"Growth since baseline ({k.baseline}), by process",
            f"Anonymous and mapped shared memory (RSS) of each process name of the selected "
            f"containers minus its lowest value over {k.baseline} (since start for a younger "
            "pod): which process grew (EngineCore, Worker_TPn leaks show here; APIServer for "
            "the multimodal cache).",
            [(
                f"sum by (process, kind) ({k.growth_since_baseline(metric(c.PROCESS_MEMORY_BYTES, *RAW, CONTAINERS, re_('kind', ATTRIBUTED_KINDS)))})",  # noqa: E501
                "{{process}} {{kind}}",
            )],
            unit="bytes", legend_table=True,
        ),
        timeseries(
            "GPU memory per process",
            "GPU memory each process name uses, per GPU, from NVML. Not charged to the "
            "cgroup, but pinned host buffers that mirror it are (shmem).",
            [(
                f"sum by (process, gpu) (max by {by(*P, 'gpu', 'uuid')} "
                f"({metric(c.PROCESS_GPU_MEMORY_BYTES, *RAW, CONTAINERS)}))",
                "{{process}} GPU {{gpu}}",
            )],
            unit="bytes", stack=True, min_zero=True,
        ),
        # --- vLLM detail -------------------------------------------------------------------------
        row("vLLM: KV cache, prefix cache, requests"),
        timeseries(
            "KV cache blocks in use vs capacity",
            "KV-cache blocks in use (usage ratio x capacity) and the capacity, per medium "
            "(gpu; cpu for the offload tier) and engine. GPU blocks live in GPU memory; CPU "
            "blocks are pinned host memory charged to the pod as shmem.",
            [
                (f"max by (engine, medium) ({KV_USAGE})\n* on (engine, medium)\n"
                 f"max by (engine, medium) ({KV_BLOCKS})", "{{medium}} in use (engine {{engine}})"),
                (f"max by (engine, medium) ({KV_BLOCKS})",
                 "{{medium}} capacity (engine {{engine}})"),
            ],
            w=6, unit="short", legend_table=True, overrides=[limit_style(".*capacity.*")],
            min_zero=True,
        ),
        timeseries(
            "Prefix-cache entries vs capacity",
            "Live prefix-cache blocks counted from vLLM's KV cache events, per medium, "
            "against the KV capacity in blocks; absent when KV events are off.",
            [
                (f"max by (engine, medium) ({PREFIX_BLOCKS})",
                 "{{medium}} prefix-cache blocks (engine {{engine}})"),
                (f"max by (engine, medium) ({KV_BLOCKS})",
                 "{{medium}} capacity (engine {{engine}})"),
            ],
            w=6, unit="short", legend_table=True, overrides=[limit_style(".*capacity.*")],
            min_zero=True,
        ),
        timeseries(
            "Requests: running and waiting",
            "vLLM requests by state (running, waiting; swapped on V0). Kills with nothing "
            "running point at growth unrelated to load.",
            [(
                f"sum by (state) (max by {by(*W, 'model_name', 'engine', 'state')} "
                f"({metric(c.VLLM_REQUESTS, *RAW, CONTAINERS)}))",
                "{{state}}",
            )],
            unit="short", min_zero=True, w=6,
        ),
        timeseries(
            "Preemptions",
            "Requests the vLLM scheduler preempted per second: KV cache pressure (the GPU "
            "tier is full).",
            [(f"sum by (engine) (rate({PREEMPTIONS}[{RATE}]))", "engine {{engine}}")],
            unit="reqps", min_zero=True, w=6,
        ),
        # --- collapsed: kernel signals ---------------------------------------------------------
        row("Pressure, memory events and swap", collapsed=True),
        timeseries(
            "Memory pressure (PSI stall time)",
            "Share of time tasks stalled on memory (PSI memory.pressure, cgroup v2): some = at "
            "least one task, full = all tasks. It rises as reclaim at the limit stalls "
            "allocations, before the OOM kill.",
            [(
                name_pod_cgroup(
                    f"max by {by(*W, 'level')} "
                    f"(rate({metric(c.MEMORY_PRESSURE_SECONDS_TOTAL, *RAW, CGROUPS)}[{RATE}]))"
                ),
                "{{container}} {{level}}",
            )],
            unit="percentunit", min_zero=True, w=8,
        ),
        timeseries(
            "Memory events (reclaim at the limit, OOM)",
            "memory.events per interval: max = the cgroup hit its limit and the kernel "
            "reclaimed (memory.failcnt on v1), high = over memory.high, oom / oom_kill = the "
            "OOM killer ran (on v1 only in the victim's own cgroup).",
            [(
                name_pod_cgroup(
                    f"round(max by {by(*W, 'event')} (increase("
                    f"{metric(c.MEMORY_EVENTS_TOTAL, *RAW, CGROUPS, EVENTS)}"
                    f"[{RATE}]))) > 0"
                ),
                "{{container}} {{event}}",
            )],
            unit="short", bars=True, min_zero=True, w=8,
            runbooks=k.runbooks("HeadroomMemoryReclaimAtLimit"),
        ),
        timeseries(
            "Swap in use",
            "Swap the cgroups use: memory that would otherwise count as unreclaimable.",
            [(
                name_pod_cgroup(f"max by {by(*W)} ({metric(c.MEMORY_SWAP_BYTES, *RAW, CGROUPS)})"),
                "{{container}}",
            )],
            unit="bytes", min_zero=True, w=8,
        ),
        # --- collapsed: bookkeeping ------------------------------------------------------------
        row("Processes by name, charges outside containers, vLLM /metrics read", collapsed=True),
        timeseries(
            "Processes by name",
            "How many processes of each name run in the selected containers: a worker that "
            "died or respawned shows here.",
            [(
                f"sum by (process) (max by {by(*P)} ({metric(c.PROCESS_COUNT, *RAW, CONTAINERS)}))",
                "{{process}}",
            )],
            unit="short", min_zero=True, w=8,
        ),
        timeseries(
            "Charged to the pod outside its containers",
            "Unreclaimable kinds of the pod cgroup minus the sum over its live containers: "
            "memory charged to the pod that no running container holds, typically pages "
            "(/dev/shm files, kernel objects) of a killed container, reparented to the pod.",
            [(
                f"max by (kind) ({metric(c.MEMORY_BYTES, *RAW, POD_CGROUP, UNRECL)})\n"
                f"- on (kind)\n"
                f"sum by (kind) (max by {by(*W, 'kind')} "
                f"({metric(c.MEMORY_BYTES, *RAW, ANY_CONTAINER, UNRECL)}))",
                "{{kind}}",
            )],
            w=8, unit="bytes", legend_table=True, overrides=kind_colours(),
        ),
        stat(
            "vLLM /metrics read",
            "Whether headroom read this pod's vLLM /metrics on the last scrape: the vLLM "
            "panels are blind while it fails (HeadroomVLLMScrapeFailing).",
            [(f"max by (container) ({metric(c.VLLM_UP, *RAW, CONTAINERS)})", "{{container}}")],
            unit="none", w=8, h=8,
            steps=thresholds(("red", 0), ("green", 1)),
            mappings=[{"type": "value", "options": {
                "0": {"text": "failing", "index": 0},
                "1": {"text": "read", "index": 1},
            }}],
            runbooks=k.runbooks("HeadroomVLLMScrapeFailing"),
        ),
    ]
