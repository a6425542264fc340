"""The cgroup source: every tracked cgroup's memory files (``cgroup_files.py``, parsed by
``cgroup_parse.py``, which explains the figures), read through descriptors kept open, and
the node's memory (``meminfo.py``) for the cgroups without a limit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.collectors.cgroup_files import CgroupGone, read_cgroup
from exporter.collectors.meminfo import NodeMemory, parse_meminfo
from exporter.contract.source import (
    Context,
    Key,
    NoSettings,
    Result,
    SourceBase,
    SourceSpec,
    in_thread,
    partial_result,
)
from exporter.host.paths import HostPaths, MemoryHierarchy, OpenFiles, read_text
from exporter.model import CgroupMemory, CgroupRef


@dataclass(frozen=True)
class CgroupData:
    memory: Mapping[str, CgroupMemory]  # cgroup path -> figures
    node: NodeMemory


KEY: Key[CgroupData] = Key("cgroup")


class CgroupSource(SourceBase):
    """Every tracked cgroup's memory files, read through descriptors kept open."""

    def __init__(self, paths: HostPaths) -> None:
        self._paths = paths
        self._files = OpenFiles()  # used by one worker thread at a time (the guard)
        self._node: NodeMemory | None = None

    async def collect(self, ctx: Context) -> Result[CgroupData]:
        return await in_thread(lambda: self.read(ctx.hierarchy, ctx.refs))

    def read(self, h: MemoryHierarchy, refs: Sequence[CgroupRef]) -> Result[CgroupData]:
        try:
            self._node = parse_meminfo(read_text(self._paths.proc("meminfo")))
        except OSError:
            # /proc unreadable (a broken mount, a namespace that hides it): the cgroup
            # files still tell each cgroup's memory; node memory (the limit of an
            # unlimited cgroup) keeps its last value. procfs and tmpfs report the outage.
            if self._node is None:
                raise
        node = self._node
        out: dict[str, CgroupMemory] = {}
        errors: list[str] = []
        for ref in refs:
            try:
                out[ref.path] = read_cgroup(h, ref.path, node.total, self._files.read_text)
            except CgroupGone:
                continue  # a container exiting: not an error
            except (OSError, ValueError) as exc:
                errors.append(f"{ref.path}: {type(exc).__name__}: {exc}")
        self._files.sweep()
        return partial_result(CgroupData(out, node), errors, f"of {len(refs)} cgroups")

    async def aclose(self) -> None:
        self._files.close()


SPEC = SourceSpec(KEY, "memory of each tracked cgroup (memory.stat, events, PSI, limits)",
                  NoSettings, lambda _settings, paths: CgroupSource(paths))
