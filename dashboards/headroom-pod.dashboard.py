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

from typing import Any

from dashboards.knobs import Knobs
from dashboards.layout import assemble
from dashboards.links import dashboard_url, link
from dashboards.names import Config
from dashboards.oom import oom_kills
from dashboards.panels import annotation
from dashboards.pod.details import details
from dashboards.pod.first_screen import first_screen
from dashboards.pod.queries import OOM_DOCS, RAW, SCOPE
from dashboards.selectors import ANY_CONTAINER, NAMESPACE, POD, RATE, W, by, metric
from dashboards.variables import container_var, exporter_var, namespace_var, pod_var
from exporter import catalog as c

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


def dashboard(config: Config) -> Any:
    k = Knobs(config)
    return assemble(
        uid="headroom-pod",
        title="headroom / pod memory",
        description="One pod: how close to its memory limit and when it will hit it, what "
        "grows and in which process, memory no process accounts for, and vLLM's KV cache and "
        "offload tier, on the first screen; details by cgroup, kind and process below.",
        variables=[namespace_var(multi=False), pod_var(), container_var(), exporter_var()],
        panels=[*first_screen(k), *details(k)],
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
