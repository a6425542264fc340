"""The OOM watcher's output as a source's data: the kills it counted, read once per
scrape and joined like every other source's ``Result`` (``exporter/exposition/join.py``).

What counts as one kill (a memory.oom.group kill of several processes is one; history
before the exporter started is not news) is defined in one place, the watcher
(``exporter/oom/watcher.py``); this module only carries its counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.contract.source import Key
from exporter.model import Workload


@dataclass(frozen=True)
class KillTally:
    """Both counts as of one moment (read together, so a scrape never shows a kill in
    one and not in the other)."""

    # (pod-level labels, victim's process name) -> kills: headroom_oom_kills_total
    by_process: Mapping[tuple[Workload, str], int] = field(default_factory=dict)
    # v1 pod-level cgroup path -> its containers' kills: the kernel counts a kill only in
    # the victim's own cgroup there, so the pod level's oom_kill event is this figure.
    pod_level: Mapping[str, int] = field(default_factory=dict)


KEY: Key[KillTally] = Key("oom")
