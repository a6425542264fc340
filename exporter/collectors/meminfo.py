"""The node's memory from /proc/meminfo: the limit of a cgroup that has none of its own,
and what is still available."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeMemory:
    total: int  # MemTotal
    available: int  # MemAvailable


def node_memory_bytes(meminfo: str, key: str = "MemTotal") -> int:
    for line in meminfo.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no {key} in meminfo")


def parse_meminfo(meminfo: str) -> NodeMemory:
    return NodeMemory(node_memory_bytes(meminfo), node_memory_bytes(meminfo, "MemAvailable"))
