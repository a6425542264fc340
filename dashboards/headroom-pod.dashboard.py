"""headroom / pod memory: one pod, answered on the first screen at 3 AM.

The first screen (1920x1080, no scrolling) answers how close, when, what grows and in
which process: six instant tiles that read the same cgroup (the pod's tightest: least
headroom over the pod cgroup and the selected containers) with the alerts' thresholds;
that cgroup's unreclaimable memory against its limit with a projection, OOM kills and
firing alerts annotated; the pod's usage stacked by process, then memory no process owns,
then page cache; the growth rate per process; vLLM's KV cache and CPU-offload tier against
the headroom, on the same time axis. Detail rows follow; the rarely needed ones are
collapsed.

The pod-level cgroup (container="") and the containers are shown apart below the first
screen: the pod cgroup contains its containers, so stacking both would count twice.
"""

from __future__ import annotations

from collections.abc import Callable

from dashboards.common import (
    ANY_CONTAINER,
    BASELINE,
    CGROUPS,
    CONTAINERS,
    CRITICAL_S,
    DASHED,
    DERIV,
    DOTTED,
    HEADROOM_PERCENT_STEPS,
    HIDDEN_COLOUR,
    JOB,
    MIN_GROWTH_BPS,
    MIN_HIDDEN_GROWTH_BPS,
    NAMESPACE,
    OOM_STEPS,
    PAGE_CACHE_COLOUR,
    POD,
    POD_CGROUP,
    RANGE,
    RATE,
    RATIO_STEPS,
    TIME_STEPS,
    Q,
    W,
    annotation,
    by,
    container_var,
    dashboard,
    dashboard_url,
    eq,
    exporter_var,
    fixed,
    growth_since_baseline,
    kind_colours,
    legend_only,
    limit_style,
    link,
    metric,
    name_pod_cgroup,
    namespace_var,
    oom_kills,
    override,
    override_regex,
    pod_var,
    re_,
    row,
    rule,
    stat,
    thresholds,
    timeseries,
)
from dashboards.common import CATALOG as c
from dashboards.common import RULE as r
from dashboards.common import RULES_CONFIG as CONFIG
from dashboards.names import FORECAST as fc
from dashboards.names import promql_duration

RAW = (JOB, NAMESPACE, POD)  # a raw series of this pod
SCOPE = (NAMESPACE, POD)  # the pod, for the job join of a recording rule
UNRECLAIMABLE_KINDS = ("anon", "shmem", "kernel", "sock", "unaccounted")
STACKED_KINDS = c.MEMORY_KINDS  # least reclaimable at the bottom
RSS_KINDS = ("rss_anon", "rss_shmem", "rss_file")
ATTRIBUTED_KINDS = ("rss_anon", "rss_shmem")
CRITICAL = promql_duration(CRITICAL_S)
P = ("namespace", "pod", "container", "process")


def pod_rule(name: str, *matchers: str, fn: Callable[[str], str] = str) -> str:
    """A recording rule of this pod (optionally wrapped by ``fn``), limited to $job."""
    return rule(name, *SCOPE, *matchers, fn=fn, scope=SCOPE)


# --- the binding cgroup: the tiles and the first chart read the same one ----------------
HEADROOM_NOW = pod_rule(r.HEADROOM, CGROUPS)
BINDING_NOW = pod_rule(fc.BINDING, CGROUPS)
# The cgroup the forecast rules mark as binding (the answer explain and top give); the
# least headroom while the binding series is absent.
TIGHTEST = (f"bottomk(1, ({HEADROOM_NOW} and on {by(*W)} ({BINDING_NOW} == 1))\n"
            f"  or ({HEADROOM_NOW} unless on () count({BINDING_NOW})))")
# -1 when the pod has raw series but the forecast rules recorded nothing for it: the
# rules are not loaded (a dashboard imported by hand), shown as "rules missing".
RULES_MISSING = (f"(vector(-1) unless on () count({BINDING_NOW}))\n"
                 f"  and on () count({metric(c.MEMORY_LIMIT_BYTES, *RAW)})")
