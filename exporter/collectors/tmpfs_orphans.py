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
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from exporter.collectors import procfs, tmpfs
from exporter.degraded import CAP_SYS_PTRACE, DEGRADED
from exporter.model import CgroupRef
from exporter.paths import HostPaths
from exporter.settings import Settings, parse_duration, positive, setting
from exporter.source import (
    Context,
    Key,
    Result,
    SourceBase,
    SourceSpec,
    in_thread,
    partial_result,
)

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


# --- the source -------------------------------------------------------------------------


@dataclass(frozen=True)
class TmpfsOrphansSettings(Settings):
    interval: float = setting(
        "--tmpfs.orphans-interval", "60s", parse_duration,
        "how often a pod's tmpfs files are checked against its processes' open files and "
        "mappings (sooner when the mount's used bytes change)", check=positive)
    # processes whose descriptors and mappings one scrape may read: the rest of the due
    # pods wait for the next scrape, keeping their last figure (not a flag)
    budget: int = 512


@dataclass(frozen=True)
class TmpfsOrphansData:
    # pod-level cgroup path (or tracked cgroup) -> mount point -> orphaned bytes
    orphans: Mapping[str, Mapping[str, int]]


KEY: Key[TmpfsOrphansData] = Key("tmpfs_orphans")


@dataclass
class _Scan:
    at: float
    used: tuple[tuple[str, int], ...]  # the mounts' used bytes then (a change: scan again)
    pids: tuple[int, ...]  # the pod's processes then (one gone: its files may be orphans)
    result: tuple[Orphans, ...]


class TmpfsOrphansSource(SourceBase):
    """Per pod: files of its memory-backed tmpfs that none of its live processes holds.

    Runs after procfs (the pod's pids) and tmpfs (its mounts and their used bytes): a pod
    whose mounts are empty costs nothing; the others are rescanned when a mount's used
    bytes change, when one of the pod's processes is gone (what it held may now be
    orphaned) or ``interval`` has passed. A pod sharing the host's IPC namespace
    (hostIPC: the host's /dev/shm) is not looked at: its files are everyone's.
    """

    def __init__(self, settings: TmpfsOrphansSettings, paths: HostPaths,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._paths = paths
        self._clock = clock
        self._reader = ProcReader(procfs=str(paths.procfs))
        self._scans: dict[str, _Scan] = {}

    async def collect(self, ctx: Context) -> Result[TmpfsOrphansData]:
        pf, tf = ctx.get(procfs.KEY), ctx.get(tmpfs.KEY)
        if pf is None or tf is None:
            return Result(None)
        return await in_thread(lambda: self.read(ctx.refs, pf, tf))

    def read(self, refs: Sequence[CgroupRef], pf: procfs.ProcfsData,
             tf: tmpfs.TmpfsData) -> Result[TmpfsOrphansData]:
        now = self._clock()
        out: dict[str, dict[str, int]] = {}
        errors: list[str] = []
        found: list[_Pod] = []
        for owner, members in tmpfs.mount_owners(refs).items():
            mounts = tf.mounts.get(owner, ())
            pids = [p.pid for r in members for p in pf.processes.get(r.path, ())]
            if not pids or not any(m.used for m in mounts):
                self._scans.pop(owner, None)
                if mounts:
                    out[owner] = {m.mount: 0 for m in mounts}
                continue
            pod = self._locate(owner, pids, {m.mount: m.used for m in mounts})
            if pod is not None:
                found.append(pod)
        # A tmpfs seen by more than one pod (hostIPC pods, a host without mount
        # namespaces) or the host's own /dev/shm is nobody's to judge: left out.
        owners_of = Counter(dev for pod in found for dev in set(pod.devs.values()))
        host = self._host_shm_dev()
        due: list[tuple[int, float, _Pod]] = []
        for pod in found:
            pod.mounts = {mp: dev for mp, dev in pod.devs.items()
                          if owners_of[dev] == 1 and dev != host}
            if not pod.mounts:
                self._scans.pop(pod.owner, None)
                continue
            scan = self._scans.get(pod.owner)
            if scan is None or scan.used != pod.used or scan.pids != pod.pid_set:
                due.append((0, 0.0, pod))  # what changed first
            elif now - scan.at >= self._settings.interval:
                due.append((1, scan.at, pod))  # then the stalest
            if scan is not None:
                out[pod.owner] = {o.mount: o.bytes for o in scan.result}
        budget = self._settings.budget
        for _, _, pod in sorted(due, key=lambda d: d[:2]):
            if budget <= 0:
                break  # the next scrape goes on from here
            budget -= len(pod.pids)
            targets = {mp: f"{pod.root}{mp}" for mp in pod.mounts}
            try:
                result = scan_pod(targets, pod.pids, self._reader, walk)
            except PermissionError as exc:
                errors.append(f"{pod.owner}: {exc}")
                DEGRADED.report(KEY.name, CAP_SYS_PTRACE, f"no orphaned tmpfs files: {exc}")
                continue
            self._scans[pod.owner] = _Scan(now, pod.used, pod.pid_set, tuple(result))
            out[pod.owner] = {o.mount: o.bytes for o in result}
            errors += [f"{pod.owner}: {o.mount} has more files than looked at"
                       for o in result if not o.complete]
        for gone in set(self._scans) - set(out):
            del self._scans[gone]
        return partial_result(TmpfsOrphansData(out), errors, "pods")

    def _host_shm_dev(self) -> int | None:
        try:
            return os.stat(f"{self._paths.procfs}/1/root/dev/shm").st_dev
        except OSError:
            return None

    def _locate(self, owner: str, pids: list[int], used: Mapping[str, int]) -> _Pod | None:
        """The pod's mounts as one of its first live processes sees them (its mount
        namespace); None when none of them is alive any more."""
        for pid in pids[:3]:
            root = f"{self._paths.procfs}/{pid}/root"
            try:
                devs = {mp: os.stat(f"{root}{mp}").st_dev for mp in used}
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # exited (or not ours to look into): the next one
            return _Pod(owner, pids, root, devs, tuple(sorted(used.items())))
        return None


@dataclass
class _Pod:
    owner: str
    pids: list[int]
    root: str  # /proc/<pid>/root of the process its mounts are looked at through
    devs: dict[str, int]  # mount point -> st_dev
    used: tuple[tuple[str, int], ...]
    mounts: dict[str, int] = field(default_factory=dict)  # the ones to scan

    @property
    def pid_set(self) -> tuple[int, ...]:
        return tuple(sorted(self.pids))


SPEC = SourceSpec(KEY, "tmpfs files of each pod that no live process of the pod holds "
                  "(stale /dev/shm)", TmpfsOrphansSettings,
                  lambda settings, paths: TmpfsOrphansSource(settings, paths))
