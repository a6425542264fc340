"""Kernel notifications on v1 memory cgroups through ``cgroup.event_control``: the eventfd
behind the OOM watcher's ``oom_control`` wake-up (``kill_notify.KillNotifier``) and the
usage thresholds that wake the sampler for a slow cgroup climbing towards its limit.

A v1 threshold fires when usage crosses it in either direction (the kernel checks its
thresholds in batches as pages are charged and freed), once per crossing; v2 has no such
file
(``memory.events`` moves only at ``high`` and ``max``), so there the pace alone decides.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Container, Iterable

from exporter.host.paths import FD_BUDGET, FdBudget, MemoryHierarchy


def v1_event(h: MemoryHierarchy, path: str, control_file: str, args: str = "") -> int:
    """A v1 eventfd armed on ``control_file`` through ``cgroup.event_control`` (with
    ``args``: a usage threshold); closing it disarms it."""
    efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        ofd = os.open(h.file(path, control_file), os.O_RDONLY | os.O_CLOEXEC)
        try:
            control = os.open(h.file(path, "cgroup.event_control"), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(control, f"{efd} {ofd} {args}".strip().encode())
            finally:
                os.close(control)
        finally:
            os.close(ofd)  # the kernel keeps the registration, not this descriptor
    except OSError:
        os.close(efd)
        raise
    return efd


class UsageThresholds:
    """v1: the kernel wakes the sampler when a cgroup's usage crosses a threshold (an
    eventfd on ``memory.usage_in_bytes``), so a slow cgroup that climbs towards its limit
    between two slow readings is read at once. v2 has no such file: nothing is armed and
    the pace alone decides. ``arm`` (re)arms one cgroup; ``ready(fd)`` names it. Each
    eventfd counts against the process's descriptor budget: past it, a cgroup is left to
    its pace."""

    def __init__(self, hierarchy: MemoryHierarchy, budget: FdBudget = FD_BUDGET) -> None:
        self._h = hierarchy
        self._budget = budget
        self._by_fd: dict[int, str] = {}
        self._of: dict[str, tuple[int, int]] = {}  # path -> (eventfd, threshold)

    def arm(self, path: str, threshold: int | None) -> int | None:
        """The new descriptor to wait on; None when nothing new was armed."""
        held = self._of.get(path)
        if held is not None and held[1] == threshold:
            return None
        self.disarm([path])
        if threshold is None or self._h.version != 1 or not self._budget.take():
            return None
        try:
            efd = v1_event(self._h, path, "memory.usage_in_bytes", str(threshold))
        except OSError:
            self._budget.give()
            return None  # refused: the slow pace still reads it every second
        self._by_fd[efd] = path
        self._of[path] = (efd, threshold)
        return efd

    def armed(self, path: str) -> bool:
        return path in self._of

    def disarm(self, paths: Iterable[str]) -> None:
        for path in paths:
            held = self._of.pop(path, None)
            if held is not None:
                self._by_fd.pop(held[0], None)
                os.close(held[0])  # leaves epoll and the kernel's list by itself
                self._budget.give()

    def retain(self, paths: Container[str]) -> None:
        """Disarm every cgroup not in ``paths`` (no longer tracked)."""
        self.disarm([p for p in self._of if p not in paths])

    def ready(self, fd: int) -> str | None:
        path = self._by_fd.get(fd)
        if path is not None:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(fd)
        return path

    def close(self) -> None:
        self.disarm(list(self._of))