MISSING = [{"type": "value", "options": {"-1": {"text": "rules missing", "color": "text",
                                                "index": 0}}}]


def of_binding(expr: str) -> str:
    """``expr`` (one series per cgroup) for the binding cgroup only."""
    return f"({expr}\n  and on {by(*W)}\n  ({BINDING_NOW} == 1))"


def of_tightest(expr: str) -> str:
    """``expr`` (one series per cgroup) for the cgroup with the least headroom."""
    return f"({expr}\n  and on {by(*W)}\n  {TIGHTEST})"


def tightest_line(name: str, fn: Callable[[str], str] = str) -> str:
    """A recording rule (wrapped by ``fn``) of the tightest cgroup, for a graph."""
    line = of_tightest(pod_rule(name, CGROUPS, fn=fn))
    return name_pod_cgroup(f"max by {by(*W)} ({line})")


def per_process_attributed(*matchers: str) -> str:
    """anon + mapped shmem per process name, as the rules attribute it: PSS where the
    exporter read it (it splits pages shared by several processes), RSS otherwise; so
    the processes plus the hidden memory add up to the unreclaimable figure."""
    by_p = by(*P)

    def part(pss_kind: str, rss_kind: str) -> str:
        pss = metric(c.PROCESS_MEMORY_PSS_BYTES, *RAW, *matchers, eq("kind", pss_kind))
        rss = metric(c.PROCESS_MEMORY_BYTES, *RAW, *matchers, eq("kind", rss_kind))
        return f"(max by {by_p} ({pss}) or max by {by_p} ({rss}))"

    return f"sum by (process) ({part('anon', 'rss_anon')} + {part('shmem', 'rss_shmem')})"


def process_growth(*matchers: str) -> str:
    """bytes/s per process name: the slope (deriv over the trend window) of the anon and
    mapped shmem its processes hold, for names that run now (``and`` the series now): a
    killed process keeps a slope over its last window, it must not stay "fastest"."""
    series = metric(c.PROCESS_MEMORY_BYTES, *RAW, *matchers, re_("kind", ATTRIBUTED_KINDS))
    return f"sum by (process) (deriv({series}[{DERIV}]) and {series})"


HIDDEN_GROWTH = pod_rule(r.HIDDEN, POD_CGROUP, fn=lambda s: f"deriv({s}[{DERIV}])")
POD_LIMIT = metric(c.MEMORY_LIMIT_BYTES, *RAW, POD_CGROUP)
POD_USAGE = metric(c.MEMORY_USAGE_BYTES, *RAW, POD_CGROUP)
POD_UNRECL = metric(c.MEMORY_UNRECLAIMABLE_BYTES, *RAW, POD_CGROUP)
POD_HIDDEN = pod_rule(r.HIDDEN, POD_CGROUP)
KV_USAGE = metric(c.VLLM_KV_CACHE_USAGE_RATIO, *RAW, CONTAINERS)
KV_BLOCKS = metric(c.VLLM_KV_CACHE_CAPACITY_BLOCKS, *RAW, CONTAINERS)
PREFIX_BLOCKS = metric(c.VLLM_PREFIX_CACHE_BLOCKS, *RAW, CONTAINERS)
OFFLOAD_BYTES = metric(c.VLLM_KV_CACHE_CAPACITY_BYTES, *RAW, CONTAINERS, eq("medium", "cpu"))
OFFLOAD_USAGE = metric(c.VLLM_KV_CACHE_USAGE_RATIO, *RAW, CONTAINERS, eq("medium", "cpu"))
PREEMPTIONS = metric(c.VLLM_PREEMPTIONS_TOTAL, *RAW, CONTAINERS)
UNRECL = re_("kind", UNRECLAIMABLE_KINDS)
EVENTS = re_("event", ("high", "max", "oom", "oom_kill", "oom_group_kill"))
KV_BY = by(*W, "model_name", "engine")


def pod_kind(kind: str) -> str:
    return metric(c.MEMORY_BYTES, *RAW, POD_CGROUP, eq("kind", kind))


