"""headroom / fleet: every vLLM pod, ranked by how soon it will be OOM-killed.

One row per pod, on its binding cgroup (the forecast's BINDING: the cgroup the page,
explain, top and the pod dashboard speak of): the recorded time to the limit, headroom,
the unreclaimable share; growth since the baseline, OOM kills; the top growers by the
recorded TOP_GROWER. Every pod name links to the pod dashboard.
"""

from __future__ import annotations

from typing import Any

from dashboards.knobs import Knobs
from dashboards.layout import assemble
from dashboards.links import SERIES_POD_LINK, TABLE_POD_LINK, dashboard_url, link
from dashboards.names import RULE as r
from dashboards.names import Config, promql_duration
from dashboards.oom import oom_kills
from dashboards.panels import Panel, bargauge, row, stat, table, timeseries
from dashboards.selectors import (
    NAMESPACE,
    POD_CGROUP,
    RANGE,
    RATE,
    in_scope,
    name_pod_cgroup,
    of_binding,
    rule,
)
from dashboards.style import OOM_STEPS, thresholds
from dashboards.variables import namespace_var, scope_var


def per_pod(agg: str, name: str, *matchers: str) -> str:
    """A recording rule reduced to one figure per pod (over its cgroups), in scope."""
    return in_scope(
        f"{agg} by (namespace, pod) ({rule(name, NAMESPACE, *matchers, scope=(NAMESPACE,))})"
    )


def on_binding(agg: str, name: str, labels: tuple[str, ...] = ("namespace", "pod")) -> str:
    """A forecast series of each pod's binding cgroup, reduced over ``labels``, in scope:
    the figure the pod dashboard's tiles and the page give."""
    line = of_binding(rule(name, NAMESPACE, scope=(NAMESPACE,)), NAMESPACE)
    return in_scope(f"{agg} by ({', '.join(labels)}) ({line})")


def rise_or_since_start(k: Knobs, rise: str, series: str) -> str:
    """The rules' baseline rise (it needs two baseline windows of data), else, for a
    younger pod (the problem pods are 2-30 h old), growth since its floor in one window:
    since it started."""
    young = rule(series, NAMESPACE, POD_CGROUP, fn=k.growth_since_baseline, scope=(NAMESPACE,))
    return in_scope(
        f"max by (namespace, pod) ({rule(rise, NAMESPACE, POD_CGROUP, scope=(NAMESPACE,))})"
        f"\n  or\n  max by (namespace, pod) ({young})"
    )


TIME_TO_LIMIT = on_binding("min", r.TIME_TO_LIMIT)
# The same, keeping which cgroup binds and at which horizon, for legends.
TIME_TO_LIMIT_NAMED = name_pod_cgroup(
    on_binding("min", r.TIME_TO_LIMIT, ("namespace", "pod", "container", "horizon")))
TOP_GROWERS = on_binding("max", r.TOP_GROWER,
                         ("namespace", "pod", "container", "process", "kind"))
HEADROOM = on_binding("min", r.HEADROOM)
PEAK_SWINGS = on_binding("min", r.PEAK_HEADROOM_SWINGS)
RATIO = on_binding("max", r.UNRECLAIMABLE_RATIO)
KILLS_IN_RANGE = in_scope(oom_kills(RANGE, NAMESPACE))

