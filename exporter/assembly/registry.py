"""The one registry of sources, in scrape order (node_exporter's registerCollector).

Each entry yields its ``--collector.<name>`` flag, its settings' flags with their
``HEADROOM_*`` twins, its place in the scrape, and its chart value and schema entry
(``headroom generate`` writes those). A new source is one module with a ``SPEC``, one
line here, and its field in the join and function in the render table (exporter/contract/source.py).
"""

from __future__ import annotations

from exporter.collectors import cgroup, node_pressure, nvml, procfs, tmpfs, tmpfs_orphans
from exporter.collectors.kube import pods as kubernetes
from exporter.collectors.vllm import servers as vllm
from exporter.contract.source import Registered

# Order matters: tmpfs and vLLM read procfs's process table, tmpfs_orphans also tmpfs's
# mounts; the join reads them all.
SOURCES: tuple[Registered, ...] = (
    cgroup.SPEC,
    procfs.SPEC,
    tmpfs.SPEC,
    tmpfs_orphans.SPEC,
    nvml.SPEC,
    vllm.SPEC,
    kubernetes.SPEC,
    node_pressure.SPEC,
)

NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


def spec(name: str) -> Registered:
    return next(s for s in SOURCES if s.name == name)
