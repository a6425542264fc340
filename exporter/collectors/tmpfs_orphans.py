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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

Scandir = Callable[[int], AbstractContextManager[Iterator[os.DirEntry[str]]]]


def walk(root: str, max_files: int = 4096, max_depth: int = 8,
         scandir: Scandir = os.scandir) -> Listing:
    """Regular files under ``root`` (a tmpfs mount seen through /proc/<pid>/root),
    within the bounds, through directory descriptors: each directory is opened relative
    to its parent's descriptor with ``O_NOFOLLOW|O_DIRECTORY`` and listed by descriptor,
    and must lie on the mount's device. A pod that swaps a directory for a symbolic link
    between the listing and the descent gets ELOOP/ENOTDIR, never a walk of the path the
    link names (red-team R14: ``lstat`` then ``scandir`` by path listed the exporter's
    own root). Open descriptors: at most ``max_depth``."""
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


# --- the source -------------------------------------------------------------------------


@dataclass(frozen=True)
class TmpfsOrphansSettings(Settings):
    interval: float = setting(
        "--tmpfs.orphans-interval", "60s", parse_duration,
        "how often a pod's tmpfs files are checked against its processes' open files and "
        "mappings (sooner when the mount's used bytes change)", check=positive)
    # What one scrape may spend on the scan, all pods together, in descriptor stats (a
    # maps read counts MAPS_COST, a walked file one): a scan that needs more goes on at
    # the next scrape where it stopped (not a flag).
    budget: int = 30_000


MAPS_COST = 16  # one /proc/<pid>/maps read, in descriptor stats


@dataclass(frozen=True)
class TmpfsOrphansData:
    # pod-level cgroup path (or tracked cgroup) -> mount point -> orphaned bytes
    orphans: Mapping[str, Mapping[str, int]]
    # pods whose scan of what they hold now is still going on (over several scrapes, as
    # the budget allows): their figure, if any, is the last finished scan's
    stale: frozenset[str] = frozenset()


KEY: Key[TmpfsOrphansData] = Key("tmpfs_orphans")


@dataclass
class _Scan:
    at: float  # when the scan started
    used: tuple[tuple[str, int], ...]  # the mounts' used bytes then (a change: scan again)
    pids: tuple[int, ...]  # the pod's processes then (one gone: its files may be orphans)
    result: tuple[Orphans, ...]


@dataclass
class _Job:
    """One pod's scan, carried across scrapes (red-team R9: a pod with 1,000 processes x
    300 descriptors whose tmpfs usage moved every second was rescanned in full on every
    scrape, 3-5 s; scrapes timed out). Its mounts are walked one at a time, then its
    processes' descriptors read one process at a time, then their maps, each step
    charged to the scrape's budget; a step may pass it by one walk or one process."""

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


class TmpfsOrphansSource(SourceBase):
    """Per pod: files of its memory-backed tmpfs that none of its live processes holds.

    Runs after procfs (the pod's pids) and tmpfs (its mounts and their used bytes): a pod
    whose mounts are empty costs nothing; the others are scanned again when a mount's
    used bytes change, when one of the pod's processes is gone (what it held may now be
    orphaned) or ``interval`` has passed. A scan is a job carried across scrapes: each
    scrape spends at most ``budget`` on all jobs together, in fair shares, stalest pod
    first, and a pod whose job is unfinished keeps its last figure and is listed in
    ``stale``. A pod sharing the host's IPC namespace (hostIPC: the host's /dev/shm) is
    not looked at: its files are everyone's.
    """

    def __init__(self, settings: TmpfsOrphansSettings, paths: HostPaths,
                 clock: Callable[[], float] = time.monotonic,
                 reader: ProcReader | None = None) -> None:
        self._settings = settings
        self._paths = paths
        self._clock = clock
        self._reader = reader or ProcReader(procfs=str(paths.procfs))
        self._scans: dict[str, _Scan] = {}
        self._jobs: dict[str, _Job] = {}

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
                self._forget(owner)
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
        due: list[tuple[float, _Pod, _Job]] = []
        for pod in found:
            pod.mounts = {mp: dev for mp, dev in pod.devs.items()
                          if owners_of[dev] == 1 and dev != host}
            if not pod.mounts:
                self._forget(pod.owner)
                continue
            scan, job = self._scans.get(pod.owner), self._jobs.get(pod.owner)
            if scan is not None:
                out[pod.owner] = {o.mount: o.bytes for o in scan.result}
            if job is None and (scan is None or scan.used != pod.used
                                or scan.pids != pod.pid_set
                                or now - scan.at >= self._settings.interval):
                job = self._jobs[pod.owner] = _Job(
                    now, pod.used, pod.pid_set, tuple(pod.pids),
                    [(mp, f"{pod.root}{mp}") for mp in sorted(pod.mounts)])
            if job is not None:
                due.append((scan.at if scan is not None else float("-inf"), pod, job))
        stale: set[str] = set()
        budget = self._settings.budget
        due.sort(key=lambda d: d[0])
        for i, (_, pod, job) in enumerate(due):
            share = budget // (len(due) - i)
            if share > 0:
                try:
                    budget -= job.step(self._reader, share, walk)
                except PermissionError as exc:
                    errors.append(f"{pod.owner}: {exc}")
                    DEGRADED.report(KEY.name, CAP_SYS_PTRACE, f"no orphaned tmpfs files: {exc}")
                    del self._jobs[pod.owner]
                    continue
            if not job.done:
                stale.add(pod.owner)  # the next scrape goes on from here
                continue
            del self._jobs[pod.owner]
            result = job.result()
            self._scans[pod.owner] = _Scan(job.started, job.used, job.pid_set, result)
            out[pod.owner] = {o.mount: o.bytes for o in result}
            errors += [f"{pod.owner}: {o.mount} has more files than looked at"
                       for o in result if not o.complete]
        live = set(out) | stale
        for gone in (set(self._scans) | set(self._jobs)) - live:
            self._forget(gone)
        return partial_result(TmpfsOrphansData(out, frozenset(stale)), errors, "pods")

    def _forget(self, owner: str) -> None:
        self._scans.pop(owner, None)
        self._jobs.pop(owner, None)

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
