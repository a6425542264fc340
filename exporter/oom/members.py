"""Who is in each tracked cgroup, kept current by the sampler thread, so a kill can be
named without the kernel log.

Without /dev/kmsg (the chart's default: a container gets EPERM) the only way to name an
OOM victim is to know who was in the cgroup just before the kill and see who is missing
just after. The scrapes' process tables (every 15-60 s) are too coarse for that: a
container born and killed between two scrapes, or a busy node where the victim takes
seconds to die, left the victim "unknown". So each sampler pass lists ``cgroup.procs``
of each tracked container whose usage moved since its last listing, and of every one at
least every ``LIST_EVERY`` (a process cannot start or die without charging or freeing
memory, and a cgroup heading for a kill is near its limit or climbing, so read, and
listed, every tick; one open-read-close: on v1 a kept-open file returns the kernel's
cached list for about a second), and keeps, per cgroup, its members
(pid, name from cmdline, last-known RSS). A pid that is no longer listed, or a zombie,
*departed* in that pass; the OOM watcher names a kill after the largest process (by
last-known RSS) that departed its kill domain since the kill counter last read lower.

Names are read once per process (status and cmdline, when a pid first appears); RSS is
read then, again every ``RSS_REFRESH`` while the cgroup's usage moves (every ``RSS_IDLE``
while it does not: its members' RSS cannot have moved much either), and at once for the
cgroups of a kill domain the kernel just notified (v1 ``oom_control`` fires at the OOM,
before the kill; v2 ``memory.events`` moves with ``max`` and ``oom`` before
``oom_kill``), so the figure that picks the victim is the one from just before the kill.

Bounds, whatever a pod does: at most ``MAX_MEMBERS`` processes followed per cgroup and
``MAX_TOTAL`` on the node, ``NEW_PER_PASS`` new processes read per pass (a fork storm is
read over several passes), ``MAX_DEPARTED`` departures handed out per pass. Not
thread-safe: the sampler thread owns it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from exporter.collectors.procfacts import (
    CMDLINE_MAX_BYTES,
    parse_cgroup_procs,
    parse_status,
    split_cmdline,
)
from exporter.collectors.procfs import process_name
from exporter.host.paths import HostPaths, MemoryHierarchy, read_bytes, read_text
from exporter.oom.watcher import ProcessEntry

MAX_MEMBERS = 1024  # processes followed per cgroup (the first listed)
MAX_TOTAL = 32768  # processes followed on the node (about 5 MiB of entries)
NEW_PER_PASS = 256  # new processes read per pass, all cgroups together
MAX_DEPARTED = 1024  # departures reported per pass
RSS_REFRESH = 5.0  # seconds between RSS reads of a cgroup's members, unless notified
RSS_IDLE = 60.0  # the same for a cgroup whose usage did not move since the last RSS read
LIST_EVERY = 30.0  # seconds between listings of a cgroup whose usage did not move


@dataclass
class _Cgroup:
    members: dict[int, ProcessEntry] = field(default_factory=dict)
    rss_at: float = -1e18
    listed_at: float = -1e18
    usage: int | None = None  # at the last listing
    rss_usage: int | None = None  # at the last RSS read


@dataclass(frozen=True)
class Refresh:
    """One pass: each listed cgroup's members now, and who left since the last pass."""

    members: dict[str, tuple[ProcessEntry, ...]]
    departed: tuple[tuple[str, ProcessEntry], ...]
    backlog: bool = False  # new processes left for the next pass (the per-pass bound)


class MemberTable:
    def __init__(self, paths: HostPaths, clock: Callable[[], float] = time.monotonic) -> None:
        self._paths = paths
        self._clock = clock
        self._cgroups: dict[str, _Cgroup] = {}

    def _read(self, pid: int) -> ProcessEntry | None:
        """Name and RSS; None for a process that exited or is a zombie."""
        try:
            status = parse_status(read_text(self._paths.proc_file(pid, "status")))
            if status is None:
                return None
            argv = split_cmdline(read_bytes(self._paths.proc_file(pid, "cmdline"),
                                            limit=CMDLINE_MAX_BYTES))
        except OSError:
            return None
        return ProcessEntry(pid, process_name(argv, status[0]), sum(status[1:4]))

    def _rss(self, pid: int) -> int | None:
        try:
            status = parse_status(read_text(self._paths.proc_file(pid, "status")))
        except OSError:
            return None
        return None if status is None else sum(status[1:4])

    def refresh(self, h: MemoryHierarchy, paths: Iterable[str],
                urgent: Callable[[str], bool] = lambda _: False,
                usage: Mapping[str, int] | None = None) -> Refresh:
        """List ``paths`` (container cgroups: processes live there); ``urgent`` cgroups
        are listed and have their members' RSS read now (their kill domain was just
        notified); ``usage``: this pass's readings (an unmoved cgroup is listed only every
        ``LIST_EVERY``; without readings, every cgroup is listed)."""
        now = self._clock()
        budget = NEW_PER_PASS
        room = MAX_TOTAL - sum(len(cg.members) for cg in self._cgroups.values())
        members: dict[str, tuple[ProcessEntry, ...]] = {}
        departed: list[tuple[str, ProcessEntry]] = []
        backlog = False
        wanted = set(paths)
        for path in wanted:
            cg = self._cgroups.setdefault(path, _Cgroup())
            now_usage = usage.get(path) if usage is not None else None
            hot = urgent(path)
            if (not hot and now_usage is not None and now_usage == cg.usage
                    and now - cg.listed_at < LIST_EVERY):
                members[path] = tuple(cg.members.values())
                continue
            cg.listed_at, cg.usage = now, now_usage
            try:
                listed = parse_cgroup_procs(read_text(h.file(path, "cgroup.procs")))
            except OSError:  # the cgroup is gone: every member departed
                listed = []
            now_listed = set(listed[:MAX_MEMBERS])
            for pid in [p for p in cg.members if p not in now_listed]:
                departed.append((path, cg.members.pop(pid)))
            since = now - cg.rss_at
            moved = now_usage is None or now_usage != cg.rss_usage
            if hot or since >= RSS_IDLE or (moved and since >= RSS_REFRESH):
                cg.rss_at, cg.rss_usage = now, now_usage
                for pid, m in list(cg.members.items()):
                    rss = self._rss(pid)
                    if rss is None:  # a zombie, or gone since the listing
                        departed.append((path, cg.members.pop(pid)))
                    elif rss != m.rss:
                        cg.members[pid] = ProcessEntry(pid, m.name, rss)
            for pid in listed[:MAX_MEMBERS]:
                if pid in cg.members:
                    continue
                if budget <= 0 or room <= 0:
                    cg.listed_at = -1e18  # the rest on the next pass, moved or not
                    backlog = True
                    break
                budget -= 1
                entry = self._read(pid)
                if entry is not None:
                    cg.members[pid] = entry
                    room -= 1
            members[path] = tuple(cg.members.values())
        for path in [p for p in self._cgroups if p not in wanted]:
            departed.extend((path, m) for m in self._cgroups.pop(path).members.values())
        return Refresh(members, tuple(departed[:MAX_DEPARTED]), backlog)
