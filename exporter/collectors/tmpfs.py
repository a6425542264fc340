"""tmpfs mounts of each pod: /dev/shm and emptyDir volumes with ``medium: Memory``.

Their pages are shmem: charged to the pod, invisible in any process's RSS unless mapped,
and never reclaimed without swap; files left by a killed container stay charged after
the restart. A pod's mounts are read from the mount table of one of its processes
(/proc/PID/mountinfo) and measured with statvfs through /proc/PID/root.

Which tmpfs mounts count: /dev/shm, and any tmpfs whose superblock the host mounted under
``.../kubernetes.io~empty-dir/`` (told by the host's mount table, /proc/1/mountinfo, when
readable). Secrets, projected tokens and the container's /dev are tmpfs too, but small and
fixed; they are left out.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors import procfs
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
from exporter.host.degraded import CAP_SYS_PTRACE, DEGRADED
from exporter.host.labels import bounded
from exporter.host.paths import HostPaths, MemoryHierarchy, read_bytes, read_text
from exporter.model import CgroupRef, TmpfsMount

SHM = "/dev/shm"
EMPTY_DIR_MARK = "kubernetes.io~empty-dir"
MAX_MOUNTS = 32  # tmpfs mounts reported per pod: /dev/shm and emptyDirs, bounded
# A pod's mount table is a few kB; one that made its own mount namespace can hold up to
# fs.mount-max (100,000) mounts of PATH_MAX names: read at most this much, refuse more.
# The host's holds every pod's mounts: a larger cap.
MOUNTINFO_MAX_BYTES = 4 << 20
HOST_MOUNTINFO_MAX_BYTES = 32 << 20


@dataclass(frozen=True)
class MountEntry:
    dev: str  # major:minor: one per tmpfs superblock
    root: str
    mount_point: str
    fstype: str


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return (
        field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def parse_mountinfo(text: str) -> list[MountEntry]:
    out = []
    for line in text.split("\n"):
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        # Split on the space only: the kernel escapes space, tab, newline and backslash
        # in paths, nothing else, so str.split()'s Unicode whitespace (\x1c-\x1f, \x85,
        # U+2028, ...) in a mount point a pod chose would shift every field.
        lf = [f for f in left.split(" ") if f]
        rf = [f for f in right.split(" ") if f]
        if len(lf) < 5 or not rf:
            continue
        out.append(MountEntry(dev=lf[2], root=_unescape(lf[3]),
                              mount_point=_unescape(lf[4]), fstype=rf[0]))
    return out


def read_mountinfo(path: str | os.PathLike[str], limit: int = MOUNTINFO_MAX_BYTES) -> str:
    """A mount table, up to ``limit`` bytes; OSError (EFBIG) beyond: a table cut short
    would name the wrong mounts."""
    data = read_bytes(path, limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"mount table larger than {limit >> 20} MiB", str(path))
    return data.decode("utf-8", "replace")


def empty_dir_devices(host_mounts: Sequence[MountEntry]) -> set[str]:
    return {m.dev for m in host_mounts if m.fstype == "tmpfs" and EMPTY_DIR_MARK in m.mount_point}


def pod_tmpfs_mounts(mounts: Sequence[MountEntry], empty_dirs: set[str]) -> list[MountEntry]:
    """The mounts that count for a pod: one per mount point (the last one mounted there
    is the visible one) and one per superblock, /dev/shm first."""
    visible: dict[str, MountEntry] = {}
    for m in mounts:
        visible[m.mount_point] = m
    picked: dict[str, MountEntry] = {}
    for m in sorted(visible.values(), key=lambda m: (m.mount_point != SHM, m.mount_point)):
        if m.fstype != "tmpfs" or m.dev in picked:
            continue
        if m.mount_point == SHM or m.dev in empty_dirs:
            picked[m.dev] = m
    return list(picked.values())


def statvfs_usage(st: os.statvfs_result) -> tuple[int, int]:
    """(used, size) in bytes."""
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize


@dataclass(frozen=True)
class TmpfsData:
    mounts: Mapping[str, tuple[TmpfsMount, ...]]  # pod-level cgroup path -> mounts


KEY: Key[TmpfsData] = Key("tmpfs")


def mount_owners(refs: Sequence[CgroupRef]) -> dict[str, list[CgroupRef]]:
    """The cgroup the mounts are reported on (the pod-level cgroup, or a tracked cgroup)
    -> the cgroups whose processes can show them."""
    owners: dict[str, list[CgroupRef]] = {}
    pod_level = {r.pod_uid: r.path for r in refs if r.is_pod_level}
    for r in refs:
        if r.pod_uid is None:
            owners.setdefault(r.path, []).append(r)
        elif r.container_id is not None and r.pod_uid in pod_level:
            owners.setdefault(pod_level[r.pod_uid], []).append(r)
    return owners


class TmpfsSource(SourceBase):
    def __init__(
        self,
        paths: HostPaths,
        statvfs: Callable[[Path], tuple[int, int]] | None = None,
    ) -> None:
        self._paths = paths
        self._statvfs = statvfs or (lambda p: statvfs_usage(os.statvfs(p)))
        self._mount_cache: dict[int, list[MountEntry]] = {}

    def _proc_dir(self, pid: int) -> Path:
        """/proc/PID, or /proc/PID/task/TID of a live thread when PID is a zombie leader
        whose other threads run (its mountinfo fails with EINVAL, its ns and root links
        are gone; the collector failed for the whole node: docs/threats.md,
        zombie-leader)."""
        base = self._paths.proc(pid)
        try:
            state = read_text(base / "stat").rsplit(")", 1)[-1].split()[:1]
        except OSError:
            return base
        if state != ["Z"]:
            return base
        try:
            tids = [t for t in os.listdir(base / "task") if t.isdigit() and t != str(pid)]
        except OSError:
            return base
        return base / "task" / tids[0] if tids else base

    def _mounts(self, proc: Path) -> list[MountEntry]:
        """The mount table of a process, parsed once per mount namespace: containers of a
        pod share one, and it rarely changes (a new namespace means a new inode)."""
        try:
            ns = os.stat(proc / "ns/mnt").st_ino
        except OSError:
            ns = None  # fixture trees and kernels without ns files: no cache
        cached = self._mount_cache.get(ns) if ns is not None else None
        if cached is not None:
            return cached
        mounts = parse_mountinfo(read_mountinfo(proc / "mountinfo"))
        if ns is not None:
            self._mount_cache[ns] = mounts
        return mounts

    def _host_empty_dirs(self) -> set[str]:
        try:
            host = read_mountinfo(self._paths.proc_file(1, "mountinfo"),
                                  HOST_MOUNTINFO_MAX_BYTES)
            return empty_dir_devices(parse_mountinfo(host))
        except OSError:
            return set()  # no host mount table (no hostPID): /dev/shm only

    def _first_pid(self, h: MemoryHierarchy, refs: Sequence[CgroupRef]) -> list[int]:
        pids: list[int] = []
        for ref in refs:
            try:
                text = read_text(h.file(ref.path, "cgroup.procs"))
            except FileNotFoundError:
                continue
            pids.extend(int(x) for x in text.split() if x.isascii() and x.isdigit() and int(x))
            if len(pids) >= 3:
                break
        return pids

    async def collect(self, ctx: Context) -> Result[TmpfsData]:
        known = ctx.get(procfs.KEY)
        pids = None
        if known is not None:
            pids = {path: [p.pid for p in procs] for path, procs in known.processes.items()}
        return await in_thread(lambda: self.read(ctx.hierarchy, mount_owners(ctx.refs), pids))

    def read(
        self,
        h: MemoryHierarchy,
        owners: Mapping[str, Sequence[CgroupRef]],
        known_pids: Mapping[str, Sequence[int]] | None = None,
    ) -> Result[TmpfsData]:
        """``known_pids`` (cgroup path -> pids, from the procfs source) saves reading
        cgroup.procs."""
        self._paths.require_procfs()
        empty_dirs = self._host_empty_dirs()
        if len(self._mount_cache) > 4 * len(owners) + 16:
            self._mount_cache.clear()  # namespaces of exited pods: keep it bounded
        result: dict[str, tuple[TmpfsMount, ...]] = {}
        errors: list[str] = []
        for owner, refs in owners.items():
            pids = None
            last_error = ""
            if known_pids is not None:
                pids = [pid for r in refs for pid in known_pids.get(r.path, ())][:3]
            for pid in pids or self._first_pid(h, refs):
                try:
                    proc = self._proc_dir(pid)
                    mounts = self._mounts(proc)
                    found = []
                    for m in pod_tmpfs_mounts(mounts, empty_dirs)[:MAX_MOUNTS]:
                        target = proc / "root" / m.mount_point.lstrip("/")
                        used, size = self._statvfs(target)
                        found.append(TmpfsMount(bounded(m.mount_point), used, size))
                except (FileNotFoundError, ProcessLookupError):
                    continue  # the process exited: try the next one
                except OSError as exc:
                    # One pod's odd process (EACCES, EINVAL, ELOOP...) is that pod's
                    # problem: try its next process; the others' mounts are still read.
                    last_error = f"{owner}: {exc}"
                    if isinstance(exc, PermissionError):
                        DEGRADED.report(KEY.name, CAP_SYS_PTRACE, f"no tmpfs mounts: {exc}")
                    continue
                result[owner] = tuple(found)
                break
            else:
                if last_error:
                    errors.append(last_error)
        return partial_result(TmpfsData(result), errors, "pods")


SPEC = SourceSpec(KEY, "tmpfs mounts of each pod: /dev/shm and emptyDir medium Memory",
                  NoSettings, lambda _settings, paths: TmpfsSource(paths))
