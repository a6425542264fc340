"""The kill domains the sampler reads for the OOM watcher, and when it reads them.

A kill domain is the cgroup whose counters count each kill once: on v2 the pod-level
cgroup (``memory.events`` is hierarchical and outlives a killed container), on v1 each
container (v1 counts a kill only in the victim's own cgroup); a tracked cgroup outside
Kubernetes as it is. Its counters are read when the kernel says they moved
(``kill_notify.KillNotifier``), on the next ``ECHO_READS`` passes after that (v1's
eventfd fires at the OOM, before the kill: a read that races the killer sees the old
count), when it is new, every ``RESYNC`` seconds as a safety net, and on every pass where
its notification could not be armed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.host.paths import MemoryHierarchy
from exporter.model import CgroupRef
from exporter.sampling.kill_notify import KillNotifier

RESYNC = 30.0  # seconds between reads of every kill counter, notified or not
ECHO_READS = 2  # passes a notified domain's counters are read again


@dataclass(frozen=True)
class Domain:
    """A kill domain as the OOM watcher follows it."""

    pod: str | None  # v1: the pod-level cgroup its kills are summed into
    young: bool  # appeared after the sampler's first listing of the node


def kill_domains(refs: Iterable[CgroupRef], version: int) -> list[str]:
    return [r.path for r in refs
            if r.pod_uid is None or (r.is_pod_level if version == 2 else not r.is_pod_level)]


class KillDomains:
    """The sampling thread's: which domains exist, and which to read this pass."""

    def __init__(self, hierarchy: MemoryHierarchy) -> None:
        self._h = hierarchy
        self.notifier = KillNotifier(hierarchy)
        self.domains: dict[str, Domain] = {}
        self._unarmed: set[str] = set()
        self._echo: dict[str, int] = {}  # notified domain -> reads still due
        self._resync_at = -1e18

    def update(self, refs: Mapping[str, CgroupRef], young: Iterable[str] = (),
               ) -> tuple[dict[str, Domain], tuple[str, ...], list[int]]:
        """After the tracked set changed: the domains added and removed, and the new
        descriptors to wake on."""
        h = self._h
        now_young = set(young)
        domains = set(kill_domains(refs.values(), h.version))
        added: dict[str, Domain] = {}
        for path in sorted(domains - set(self.domains)):
            ref = refs.get(path)
            pod = None
            if h.version == 1 and ref is not None and ref.container_id is not None:
                pod = path.rsplit("/", 1)[0]
            added[path] = self.domains[path] = Domain(pod, path in now_young)
            if not self.notifier.register(path):
                self._unarmed.add(path)
        removed = tuple(sorted(set(self.domains) - domains))
        for path in removed:
            del self.domains[path]
            self._unarmed.discard(path)
            self._echo.pop(path, None)
        if removed:
            self.notifier.unregister(removed)  # closed descriptors leave epoll by themselves
        return added, removed, self.notifier.take_new_fds()

    def due(self, now: float, notified: set[str], added: Iterable[str]) -> set[str]:
        """The domains whose counters to read this pass."""
        due = notified | set(added) | set(self._echo) | self._unarmed
        self._echo = {p: n - 1 for p, n in self._echo.items() if n > 1}
        self._echo.update(dict.fromkeys(notified, ECHO_READS))
        if now >= self._resync_at:
            self._resync_at = now + RESYNC
            due.update(self.domains)
        return due

    def next_at(self, now: float, interval: float) -> float:
        """When a pass is next needed for the counters alone."""
        if self._echo:
            return now + interval
        if self._unarmed:
            return now + 1.0
        return self._resync_at

    def close(self) -> None:
        self.notifier.close()
