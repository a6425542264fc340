"""The only module that knows where /proc and the cgroup filesystem live.

Everything reads host files through a ``HostPaths`` so tests run on fixture trees
(node_exporter's ``--path.procfs`` / ``--path.cgroupfs``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from exporter.model import CgroupVersion


class CgroupLayoutError(Exception):
    """No memory controller was found under the cgroupfs root."""


@dataclass(frozen=True)
class MemoryHierarchy:
    """Where the memory controller is mounted, and which cgroup version it speaks."""

    root: Path  # the memory controller's root directory
    version: CgroupVersion

    def dir(self, rel: str) -> Path:
        return self.root / rel.strip("/") if rel.strip("/") else self.root


@dataclass(frozen=True)
class HostPaths:
    procfs: Path = Path("/proc")
    cgroupfs: Path = Path("/sys/fs/cgroup")

    def proc(self, *parts: str | int) -> Path:
        return self.procfs.joinpath(*(str(p) for p in parts))

    def detect_memory_hierarchy(self) -> MemoryHierarchy:
        """Find the memory controller by the files present, not by kernel version.

        Unified (v2) at the root, v1 at ``memory/``, or v2 at ``unified/`` on a hybrid
        host where the memory controller was given to v2.
        """
        root = self.cgroupfs
        for candidate in (root, root / "unified"):
            if "memory" in _read_words(candidate / "cgroup.controllers"):
                return MemoryHierarchy(candidate, 2)
        v1 = root / "memory"
        if (v1 / "memory.usage_in_bytes").exists():
            return MemoryHierarchy(v1, 1)
        if (root / "memory.usage_in_bytes").exists():  # a v1 memory mount passed directly
            return MemoryHierarchy(root, 1)
        # v2 root cgroup.controllers may be absent in a fixture that holds only a subtree
        if (root / "memory.stat").exists() and not (root / "memory.usage_in_bytes").exists():
            return MemoryHierarchy(root, 2)
        raise CgroupLayoutError(
            f"no memory cgroup controller under {root} (looked for a v2 'memory' in "
            f"cgroup.controllers, and v1 {v1}/memory.usage_in_bytes)"
        )


def _read_words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def self_memory_cgroup(procfs: Path = Path("/proc"), pid: int | str = "self") -> str:
    """The memory cgroup path of a process (relative, no leading slash).

    On v1 the line with ``memory`` in its controller list; on a pure v2 host the ``0::``
    line. Hybrid hosts list both; the v1 memory line wins when it exists.
    """
    text = (procfs / str(pid) / "cgroup").read_text()
    v2_path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "memory" in controllers.split(","):
            return path.strip("/")
        if parts[0] == "0" and controllers == "":
            v2_path = path.strip("/")
    if v2_path is None:
        raise CgroupLayoutError(f"no memory cgroup in {procfs}/{pid}/cgroup")
    return v2_path


def page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")
