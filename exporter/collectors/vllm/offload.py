"""The CPU KV-offload tier's real host bytes, from the kernel's view of vLLM's processes.

vLLM 0.3x keeps the CPU tier in one shared region, ``/dev/shm/vllm_offload_<engine>.mmap``
(v1/kv_offload/cpu/shared_offload_region.py): created by the first worker, mapped in full
by every worker, pre-faulted (MADV_POPULATE_WRITE) and usually unlinked once all have
mapped it (then the path shows as ``... (deleted)``). Its mapped size is what the pod pays
in shmem, whatever the configured ``kv_offloading_size`` says: earlier tiers were torch
pinned tensors, which the CUDA host allocator rounds up to a power of two (vLLM #53042,
#56410: about 1.9x). The tier's residency never comes from
``vllm:kv_offload_cpu_cache_usage_perc``: that gauge counts blocks pinned by in-flight
transfers and reads 0 at idle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# "start-end perms offset major:minor inode   /dev/shm/vllm_offload_<id>.mmap[ (deleted)]"
_REGION = re.compile(
    rb"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ ([0-9a-f]+:[0-9a-f]+) (\d+) +"
    rb"\S*/vllm_offload_[^/\n]*\.mmap(?: \(deleted\))?$", re.MULTILINE)


def offload_regions(maps: bytes) -> dict[tuple[bytes, int], int]:
    """(device, inode) -> bytes mapped, for the offload regions one process maps (the
    largest mapping of each file: a region is mapped whole)."""
    out: dict[tuple[bytes, int], int] = {}
    for start, end, dev, inode in _REGION.findall(maps):
        key = (dev, int(inode))
        out[key] = max(out.get(key, 0), int(end, 16) - int(start, 16))
    return out


def offload_region_bytes(pids: Iterable[int], read_maps: Callable[[int], bytes]) -> int:
    """Host bytes of the offload regions the processes map, each region counted once."""
    regions: dict[tuple[bytes, int], int] = {}
    for pid in pids:
        try:
            found = offload_regions(read_maps(pid))
        except OSError:
            continue  # exited meanwhile
        for key, size in found.items():
            regions[key] = max(regions.get(key, 0), size)
    return sum(regions.values())
