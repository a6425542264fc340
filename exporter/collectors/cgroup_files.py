"""Which files of a memory cgroup hold what, read through a ``Reader`` (an ``OpenFiles``
keeps them open and re-reads them with pread): everything for a scrape (``read_raw``),
and the sampler's few small files (usage, lifetime peak, own limit)."""

from __future__ import annotations

from collections.abc import Callable

from exporter.collectors.cgroup_parse import RawCgroup, parse_cgroup, parse_limit
from exporter.host.paths import MemoryHierarchy, read_text
from exporter.model import CgroupMemory


class CgroupGone(Exception):
    """The cgroup disappeared while it was read (a container exiting)."""


Reader = Callable[[str], str]


def _read(read: Reader, path: str) -> str | None:
    """File contents; None when the kernel does not offer the file (or PSI is off)."""
    try:
        return read(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        # PSI files exist but fail with EOPNOTSUPP when the kernel boots with psi=0.
        if exc.errno == 95:
            return None
        raise


def must_read(read: Reader, path: str) -> str:
    try:
        return read(path)
    except FileNotFoundError as exc:
        raise CgroupGone(path) from exc


def read_raw(hierarchy: MemoryHierarchy, rel: str, read: Reader = read_text) -> RawCgroup:
    f = hierarchy.file
    if hierarchy.version == 2:
        limits: list[str] = []
        parts = [p for p in rel.strip("/").split("/") if p]
        for depth in range(len(parts), 0, -1):  # the cgroup and each ancestor
            text = _read(read, f("/".join(parts[:depth]), "memory.max"))
            if text is not None:
                limits.append(text)
        return RawCgroup(
            version=2,
            usage=must_read(read, f(rel, "memory.current")),
            stat=must_read(read, f(rel, "memory.stat")),
            limits=tuple(limits),
            events=_read(read, f(rel, "memory.events")),
            pressure=_read(read, f(rel, "memory.pressure")),
            swap_current=_read(read, f(rel, "memory.swap.current")),
            high=_read(read, f(rel, "memory.high")),
            min=_read(read, f(rel, "memory.min")),
            low=_read(read, f(rel, "memory.low")),
        )
    return RawCgroup(
        version=1,
        usage=must_read(read, f(rel, "memory.usage_in_bytes")),
        stat=must_read(read, f(rel, "memory.stat")),
        limits=(),
        failcnt=_read(read, f(rel, "memory.failcnt")),
        oom_control=_read(read, f(rel, "memory.oom_control")),
        kmem_usage=_read(read, f(rel, "memory.kmem.usage_in_bytes")),
    )


def read_cgroup(
    hierarchy: MemoryHierarchy, rel: str, node_memory: int, read: Reader = read_text
) -> CgroupMemory:
    return parse_cgroup(read_raw(hierarchy, rel, read), node_memory)


def read_usage(hierarchy: MemoryHierarchy, rel: str, read: Reader = read_text) -> int:
    """The sampler's hot path: one small file."""
    name = "memory.current" if hierarchy.version == 2 else "memory.usage_in_bytes"
    return int(must_read(read, hierarchy.file(rel, name)))


def read_lifetime_peak(
    hierarchy: MemoryHierarchy, rel: str, read: Reader = read_text
) -> int | None:
    """memory.peak (v2, 5.19+) or memory.max_usage_in_bytes (v1); read-only use."""
    name = "memory.peak" if hierarchy.version == 2 else "memory.max_usage_in_bytes"
    text = _read(read, hierarchy.file(rel, name))
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_own_limit(hierarchy: MemoryHierarchy, rel: str, read: Reader = read_text,
                   ) -> int | None:
    """The cgroup's own limit (not its ancestors'): v2 memory.max, v1
    memory.limit_in_bytes; None when unlimited or absent (the sampler's pace)."""
    name = "memory.max" if hierarchy.version == 2 else "memory.limit_in_bytes"
    text = _read(read, hierarchy.file(rel, name))
    return None if text is None else parse_limit(text)
