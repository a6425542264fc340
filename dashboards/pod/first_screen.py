"""The pod dashboard's first screen (1920x1080, no scrolling): six instant tiles on the
binding cgroup with the alerts' thresholds, then how close and when over time, what grows
per process, and vLLM's KV cache and offload tier against the headroom."""

from __future__ import annotations

from dashboards.knobs import Knobs
from dashboards.names import RULE as r
from dashboards.names import promql_duration
from dashboards.oom import oom_kills
from dashboards.panels import Panel, Q, stat, timeseries
from dashboards.pod.queries import (
    HEADROOM_NOW,
    KV_BY,
    KV_USAGE,
    MISSING,
    OFFLOAD_BYTES,
    OFFLOAD_USAGE,
    OOM_DOCS_LINK,
    POD_HIDDEN,
    POD_LIMIT,
    POD_UNRECL,
    POD_USAGE,
    RULES_MISSING,
    SCOPE,
    hidden_growth,
    of_binding,
    of_tightest,
    per_process_attributed,
    pod_rule,
    process_growth,
    tightest_line,
)
from dashboards.selectors import ANY_CONTAINER, CGROUPS, CONTAINERS, RANGE
from dashboards.style import (
    DOTTED,
    HIDDEN_COLOUR,
    OOM_STEPS,
    PAGE_CACHE_COLOUR,
    fixed,
    limit_style,
    override,
    override_regex,
    thresholds,
)


