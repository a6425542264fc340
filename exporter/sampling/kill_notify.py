"""The kernel's own kill notifications: a kill domain's ``oom_kill`` counter read when it
may have moved, not every tick.

Kill counters need no polling where the kernel notifies (``KillNotifier``):

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
import logging
import os
from collections.abc import Iterable

from exporter.host.paths import MemoryHierarchy
from exporter.sampling.inotify import IN_IGNORED, IN_MODIFY, Inotify
from exporter.sampling.usage_events import v1_event

log = logging.getLogger("exporter.sampling.cgroup_watch")  # the logger its lines had


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
