"""headroom / pod memory: one pod, read top to bottom at 3 AM.

How far from the limit and when; what the kernel cannot reclaim; what grew since the
baseline, by kind and by process; whether vLLM's KV cache, prefix cache or CPU offload
tier explains it; and whether memory no process accounts for (tmpfs, kernel, leftovers of
an earlier container) is the culprit.

The pod-level cgroup (container="") and the containers are shown apart: the pod cgroup
contains its containers, so stacking both would count memory twice.
"""

from __future__ import annotations

from dashboards.common import (
    BASELINE,
    CGROUPS,
    CONTAINERS,
    DASHED,
    JOB,
    NAMESPACE,
    POD,
    POD_CGROUP,
    RANGE,
    RATE,
    RULES_CONFIG,
    annotation,
    by,
    container_var,
    dashboard,
    eq,
    growth_since_baseline,
    limit_style,
    metric,
    name_pod_cgroup,
    namespace_var,
    override,
    pod_var,
    re_,
    row,
    stat,
    thresholds,
    timeseries,
)
from dashboards.common import CATALOG as c
from dashboards.common import RULE as r

W = ("namespace", "pod", "container")
RAW = (JOB, NAMESPACE, POD)  # a raw series of this pod
ANY_CONTAINER = 'container!=""'
RULES = (NAMESPACE, POD)  # a recording rule (it keeps no job label) of this pod
UNRECLAIMABLE_KINDS = ("anon", "shmem", "kernel", "sock", "unaccounted")
STACKED_KINDS = c.MEMORY_KINDS  # least reclaimable at the bottom
RSS_KINDS = ("rss_anon", "rss_shmem", "rss_file")
ATTRIBUTED_KINDS = ("rss_anon", "rss_shmem")
# Colours of "time to limit" follow the alert's horizons (critical 1h, warning 12h).
FILL_CRITICAL = float(RULES_CONFIG.fill_critical_horizon_s)
FILL_WARNING = float(RULES_CONFIG.fill_warning_horizon_s)


# Selectors used by several panels.
OOM_EVENTS = metric(c.MEMORY_EVENTS_TOTAL, *RAW, POD_CGROUP, eq("event", "oom_kill"))
UNRECL = re_("kind", UNRECLAIMABLE_KINDS)
EVENTS = re_("event", ("high", "max", "oom", "oom_kill", "oom_group_kill"))
PROCESS_ATTRIBUTED_RSS = metric(
    c.PROCESS_MEMORY_BYTES, *RAW, CONTAINERS, re_("kind", ATTRIBUTED_KINDS)
)
KV_USAGE = metric(c.VLLM_KV_CACHE_USAGE_RATIO, *RAW, CONTAINERS)
KV_BLOCKS = metric(c.VLLM_KV_CACHE_CAPACITY_BLOCKS, *RAW, CONTAINERS)
PREFIX_BLOCKS = metric(c.VLLM_PREFIX_CACHE_BLOCKS, *RAW, CONTAINERS)
OFFLOAD_BYTES = metric(c.VLLM_KV_CACHE_CAPACITY_BYTES, *RAW, CONTAINERS, eq("medium", "cpu"))
OFFLOAD_USAGE = metric(c.VLLM_KV_CACHE_USAGE_RATIO, *RAW, CONTAINERS, eq("medium", "cpu"))
PREEMPTIONS = metric(c.VLLM_PREEMPTIONS_TOTAL, *RAW, CONTAINERS)


def pod_kind(kind: str) -> str:
    return metric(c.MEMORY_BYTES, *RAW, POD_CGROUP, eq("kind", kind))


def cgroup_rule(name: str) -> str:
    """A recording rule for the pod cgroup and the selected containers."""
    return name_pod_cgroup(metric(name, *RULES, CGROUPS))


def memory_lines(level: str, legend_prefix: str) -> list[tuple[str, str]]:
    """limit, peak, usage, working set and unreclaimable of one cgroup level."""
    group = by(*W)
    out = []
    for spec, what in (
        (c.MEMORY_LIMIT_BYTES, "limit"),
        (c.MEMORY_PEAK_BYTES, "peak"),
        (c.MEMORY_USAGE_BYTES, "usage"),
        (c.MEMORY_WORKING_SET_BYTES, "working set"),
        (c.MEMORY_UNRECLAIMABLE_BYTES, "unreclaimable"),
    ):
        # max by: one series per cgroup even while two exporter pods overlap.
        out.append((f"max by {group} ({metric(spec, *RAW, level)})", f"{legend_prefix}{what}"))
    return out


