"""What the kernel counts per kill domain, as the OOM watcher reads it: v2
``memory.events``, v1 ``memory.oom_control`` (what one kill is lives in
``oom/watcher.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog import EVENT_OOM_KILL
from exporter.collectors.cgroup_files import Reader, must_read
from exporter.collectors.cgroup_parse import parse_flat_keyed
from exporter.host.paths import MemoryHierarchy, read_text


@dataclass(frozen=True)
class KillCounters:
    """A kill domain's counters (the OOM watcher's input): ``oom_kill`` counts processes
    killed, whichever limit was hit; v2's ``oom_group_kill`` counts memory.oom.group kills
    of a whole cgroup (one kill however many processes it took)."""

    oom_kill: int
    oom_group_kill: int = 0


def parse_kill_counters(text: str) -> KillCounters | None:
    """From memory.events (v2) or memory.oom_control (v1); None without an oom_kill key."""
    keyed = parse_flat_keyed(text)
    if EVENT_OOM_KILL not in keyed:
        return None
    return KillCounters(keyed[EVENT_OOM_KILL], keyed.get("oom_group_kill", 0))


def read_kill_counters(hierarchy: MemoryHierarchy, rel: str, read: Reader = read_text) -> (
    KillCounters | None
):
    """The kill counters of one cgroup (None when the kernel has none): v2
    ``memory.events`` (hierarchical: a pod-level cgroup counts its containers' kills; its
    ``memory.events.local`` never moves, it holds no processes: seen on a real v2
    kernel), v1 ``memory.oom_control`` (the cgroup's own processes only). Raises
    CgroupGone when the cgroup was removed."""
    name = "memory.events" if hierarchy.version == 2 else "memory.oom_control"
    return parse_kill_counters(must_read(read, hierarchy.file(rel, name)))
