"""Per-process memory of the processes in tracked cgroups.

Every scrape: the pids in each cgroup's ``cgroup.procs`` and their /proc/PID/status.
At a low frequency and only below a size gate: /proc/PID/smaps_rollup for PSS, because
the kernel walks every page table of the process under its mmap lock to produce it, which
stalls a process with hundreds of GB mapped (a vLLM worker with pinned memory).

Processes are named from /proc/PID/cmdline (comm is cut at 15 characters): a vLLM title
``VLLM::EngineCore_DP1`` gives ``EngineCore_DP1``; the un-retitled ``vllm serve`` main
process gives ``APIServer``; anything else its executable's name. Processes of one name are
summed; beyond a per-cgroup cap the smallest names are folded into ``other``. This module
reads the facts (pids, command lines, parents, memory); which processes are vLLM's and what
each one is, ``collectors/vllm/identity.py`` decides.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from exporter.catalog import OTHER_PROCESS
from exporter.collectors.procfacts import (
    CMDLINE_MAX_BYTES,
    parse_cgroup_procs,
    parse_pid_stat,
    parse_smaps_rollup,
    parse_status,
    split_cmdline,
)
from exporter.collectors.vllm.identity import (
    API_SERVER,
    ApiServer,
    engine_title,
    find_api_servers,
    is_api_server_cmdline,
    vllm_process_name,
)
from exporter.contract.settings import (
    Settings,
    at_least,
    parse_duration,
    parse_size,
    positive,
    setting,
)
from exporter.contract.source import Context, Key, Result, SourceBase, SourceSpec, in_thread
from exporter.host.degraded import CAP_SYS_PTRACE, DEGRADED
from exporter.host.labels import bounded
from exporter.host.paths import HostPaths, MemoryHierarchy, OpenFiles, read_bytes, read_text
from exporter.model import CgroupRef, ProcessGroup, ProcessPss, ProcessStatus

ARGS_KEPT, ARG_MAX_CHARS = 128, 512


def process_name(argv: Sequence[str], comm: str) -> str:
    """The contract's ``process`` label from a command line (comm when it is empty or
    blank), bounded and escaped (``labels.bounded``): argv[0] is the process's choice,
    whitespace (``exec -a ' '``) and 128 KiB included. A vLLM process is named by the
    vLLM package (``vllm.identity``)."""
    fallback = bounded(comm.strip()) or "unknown"
    if not argv:
        return fallback
    vllm = vllm_process_name(argv)
    if vllm is not None:
        return vllm
    words = argv[0].split(maxsplit=1)
    return bounded(os.path.basename(words[0])) if words and os.path.basename(words[0]) \
        else fallback


def group_processes(
    procs: Iterable[ProcessStatus], pss: Mapping[int, ProcessPss], cap: int
) -> tuple[ProcessGroup, ...]:
    """Sum processes by name; keep the ``cap`` largest names by RSS, fold the rest."""
    by_name: dict[str, list[ProcessStatus]] = {}
    for p in procs:
        by_name.setdefault(p.name, []).append(p)
    ranked = sorted(by_name.items(), key=lambda kv: (-sum(p.rss for p in kv[1]), kv[0]))
    keep = ranked if len(ranked) <= cap else ranked[: max(cap - 1, 0)]
    folded = [p for _, members in ranked[len(keep):] for p in members]
    groups = [_sum_group(name, members, pss) for name, members in keep]
    if folded:
        groups.append(_sum_group(OTHER_PROCESS, folded, pss))
    return tuple(sorted(groups, key=lambda g: g.name))


def _sum_group(name: str, members: list[ProcessStatus], pss: Mapping[int, ProcessPss]) -> (
    ProcessGroup
):
    readings = [pss[p.pid] for p in members if p.pid in pss]
    return ProcessGroup(
        name=name,
        count=len(members),
        rss_anon=sum(p.rss_anon for p in members),
        rss_file=sum(p.rss_file for p in members),
        rss_shmem=sum(p.rss_shmem for p in members),
        swap=sum(p.swap for p in members),
        pss=ProcessPss(
            anon=sum(r.anon for r in readings),
            file=sum(r.file for r in readings),
            shmem=sum(r.shmem for r in readings),
        ) if readings else None,
    )


@dataclass(frozen=True)
class ProcfsSettings(Settings):
    max_processes: int = setting(
        "--procfs.max-processes", "10", int,
        "process names kept per container; the rest are summed as 'other'",
        check=at_least(1))
    pss_interval: float = setting(
        "--procfs.pss-interval", "60s", parse_duration,
        "how often one process's smaps_rollup (PSS) is read", check=positive)
    pss_max_rss: int = setting(
        "--procfs.pss-max-rss", "2GiB", parse_size,
        "never read smaps_rollup of a process whose RSS is above this")
    pss_per_scrape: int = 16  # spread smaps_rollup reads over scrapes (not a flag)


@dataclass(frozen=True)
class ProcfsData:
    groups: Mapping[str, tuple[ProcessGroup, ...]]  # cgroup path -> groups
    processes: Mapping[str, tuple[ProcessStatus, ...]]  # cgroup path -> processes (by pid)
    hidden: int = 0  # pids listed as 0: processes in a pid namespace we cannot see
    # What the vLLM package decided from the command lines and parents read here (one pass
    # over /proc; the names above need it): cgroup path -> the command line of a vLLM API
    # server in it (for vLLM before 0.32, whose KV-event ports only its flags tell; they
    # are checked against its sockets), and cgroup path -> its API servers (found by the
    # engine processes they started, whatever their command line)
    api_server_argv: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    api_servers: Mapping[str, tuple[ApiServer, ...]] = field(default_factory=dict)


MAX_TREE = 512  # processes of one container whose parents are read to find an API server


class ProcfsCollector:
    """Holds the PSS cache and the name cache between scrapes; used from one thread."""

    def __init__(
        self,
        paths: HostPaths,
        settings: ProcfsSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._paths = paths
        self._settings = settings
        self._clock = clock
        self._names: dict[tuple[int, str], str] = {}  # (pid, comm) -> name
        self._first_look: set[tuple[int, str]] = set()  # names read once only
        self._pss: dict[int, tuple[float, str, ProcessPss]] = {}  # pid -> (when, comm, pss)
        self._hidden = 0
        self._api_argv: dict[int, tuple[str, ...]] = {}  # pid -> argv of vLLM API servers
        self._engines: dict[int, str] = {}  # pid -> vLLM engine title (EngineCore, Worker_TP0)
        self._files = OpenFiles()  # /proc/PID/status stays open between scrapes

    def pids(self, h: MemoryHierarchy, ref: CgroupRef) -> list[int]:
        try:
            # Opened afresh: on cgroup v1 a kept-open cgroup.procs re-read within about a
            # second returns the kernel's cached pid list (stale pids, new ones missing).
            text = read_text(h.file(ref.path, "cgroup.procs"))
        except FileNotFoundError:
            return []  # the container exited
        # The kernel lists processes outside the reader's pid namespace as 0.
        self._hidden += text.split().count("0")
        return parse_cgroup_procs(text)

    def read_process(self, pid: int) -> ProcessStatus | None:
        """One process; None when it exited (or became a zombie) mid-read."""
        try:
            text = self._files.read_text(self._paths.proc_file(pid, "status"))
            status = parse_status(text)
            if status is None and "\nState:\tZ" in text:
                status = self._live_thread_status(pid)
            if status is None:
                return None
            comm = status[0]
            key = (pid, comm)
            name = self._names.get(key)
            if name is None or key in self._first_look:
                # Re-read cmdline only when comm changes (vLLM retitles set both), and
                # once more at the second look: a process read between fork and exec
                # (runtimes place it in its cgroup first) showed its parent's command
                # line, and an exec that keeps comm (python3 -> python3) changes no
                # other field read here.
                if name is None:
                    self._first_look.add(key)
                else:
                    self._first_look.discard(key)
                argv = split_cmdline(read_bytes(self._paths.proc_file(pid, "cmdline"),
                                                limit=CMDLINE_MAX_BYTES))
                name = process_name(argv, comm)
                self._names[key] = name
                if is_api_server_cmdline(argv):
                    # Kept per process: bounded, whatever the command line holds.
                    self._api_argv[pid] = tuple(a[:ARG_MAX_CHARS] for a in argv[:ARGS_KEPT])
                else:
                    self._api_argv.pop(pid, None)
                title = engine_title(argv)
                if title is not None:
                    self._engines[pid] = title
                else:
                    self._engines.pop(pid, None)
        except (FileNotFoundError, ProcessLookupError):
            return None
        return ProcessStatus(pid, name, *status[1:])

    def _live_thread_status(self, pid: int) -> tuple[str, int, int, int, int] | None:
        """A zombie leader whose other threads run (a container's main thread called
        pthread_exit): the memory is the thread group's, read through a
        live thread."""
        task = self._paths.proc_file(pid, "task")
        try:
            tids = [t for t in os.listdir(task) if t.isdigit() and t != str(pid)][:8]
        except OSError:
            return None
        for tid in tids:
            try:
                status = parse_status(read_text(f"{task}/{tid}/status"))
            except OSError:
                continue
            if status is not None:
                return status
        return None

    def collect(self, h: MemoryHierarchy, refs: Sequence[CgroupRef]) -> ProcfsData:
        self._paths.require_procfs()
        groups: dict[str, tuple[ProcessGroup, ...]] = {}
        processes: dict[str, tuple[ProcessStatus, ...]] = {}
        api_argv: dict[str, tuple[str, ...]] = {}
        api_servers: dict[str, tuple[ApiServer, ...]] = {}
        live: set[int] = set()
        now = self._clock()
        self._hidden = 0
        budget = self._settings.pss_per_scrape
        for ref in refs:
            if ref.is_pod_level:
                continue  # processes live in the container cgroups
            procs: list[ProcessStatus] = []
            for pid in self.pids(h, ref):
                p = self.read_process(pid)
                if p is None:
                    continue
                procs.append(p)
                live.add(pid)
                if pid in self._api_argv and ref.path not in api_argv:
                    api_argv[ref.path] = self._api_argv[pid]
                budget -= self._refresh_pss(p, now, budget)
            servers = self._api_servers(procs)
            if servers:
                api_servers[ref.path] = servers
                procs = self._name_api_servers(procs, servers)
                if ref.path not in api_argv:
                    with contextlib.suppress(OSError):
                        argv = split_cmdline(read_bytes(
                            self._paths.proc_file(servers[0].pid, "cmdline")))
                        api_argv[ref.path] = tuple(a[:ARG_MAX_CHARS] for a in argv[:ARGS_KEPT])
            pss = {p.pid: self._pss[p.pid][2] for p in procs if p.pid in self._pss}
            groups[ref.path] = group_processes(procs, pss, self._settings.max_processes)
            processes[ref.path] = tuple(procs)
        self._forget(live)
        self._files.sweep()
        return ProcfsData(groups, processes, self._hidden, api_argv, api_servers)

    def _api_servers(self, procs: Sequence[ProcessStatus]) -> tuple[ApiServer, ...]:
        """The vLLM API servers among a container's processes, as the vLLM package finds
        them from their parents (read from /proc/PID/stat only in containers that have
        vLLM engine processes)."""
        if not any(p.pid in self._engines for p in procs):
            return ()
        ppids: dict[int, int] = {}
        for p in procs[:MAX_TREE]:
            try:
                st = parse_pid_stat(read_text(self._paths.proc_file(p.pid, "stat")))
            except OSError:
                continue
            if st is not None:
                ppids[p.pid] = st.ppid
        return find_api_servers(ppids, {pid: self._engines[pid] for pid in ppids
                                        if pid in self._engines})

    @staticmethod
    def _name_api_servers(procs: Sequence[ProcessStatus],
                          servers: Sequence[ApiServer]) -> list[ProcessStatus]:
        """The contract's ``APIServer`` for an API server whatever its command line (a
        launcher's process is otherwise named after its executable, e.g. python)."""
        pids = {s.pid for s in servers}
        return [replace(p, name=API_SERVER) if p.pid in pids and
                not p.name.startswith(API_SERVER) else p for p in procs]

    def _refresh_pss(self, p: ProcessStatus, now: float, budget: int) -> int:
        """Read smaps_rollup when due and small enough; returns reads spent (0 or 1)."""
        cached = self._pss.get(p.pid)
        if cached is not None and cached[1] != p.name:
            del self._pss[p.pid]  # pid reused by another program
            cached = None
        if budget <= 0 or p.rss > self._settings.pss_max_rss:
            if p.rss > self._settings.pss_max_rss:
                self._pss.pop(p.pid, None)  # grew past the gate: a stale reading misleads
            return 0
        if cached is not None and now - cached[0] < self._settings.pss_interval:
            return 0
        try:
            reading = parse_smaps_rollup(read_text(self._paths.proc_file(p.pid, "smaps_rollup")))
        except PermissionError as exc:
            DEGRADED.report(KEY.name, CAP_SYS_PTRACE, f"no PSS: smaps_rollup of pid {p.pid}: "
                            f"{exc.strerror}")
            return 1
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return 1
        self._pss[p.pid] = (now, p.name, reading)
        return 1

    def _forget(self, live: set[int]) -> None:
        for key in [k for k in self._names if k[0] not in live]:
            del self._names[key]
            self._first_look.discard(key)
        for pid in [pid for pid in self._pss if pid not in live]:
            del self._pss[pid]
        for cache in (self._api_argv, self._engines):
            for pid in [pid for pid in cache if pid not in live]:
                del cache[pid]


# --- the source ------------------------------------------------------------------------

KEY: Key[ProcfsData] = Key("procfs")


class ProcfsSource(SourceBase):
    def __init__(self, settings: ProcfsSettings, paths: HostPaths) -> None:
        self.collector = ProcfsCollector(paths, settings)

    async def collect(self, ctx: Context) -> Result[ProcfsData]:
        data = await in_thread(lambda: self.collector.collect(ctx.hierarchy, ctx.refs))
        if not data.hidden:
            return Result(data)
        return Result(data, (
            f"{data.hidden} processes of tracked cgroups are in another pid namespace "
            "(cgroup.procs lists them as 0): run headroom with the host's pid namespace "
            "(hostPID: true) and --path.procfs pointing at the host's /proc",))


SPEC = SourceSpec(KEY, "memory of each process in the tracked cgroups (/proc/PID/status, "
                  "smaps_rollup)", ProcfsSettings, ProcfsSource)
