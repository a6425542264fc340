"""The dashboards' count of OOM kills per pod: one query, read by the fleet, node and pod
dashboards (tiles, tables and the kill annotation) alike."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.selectors import ANY_CONTAINER, JOB, POD_CGROUP, by, eq, metric
from exporter import catalog as c


def oom_kills(increase_range: str, *scope: str, by_labels: Sequence[str] = ("namespace", "pod")
              ) -> str:
    """OOM kills per pod from every source, on cgroup v1 and v2, as a whole number.

    v2: the pod cgroup's ``oom_kill`` is hierarchical (it counts its containers, even a
    container whose cgroup is gone after a restart). v1: only the victim's own cgroup
    counts it (memory.oom_control), the pod level stays 0: the containers' counters are
    summed. headroom's watcher counter is the third source (its series is born at the
    first kill of a process name, so increase() counts the kills after that one). The
    largest of the three is the count; increase() extrapolates to the range edges, hence
    round()."""
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
