"""Stale shared memory: files in a pod's memory-backed tmpfs that no live process of the
pod has open or mapped.

Pages of /dev/shm and ``emptyDir: {medium: Memory}`` files are shmem charged to the pod
until the file is removed. A process killed with SIGKILL (an OOM kill, a failed liveness
probe) cannot clean up: vLLM's CPU offload region (``vllm_offload_*.mmap``), its
multiprocessing segments (``psm_*``), SGLang's segments stay behind, and the restarted
container pays for them again (vLLM #51579, #54002, llm-d #364, sglang #40723).

How a file is found in use, without trusting names: the kernel's ``(st_dev, st_ino)`` of
each file, against what the pod's live processes hold:
- open file descriptors: one ``stat`` of each ``/proc/<pid>/fd/N`` (it follows the
  descriptor itself, so renames, other containers' mount paths and bind mounts do not
  matter; sockets and pipes simply match nothing);
- shared mappings (``/proc/<pid>/maps``: ``major:minor inode`` columns): read only while
  some file is still unaccounted for, and skipped for every process once all are.

A file that is mapped or open counts as live even when the holder is in another pod
(hostIPC): only processes of this pod are checked, so such a file would show as
orphaned here; pods with ``hostIPC`` share the host's /dev/shm and are not scanned.

Bounds: at most ``max_files`` entries walked per mount and ``max_depth`` levels; at most
``max_fds`` descriptors per process. Beyond a bound the result says so (``complete``
False) and counts only what it saw.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

FileId = tuple[int, int]  # (st_dev, st_ino)

# a maps line: "start-end perms offset major:minor inode   path"; tmpfs is an anonymous
# block device (major 0), so only "00:" lines can be tmpfs files
_MAPS_TMPFS = re.compile(rb"^\S+ \S+ \S+ 00:([0-9a-f]+) (\d+)", re.MULTILINE)


def maps_tmpfs_ids(text: bytes) -> set[FileId]:
    """``(st_dev, st_ino)`` of the files with major device 0 (tmpfs, shmem) that a
    process maps, from ``/proc/<pid>/maps``. Anonymous mappings (inode 0) are left out."""
    out = set()
    for minor, inode in _MAPS_TMPFS.findall(text):
        ino = int(inode)
        if ino:
            out.add((os.makedev(0, int(minor, 16)), ino))
    return out


@dataclass(frozen=True)
class TmpfsFile:
    path: str  # relative to the mount point
    fid: FileId
    bytes: int  # allocated (st_blocks * 512): what the pod is charged, sparse files too


@dataclass(frozen=True)
class Listing:
    files: tuple[TmpfsFile, ...]
    complete: bool  # False when a bound cut the walk short


def walk(root: str, max_files: int = 4096, max_depth: int = 8,
         lstat: Callable[[str], os.stat_result] = os.lstat,
         scandir: Callable[[str], AbstractContextManager[Iterator[os.DirEntry[str]]]]
         = os.scandir) -> Listing:
    """Regular files under ``root`` (a tmpfs mount seen through /proc/<pid>/root),
    without following symbolic links, within the bounds."""
    files: list[TmpfsFile] = []
    seen = 0
    complete = True
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        try:
            entries = scandir(os.path.join(root, rel) if rel else root)
        except OSError:
            continue  # removed meanwhile, or unreadable: nothing to count there
        with entries as it:
            for entry in it:
                seen += 1
                if seen > max_files:
                    return Listing(tuple(files), False)
                name = os.path.join(rel, entry.name) if rel else entry.name
                try:
                    st = lstat(os.path.join(root, name))
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if depth + 1 < max_depth:
                        stack.append((name, depth + 1))
                    else:
                        complete = False
                elif stat.S_ISREG(st.st_mode):
                    files.append(TmpfsFile(name, (st.st_dev, st.st_ino), st.st_blocks * 512))
    return Listing(tuple(files), complete)


@dataclass(frozen=True)
class Orphans:
    mount: str
    bytes: int
    files: tuple[str, ...]  # relative paths, largest first (for logs and the debug view)
    complete: bool


def orphans(mount: str, listing: Listing, held: set[FileId]) -> Orphans:
    lost = sorted((f for f in listing.files if f.fid not in held), key=lambda f: -f.bytes)
    return Orphans(mount, sum(f.bytes for f in lost), tuple(f.path for f in lost),
                   listing.complete)


# --- reading one pod ---------------------------------------------------------------------


@dataclass
class ProcReader:
    """The few /proc reads the scan needs, as functions (fixture trees and tests swap
    them)."""

    procfs: str = "/proc"
    max_fds: int = 4096
    listdir: Callable[[str], list[str]] = os.listdir
    stat: Callable[[str], os.stat_result] = os.stat
    read_bytes: Callable[[str], bytes] = field(default=lambda p: _read_bytes(p))

    def fd_ids(self, pid: int) -> set[FileId]:
        """(st_dev, st_ino) of everything ``pid`` has open."""
        base = f"{self.procfs}/{pid}/fd"
        out: set[FileId] = set()
        try:
            fds = self.listdir(base)
        except OSError:
            return out
        for fd in fds[: self.max_fds]:
            try:
                st = self.stat(f"{base}/{fd}")
            except OSError:
                continue
            out.add((st.st_dev, st.st_ino))
        return out

    def mapped_ids(self, pid: int) -> set[FileId]:
        try:
            return maps_tmpfs_ids(self.read_bytes(f"{self.procfs}/{pid}/maps"))
        except OSError:
            return set()


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def held_ids(pids: Sequence[int], wanted: set[FileId], reader: ProcReader) -> set[FileId]:
    """Which of ``wanted`` the processes hold: descriptors first (cheap), then maps, each
    process's only while something is still unaccounted for."""
    held: set[FileId] = set()
    for pid in pids:
        held |= reader.fd_ids(pid) & wanted
        if held >= wanted:
            return held
    for pid in pids:
        held |= reader.mapped_ids(pid) & wanted
        if held >= wanted:
            break
    return held


def scan_pod(mounts: Mapping[str, str], pids: Sequence[int], reader: ProcReader,
             list_mount: Callable[[str], Listing]) -> list[Orphans]:
    """``mounts``: mount point -> its path through /proc/<pid>/root (one live process of
    the pod); ``pids``: every live process of the pod."""
    listings = {mp: list_mount(path) for mp, path in mounts.items()}
    wanted = {f.fid for lst in listings.values() for f in lst.files}
    held = held_ids(pids, wanted, reader) if wanted else set()
    return [orphans(mp, lst, held) for mp, lst in sorted(listings.items())]
