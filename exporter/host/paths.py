"""The only module that knows where /proc and the cgroup filesystem live.

Everything reads host files through a ``HostPaths`` so tests run on fixture trees
(node_exporter's ``--path.procfs`` / ``--path.cgroupfs``).
"""

from __future__ import annotations

import errno
import os
import posixpath
import resource
import threading
from dataclasses import dataclass
from pathlib import Path

from exporter.model import CgroupVersion


class CgroupLayoutError(Exception):
    """No memory controller was found under the cgroupfs root."""


@dataclass(frozen=True)
class MemoryHierarchy:
    """Where the memory controller is mounted, and which cgroup version it speaks."""

    root: Path  # the memory controller's root directory
    version: CgroupVersion

    def dir(self, rel: str) -> Path:
        return self.root / rel.strip("/") if rel.strip("/") else self.root

    def file(self, rel: str, name: str) -> str:
        """A file of a cgroup as a plain string path (the hot path avoids pathlib)."""
        rel = rel.strip("/")
        return f"{self.root}/{rel}/{name}" if rel else f"{self.root}/{name}"


@dataclass(frozen=True)
class HostPaths:
    procfs: Path = Path("/proc")
    cgroupfs: Path = Path("/sys/fs/cgroup")

    def proc(self, *parts: str | int) -> Path:
        return self.procfs.joinpath(*(str(p) for p in parts))

    def proc_file(self, pid: int | str, name: str) -> str:
        return f"{self.procfs}/{pid}/{name}"

    def require_procfs(self) -> None:
        """Raise unless ``procfs`` holds a procfs: with /proc gone (unmounted, a hostPath
        that vanished) every pid would look exited, and a collector would report success
        with no series (docs/threats.md: proc-gone)."""
        if not os.path.exists(f"{self.procfs}/meminfo"):
            raise FileNotFoundError(
                errno.ENOENT, f"{self.procfs} holds no procfs (no meminfo): is /proc mounted?")

    def detect_memory_hierarchy(self) -> MemoryHierarchy:
        """Find the memory controller by the files present, not by kernel version.

        Unified (v2) at the root, v1 at ``memory/``, or v2 at ``unified/`` on a hybrid
        host where the memory controller was given to v2.
        """
        root = self.cgroupfs
        for candidate in (root, root / "unified"):
            if "memory" in _read_words(candidate / "cgroup.controllers"):
                return MemoryHierarchy(candidate, 2)
        v1 = root / "memory"
        if (v1 / "memory.usage_in_bytes").exists():
            return MemoryHierarchy(v1, 1)
        if (root / "memory.usage_in_bytes").exists():  # a v1 memory mount passed directly
            return MemoryHierarchy(root, 1)
        # v2 root cgroup.controllers may be absent in a fixture that holds only a subtree
        if (root / "memory.stat").exists() and not (root / "memory.usage_in_bytes").exists():
            return MemoryHierarchy(root, 2)
        raise CgroupLayoutError(
            f"no memory cgroup controller under {root} (looked for a v2 'memory' in "
            f"cgroup.controllers, and v1 {v1}/memory.usage_in_bytes)"
        )


def _read_words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def self_memory_cgroup(procfs: Path = Path("/proc"), pid: int | str = "self") -> str:
    """The memory cgroup path of a process (relative, no leading slash).

    On v1 the line with ``memory`` in its controller list; on a pure v2 host the ``0::``
    line. Hybrid hosts list both; the v1 memory line wins when it exists.
    """
    # Cgroup names are bytes: a pod may create one that is not UTF-8 (strict decoding
    # failed discovery on every host scan: docs/threats.md, non-utf8-cgroup).
    # surrogateescape keeps the exact bytes for the filesystem; label values escape them
    # (labels.bounded).
    text = (procfs / str(pid) / "cgroup").read_bytes().decode("utf-8", "surrogateescape")
    v2_path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "memory" in controllers.split(","):
            return path.strip("/")
        if parts[0] == "0" and controllers == "":
            v2_path = path.strip("/")
    if v2_path is None:
        raise CgroupLayoutError(f"no memory cgroup in {procfs}/{pid}/cgroup")
    return v2_path