def first_screen(k: Knobs) -> list[Panel]:
    """Six tiles and four charts: how close, when, what grows, in which process."""
    return [
        # --- tiles: how close, when, what grows, in which process ---------------------------
        stat(
            "Time to limit",
            f"When the binding cgroup (the tightest of the pod cgroup and its containers, "
            f"{r.BINDING}) reaches its limit: the recorded forecast {r.TIME_TO_LIMIT}, the "
            "soonest credible of the short (minutes), medium (hours) and lasting (days: the "
            "floor and the peaks' envelope rising) horizons; the name says which. The same "
            "answer as the page, headroom explain and headroom top. 'no kill forecast' when "
            "no horizon reaches the limit; 'rules missing' when the shipped recording rules "
            f"are not loaded. Red: under {k.critical} (the critical HeadroomMemoryFillingUp "
            f"page), orange: under {promql_duration(int(k.time_steps[2]['value']))}.",
            [Q(f"min by (horizon) ({of_binding(pod_rule(r.TIME_TO_LIMIT, CGROUPS))})\n"
               f"or on ()\n{RULES_MISSING}", "{{horizon}}", instant=True)],
            unit="s", w=4, h=4, steps=k.time_steps, no_value="no kill forecast", instant=True,
            text_mode="value_and_name", mappings=MISSING,
            runbooks=k.runbooks("HeadroomMemoryFillingUp"),
        ),
        stat(
            "Headroom",
            "Limit minus unreclaimable memory of the tightest cgroup: what can still be "
            f"charged once the kernel has reclaimed all page cache ({r.HEADROOM}). Coloured "
            "by its share of that cgroup's limit (query B, the limit, sets the maximum): red "
            f"under {k.headroom_percent_steps[1]['value']:g}% (HeadroomMemoryNearLimit), "
            f"orange under {k.headroom_percent_steps[2]['value']:g}%.",
            [
                Q(f"min({HEADROOM_NOW})", "Headroom", instant=True),
                Q(f"max({of_tightest(pod_rule(r.LIMIT, CGROUPS))})", "Max", instant=True),
            ],
            unit="bytes", w=4, h=4, steps=k.headroom_percent_steps, percent_steps=True,
            instant=True, min_zero=True, runbooks=k.runbooks("HeadroomMemoryNearLimit"),
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
            f"{k.ratio_steps[1]['value']:.0%} (HeadroomMemoryReclaimAtLimit territory), red from "
            f"{k.ratio_steps[2]['value']:.0%} (HeadroomMemoryNearLimit).",
            [Q(f"max({of_tightest(pod_rule(r.UNRECLAIMABLE_RATIO, CGROUPS))})",
               "unreclaimable / limit", instant=True)],
            unit="percentunit", w=4, h=4, steps=k.ratio_steps, instant=True,
            runbooks=k.runbooks("HeadroomMemoryNearLimit", "HeadroomMemoryReclaimAtLimit"),
        ),
        stat(
            "Top grower",
            f"What explains most of the binding cgroup's growth ({r.TOP_GROWER}): the "
            "process (a vLLM title such as EngineCore, else the kind: anon, shmem, /dev/shm, "
            "kernel, hidden) and its growth at the horizon that binds (day over day for the "
            "lasting horizon, else the last hour), the rate the page's 'What "
            "grows' gives. The same answer as the page, explain and top. "
            f"Orange from {k.min_growth_bps:.0f} B/s: the rules' minimum baseline rise "
            f"({k.config.min_baseline_rise_bytes >> 20} MiB) per {k.baseline}. 'nothing grows' "
            "when nothing does; 'rules missing' without the shipped recording rules.",
            [Q(f"max by (process, kind) ({of_binding(pod_rule(r.TOP_GROWER, CGROUPS))} > 0)\n"
               f"or on ()\n{RULES_MISSING}", "{{process}} {{kind}}", instant=True)],
            unit="binBps", w=4, h=4, instant=True, text_mode="value_and_name", mappings=MISSING,
            steps=thresholds(("green", 0), ("orange", k.min_growth_bps)), no_value="nothing grows",
        ),
        stat(
            "Hidden memory growth",
            f"Slope over {k.deriv} of the memory no process accounts for in the pod cgroup "
            f"({r.HIDDEN}): /dev/shm or memory emptyDir files no process maps, kernel memory, "
            f"a dead container's charges. Orange from {k.min_hidden_growth_bps:.0f} B/s: "
            f"HeadroomHiddenMemoryGrowth's minimum rise ({k.config.hidden_min_rise_bytes >> 20} "
            f"MiB) per {k.baseline}.",
            [Q(f"max({hidden_growth(k)})", "hidden", instant=True)],
            unit="binBps", w=4, h=4, instant=True, no_value="nothing hidden",
            steps=thresholds(("green", 0), ("orange", k.min_hidden_growth_bps)),
            runbooks=k.runbooks("HeadroomHiddenMemoryGrowth"),
        ),
        stat(
            "OOM kills in range",
            "OOM kills in the pod during the dashboard's time range, from any source: the "
            "pod cgroup's memory.events (cgroup v2, hierarchical), the containers' counters "
            "(cgroup v1 counts a kill only in the victim's cgroup) and headroom's watcher; "
            "the largest, rounded. The link opens the exporter's post-mortem documents.",
            [Q(f"sum({oom_kills(RANGE, *SCOPE)})", "OOM kills", instant=True)],
            unit="short", w=4, h=4, instant=True, steps=OOM_STEPS, no_value="0",
            links=[OOM_DOCS_LINK], runbooks=k.runbooks("HeadroomPodOOMKilled"),
        ),
        # --- how close and when, over time --------------------------------------------------
        timeseries(
            "Unreclaimable against the limit (tightest cgroup)",
            "The tightest cgroup's limit, unreclaimable memory (what reaches the limit before "
            "an OOM kill) and the kubelet's working set, which counts active page cache and "
            f"stays flat while page cache is squeezed out. Dotted: unreclaimable {k.critical} "
            f"ahead, predict_linear over {k.deriv} (the critical page's horizon). Annotations: "
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
                                  lambda s: f"predict_linear({s}[{k.deriv}], {k.critical_s})"),
                    "{{container}} unreclaimable in " + k.critical + " (projection)",
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
            runbooks=k.runbooks("HeadroomMemoryFillingUp"),
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
            runbooks=k.runbooks("HeadroomHiddenMemoryGrowth"),
        ),
        # --- what grows, and vLLM next to it -------------------------------------------------
        timeseries(
            "What grows: per process and hidden, bytes/s",
            f"Slope over {k.deriv} of each process name's anon + mapped shmem (selected "
            "containers) and of the memory no process accounts for (pod cgroup). A line that "
            "stays above zero is the leak; hidden growth with no process growing is /dev/shm, "
            "pinned memory or kernel memory.",
            [
                (process_growth(k, CONTAINERS), "{{process}}"),
                (f"max({hidden_growth(k)})", "no process (hidden)"),
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
            runbooks=k.runbooks("HeadroomKVOffloadWillNotFit"),
        ),
    ]
