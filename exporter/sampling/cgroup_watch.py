"""Cgroups found between scrapes, and the kernel's own kill notifications.

The most common vLLM OOM is the young one (a model load, a first burst, a crash loop): a
container killed seconds after it started. Found only by the next scrape, it has no peak
and no named victim. The sampler thread asks ``CgroupTree`` each tick what appeared and
vanished under kubepods, so a new container is sampled within about one tick.

Two ways to notice, the same result:

- **inotify** (the default): one watch on the kubepods directory, each QoS directory and
  each pod directory (``IN_CREATE | IN_DELETE``; the kubelet and the runtimes create
  cgroups with mkdir(2), which cgroupfs reports like any filesystem, on v1 and v2). A
  directory is re-listed only when the kernel says it changed, so an idle node costs no
  syscalls at all; about 40 watches for 100 containers.
- **a scan**: every directory re-listed every ``scan_interval`` (1 s). The fallback when
  inotify is unavailable (the per-user instance or watch limit reached).

Kill counters need no polling either where the kernel notifies (``KillNotifier``):

- v2: ``memory.events`` of a kill domain (the pod-level cgroup) raises an inotify modify
  event whenever one of its counters moves (at most every 20 ms per file: cgroupfs rate
  limits it). Its ``oom_kill`` line is read then, not every tick.
- v1: an eventfd registered on ``memory.oom_control`` through ``cgroup.event_control``
  fires when the cgroup goes out of memory, and again when the cgroup is removed. (Linux
  6.x logs once, at the first registration, that v1's oom_control is deprecated.)

Domains whose notification could not be set up are read every tick.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from exporter.host.paths import MemoryHierarchy
from exporter.host.workloads import _POD_RE, _QOS_RE, parse_container_dir, parse_pod_dir
from exporter.model import CgroupRef
from exporter.sampling.usage_events import v1_event

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name, NUL-padded)


class Inotify:
    """A non-blocking inotify instance through libc (the standard library has none)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("c")
        self._libc = ctypes.CDLL(name, use_errno=True)
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_init1: {os.strerror(e)}")
        self.fd: int = fd

    def add(self, path: str, mask: int) -> int:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_add_watch: {os.strerror(e)}", path)
        return int(wd)

    def remove(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self.fd, wd)  # EINVAL when already gone: fine

    def read(self) -> list[tuple[int, int, str]]:
        """Pending events as (watch, mask, name); [] when there are none."""
        out: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            i = 0
            while i + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, i)
                raw = data[i + _EVENT.size: i + _EVENT.size + length].split(b"\0", 1)[0]
                out.append((wd, mask, os.fsdecode(raw)))
                i += _EVENT.size + length

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _subdirs(path: str) -> list[str] | None:
    """Names of the subdirectories; None when the directory is gone or unreadable."""
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return None


# What a directory is in the kubepods tree decides what its children are.
_ROOT, _QOS, _POD = "root", "qos", "pod"