def cgroup_rule(name: str) -> str:
    """A recording rule for the pod cgroup and the selected containers."""
    return name_pod_cgroup(pod_rule(name, CGROUPS))


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
    override_regex(".*unreclaimable$", custom__lineWidth=3, color=fixed("orange")),
    override_regex(".*peak$", custom__lineStyle=DOTTED),
]

OOM_DOCS = "http://${exporter}/debug/oom/?namespace=${namespace}&pod=${pod}"
OOM_DOCS_LINK = {"title": "OOM post-mortems of this pod (the exporter's /debug/oom/)",
                 "url": OOM_DOCS, "targetBlank": True}

first_screen = [
    # --- tiles: how close, when, what grows, in which process ---------------------------
    stat(
        "Time to limit",
        f"When the binding cgroup (the tightest of the pod cgroup and its containers, "
        f"{fc.BINDING}) reaches its limit: the recorded forecast {fc.TIME_TO_LIMIT}, the "
        "soonest credible of the short (minutes), medium (hours) and lasting (days: the "
        "floor and the peaks' envelope rising) horizons; the name says which. The same "
        "answer as the page, headroom explain and headroom top. 'no kill forecast' when "
        "no horizon reaches the limit; 'rules missing' when the shipped recording rules "
        f"are not loaded. Red: under {CRITICAL} (the critical HeadroomMemoryFillingUp "
        f"page), orange: under {promql_duration(int(TIME_STEPS[2]['value']))}.",
        [Q(f"min by (horizon) ({of_binding(pod_rule(fc.TIME_TO_LIMIT, CGROUPS))})\n"
           f"or on ()\n{RULES_MISSING}", "{{horizon}}", instant=True)],
        unit="s", w=4, h=4, steps=TIME_STEPS, no_value="no kill forecast", instant=True,
        text_mode="value_and_name", mappings=MISSING, runbooks=["HeadroomMemoryFillingUp"],
    ),
    stat(
        "Headroom",
        "Limit minus unreclaimable memory of the tightest cgroup: what can still be "
        f"charged once the kernel has reclaimed all page cache ({r.HEADROOM}). Coloured "
        "by its share of that cgroup's limit (query B, the limit, sets the maximum): red "
        f"under {HEADROOM_PERCENT_STEPS[1]['value']:g}% (HeadroomMemoryNearLimit), "
        f"orange under {HEADROOM_PERCENT_STEPS[2]['value']:g}%.",
        [
            Q(f"min({HEADROOM_NOW})", "Headroom", instant=True),
            Q(f"max({of_tightest(pod_rule(r.LIMIT, CGROUPS))})", "Max", instant=True),
        ],
        unit="bytes", w=4, h=4, steps=HEADROOM_PERCENT_STEPS, percent_steps=True,
        instant=True, min_zero=True, runbooks=["HeadroomMemoryNearLimit"],
        transformations=[{
            "id": "configFromData",
            "options": {
                "configRefId": "B",
                "mappings": [{"fieldName": "Max", "handlerKey": "max"}],
                "applyTo": {"id": "byFrameRefID", "options": "A"},
            },
        }],
    ),
    stat(
        "Unreclaimable / limit",
        "Share of the tightest cgroup's limit the kernel cannot reclaim without swap "
        f"(anon, shmem, kernel; {r.UNRECLAIMABLE_RATIO}). Orange from "
        f"{RATIO_STEPS[1]['value']:.0%} (HeadroomMemoryReclaimAtLimit territory), red from "
        f"{RATIO_STEPS[2]['value']:.0%} (HeadroomMemoryNearLimit).",
        [Q(f"max({of_tightest(pod_rule(r.UNRECLAIMABLE_RATIO, CGROUPS))})",
           "unreclaimable / limit", instant=True)],
        unit="percentunit", w=4, h=4, steps=RATIO_STEPS, instant=True,
        runbooks=["HeadroomMemoryNearLimit", "HeadroomMemoryReclaimAtLimit"],
    ),
    stat(
        "Top grower",
        f"What explains most of the binding cgroup's growth ({fc.TOP_GROWER}): the "
        "process (a vLLM title such as EngineCore, else the kind: anon, shmem, /dev/shm, "
        "kernel, hidden) and its growth at the horizon that binds (day over day for the "
        "lasting horizon, else the last hour), the rate the page's 'What "
        "grows' gives. The same answer as the page, explain and top. "
        f"Orange from {MIN_GROWTH_BPS:.0f} B/s: the rules' minimum baseline rise "
        f"({CONFIG.min_baseline_rise_bytes >> 20} MiB) per {BASELINE}. 'nothing grows' "
        "when nothing does; 'rules missing' without the shipped recording rules.",
        [Q(f"max by (process, kind) ({of_binding(pod_rule(fc.TOP_GROWER, CGROUPS))} > 0)\n"
           f"or on ()\n{RULES_MISSING}", "{{process}} {{kind}}", instant=True)],
        unit="binBps", w=4, h=4, instant=True, text_mode="value_and_name", mappings=MISSING,
        steps=thresholds(("green", 0), ("orange", MIN_GROWTH_BPS)), no_value="nothing grows",
    ),
    stat(
        "Hidden memory growth",
        f"Slope over {DERIV} of the memory no process accounts for in the pod cgroup "
        f"({r.HIDDEN}): /dev/shm or memory emptyDir files no process maps, kernel memory, "
        f"a dead container's charges. Orange from {MIN_HIDDEN_GROWTH_BPS:.0f} B/s: "
        f"HeadroomHiddenMemoryGrowth's minimum rise ({CONFIG.hidden_min_rise_bytes >> 20} "
        f"MiB) per {BASELINE}.",
        [Q(f"max({HIDDEN_GROWTH})", "hidden", instant=True)],
        unit="binBps", w=4, h=4, instant=True, no_value="nothing hidden",
        steps=thresholds(("green", 0), ("orange", MIN_HIDDEN_GROWTH_BPS)),
        runbooks=["HeadroomHiddenMemoryGrowth"],
    ),
    stat(
        "OOM kills in range",
        "OOM kills in the pod during the dashboard's time range, from any source: the "
        "pod cgroup's memory.events (cgroup v2, hierarchical), the containers' counters "
        "(cgroup v1 counts a kill only in the victim's cgroup) and headroom's watcher; "
        "the largest, rounded. The link opens the exporter's post-mortem documents.",
        [Q(f"sum({oom_kills(RANGE, *SCOPE)})", "OOM kills", instant=True)],
        unit="short", w=4, h=4, instant=True, steps=OOM_STEPS, no_value="0",
        links=[OOM_DOCS_LINK], runbooks=["HeadroomPodOOMKilled"],
    ),
    # --- how close and when, over time --------------------------------------------------
    timeseries(
        "Unreclaimable against the limit (tightest cgroup)",
        "The tightest cgroup's limit, unreclaimable memory (what reaches the limit before "
        "an OOM kill) and the kubelet's working set, which counts active page cache and "
        f"stays flat while page cache is squeezed out. Dotted: unreclaimable {CRITICAL} "
        f"ahead, predict_linear over {DERIV} (the critical page's horizon). Annotations: "
        "OOM kills and firing headroom alerts.",
        [
            (tightest_line(r.LIMIT),
             "{{container}} limit"),
            (tightest_line(r.UNRECLAIMABLE),
             "{{container}} unreclaimable"),
            (tightest_line(r.WORKING_SET),
             "{{container}} working set"),
            (
                tightest_line(r.UNRECLAIMABLE,
                              lambda s: f"predict_linear({s}[{DERIV}], {CRITICAL_S})"),
                "{{container}} unreclaimable in " + CRITICAL + " (projection)",
            ),
        ],
        unit="bytes", w=12, h=10, min_zero=True, legend_table=True,
        overrides=[
            limit_style(".*limit$"),
            override_regex(".*unreclaimable$", custom__lineWidth=3, color=fixed("orange")),
            override_regex(".*working set$", color=fixed("text")),
            override_regex(".*projection\\)$", custom__lineStyle=DOTTED,
                           color=fixed("orange"), custom__fillOpacity=0),
        ],
        runbooks=["HeadroomMemoryFillingUp"],
    ),
    timeseries(
        "Pod usage by process, no process, page cache",
        "The pod cgroup's usage, stacked: each process name's anon + mapped shmem (PSS "
        "where read, else RSS; all containers), then memory no process owns "
        f"({r.HIDDEN}: unmapped /dev/shm files, kernel memory, a dead container's "
        "charges), then page cache and reclaimable kernel memory (usage - unreclaimable), "
        "which the kernel takes back before an OOM kill. The stack adds up to usage. "
        "Dashed: the pod's limit.",
        [
            (per_process_attributed(ANY_CONTAINER), "{{process}}"),
            (f"max({POD_HIDDEN})", "no process (hidden)"),
            (f"max({POD_USAGE} - {POD_UNRECL})", "page cache (reclaimable)"),
            (f"max({POD_LIMIT})", "pod limit"),
        ],
        unit="bytes", w=12, h=10, stack=True, min_zero=True, legend_table=True,
        legend_right=True,
        overrides=[
            limit_style("pod limit"),
            override("no process (hidden)", color=fixed(HIDDEN_COLOUR)),
            override("page cache (reclaimable)", color=fixed(PAGE_CACHE_COLOUR),
                     custom__fillOpacity=10),
        ],
        runbooks=["HeadroomHiddenMemoryGrowth"],
    ),
    # --- what grows, and vLLM next to it -------------------------------------------------
    timeseries(
        "What grows: per process and hidden, bytes/s",
        f"Slope over {DERIV} of each process name's anon + mapped shmem (selected "
        "containers) and of the memory no process accounts for (pod cgroup). A line that "
        "stays above zero is the leak; hidden growth with no process growing is /dev/shm, "
        "pinned memory or kernel memory.",
        [
            (process_growth(CONTAINERS), "{{process}}"),
            (f"max({HIDDEN_GROWTH})", "no process (hidden)"),
        ],
        unit="binBps", w=12, h=10, legend_table=True,
        overrides=[override("no process (hidden)", color=fixed(HIDDEN_COLOUR),
                            custom__lineWidth=2)],
    ),
    timeseries(
        "vLLM KV cache and CPU offload against the headroom",
        "On the same time axis: KV-cache usage per medium (right axis), vLLM's CPU "
        f"KV-offload tier (capacity, resident, pending: {r.KV_OFFLOAD_PENDING}) and the "
        "tightest cgroup's headroom. Pending above headroom: the pod is OOM-killed when "
        "the tier fills (HeadroomKVOffloadWillNotFit).",
        [
            (f"max({HEADROOM_NOW})", "headroom"),
            (f"sum({OFFLOAD_BYTES})", "offload capacity"),
            (
                f"sum(max by {KV_BY} ({OFFLOAD_BYTES})\n* on {KV_BY}\n"
                f"max by {KV_BY} ({OFFLOAD_USAGE}))",
                "offload resident",
            ),
            (f"sum({pod_rule(r.KV_OFFLOAD_PENDING, CONTAINERS)})", "offload pending"),
            (f"max by (medium) ({KV_USAGE})", "KV usage {{medium}}"),
        ],
        unit="bytes", w=12, h=10, legend_table=True, min_zero=True,
        overrides=[
            override("headroom", custom__lineWidth=3, color=fixed("green")),
            override("offload pending", custom__lineWidth=3, color=fixed("orange")),
            override_regex("KV usage .*", unit="percentunit", max=1,
                           custom__axisPlacement="right", custom__lineStyle=DOTTED),
        ],
        runbooks=["HeadroomKVOffloadWillNotFit"],
    ),
]