def panels(k: Knobs) -> list[Panel]:
    """Pods at risk now, ranked, and the largest growth."""
    warn_s, full = k.warning_s, k.config.near_limit_ratio
    rise = rise_or_since_start(k, r.UNRECLAIMABLE_BASELINE_RISE, r.UNRECLAIMABLE)
    hidden_rise = rise_or_since_start(k, r.HIDDEN_BASELINE_RISE, r.HIDDEN)
    return [
        row("At risk now"),
        stat(
            f"Pods within {promql_duration(warn_s)} of the limit",
            "Pods whose binding cgroup reaches its limit within "
            f"{promql_duration(warn_s)} by the recorded forecast ({r.TIME_TO_LIMIT}, the "
            "soonest of the short, medium and lasting horizons): the figure the page, "
            "explain, top and the pod dashboard give.",
            [(f"count({TIME_TO_LIMIT} < {warn_s}) or vector(0)", "")],
            unit="short", w=6, steps=thresholds(("green", 0), ("orange", 1)),
            runbooks=k.runbooks("HeadroomMemoryFillingUp"),
        ),
        stat(
            f"Pods over {full:.0%} unreclaimable",
            f"Pods where more than {full:.0%} of a limit is memory the kernel cannot "
            "reclaim: the next growth or burst is an OOM kill.",
            [(f"count({RATIO} > {full}) or vector(0)", "")],
            unit="short", w=6, steps=thresholds(("green", 0), ("red", 1)),
            runbooks=k.runbooks("HeadroomMemoryNearLimit"),
        ),
        stat(
            "OOM kills in range",
            "OOM kills in the pods in scope during the dashboard's time range, from any "
            "source: the pod cgroup's memory.events (cgroup v2, hierarchical), the "
            "containers' counters (cgroup v1 counts a kill only in the victim's cgroup) and "
            "headroom's watcher; per pod the largest, rounded.",
            [(f"sum({KILLS_IN_RANGE}) or vector(0)", "")],
            unit="short", w=6, instant=True, steps=OOM_STEPS,
            runbooks=k.runbooks("HeadroomPodOOMKilled"),
        ),
        stat(
            "Pods tracked",
            "Pods in scope (vLLM pods by their processes or a vLLM /metrics headroom reads; "
            "or every pod) that headroom reports.",
            [(f"count({per_pod('max', r.LIMIT)})", "")],
            unit="short", w=6,
        ),
        row("Ranked"),
        table(
            "Pods ranked by time to limit",
            "One row per pod, on its binding cgroup (the forecast's "
            f"{r.BINDING}); sorted by the recorded time to limit ({r.TIME_TO_LIMIT}; empty: "
            "no horizon forecasts a kill), then sort by any column, e.g. headroom. Peaks to "
            f"limit ({r.PEAK_HEADROOM_SWINGS}): the headroom above the peaks in the memory's "
            "quiet-hour swings, for a pod that keeps growing; below "
            f"{k.config.fill_noise_band_swings:g} the page fires whatever the time to limit "
            "says (the next excursion reaches the limit). The pod name opens the pod "
            "dashboard.",
            [
                ("Time to limit", TIME_TO_LIMIT, "s"),
                ("Peaks to limit (quiet swings)", PEAK_SWINGS, "none"),
                ("Headroom", HEADROOM, "bytes"),
                ("Unreclaimable / limit", RATIO, "percentunit"),
                (f"Growth since baseline ({k.baseline} or start)", rise, "bytes"),
                (f"Hidden growth ({k.baseline} or start)", hidden_rise, "bytes"),
                ("OOM kills in range", KILLS_IN_RANGE, "short"),
            ],
            labels=["namespace", "pod"],
            sort_by="Time to limit",
            links={"pod": TABLE_POD_LINK},
            h=11,
        ),
        bargauge(
            "Least headroom",
            "The 15 pods with the smallest share of their limit left once page cache is "
            "reclaimed (1 - unreclaimable / limit, binding cgroup of the pod). Red under 5%, "
            "orange under 15%. Click a bar for the pod dashboard.",
            [(f"bottomk(15, 1 - {RATIO})", "{{namespace}}/{{pod}}")],
            unit="percentunit",
            steps=thresholds(("red", 0), ("orange", 0.05), ("green", 0.15)),
            links=[SERIES_POD_LINK],
        ),
        timeseries(
            "Time to limit: the 10 closest pods",
            f"The recorded time to the limit ({r.TIME_TO_LIMIT}) of the 10 pods closest to "
            "it, named by the binding cgroup and the horizon that binds. A line falling "
            "towards zero is a pod about to be killed; gaps mean no horizon forecasts a kill. "
            f"The red line is {promql_duration(k.critical_s)}, the page.",
            [(f"bottomk(10, {TIME_TO_LIMIT_NAMED})",
              "{{namespace}}/{{pod}} {{container}} ({{horizon}})")],
            unit="s", h=9, links=[SERIES_POD_LINK], min_zero=True,
            steps=thresholds(("green", 0), ("red", k.critical_s)),
        ),
        timeseries(
            "Unreclaimable / limit: the 10 fullest pods",
            "Share of the limit the kernel cannot reclaim, for the 10 fullest pods (worst "
            "cgroup of each). Lines at 85% (reclaim at the limit) and 95% (near the limit).",
            [(f"topk(10, {RATIO})", "{{namespace}}/{{pod}}")],
            unit="percentunit", links=[SERIES_POD_LINK], min_zero=True, steps=k.ratio_steps,
        ),
        timeseries(
            "OOM kills",
            "OOM kills per interval and pod, from any source (pod cgroup, containers, "
            "headroom's watcher; the largest, rounded): the same count on cgroup v1 and v2.",
            [(f"{in_scope(oom_kills(RATE, NAMESPACE))} > 0", "{{namespace}}/{{pod}}")],
            unit="short", bars=True, links=[SERIES_POD_LINK], min_zero=True,
        ),
        row("Growth"),
        bargauge(
            "Top growers",
            f"The 10 fastest top growers ({r.TOP_GROWER}, on each pod's binding cgroup): the "
            "process and kind (anon, shmem, dev_shm, kernel, hidden) the page's 'What "
            "grows' names, at the rate of the horizon that binds (day over day for the lasting "
            "horizon, else the last hour). The same answer as explain, top "
            "and the pod dashboard's Top grower tile.",
            [(f"topk(10, {TOP_GROWERS} > 0)",
              "{{namespace}}/{{pod}} {{container}}: {{process}} {{kind}}")],
            unit="binBps", w=24, h=7, links=[SERIES_POD_LINK],
            runbooks=k.runbooks("HeadroomMemoryFillingUp"),
        ),
        bargauge(
            f"Largest growth since baseline ({k.baseline})",
            f"The 10 pods whose unreclaimable floor (lowest value over {k.baseline}, pod "
            f"cgroup) rose most since the window before ({r.UNRECLAIMABLE_BASELINE_RISE}): "
            "growth diurnal load cannot explain, what HeadroomMemoryFillingUp extrapolates. "
            f"A pod younger than two windows: its growth since its floor in {k.baseline}.",
            [(f"topk(10, {rise} > 0)", "{{namespace}}/{{pod}}")],
            unit="bytes", links=[SERIES_POD_LINK], runbooks=k.runbooks("HeadroomMemoryFillingUp"),
        ),
        bargauge(
            f"Largest hidden-memory growth ({k.baseline})",
            "The 10 pods whose memory no process accounts for (unmapped /dev/shm files, "
            "kernel memory, a dead container's charges) rose most over the baseline window "
            f"({r.HIDDEN_BASELINE_RISE}; since the floor in {k.baseline} for a younger pod): "
            "HeadroomHiddenMemoryGrowth's signal.",
            [(f"topk(10, {hidden_rise} > 0)", "{{namespace}}/{{pod}}")],
            unit="bytes", links=[SERIES_POD_LINK],
            runbooks=k.runbooks("HeadroomHiddenMemoryGrowth"),
        ),
        timeseries(
            "Headroom of the pods in scope",
            "Limit minus unreclaimable memory per pod (worst cgroup). A pod's line drops as "
            "it grows; page cache does not count, the kernel reclaims it first.",
            [(HEADROOM, "{{namespace}}/{{pod}}")],
            unit="bytes", w=24, links=[SERIES_POD_LINK], min_zero=True, legend_table=True,
        ),
    ]


def dashboard(config: Config) -> Any:
    return assemble(
        uid="headroom-fleet",
        title="headroom / fleet",
        description="Every vLLM pod ranked by time to its memory limit and by headroom, OOM "
        "kills, and the largest growth since the baseline; each pod links to its pod view.",
        variables=[namespace_var(), scope_var()],
        panels=panels(Knobs(config)),
        links=[link("Exporters", dashboard_url("exporter"),
                    tooltip="headroom / exporter: are the exporters and collectors healthy?")],
    )