@dataclass(frozen=True)
class Changes:
    added: tuple[CgroupRef, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


class CgroupTree:
    """Pod and container cgroups under kubepods, kept current between scrapes.

    Not thread-safe: the sampler thread owns it. ``refresh`` returns what changed since the
    last call; ``young`` tells whether a cgroup appeared after the first listing (its
    counters then started at zero after the exporter did: the OOM watcher counts a kill
    read at its first look, instead of taking it as history).
    """

    def __init__(self, hierarchy: MemoryHierarchy, kubepods: str, *,
                 use_inotify: bool = True, scan_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._h = hierarchy
        self.kubepods = kubepods.strip("/")
        self.scan_interval = scan_interval
        self._clock = clock
        self.refs: dict[str, CgroupRef] = {}
        self._young: set[str] = set()
        self._dirs: dict[str, tuple[str, str | None]] = {}  # rel -> (kind, qos)
        self._children: dict[str, list[str]] = {}
        self._wd: dict[int, str] = {}
        self._wd_of: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._listed = False  # the first full listing is the exporter's start state
        self._next_scan = -1e18
        # The nearest ancestor of kubepods that exists, watched until kubepods does.
        self._parent: tuple[str | None, int | None] = (None, None)
        self.inotify: Inotify | None = None
        if use_inotify:
            try:
                self.inotify = Inotify()
            except OSError as exc:
                log.info("inotify unavailable (%s): new cgroups found by a scan every %gs",
                         exc.strerror, scan_interval)
        self.mode = "inotify" if self.inotify is not None else "scan"

    def fileno(self) -> int | None:
        return self.inotify.fd if self.inotify is not None else None

    def next_scan_at(self) -> float:
        """When the tree must be listed again without a notification (scan mode)."""
        if self.mode == "scan" or self.kubepods not in self._dirs:  # no kubepods yet
            return self._next_scan
        return float("inf")

    def _path(self, rel: str) -> str:
        return str(self._h.dir(rel))

    def young(self, path: str) -> bool:
        return path in self._young

    def refresh(self) -> Changes:
        added: list[CgroupRef] = []
        removed: list[str] = []
        now = self._clock()
        root = self.kubepods
        events = self.inotify.read() if self.inotify is not None else []
        if root not in self._dirs:
            if _subdirs(self._path(root)) is None:
                self._listed = True  # what appears from now on is new
                self._watch_parent()  # its creation wakes the sampler
                self._next_scan = now + self.scan_interval  # and a look every second
                return Changes()  # no kubepods (yet): look again next time
            self._unwatch_parent()
            self._dirs[root] = (_ROOT, None)
            self._watch(root)
            self._dirty.add(root)
        if events:
            for wd, mask, _ in events:
                if mask & IN_Q_OVERFLOW:
                    self._dirty.update(self._dirs)  # events were lost: list everything
                    continue
                rel = self._wd.get(wd)
                if rel is None:
                    continue
                if mask & IN_IGNORED:  # the directory is gone (or the watch was dropped)
                    self._wd.pop(wd, None)
                    if self._wd_of.get(rel) == wd:
                        del self._wd_of[rel]
                self._dirty.add(rel)
        if (self.mode == "scan" or self.inotify is None) and now >= self._next_scan:
            self._next_scan = now + self.scan_interval
            self._dirty.update(self._dirs)
        while self._dirty:
            rel = min(self._dirty, key=len)  # parents before their children
            self._dirty.discard(rel)
            self._relist(rel, added, removed)
        if not self._listed:
            self._listed = True
        return Changes(tuple(added), tuple(removed))

    def _watch_parent(self) -> None:
        """Watch the nearest existing ancestor of the missing kubepods for creations."""
        if self.inotify is None:
            return
        rel = self.kubepods
        while rel:
            rel = rel.rpartition("/")[0]
            if rel == self._parent[0]:
                return  # already watched, and still the nearest
            try:
                wd = self.inotify.add(self._path(rel), IN_CREATE | IN_ONLYDIR)
            except OSError:
                continue
            self._unwatch_parent()
            self._parent = (rel, wd)
            return

    def _unwatch_parent(self) -> None:
        if self.inotify is not None and self._parent[1] is not None:
            self.inotify.remove(self._parent[1])
        self._parent = (None, None)

    def _watch(self, rel: str) -> None:
        if self.inotify is None:
            return
        try:
            wd = self.inotify.add(self._path(rel), IN_CREATE | IN_DELETE | IN_ONLYDIR)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.ENOMEM):
                log.warning("inotify watch limit reached (%s): new cgroups found by a scan "
                            "every %gs", exc.strerror, self.scan_interval)
                self.mode = "scan"
            return
        self._wd[wd] = rel
        self._wd_of[rel] = wd

    def _relist(self, rel: str, added: list[CgroupRef], removed: list[str]) -> None:
        if rel not in self._dirs:
            return
        kind, qos = self._dirs[rel]
        names = _subdirs(self._path(rel))
        if names is None:
            if rel != self.kubepods:
                self._drop(rel, removed)
            return
        before = set(self._children.get(rel, ()))
        self._children[rel] = names
        for name in names:
            if name not in before:
                self._found(rel, kind, qos, name, added)
        for name in before - set(names):
            self._drop(f"{rel}/{name}", removed)

    def _found(self, parent: str, kind: str, qos: str | None, name: str,
               added: list[CgroupRef]) -> None:
        rel = f"{parent}/{name}"
        if kind in (_ROOT, _QOS):
            pod = parse_pod_dir(name, qos) if _POD_RE.match(name) else None
            if pod is not None:
                self._add(CgroupRef(path=rel, pod_uid=pod.uid, qos=pod.qos), added)
                self._dirs[rel] = (_POD, pod.qos)
            elif kind == _ROOT and (q := _QOS_RE.search(name)):
                self._dirs[rel] = (_QOS, q.group("qos"))
            else:
                return
            self._watch(rel)  # before listing it: nothing created in between is missed
            self._relist(rel, added, [])
        elif kind == _POD:
            container = parse_container_dir(name)
            pod_ref = self.refs.get(parent)
            if container is not None and pod_ref is not None:
                self._add(CgroupRef(path=rel, pod_uid=pod_ref.pod_uid,
                                    container_id=container[0], runtime=container[1],
                                    qos=pod_ref.qos), added)

    def _add(self, ref: CgroupRef, added: list[CgroupRef]) -> None:
        if ref.path in self.refs:
            return
        self.refs[ref.path] = ref
        if self._listed:
            self._young.add(ref.path)
        added.append(ref)

    def _drop(self, rel: str, removed: list[str]) -> None:
        prefix = rel + "/"
        for path in [p for p in self.refs if p == rel or p.startswith(prefix)]:
            del self.refs[path]
            self._young.discard(path)
            removed.append(path)
        for d in [d for d in self._dirs if d == rel or d.startswith(prefix)]:
            del self._dirs[d]
            self._children.pop(d, None)
            wd = self._wd_of.pop(d, None)
            if wd is not None and self.inotify is not None:
                self._wd.pop(wd, None)
                self.inotify.remove(wd)

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None


class KillNotifier:
    """Kernel notifications that a kill domain's ``oom_kill`` counter may have moved.

    ``register(path)`` arms one (v2: an inotify watch on memory.events; v1: an eventfd on
    memory.oom_control); it returns False when the kernel refused, and that domain is then
    read every tick. ``take_new_fds()`` are what the sampler waits on; ``ready(fd)`` names
    the domains to read after ``fd`` woke it.
    """

    def __init__(self, hierarchy: MemoryHierarchy) -> None:
        self._h = hierarchy
        self._inotify: Inotify | None = None
        self._by_wd: dict[int, str] = {}
        self._wd_of: dict[str, int] = {}
        self._eventfd: dict[int, str] = {}  # v1: eventfd -> domain
        self._fd_of: dict[str, int] = {}
        self._handed: set[int] = set()  # descriptors the caller already waits on
        if hierarchy.version == 2:
            try:
                self._inotify = Inotify()
            except OSError as exc:
                log.info("inotify unavailable (%s): kill counters read every tick",
                         exc.strerror)

    def armed(self, path: str) -> bool:
        return path in self._wd_of or path in self._fd_of

    def register(self, path: str) -> bool:
        if self.armed(path):
            return True
        try:
            if self._h.version == 2:
                if self._inotify is None:
                    return False
                wd = self._inotify.add(self._h.file(path, "memory.events"), IN_MODIFY)
                self._by_wd[wd] = path
                self._wd_of[path] = wd
            else:
                self._register_v1(path)
        except OSError:
            return False
        return True

    def _register_v1(self, path: str) -> None:
        efd = v1_event(self._h, path, "memory.oom_control")
        self._eventfd[efd] = path
        self._fd_of[path] = efd

    def unregister(self, paths: Iterable[str]) -> None:
        """Domains no longer followed (the kernel drops v1 events with the cgroup)."""
        for path in paths:
            wd = self._wd_of.pop(path, None)
            if wd is not None:
                self._by_wd.pop(wd, None)
                if self._inotify is not None:
                    self._inotify.remove(wd)
            efd = self._fd_of.pop(path, None)
            if efd is not None:
                self._eventfd.pop(efd, None)
                self._handed.discard(efd)  # its number may come back with the next one
                os.close(efd)

    def take_new_fds(self) -> list[int]:
        """Descriptors to wait on that were not handed out before (a closed eventfd
        leaves an epoll set by itself)."""
        fds = set(self._eventfd)
        if self._inotify is not None:
            fds.add(self._inotify.fd)
        self._handed &= fds
        new = sorted(fds - self._handed)
        self._handed.update(new)
        return new

    def ready(self, fd: int) -> list[str]:
        if self._inotify is not None and fd == self._inotify.fd:
            out = []
            for wd, mask, _ in self._inotify.read():
                path = self._by_wd.get(wd)
                if path is None:
                    continue
                if mask & IN_IGNORED:  # the cgroup is gone
                    self._by_wd.pop(wd, None)
                    self._wd_of.pop(path, None)
                out.append(path)
            return sorted(set(out))
        path = self._eventfd.get(fd)
        if path is None:
            return []
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(fd)  # reset it: the next notification wakes the sampler again
        return [path]

    def close(self) -> None:
        self.unregister(list(self._wd_of) + list(self._fd_of))
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


