"""Cgroups found between scrapes.

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

The kernel's own kill notifications (inotify on v2, eventfds on v1) are in
``kill_notify``.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.host.paths import MemoryHierarchy
from exporter.host.workloads import _POD_RE, _QOS_RE, parse_container_dir, parse_pod_dir
from exporter.model import CgroupRef
from exporter.sampling.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_IGNORED,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
)

log = logging.getLogger(__name__)


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
