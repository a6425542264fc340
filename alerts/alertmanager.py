"""Alertmanager routing, grouping and inhibition for headroom's alerts: one page per
problem. Rendered to ``alerts/alertmanager.yaml`` (a complete, valid configuration to
merge into yours: take ``inhibit_rules`` and the ``routes`` under your own root) and
copied into the chart.

* Grouping by alertname, namespace and pod: the container and the pod-level cgroup of
  one pod, if both ever fire, arrive as one notification.
* A page for a pod mutes its memory tickets (FillingUp warning, ReclaimAtLimit, ...):
  the page's runbook covers them.
* HeadroomMemoryFillingUp (critical) mutes HeadroomMemoryNearLimit of the same pod: a
  pod that fills up is near its limit at the end, and that is the same problem.

The scenario replay (``alerts.tests.evaluate``) applies these same rules when it counts
notifications; ``alerts/tests/test_alertmanager.py`` checks them on a real Alertmanager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Memory tickets a page of the same pod makes redundant (not HeadroomPodOOMKilled: a
# kill is news even while the page is on, nor the meta alerts).
MEMORY_WARNINGS: tuple[str, ...] = (
    "HeadroomMemoryFillingUp",
    "HeadroomMemoryReclaimAtLimit",
    "HeadroomHiddenMemoryGrowth",
    "HeadroomSharedMemoryFillingUp",
    "HeadroomStaleSharedMemory",
    "HeadroomKVOffloadWillNotFit",
)
POD_PAGES: tuple[str, ...] = ("HeadroomMemoryFillingUp", "HeadroomMemoryNearLimit")
GROUP_BY: tuple[str, ...] = ("alertname", "namespace", "pod")
PAGER, TICKETS = "headroom-pager", "headroom-tickets"


@dataclass(frozen=True)
class Inhibit:
    """An inhibit rule: exact label matchers (a value with ``|`` is a regex of
    alternatives) on the source and the target, and the labels they must share."""

    source: tuple[tuple[str, str], ...]
    target: tuple[tuple[str, str], ...]
    equal: tuple[str, ...] = ("namespace", "pod")


INHIBIT_RULES: tuple[Inhibit, ...] = (
    Inhibit(source=(("alertname", "|".join(POD_PAGES)), ("severity", "critical")),
            target=(("alertname", "|".join(MEMORY_WARNINGS)), ("severity", "warning"))),
    Inhibit(source=(("alertname", "HeadroomMemoryFillingUp"), ("severity", "critical")),
            target=(("alertname", "HeadroomMemoryNearLimit"), ("severity", "critical"))),
)


def matcher(label: str, value: str, regex: bool | None = None) -> str:
    """Alertmanager (and PromQL) matcher text: ``=~`` where the value lists several."""
    op = "=~" if (regex if regex is not None else "|" in value) else "="
    return f'{label}{op}"{value}"'


def config(group_wait: str = "30s", group_interval: str = "5m",
           repeat_interval: str = "12h") -> dict[str, Any]:
    """The configuration, as a dict (receivers empty: name yours the same or rename)."""
    return {
        "route": {
            "receiver": TICKETS,
            "group_by": list(GROUP_BY),
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
            "routes": [
                {"receiver": PAGER, "matchers": [
                    matcher("alertname", "Headroom.*", regex=True), 'severity="critical"']},
                {"receiver": TICKETS, "matchers": [
                    matcher("alertname", "Headroom.*", regex=True)]},
            ],
        },
        "inhibit_rules": [
            {
                "source_matchers": [matcher(k, v) for k, v in r.source],
                "target_matchers": [matcher(k, v) for k, v in r.target],
                "equal": list(r.equal),
            }
            for r in INHIBIT_RULES
        ],
        "receivers": [{"name": PAGER}, {"name": TICKETS}],
    }
