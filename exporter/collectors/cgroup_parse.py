"""Memory of a cgroup from the contents of its cgroup v2 or v1 files: pure functions from
text to a ``CgroupMemory`` (``cgroup_files.py`` reads the files). What the kernel offers
is detected by which files and keys exist, not by version numbers: a missing file means
"not offered", never a failure.

The ``kind`` partition (all bytes):

    anon          v2 ``anon``; v1 ``total_rss`` (anonymous, not shmem)
    shmem         ``shmem`` / ``total_shmem``: tmpfs, /dev/shm, shared anonymous, CUDA
                  pinned host memory; unreclaimable without swap
    file_active   ``active_file`` / ``total_active_file``
    file_inactive ``inactive_file`` / ``total_inactive_file``
    kernel        v2 ``kernel`` (or the sum of slab, kernel_stack, pagetables, percpu,
                  vmalloc on kernels before 5.18); v1 ``memory.kmem.usage_in_bytes``
    sock          v2 ``sock`` (v1 charges socket buffers outside memory.usage_in_bytes)
    unaccounted   usage minus all of the above: pages the stat keys miss (unevictable
                  file pages, stat batching drift, kernel memory on v1 without kmem files)

The kernel's per-cpu stat batching can make the kinds add up to a little more than usage;
the excess is then taken off ``file_inactive`` (then ``file_active``) so the partition stays
exact and non-negative.

``unreclaimable = usage - active_file - inactive_file - slab_reclaimable``: with no swap
the kernel can only take back clean file pages and reclaimable slab; anon, shmem,
unevictable pages, the rest of kernel memory and the residual stay. Dirty file pages count
as reclaimable (they are written back first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.catalog import EVENT_MAX, EVENT_OOM_KILL
from exporter.model import CgroupMemory, CgroupVersion

V2_KERNEL_PARTS = ("slab", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "vmalloc")
V1_UNLIMITED_FLOOR = 1 << 62  # v1 reports "no limit" as PAGE_COUNTER_MAX pages



def parse_flat_keyed(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, memory.events, oom_control)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.isdigit():
            out[key] = int(value)
    return out


_V1_STAT_KEYS = (
    *(prefix + key
      for key in ("rss", "shmem", "active_file", "inactive_file", "swap")
      for prefix in ("total_", "")),
    "hierarchical_memory_limit",
)
_V2_STAT_KEYS = (
    "anon", "shmem", "active_file", "inactive_file", "kernel", "sock", "slab_reclaimable",
    *V2_KERNEL_PARTS,
)


def parse_stat(text: str, version: CgroupVersion) -> dict[str, int]:
    """The memory.stat keys the contract needs. v1's file has ~70 lines, read for every
    cgroup on every scrape: finding a dozen keys beats splitting every line (5x)."""
    text = "\n" + text
    out: dict[str, int] = {}
    for key in _V1_STAT_KEYS if version == 1 else _V2_STAT_KEYS:
        i = text.find(f"\n{key} ")
        if i >= 0:
            start = i + len(key) + 2
            end = text.find("\n", start)
            value = text[start:end if end >= 0 else None]
            if value.isdigit():
                out[key] = int(value)
    return out


def parse_pressure(text: str) -> dict[str, float]:
    """PSI ``some avg10=... total=<us>`` lines -> level -> seconds stalled."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        for kv in fields[1:]:
            key, _, value = kv.partition("=")
            if key == "total":
                out[fields[0]] = int(value) / 1e6
    return out


def parse_limit(text: str) -> int | None:
    """``max`` (v2) or a huge v1 value means no limit."""
    text = text.strip()
    if text in ("", "max"):
        return None
    value = int(text)
    return None if value >= V1_UNLIMITED_FLOOR else value


@dataclass(frozen=True)
class RawCgroup:
    """File contents of one cgroup; None where the file does not exist."""

    version: CgroupVersion
    usage: str
    stat: str
    limits: tuple[str, ...]  # memory.max of the cgroup and each ancestor (v2); [] on v1
    events: str | None = None  # v2 memory.events
    pressure: str | None = None  # v2 memory.pressure
    swap_current: str | None = None  # v2 memory.swap.current
    failcnt: str | None = None  # v1
    oom_control: str | None = None  # v1
    kmem_usage: str | None = None  # v1 memory.kmem.usage_in_bytes
    high: str | None = None  # v2 memory.high (MemoryQoS throttling point)
    min: str | None = None  # v2 memory.min (hard protection)
    low: str | None = None  # v2 memory.low (best-effort protection)