def kinds_stack(level: str, aggregate: str) -> list[tuple[str, str]]:
    """One query per kind, in catalog stacking order (Grafana stacks in query order)."""
    return [
        (
            f"{aggregate} (max by {by(*W, 'kind')} "
            f"({metric(c.MEMORY_BYTES, *RAW, level, eq('kind', kind))}))",
            kind,
        )
        for kind in STACKED_KINDS
    ]


LINE_STYLES = [
    limit_style(".*limit$"),
    {
        "matcher": {"id": "byRegexp", "options": ".*unreclaimable$"},
        "properties": [
            {"id": "custom.lineWidth", "value": 3},
            {"id": "color", "value": {"fixedColor": "orange", "mode": "fixed"}},
        ],
    },
    {
        "matcher": {"id": "byRegexp", "options": ".*peak$"},
        "properties": [{"id": "custom.lineStyle", "value": {"dash": [2, 4], "fill": "dot"}}],
    },
]

panels = [
    # --- the answer first ----------------------------------------------------------------
    row("Headroom: how far from the limit, and when"),
    stat(
        "Time to limit",
        "When unreclaimable memory reaches the limit at its current 1h slope "
        f"({r.TIME_TO_LIMIT}), for the pod cgroup and each selected container. "
        "'not growing' means the slope is flat or falling. Red: under 1h (the critical "
        "HeadroomMemoryFillingUp page), orange: under 12h.",
        [(cgroup_rule(r.TIME_TO_LIMIT), "{{container}}")],
        unit="s", w=6,
        steps=thresholds(("red", 0), ("orange", FILL_CRITICAL), ("green", FILL_WARNING)),
        no_value="not growing",
    ),
    stat(
        "Headroom",
        "Limit minus unreclaimable memory: what can still be charged once the kernel has "
        f"reclaimed all page cache ({r.HEADROOM}). The working set overstates use: it "
        "counts active page cache, which the kernel takes back.",
        [(cgroup_rule(r.HEADROOM), "{{container}}")],
        unit="bytes", w=6,
    ),
    stat(
        "Unreclaimable / limit",
        "Share of the limit the kernel cannot reclaim without swap (anon, shmem, kernel). "
        "Orange above 85% (HeadroomMemoryReclaimAtLimit territory), red above 95% "
        "(HeadroomMemoryNearLimit).",
        [(cgroup_rule(r.UNRECLAIMABLE_RATIO), "{{container}}")],
        unit="percentunit", w=4,
        steps=thresholds(("green", 0), ("orange", 0.85), ("red", 0.95)),
    ),
    stat(
        f"Growth since baseline ({BASELINE})",
        f"Rise of the unreclaimable floor (lowest value over {BASELINE}) since the window "
        f"before ({r.UNRECLAIMABLE_BASELINE_RISE}): growth that diurnal load cannot "
        "explain. Needs two windows of data.",
        [(cgroup_rule(r.UNRECLAIMABLE_BASELINE_RISE), "{{container}}")],
        unit="bytes", w=4,
    ),
    stat(
        "OOM kills in range",
        "OOM kills in the pod during the dashboard's time range: the pod cgroup's "
        "memory.events oom_kill (hierarchical: any container) and headroom's own watcher.",
        [
            (
                f"sum(increase({OOM_EVENTS}[{RANGE}]))",
                "cgroup events",
            ),
            (f"sum(increase({metric(c.OOM_KILLS_TOTAL, *RAW)}[{RANGE}]))", "watcher"),
        ],
        unit="short", w=4, instant=True,
        steps=thresholds(("green", 0), ("red", 1)), no_value="0",
    ),
    # --- the pod cgroup --------------------------------------------------------------------
    row("Memory against the limit"),
    timeseries(
        "Pod cgroup: memory against the limit",
        "The pod-level cgroup (container=\"\"): its limit, the peak between scrapes "
        "(bursts the scrape misses), usage, the kubelet's working set, and unreclaimable "
        "memory, the figure that reaches the limit before an OOM kill. A flat working set "
        "over a rising unreclaimable line is page cache being squeezed out.",
        memory_lines(POD_CGROUP, ""),
        unit="bytes", legend_table=True, overrides=LINE_STYLES, min_zero=True,
    ),
    timeseries(
        "Pod cgroup: memory by kind",
        "The pod cgroup's usage split by kind, least reclaimable at the bottom: anon, "
        "shmem (/dev/shm, memory emptyDir, CUDA pinned host memory), kernel, sock, "
        "unaccounted; then page cache (file_active, file_inactive), which the kernel can "
        "reclaim. The kinds sum to usage exactly; the dashed line is the limit.",
        [
            *kinds_stack(POD_CGROUP, "sum"),
            (f"max({metric(c.MEMORY_LIMIT_BYTES, *RAW, POD_CGROUP)})", "limit"),
        ],
        unit="bytes", stack=True, legend_table=True, overrides=[limit_style("^limit$")],
        min_zero=True,
    ),
    timeseries(
        "Containers: memory against the limit",
        "The same lines per selected container: a container with its own limit is "
        "OOM-killed at that limit, whatever the pod cgroup's headroom.",
        memory_lines(CONTAINERS, "{{container}} "),
        unit="bytes", legend_table=True, overrides=LINE_STYLES, min_zero=True,
    ),
    timeseries(
        "Containers: memory by kind",
        "Usage of the selected containers, summed, by kind (stacked as on the pod "
        "cgroup panel). The pod cgroup minus this is memory charged to the pod but to no "
        "live container (see 'Charged to the pod outside its containers').",
        kinds_stack(CONTAINERS, "sum"),
        unit="bytes", stack=True, legend_table=True, min_zero=True,
    ),
    # --- growth -------------------------------------------------------------------------------
    row("Growth since the baseline"),
    timeseries(
        f"Baseline: unreclaimable floor ({BASELINE}) vs now",
        f"Unreclaimable memory now and its baseline, the lowest value over {BASELINE} "
        f"({r.UNRECLAIMABLE_BASELINE}); the working-set baseline for comparison. Diurnal "
        "load returns to the same floor; a floor that steps up every night is growth "
        "(the 3 AM kills). Pod cgroup and selected containers.",
        [
            (cgroup_rule(r.UNRECLAIMABLE), "{{container}} unreclaimable"),
            (cgroup_rule(r.UNRECLAIMABLE_BASELINE), "{{container}} unreclaimable baseline"),
            (cgroup_rule(r.WORKING_SET_BASELINE), "{{container}} working set baseline"),
        ],
        unit="bytes", legend_table=True,
        overrides=[{
            "matcher": {"id": "byRegexp", "options": ".*baseline$"},
            "properties": [{"id": "custom.lineStyle", "value": DASHED}],
        }],
    ),
    timeseries(
        "Growth since baseline, by kind",
        f"Each kind of the pod cgroup minus its own lowest value over {BASELINE} (for a "
        "pod younger than that, since it started): which kind grew. anon up: a process "
        "leaks (see by process); shmem up with no process's rss_shmem up: /dev/shm files "
        "or pinned memory no process maps; file going negative: page cache squeezed out.",
        [
            (
                f"max by (kind) ({growth_since_baseline(pod_kind(kind))})",
                kind,
            )
            for kind in STACKED_KINDS
        ],
        unit="bytes", legend_table=True,
    ),
    timeseries(
        "Growth since baseline, by process",
        f"Anonymous and mapped shared memory (RSS) of each process name of the selected "
        f"containers minus its lowest value over {BASELINE}: which process grew "
        "(EngineCore, Worker_TPn leaks show here; APIServer for the multimodal cache).",
        [
            (
                f"sum by (process, kind) ({growth_since_baseline(PROCESS_ATTRIBUTED_RSS)})",
                "{{process}} {{kind}}",
            )
        ],
        w=24, unit="bytes", legend_table=True,
    ),
    # --- processes -----------------------------------------------------------------------------
    row("Processes"),
    timeseries(
        "Memory per process (RSS)",
        "Resident memory of each process name in the selected containers (summed over "
        "processes of that name) from /proc/PID/status: rss_anon, rss_shmem, rss_file. "
        "Shared pages count once per process that maps them, so the stack can exceed "
        "the cgroup; see PSS.",
        [
            (
                f"sum by (process, kind) (max by {by(*W, 'process', 'kind')} "
                f"({metric(c.PROCESS_MEMORY_BYTES, *RAW, CONTAINERS, re_('kind', RSS_KINDS))}))",
                "{{process}} {{kind}}",
            )
        ],
        unit="bytes", stack=True, legend_table=True, h=10,
    ),
    timeseries(
        "Memory per process (PSS)",
        "Proportional set size per process name (anon, shmem, file) from smaps_rollup: "
        "shared pages split between the processes that map them, so this stack adds up. "
        "Read at a low rate and skipped above the exporter's size gate.",
        [
            (
                f"sum by (process, kind) (max by {by(*W, 'process', 'kind')} "
                f"({metric(c.PROCESS_MEMORY_PSS_BYTES, *RAW, CONTAINERS)}))",
                "{{process}} {{kind}}",
            )
        ],
        unit="bytes", stack=True, legend_table=True, h=10,
    ),
    timeseries(
        "Processes by name",
        "How many processes of each name run in the selected containers: a worker that "
        "died or respawned shows here.",
        [
            (
                f"sum by (process) (max by {by(*W, 'process')} "
                f"({metric(c.PROCESS_COUNT, *RAW, CONTAINERS)}))",
                "{{process}}",
            )
        ],
        unit="short", min_zero=True,
    ),
    timeseries(
        "GPU memory per process",
        "GPU memory each process name uses, per GPU, from NVML. Not charged to the "
        "cgroup, but pinned host buffers that mirror it are (shmem).",
        [
            (
                f"sum by (process, gpu) (max by {by(*W, 'process', 'gpu', 'uuid')} "
                f"({metric(c.PROCESS_GPU_MEMORY_BYTES, *RAW, CONTAINERS)}))",
                "{{process}} GPU {{gpu}}",
            )
        ],
        unit="bytes", stack=True, min_zero=True,
    ),
    # --- what no process accounts for -----------------------------------------------------------
    row("Memory no process accounts for"),
    timeseries(
        "Hidden memory (no process accounts for it)",
        f"Unreclaimable memory minus what the processes account for, anon + mapped shmem, "
        f"PSS where read else RSS ({r.HIDDEN}, {r.PROCESS_ATTRIBUTED}). What is left: "
        "/dev/shm or memory emptyDir files no process maps, kernel memory, charges of a "
        "dead container reparented to the pod cgroup. HeadroomHiddenMemoryGrowth fires "
        "when its floor rises.",
        [
            (cgroup_rule(r.HIDDEN), "{{container}} hidden"),
            (cgroup_rule(r.PROCESS_ATTRIBUTED), "{{container}} attributed to processes"),
        ],
        w=8, unit="bytes", legend_table=True, min_zero=True,
    ),
    timeseries(
        "tmpfs mounts: used vs size",
        "The pod's tmpfs mounts (/dev/shm, emptyDir medium Memory): bytes used and the "
        "mount's size. Used bytes are shmem charged to the pod and never reclaimed; they "
        "outlive container restarts. HeadroomSharedMemoryFillingUp watches these.",
        [
            (
                f"max by (mount) ({metric(c.TMPFS_USED_BYTES, *RAW)})",
                "{{mount}} used",
            ),
            (
                f"max by (mount) ({metric(c.TMPFS_SIZE_BYTES, *RAW)})",
                "{{mount}} size",
            ),
        ],
        w=8, unit="bytes", legend_table=True, overrides=[limit_style(".* size$")], min_zero=True,
    ),
    timeseries(
        "Charged to the pod outside its containers",
        "Unreclaimable kinds of the pod cgroup minus the sum over its live containers: "
        "memory charged to the pod that no running container holds, typically pages "
        "(/dev/shm files, kernel objects) of a killed container, reparented to the pod.",
        [
            (
                f"max by (kind) ({metric(c.MEMORY_BYTES, *RAW, POD_CGROUP, UNRECL)})\n"
                f"- on (kind)\n"
                f"sum by (kind) (max by {by(*W, 'kind')} "
                f"({metric(c.MEMORY_BYTES, *RAW, ANY_CONTAINER, UNRECL)}))",
                "{{kind}}",
            )
        ],
        w=8, unit="bytes", legend_table=True,
    ),
    # --- vLLM ------------------------------------------------------------------------------------
    row("vLLM: KV cache, prefix cache, CPU offload"),
    timeseries(
        "KV cache blocks in use vs capacity",
        "KV-cache blocks in use (usage ratio x capacity) and the capacity, per medium "
        "(gpu; cpu for the offload tier) and engine. GPU blocks live in GPU memory; CPU "
        "blocks are pinned host memory charged to the pod as shmem.",
        [
            (
                f"max by (engine, medium) ({KV_USAGE})\n"
                f"* on (engine, medium)\n"
                f"max by (engine, medium) ({KV_BLOCKS})",
                "{{medium}} in use (engine {{engine}})",
            ),
            (
                f"max by (engine, medium) ({KV_BLOCKS})",
                "{{medium}} capacity (engine {{engine}})",
            ),
        ],
        w=8, unit="short", legend_table=True, overrides=[limit_style(".*capacity.*")],
        min_zero=True,
    ),
    timeseries(
        "Prefix-cache entries vs capacity",
        "Live prefix-cache blocks counted from vLLM's KV cache events, per medium, "
        "against the KV capacity in blocks. Offloaded prefixes fill the CPU tier until it "
        "is resident; absent when KV events are off.",
        [
            (
                f"max by (engine, medium) ({PREFIX_BLOCKS})",
                "{{medium}} prefix-cache blocks (engine {{engine}})",
            ),
            (
                f"max by (engine, medium) ({KV_BLOCKS})",
                "{{medium}} capacity (engine {{engine}})",
            ),
        ],
        w=8, unit="short", legend_table=True, overrides=[limit_style(".*capacity.*")],
        min_zero=True,
    ),
    timeseries(
        "CPU KV-offload tier against the memory left",
        "vLLM's CPU KV-offload tier: its capacity, the part resident now, and the part "
        f"not yet in use ({r.KV_OFFLOAD_PENDING}), against the headroom of the pod "
        "cgroup and the containers. Pending above headroom: the pod is OOM-killed when "
        "the tier fills (HeadroomKVOffloadWillNotFit).",
        [
            (
                f"sum({OFFLOAD_BYTES})",
                "offload capacity",
            ),
            (
                f"sum(max by {by(*W, 'model_name', 'engine')} "
                f"({OFFLOAD_BYTES})\n"
                f"* on {by(*W, 'model_name', 'engine')}\n"
                f"max by {by(*W, 'model_name', 'engine')} "
                f"({OFFLOAD_USAGE}))",
                "offload resident",
            ),
            (f"sum({metric(r.KV_OFFLOAD_PENDING, *RULES, CONTAINERS)})", "offload pending"),
            (cgroup_rule(r.HEADROOM), "{{container}} headroom"),
        ],
        w=8, unit="bytes", legend_table=True, min_zero=True,
        overrides=[override("offload pending", custom__lineWidth=3)],
    ),
    timeseries(
        "Requests: running and waiting",
        "vLLM requests by state (running, waiting; swapped on V0). Kills with nothing "
        "running point at growth unrelated to load.",
        [
            (
                f"sum by (state) (max by {by(*W, 'model_name', 'engine', 'state')} "
                f"({metric(c.VLLM_REQUESTS, *RAW, CONTAINERS)}))",
                "{{state}}",
            )
        ],
        unit="short", min_zero=True, w=8,
    ),
    timeseries(
        "Preemptions",
        "Requests the vLLM scheduler preempted per second: KV cache pressure (the GPU "
        "tier is full).",
        [
            (
                f"sum by (engine) (rate({PREEMPTIONS}[{RATE}]))",
                "engine {{engine}}",
            )
        ],
        unit="reqps", min_zero=True, w=8,
    ),
    stat(
        "vLLM /metrics read",
        "Whether headroom read this pod's vLLM /metrics on the last scrape: the panels of "
        "this row are blind while it fails (HeadroomVLLMScrapeFailing).",
        [(f"max by (container) ({metric(c.VLLM_UP, *RAW, CONTAINERS)})", "{{container}}")],
        unit="none", w=8, h=8,
        steps=thresholds(("red", 0), ("green", 1)),
        mappings=[{"type": "value", "options": {
            "0": {"text": "failing", "index": 0},
            "1": {"text": "read", "index": 1},
        }}],
    ),
    # --- kernel signals -------------------------------------------------------------------
    row("Pressure and memory events"),
    timeseries(
        "Memory pressure (PSI stall time)",
        "Share of time tasks stalled on memory (PSI memory.pressure, cgroup v2): some = at "
        "least one task, full = all tasks. It rises as reclaim at the limit stalls "
        "allocations, before the OOM kill.",
        [
            (
                name_pod_cgroup(
                    f"max by {by(*W, 'level')} "
                    f"(rate({metric(c.MEMORY_PRESSURE_SECONDS_TOTAL, *RAW, CGROUPS)}[{RATE}]))"
                ),
                "{{container}} {{level}}",
            )
        ],
        unit="percentunit", min_zero=True, w=8,
    ),
    timeseries(
        "Memory events (reclaim at the limit, OOM)",
        "memory.events per interval: max = the cgroup hit its limit and the kernel "
        "reclaimed (memory.failcnt on v1), high = over memory.high, oom / oom_kill = the "
        "OOM killer ran. Hierarchical: the pod cgroup counts its containers' events.",
        [
            (
                name_pod_cgroup(
                    f"max by {by(*W, 'event')} (increase("
                    f"{metric(c.MEMORY_EVENTS_TOTAL, *RAW, CGROUPS, EVENTS)}"
                    f"[{RATE}])) > 0"
                ),
                "{{container}} {{event}}",
            )
        ],
        unit="short", bars=True, min_zero=True, w=8,
    ),
    timeseries(
        "Swap in use",
        "Swap the cgroups use: memory that would otherwise count as unreclaimable.",
        [
            (
                name_pod_cgroup(f"max by {by(*W)} ({metric(c.MEMORY_SWAP_BYTES, *RAW, CGROUPS)})"),
                "{{container}}",
            )
        ],
        unit="bytes", min_zero=True, w=8,
    ),
]

