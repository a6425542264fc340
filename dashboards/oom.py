"""The dashboards' count of OOM kills per pod: one query, read by the fleet, node and pod
dashboards (tiles, tables and the kill annotation) alike."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.selectors import ANY_CONTAINER, JOB, POD_CGROUP, by, eq, metric
from exporter import catalog as c


def oom_kills(increase_range: str, *scope: str, by_labels: Sequence[str] = ("namespace", "pod")
              ) -> str:
    """OOM kills per pod from every source, on cgroup v1 and v2, as a whole number.

    The pod cgroup's ``oom_kill`` counts its containers' kills, even a container's whose
    cgroup is gone after a restart (v2: the kernel's hierarchical count; v1: the exporter
    sums them, the kernel counting a kill only in the victim's own cgroup); the
    containers' own counters, summed, are the second source. The kernel's counters count
    each process a memory.oom.group kill signals; headroom's watcher counter, the third
    source, counts each kill once as ``exporter/oom/watcher.py`` defines it (a 0 for each
    process name running in the pod, so increase() sees a first kill). The largest of the
    three is the count; increase() extrapolates to the range edges, hence round()."""
    grouping = by(*by_labels)
    events = c.MEMORY_EVENTS_TOTAL
    kill = eq("event", c.EVENT_OOM_KILL)
    sources = (
        ("pod cgroup", metric(events, JOB, *scope, POD_CGROUP, kill)),
        ("containers", metric(events, JOB, *scope, ANY_CONTAINER, kill)),
        ("watcher", metric(c.OOM_KILLS_TOTAL, JOB, *scope)),
    )
    parts = [
        f'label_replace(sum by {grouping} (increase({sel_}[{increase_range}])), '
        f'"source", "{name}", "", "")'
        for name, sel_ in sources
    ]
    union = "\n  or ".join(parts)
    return f"round(max by {grouping} (\n  {union}\n))"