def partition(
    usage: int, stat: Mapping[str, int], version: CgroupVersion, kmem: int | None
) -> dict[str, int]:
    """Split usage into kinds that sum to it exactly (see the module docstring)."""
    if version == 2:
        kernel = stat.get("kernel")
        if kernel is None:
            kernel = sum(stat.get(k, 0) for k in V2_KERNEL_PARTS)
        kinds = {
            "anon": stat.get("anon", 0),
            "shmem": stat.get("shmem", 0),
            "file_active": stat.get("active_file", 0),
            "file_inactive": stat.get("inactive_file", 0),
            "kernel": kernel,
        }
        if "sock" in stat:
            kinds["sock"] = stat["sock"]
    else:
        kinds = {
            "anon": stat.get("total_rss", stat.get("rss", 0)),
            "shmem": stat.get("total_shmem", stat.get("shmem", 0)),
            "file_active": stat.get("total_active_file", stat.get("active_file", 0)),
            "file_inactive": stat.get("total_inactive_file", stat.get("inactive_file", 0)),
        }
        if kmem is not None:
            kinds["kernel"] = kmem
    residual = usage - sum(kinds.values())
    if residual < 0:
        # Stat drift: take the excess off the reclaimable page cache, never below zero.
        excess = -residual
        for key in ("file_inactive", "file_active", "kernel", "shmem", "anon"):
            if key in kinds and excess:
                cut = min(kinds[key], excess)
                kinds[key] -= cut
                excess -= cut
        residual = 0
    kinds["unaccounted"] = residual
    return kinds


def unreclaimable(usage: int, stat: Mapping[str, int], version: CgroupVersion) -> int:
    prefix = "total_" if version == 1 and "total_active_file" in stat else ""
    reclaimable = (
        stat.get(prefix + "active_file", 0)
        + stat.get(prefix + "inactive_file", 0)
        + stat.get("slab_reclaimable", 0)  # v2 only; v1 does not split slab
    )
    return max(0, usage - reclaimable)


def working_set(usage: int, stat: Mapping[str, int], version: CgroupVersion) -> int:
    key = "total_inactive_file" if version == 1 and "total_inactive_file" in stat else (
        "inactive_file"
    )
    return max(0, usage - stat.get(key, 0))


def effective_limit(raw: RawCgroup, stat: Mapping[str, int], node_memory: int) -> int:
    """The smallest limit on the path to the root; node memory when none is set."""
    candidates = [node_memory]
    if raw.version == 1:
        limit = stat.get("hierarchical_memory_limit")
        if limit is not None and limit < V1_UNLIMITED_FLOOR:
            candidates.append(limit)
    for text in raw.limits:
        parsed = parse_limit(text)
        if parsed is not None:
            candidates.append(parsed)
    return min(candidates)


def parse_events(raw: RawCgroup) -> dict[str, int]:
    if raw.version == 2:
        return parse_flat_keyed(raw.events) if raw.events is not None else {}
    events: dict[str, int] = {}
    if raw.failcnt is not None:
        events[EVENT_MAX] = int(raw.failcnt.strip() or 0)
    if raw.oom_control is not None:
        oom = parse_flat_keyed(raw.oom_control)
        if EVENT_OOM_KILL in oom:
            events[EVENT_OOM_KILL] = oom[EVENT_OOM_KILL]
    return events


def parse_qos(text: str | None, unset: str) -> int | None:
    """memory.high / memory.min / memory.low: bytes, or None when absent or ``unset``
    (``max`` for high, ``0`` for the protections)."""
    if text is None or text.strip() in ("", unset):
        return None
    value = text.strip()
    return int(value) if value.isdigit() else None


def parse_cgroup(raw: RawCgroup, node_memory: int) -> CgroupMemory:
    """All of one cgroup's contract figures from its file contents."""
    usage = int(raw.usage.strip())
    stat = parse_stat(raw.stat, raw.version)
    kmem = int(raw.kmem_usage.strip()) if raw.kmem_usage is not None else None
    if raw.version == 2:
        swap = int(raw.swap_current.strip()) if raw.swap_current is not None else None
    else:
        swap = stat.get("total_swap", stat.get("swap"))
    return CgroupMemory(
        usage=usage,
        limit=effective_limit(raw, stat, node_memory),
        working_set=working_set(usage, stat, raw.version),
        kinds=partition(usage, stat, raw.version, kmem),
        unreclaimable=unreclaimable(usage, stat, raw.version),
        swap=swap,
        events=parse_events(raw),
        pressure=parse_pressure(raw.pressure) if raw.pressure is not None else {},
        high=parse_qos(raw.high, "max"),
        min=parse_qos(raw.min, "0"),
        low=parse_qos(raw.low, "0"),
    )