details = [
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
        runbooks=["HeadroomSharedMemoryFillingUp", "HeadroomStaleSharedMemory"],
    ),
    timeseries(
        f"Baseline: unreclaimable floor ({BASELINE}) vs now",
        f"Unreclaimable memory now and its baseline, the lowest value over {BASELINE} "
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
        f"Each kind of the pod cgroup minus its own lowest value over {BASELINE} (for a "
        "pod younger than that, since it started): which kind grew. anon up: a process "
        "leaks; shmem up with no process's rss_shmem up: /dev/shm files or pinned memory "
        "no process maps; file going negative: page cache squeezed out.",
        [(f"max by (kind) ({growth_since_baseline(pod_kind(kind))})", kind)
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
        f"Growth since baseline ({BASELINE}), by process",
        f"Anonymous and mapped shared memory (RSS) of each process name of the selected "
        f"containers minus its lowest value over {BASELINE} (since start for a younger "
        "pod): which process grew (EngineCore, Worker_TPn leaks show here; APIServer for "
        "the multimodal cache).",
        [(
            f"sum by (process, kind) ({growth_since_baseline(metric(c.PROCESS_MEMORY_BYTES, *RAW, CONTAINERS, re_('kind', ATTRIBUTED_KINDS)))})",  # noqa: E501
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
            (f"max by (engine, medium) ({KV_BLOCKS})", "{{medium}} capacity (engine {{engine}})"),
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
            (f"max by (engine, medium) ({KV_BLOCKS})", "{{medium}} capacity (engine {{engine}})"),
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
        runbooks=["HeadroomMemoryReclaimAtLimit"],
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
        runbooks=["HeadroomVLLMScrapeFailing"],
    ),
]

_RESET_SEL = (*RAW, ANY_CONTAINER)
# A restart: a container's unreclaimable memory falls below this fraction of its floor of
# the minutes before (its processes started again; a leak or a release never halves it).
RESTART_DROP_RATIO = 0.5


def _restarted(minutes_ago: int = 0) -> str:
    """A container whose unreclaimable memory fell below a fraction of its floor of the
    minutes before: its processes started again (the rules' restart signal, on the raw
    series: cgroup v1 and v2 alike, and without the recording rules). PSI and
    memory.events resets, used before, never move on v1 or on a cgroup that never hit
    its limit."""
    u = metric(c.MEMORY_UNRECLAIMABLE_BYTES, *_RESET_SEL)
    now = f"{u} offset {minutes_ago}m" if minutes_ago else u
    return (f"max by {by(*W)} ({now})\n"
            f"  < {RESTART_DROP_RATIO:g} * max by {by(*W)} "
            f"(min_over_time({u}[10m] offset {minutes_ago + 2}m))")


# The first evaluation after the fall: one mark per restart, not one per sample.
RESTART_EDGE = f"{_restarted()}\nunless on {by(*W)}\n{_restarted(1)}"
ALERTS = (
    'ALERTS{alertname=~"Headroom.*", alertstate="firing", '
    f"{NAMESPACE}, {POD}}}"
)

dashboard = dashboard(
    uid="headroom-pod",
    title="headroom / pod memory",
    description="One pod: how close to its memory limit and when it will hit it, what "
    "grows and in which process, memory no process accounts for, and vLLM's KV cache and "
    "offload tier, on the first screen; details by cgroup, kind and process below.",
    variables=[namespace_var(multi=False), pod_var(), container_var(), exporter_var()],
    panels=[*first_screen, *details],
    links=[
        link("OOM post-mortems (exporter /debug/oom/)", OOM_DOCS, new_tab=True,
             tooltip="The flight-recorder documents of this pod's OOM kills, served by the "
             "exporter that reports it (its address: reachable in the cluster, or through "
             "kubectl port-forward)"),
        link("Node of this pod", dashboard_url("node", "var-node=${exporter}"),
             tooltip="headroom / node for the exporter that reports this pod"),
        link("Fleet", dashboard_url("fleet", "${namespace:queryparam}"),
             tooltip="headroom / fleet, this namespace"),
    ],
    annotations=[
        annotation(
            "OOM kill",
            f"{oom_kills(RATE, *SCOPE)} > 0",
            color="red",
        ),
        annotation("Firing headroom alert", ALERTS, color="orange"),
        annotation("Container restart", RESTART_EDGE, color="purple"),
    ],
)