_RESET_SEL = (*RAW, ANY_CONTAINER)

dashboard = dashboard(
    uid="headroom-pod",
    title="headroom / pod memory",
    description="One pod: how far from its memory limit and when it will hit it, what "
    "the kernel cannot reclaim, what grew since the baseline (by kind, by process), "
    "vLLM's KV cache and offload tier, and memory no process accounts for.",
    variables=[namespace_var(multi=False), pod_var(), container_var()],
    panels=panels,
    annotations=[
        annotation(
            "OOM kill (cgroup memory.events)",
            f"max by (namespace, pod) (increase({OOM_EVENTS}[{RATE}])) > 0",
            color="red", title="OOM kill", text="{{namespace}}/{{pod}}: oom_kill event",
        ),
        annotation(
            "OOM kill (headroom watcher)",
            f"sum by (namespace, pod, process) "
            f"(increase({metric(c.OOM_KILLS_TOTAL, *RAW)}[{RATE}])) > 0",
            color="dark-red", title="OOM kill", text="victim: {{process}}",
        ),
        annotation(
            "Container restart (counters reset)",
            # A restarted container gets a new cgroup: its kernel counters start again
            # from zero, which resets() sees when they were not zero before.
            f"max by (namespace, pod, container) "
            f"(resets({metric(c.MEMORY_PRESSURE_SECONDS_TOTAL, *_RESET_SEL)}[{RATE}])) > 0\n"
            f"or\n"
            f"max by (namespace, pod, container) "
            f"(resets({metric(c.MEMORY_EVENTS_TOTAL, *_RESET_SEL)}[{RATE}])) > 0",
            color="orange", title="Container restart", text="{{container}} restarted",
        ),
    ],
)
