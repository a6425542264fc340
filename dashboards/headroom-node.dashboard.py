"""headroom / node: every workload on one node, its GPUs and its memory.

The node variable's text is the ``node`` label (added by the scrape config from the pod's
node name) or, without it, the exporter's ``instance``; its value is always the instance,
which every series carries, so the panels select ``instance=~"$node"``.
"""

from __future__ import annotations

from typing import Any

from dashboards.knobs import Knobs
from dashboards.layout import assemble
from dashboards.links import SERIES_POD_LINK, TABLE_POD_LINK, dashboard_url, link
from dashboards.names import RULE as r
from dashboards.names import Config
from dashboards.oom import oom_kills
from dashboards.panels import Panel, bargauge, row, stat, table, timeseries
from dashboards.selectors import (
    JOB,
    NODE,
    POD_CGROUP,
    RANGE,
    RATE,
    by,
    eq,
    jobbed,
    metric,
    name_pod_cgroup,
    of_binding,
)
from dashboards.style import OOM_STEPS, kind_colours, legend_only, limit_style
from dashboards.variables import node_var
from exporter import catalog as c

W = c.WORKLOAD_LABELS
LABELS_TTL = ("namespace", "pod", "container", "horizon")
LABELS_GROWER = ("namespace", "pod", "container", "process", "kind")
ON_NODE = (JOB, NODE)
PSI_SOME, _PSI_FULL = c.PRESSURE_LEVELS
POD = (*ON_NODE, POD_CGROUP)  # pod-level cgroups of the node's pods
PODS_ON_NODE = f"max by (namespace, pod) ({metric(c.MEMORY_LIMIT_BYTES, *POD)})"


def per_pod(spec: c.MetricSpec, agg: str = "max") -> str:
    return f"{agg} by (namespace, pod) ({metric(spec, *POD)})"


def rule_on_node(agg: str, rule: str) -> str:
    """A recording rule (no job or instance label) for the pods of this node: joined to
    the node's raw series, which select $job and the node's exporter."""
    return f"{agg} by (namespace, pod) ({jobbed(rule, NODE)})"


def binding_on_node(agg: str, rule: str, labels: tuple[str, ...] = ("namespace", "pod")
                    ) -> str:
    """A forecast series of the binding cgroup of each pod on this node (the cgroup the
    page, explain, top and the pod dashboard speak of), reduced over ``labels``."""
    return f"{agg} by ({', '.join(labels)}) ({of_binding(jobbed(rule, NODE))})"