def cgroupns_root(procfs: Path, hierarchy: MemoryHierarchy, max_dirs: int = 20000
                  ) -> str | None:
    """Where this process's cgroup namespace is rooted, relative to the hierarchy root;
    None when it shares pid 1's (the host's, with hostPID).

    In a private cgroup namespace (the default for containers on cgroup v2, or
    ``unshare -C``) /proc/PID/cgroup shows paths relative to that root (``/../../x``):
    taken as they are, every host process's cgroup resolves to a wrong directory and is
    silently not monitored (docs/threats.md: own-cgroup-namespace). pid 1 at the host root reads as
    ``/..`` repeated once per level of our root (the namespace files of pid 1 may not be
    readable, the paths always are); the root is the directory at that depth that holds
    our own cgroup. Raises CgroupLayoutError when it cannot be found.
    """
    try:
        up = [p for p in self_memory_cgroup(procfs, 1).split("/") if p]
        own = self_memory_cgroup(procfs, "self")
    except (OSError, CgroupLayoutError):
        return None  # no hostPID, or a fixture tree
    if not up or up[0] != "..":
        return None  # pid 1 is at or below our root: the host's view
    if any(part != ".." for part in up):
        raise CgroupLayoutError("in a private cgroup namespace, and pid 1 is not at the "
                                "root of the hierarchy: cannot place it")
    depth = len(up)
    level = [""]
    for _ in range(depth):
        nxt: list[str] = []
        for rel in level:
            try:
                with os.scandir(hierarchy.dir(rel)) as it:
                    nxt.extend(f"{rel}/{e.name}".strip("/") for e in it
                               if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
            if len(nxt) > max_dirs:
                raise CgroupLayoutError("cgroup tree too large to find our namespace root")
        level = nxt
    me = str(os.getpid())
    for rel in level:
        try:
            procs = Path(hierarchy.file(posixpath.join(rel, own), "cgroup.procs")).read_text()
        except OSError:
            continue
        if me in procs.split():
            return rel
    raise CgroupLayoutError("in a private cgroup namespace whose root was not found in "
                            f"{hierarchy.root}: run headroom in the host's cgroup namespace")


def resolve_cgroup(rel: str, ns_root: str | None) -> str:
    """A /proc/PID/cgroup path (without the leading slash) relative to the hierarchy."""
    if not ns_root:
        return posixpath.normpath("/" + rel).strip("/") if ".." in rel else rel
    return posixpath.normpath(f"/{ns_root}/{rel}").strip("/")


def read_bytes(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """Read a small kernel file with raw syscalls: 4-5x cheaper than pathlib's read_text,
    which matters at thousands of /proc and cgroup reads per scrape. ``limit``: read at
    most that many bytes (a file a process fills, like cmdline)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        left = limit if limit is not None else -1
        while left != 0:
            chunk = os.read(fd, 65536 if left < 0 else min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk) if left > 0 else 0
            # Read to EOF: a seq_file hands out one page per read (cgroup.procs of a
            # cgroup with more than ~680 processes came back cut at 4 KiB, and every
            # process past the first page went unseen).
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str]) -> str:
    return read_bytes(path).decode("utf-8", "replace")


def default_fd_budget(soft: int | None = None) -> int:
    """Descriptors all OpenFiles together may keep open: half the soft open-file limit,
    less a reserve. The other half is for HTTP connections (a quarter, see
    connections.py) and transient opens (cgroup.procs, cmdline, sockets to vLLM)."""
    if soft is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft > 1 << 20:
        soft = 1 << 20
    return max(0, soft // 2 - 64)


class FdBudget:
    """A process-wide count of kept-open descriptors (thread-safe)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self, n: int = 1) -> None:
        with self._lock:
            self.used = max(0, self.used - n)


FD_BUDGET = FdBudget(default_fd_budget())
_NO_FDS = (errno.EMFILE, errno.ENFILE)


class OpenFiles:
    """Keeps kernel files open between scrapes and re-reads them with pread at offset 0.

    cgroup and /proc files are generated afresh on every read from offset 0, so an open
    descriptor gives current values without the open/close syscalls (on this benchmark's
    VM: 1.8 us instead of 12 us for memory.usage_in_bytes). A file of a removed cgroup
    or an exited process fails its read (ENODEV, ESRCH): the descriptor is closed and the
    error is raised as FileNotFoundError. ``sweep`` closes what a pass did not use, so a
    removed cgroup is never pinned for longer than one scrape. Not thread-safe: one
    instance per collector.

    Bounded: descriptors are kept only while the process-wide ``FdBudget`` allows (half
    the open-file limit); beyond it a file is opened, read and closed each time. A node
    with more processes than the limit (docs/threats.md: fd-exhaustion; 1,100 processes at
    1,024 fds left the exporter at its limit, unable to accept a scrape) costs syscalls,
    not availability. On EMFILE/ENFILE every descriptor this instance keeps is given back
    and the read is retried once, open-read-close.
    """

    def __init__(self, max_open: int = 4096, budget: FdBudget | None = None) -> None:
        self._fds: dict[str, int] = {}
        self._used: set[str] = set()
        self.max_open = max_open
        self._budget = budget or FD_BUDGET

    def read_text(self, path: str) -> str:
        fd = self._fds.get(path)
        if fd is not None:
            try:
                return self._pread(path, fd)
            except FileNotFoundError:
                pass  # a stale descriptor (pid reused, cgroup re-created): open afresh
        if len(self._fds) >= self.max_open or not self._budget.take():
            return self._read_once(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # FileNotFoundError propagates
        except OSError as exc:
            self._budget.give()
            if exc.errno in _NO_FDS:
                self.close()
                return self._read_once(path)
            raise
        self._fds[path] = fd
        return self._pread(path, fd)

    def _read_once(self, path: str) -> str:
        try:
            return read_text(path)
        except OSError as exc:
            if exc.errno not in _NO_FDS or not self._fds:
                raise
            self.close()  # out of descriptors: give ours back and try once more
            return read_text(path)

    def _pread(self, path: str, fd: int) -> str:
        self._used.add(path)
        try:
            data = os.pread(fd, 65536, 0)
            if len(data) >= 4096:  # maybe one seq_file page of more: read to EOF
                data = read_bytes(path)
        except OSError as exc:
            self._close(path)
            if exc.errno in (errno.ENODEV, errno.ESRCH, errno.ENOENT):
                raise FileNotFoundError(exc.errno, exc.strerror, path) from exc
            raise
        return data.decode("utf-8", "replace")

    def _close(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        self._used.discard(path)
        if fd is not None:
            os.close(fd)
            self._budget.give()

    def sweep(self) -> None:
        for path in [p for p in self._fds if p not in self._used]:
            self._close(path)
        self._used.clear()

    def close(self) -> None:
        for path in list(self._fds):
            self._close(path)

    def __len__(self) -> int:
        return len(self._fds)
