"""What a pod's memory-backed tmpfs holds and which of it the pod's live processes use:
the reading half of the stale shared memory source (``tmpfs_orphans``).

How a file is found in use, without trusting names: the kernel's ``(st_dev, st_ino)`` of
each file, against what the pod's live processes hold:
- open file descriptors: one ``stat`` of each ``/proc/<pid>/fd/N`` (it follows the
  descriptor itself, so renames, other containers' mount paths and bind mounts do not
  matter; sockets and pipes simply match nothing);
- shared mappings (``/proc/<pid>/maps``: ``major:minor inode`` columns): read only while
  some file is still unaccounted for, and skipped for every process once all are.

Bounds: at most ``max_files`` entries walked per mount and ``max_depth`` levels; at most
``max_fds`` descriptors per process. Beyond a bound the result says so (``complete``
False) and counts only what it saw. A scan of a large pod is a ``ScanJob`` that goes on
over several scrapes within a budget.
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

Scandir = Callable[[int], AbstractContextManager[Iterator[os.DirEntry[str]]]]


def walk(root: str, max_files: int = 4096, max_depth: int = 8,
         scandir: Scandir = os.scandir) -> Listing:
    """Regular files under ``root`` (a tmpfs mount seen through /proc/<pid>/root),
    within the bounds, through directory descriptors: each directory is opened relative
    to its parent's descriptor with ``O_NOFOLLOW|O_DIRECTORY`` and listed by descriptor,
    and must lie on the mount's device. A pod that swaps a directory for a symbolic link
    between the listing and the descent gets ELOOP/ENOTDIR, never a walk of the path the
    link names (an ``lstat`` then a ``scandir`` by path would follow such a link, even to
    the exporter's own root). Open descriptors: at most ``max_depth``."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return Listing((), True)  # removed meanwhile, or unreadable: nothing to count
    files: list[TmpfsFile] = []
    state = _WalkState(max_files)
    try:
        dev = os.fstat(fd).st_dev
        _walk_dir(fd, "", 1, dev, max_depth, scandir, files, state)
    finally:
        os.close(fd)
    return Listing(tuple(files), state.complete)


@dataclass
class _WalkState:
    left: int  # entries still allowed
    complete: bool = True


def _walk_dir(fd: int, rel: str, depth: int, dev: int, max_depth: int, scandir: Scandir,
              files: list[TmpfsFile], state: _WalkState) -> None:
    subdirs: list[str] = []
    try:
        with scandir(fd) as it:
            for entry in it:
                state.left -= 1
                if state.left < 0:
                    state.complete = False
                    return
                try:
                    st = entry.stat(follow_symlinks=False)  # fstatat(fd, name, NOFOLLOW)
                except OSError:
                    continue
                if st.st_dev != dev:
                    continue  # another filesystem mounted inside: not this tmpfs
                if stat.S_ISDIR(st.st_mode):
                    if depth < max_depth:
                        subdirs.append(entry.name)
                    else:
                        state.complete = False
                elif stat.S_ISREG(st.st_mode):
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    files.append(TmpfsFile(name, (st.st_dev, st.st_ino), st.st_blocks * 512))
    except OSError:
        return  # removed meanwhile, or unreadable: nothing to count there
    for name in subdirs:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue  # gone, or no longer a directory (a symlink put there): skipped
        try:
            if os.fstat(child).st_dev == dev:
                _walk_dir(child, f"{rel}/{name}" if rel else name, depth + 1, dev,
                          max_depth, scandir, files, state)
        finally:
            os.close(child)
        if state.left < 0:
            return


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
        return self.fd_scan(pid)[0]

    def fd_scan(self, pid: int) -> tuple[set[FileId], int]:
        """``fd_ids`` and the number of descriptors stat'ed (what it cost)."""
        base = f"{self.procfs}/{pid}/fd"
        out: set[FileId] = set()
        try:
            fds = self.listdir(base)[: self.max_fds]
        except OSError:
            return out, 0
        for fd in fds:
            try:
                st = self.stat(f"{base}/{fd}")
            except OSError:
                continue
            out.add((st.st_dev, st.st_ino))
        return out, len(fds)

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


MAPS_COST = 16  # one /proc/<pid>/maps read, in descriptor stats


@dataclass
class ScanJob:
    """One pod's scan, carried across scrapes: a pod with 1,000 processes x 300
    descriptors whose tmpfs usage moves every second would otherwise be rescanned in full
    on every scrape (3-5 s, past the scrape's time limit). Its mounts are walked one at a
    time, then its processes' descriptors read one process at a time, then their maps,
    each step charged to the scrape's budget; a step may pass it by one walk or one
    process."""

    started: float
    used: tuple[tuple[str, int], ...]
    pid_set: tuple[int, ...]
    pids: tuple[int, ...]
    todo: list[tuple[str, str]]  # (mount point, path) still to walk
    listings: dict[str, Listing] = field(default_factory=dict)
    wanted: set[FileId] = field(default_factory=set)
    held: set[FileId] = field(default_factory=set)
    fd_next: int = 0  # the next process whose descriptors are read
    maps_next: int = 0  # the next process whose maps are read

    @property
    def settled(self) -> bool:
        """Every file found is held: nothing left to look for."""
        return not self.todo and self.held >= self.wanted

    @property
    def done(self) -> bool:
        return self.settled or (not self.todo and self.maps_next >= len(self.pids))

    def step(self, reader: ProcReader, budget: int,
             list_mount: Callable[[str], Listing]) -> int:
        """Work until done or ``budget`` is spent; returns what was spent."""
        spent = 0
        while self.todo and spent < budget:
            mount, path = self.todo.pop(0)
            listing = list_mount(path)
            self.listings[mount] = listing
            self.wanted |= {f.fid for f in listing.files}
            spent += 1 + len(listing.files)
        while not self.todo and self.fd_next < len(self.pids) and spent < budget \
                and not self.settled:
            ids, cost = reader.fd_scan(self.pids[self.fd_next])
            self.held |= ids & self.wanted
            self.fd_next += 1
            spent += 1 + cost
        if self.fd_next < len(self.pids) and not self.settled:
            return spent
        while self.maps_next < len(self.pids) and spent < budget and not self.settled:
            self.held |= reader.mapped_ids(self.pids[self.maps_next]) & self.wanted
            self.maps_next += 1
            spent += MAPS_COST
        return spent

    def result(self) -> tuple[Orphans, ...]:
        return tuple(orphans(mp, lst, self.held) for mp, lst in sorted(self.listings.items()))