def panels(k: Knobs) -> list[Panel]:
    """The node's pods, their growth, tmpfs, GPUs and pressure."""
    return [
        row("Node"),
        stat(
            "Pods tracked",
            "Pods on this node whose cgroups headroom reads.",
            [(f"count({PODS_ON_NODE})", "")],
            unit="short", w=4,
        ),
        stat(
            "Memory charged to pods",
            "Sum of the pod cgroups' usage on this node (page cache included).",
            [(f"sum({per_pod(c.MEMORY_USAGE_BYTES)})", "")],
            unit="bytes", w=5,
        ),
        stat(
            "Unreclaimable, all pods",
            "Sum of what the kernel cannot reclaim in the pod cgroups on this node: the "
            "floor of node memory the pods hold.",
            [(f"sum({per_pod(c.MEMORY_UNRECLAIMABLE_BYTES)})", "")],
            unit="bytes", w=5,
        ),
        stat(
            "GPUs",
            "GPUs (or MIG instances) NVML reports on this node.",
            [(f"count(max by (gpu, uuid) ({metric(c.GPU_MEMORY_TOTAL_BYTES, *ON_NODE)}))", "")],
            unit="short", w=5, no_value="none",
        ),
        stat(
            "OOM kills in range",
            "OOM kills in the pods of this node during the time range, from any source "
            "(pod cgroups, containers: cgroup v1 counts a kill only in the victim's cgroup, "
            "headroom's watcher; per pod the largest, rounded).",
            [(f"sum({oom_kills(RANGE, NODE)}) or vector(0)", "")],
            unit="short", w=5, instant=True, steps=OOM_STEPS,
            runbooks=k.runbooks("HeadroomPodOOMKilled"),
        ),
        table(
            "Workloads on this node",
            "Every pod on the node (its pod cgroup): limit, usage, unreclaimable memory and "
            "its share of the limit, headroom, and the recorded time to the limit of its "
            f"binding cgroup ({r.TIME_TO_LIMIT} on {r.BINDING}; empty: no horizon forecasts "
            "a kill), the same figure as the page, explain and top. The pod name opens the "
            "pod dashboard.",
            [
                ("Limit", per_pod(c.MEMORY_LIMIT_BYTES), "bytes"),
                ("Usage", per_pod(c.MEMORY_USAGE_BYTES), "bytes"),
                ("Unreclaimable", per_pod(c.MEMORY_UNRECLAIMABLE_BYTES), "bytes"),
                ("Unreclaimable / limit", rule_on_node("max", r.UNRECLAIMABLE_RATIO),
                 "percentunit"),
                ("Headroom", rule_on_node("min", r.HEADROOM), "bytes"),
                ("Time to limit", binding_on_node("min", r.TIME_TO_LIMIT), "s"),
                ("tmpfs used", per_pod(c.TMPFS_USED_BYTES, "sum"), "bytes"),
            ],
            labels=["namespace", "pod"],
            sort_by="Unreclaimable / limit", descending=True,
            links={"pod": TABLE_POD_LINK},
            h=10,
        ),
        bargauge(
            "Soonest to the limit",
            f"The recorded time to the limit ({r.TIME_TO_LIMIT}) of the pods on this node "
            "that have one, named by the binding cgroup and the horizon that binds: the "
            "answer the page, explain and top give.",
            [(f"bottomk(10, "
              f"{name_pod_cgroup(binding_on_node('min', r.TIME_TO_LIMIT, LABELS_TTL))})",
              "{{namespace}}/{{pod}} {{container}} ({{horizon}})")],
            unit="s", w=12, h=7, links=[SERIES_POD_LINK],
            runbooks=k.runbooks("HeadroomMemoryFillingUp"),
        ),
        bargauge(
            "Top growers",
            f"What grows most in each pod's binding cgroup ({r.TOP_GROWER}): the process and "
            "kind the page's 'What grows' names, at the rate of the horizon that binds "
            "(day over day for the lasting horizon, else the last hour).",
            [(f"topk(10, {binding_on_node('max', r.TOP_GROWER, LABELS_GROWER)} > 0)",
              "{{namespace}}/{{pod}} {{container}}: {{process}} {{kind}}")],
            unit="binBps", w=12, h=7, links=[SERIES_POD_LINK],
        ),
        row("Memory"),
        timeseries(
            "Node memory: pods against what the node has",
            "The node's memory and what it could still give (MemAvailable), against the usage "
            "and the unreclaimable part of all pod cgroups on it.",
            [
                (metric(c.NODE_MEMORY_TOTAL_BYTES, *ON_NODE), "node total"),
                (metric(c.NODE_MEMORY_AVAILABLE_BYTES, *ON_NODE), "node available"),
                (f"sum({metric(c.MEMORY_USAGE_BYTES, *POD)})", "pods: usage"),
                (f"sum({metric(c.MEMORY_UNRECLAIMABLE_BYTES, *POD)})", "pods: unreclaimable"),
            ],
            unit="bytes", legend_table=True, overrides=[limit_style("node total")], min_zero=True,
            runbooks=k.runbooks("HeadroomNodeMemoryPressure"),
        ),
        timeseries(
            "Unreclaimable memory per pod",
            "What the kernel cannot reclaim in each pod cgroup on the node, stacked: the "
            "part of node memory page cache cannot give back.",
            [(per_pod(c.MEMORY_UNRECLAIMABLE_BYTES), "{{namespace}}/{{pod}}")],
            unit="bytes", stack=True, legend_table=True, links=[SERIES_POD_LINK], min_zero=True,
        ),
        timeseries(
            "Memory by kind, all pods",
            "Usage of all pod cgroups on the node by kind, least reclaimable at the bottom.",
            [
                (
                    f"sum(max by (namespace, pod, kind) "
                    f"({metric(c.MEMORY_BYTES, *POD, eq('kind', kind))}))",
                    kind,
                )
                for kind in c.MEMORY_KINDS
            ],
            unit="bytes", stack=True, legend_table=True, min_zero=True, overrides=kind_colours(),
        ),
        timeseries(
            "Headroom per pod",
            "Limit minus unreclaimable memory per pod (lowest over its cgroups).",
            [(rule_on_node("min", r.HEADROOM), "{{namespace}}/{{pod}}")],
            unit="bytes", legend_table=True, links=[SERIES_POD_LINK], min_zero=True,
        ),
        timeseries(
            "tmpfs used per pod",
            "Bytes on the pods' tmpfs mounts (/dev/shm, memory emptyDir): shmem charged to "
            "the pod, never reclaimed, kept across container restarts. Each mount's size is "
            "in the legend only (a node-sized /dev/shm would flatten the axis).",
            [
                (f"sum by (namespace, pod, mount) ({metric(c.TMPFS_USED_BYTES, *ON_NODE)})",
                 "{{namespace}}/{{pod}} {{mount}} used"),
                (f"max by (namespace, pod, mount) ({metric(c.TMPFS_SIZE_BYTES, *ON_NODE)})",
                 "{{namespace}}/{{pod}} {{mount}} size"),
            ],
            unit="bytes", legend_table=True, links=[SERIES_POD_LINK], min_zero=True,
            overrides=[legend_only(".* size$")],
            runbooks=k.runbooks("HeadroomSharedMemoryFillingUp", "HeadroomStaleSharedMemory"),
        ),
        row("GPUs"),
        timeseries(
            "GPU memory per GPU: used vs total",
            "Used and total memory of each GPU (or MIG instance) on the node, from NVML.",
            [
                (f"max by (gpu) ({metric(c.GPU_MEMORY_USED_BYTES, *ON_NODE)})", "GPU {{gpu}} used"),
                (f"max by (gpu) ({metric(c.GPU_MEMORY_TOTAL_BYTES, *ON_NODE)})",
                 "GPU {{gpu}} total"),
            ],
            unit="bytes", legend_table=True, overrides=[limit_style(".* total$")], min_zero=True,
        ),
        timeseries(
            "GPU memory per workload",
            "GPU memory each pod's processes use, per GPU (NVML per-process accounting).",
            [(
                f"sum by (namespace, pod, gpu) (max by {by(*W, 'process', 'gpu', 'uuid')} "
                f"({metric(c.PROCESS_GPU_MEMORY_BYTES, *ON_NODE)}))",
                "{{namespace}}/{{pod}} GPU {{gpu}}",
            )],
            unit="bytes", stack=True, legend_table=True, links=[SERIES_POD_LINK], min_zero=True,
        ),
        row("Pressure and OOM kills"),
        timeseries(
            "Memory pressure per pod (PSI some)",
            "Share of time at least one task of the pod stalled on memory (PSI, cgroup v2).",
            [(
                f"max by (namespace, pod) (rate("
                f"{metric(c.MEMORY_PRESSURE_SECONDS_TOTAL, *POD, eq('level', PSI_SOME))}[{RATE}]))",
                "{{namespace}}/{{pod}}",
            )],
            unit="percentunit", links=[SERIES_POD_LINK], min_zero=True,
        ),
        timeseries(
            "OOM kills per pod",
            "OOM kills per interval in the pods of this node, from any source (pod cgroup, "
            "containers, headroom's watcher; the largest, rounded): the same count on cgroup "
            "v1, which counts kills only in the victim's own container cgroup, and v2.",
            [(f"{oom_kills(RATE, NODE)} > 0", "{{namespace}}/{{pod}}")],
            unit="short", bars=True, links=[SERIES_POD_LINK], min_zero=True,
        ),
    ]


def dashboard(config: Config) -> Any:
    return assemble(
        uid="headroom-node",
        title="headroom / node",
        description="Every workload headroom tracks on one node, its GPUs and the memory "
        "its pods hold.",
        variables=[node_var()],
        panels=panels(Knobs(config)),
        links=[
            link("Fleet", dashboard_url("fleet"), tooltip="headroom / fleet"),
            link("This node's exporter", dashboard_url("exporter", "var-instance=${node}"),
                 tooltip="headroom / exporter for this node's exporter"),
        ],
    )
