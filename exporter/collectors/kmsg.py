"""The kernel log (/dev/kmsg) as a source of OOM victims: the kernel names the killed
process and its memory cgroup. One kill is two consecutive records:

    oom-kill:constraint=...,oom_memcg=<cgroup>,task_memcg=<cgroup>,task=<comm>,pid=<pid>,uid=<uid>
    Memory cgroup out of memory: Killed process <pid> (<comm>) total-vm:...

``comm`` is whatever the process named itself (prctl, exec): it may hold commas and
``pid=``, so a process named ``x,pid=<other>`` could make a naive parser blame another
process (docs/threats.md: victim-name-spoof). The first line is therefore read from its end
(``,pid=<digits>,uid=<digits>`` anchored there, the comm is whatever lies between
``task=`` and that), and the pid is confirmed by the second line, where it comes before
the comm and cannot be steered. Read by the OOM watcher on the sampler thread, never at
scrape time."""

from __future__ import annotations

import errno
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from exporter.host.degraded import CAP_SYSLOG, DEGRADED, DEVICE_DENIED

log = logging.getLogger(__name__)

_OOM_KILL_RE = re.compile(r"oom-kill:.*?,task_memcg=(?P<memcg>.*?),task=(?P<comm>.*),"
                          r"pid=(?P<pid>\d+),uid=\d+$")
_KILLED_RE = re.compile(r"Killed process (?P<pid>\d+) \((?P<comm>.*)\) total-vm:")


@dataclass(frozen=True)
class KernelVictim:
    pid: int
    comm: str
    memcg: str  # relative to the memory hierarchy root, no leading slash ("" if unknown)
    line: str


def parse_kmsg_record(record: str) -> KernelVictim | None:
    """One /dev/kmsg record (``prio,seq,usec,flags;message``) -> the OOM victim, if any."""
    _, _, message = record.partition(";")
    message = message.split("\n", 1)[0]
    m = _OOM_KILL_RE.search(message.rstrip())
    if m:
        return KernelVictim(int(m["pid"]), m["comm"], m["memcg"].strip("/"), message)
    m = _KILLED_RE.search(message)
    if m:
        return KernelVictim(int(m["pid"]), m["comm"], "", message)
    return None


def pair_victims(records: list[KernelVictim]) -> tuple[list[KernelVictim], KernelVictim | None]:
    """Victims with their cgroup, each ``oom-kill:`` record confirmed by the ``Killed
    process`` record after it (its pid wins: it cannot be steered by a name). Returns the
    victims and a trailing ``oom-kill:`` record still waiting for its second line."""
    out: list[KernelVictim] = []
    held: KernelVictim | None = None
    for r in records:
        if r.memcg:  # an oom-kill: summary line
            if held is not None:
                out.append(held)  # its second line never came: the summary alone
            held = r
        elif held is not None:  # Killed process: the same kill, its pid authoritative
            out.append(KernelVictim(r.pid, held.comm, held.memcg, held.line))
            held = None
        # a Killed process line alone: a member of an oom.group kill, or history
    return out, held


class KmsgReader:
    """Non-blocking reader of new /dev/kmsg records (history is skipped at open)."""

    def __init__(self, path: Path | None) -> None:
        self._fd: int | None = None
        self._held: KernelVictim | None = None  # an oom-kill: line awaiting its pair
        if path is None:
            return
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            log.info("kernel log %s not readable (%s): OOM victims are inferred", path,
                     exc.strerror)
            if exc.errno in (errno.EPERM, errno.EACCES):
                # EPERM at open: dmesg_restrict without SYSLOG, or the device cgroup.
                DEGRADED.report("kmsg", CAP_SYSLOG, f"no kernel log: {path}: {exc.strerror}",
                                otherwise=DEVICE_DENIED)
            self._fd = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def read_victims(self) -> list[KernelVictim]:
        """The victims logged since the last call (an ``oom-kill:`` line whose second line
        is not there yet is returned next time, or alone if the next record is not it)."""
        carried = self._held
        records: list[KernelVictim] = [carried] if carried is not None else []
        self._held = None
        if self._fd is None:
            return []
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: go on
                    continue
                raise
            if not record:
                break
            victim = parse_kmsg_record(record.decode("utf-8", "replace"))
            if victim is not None:
                records.append(victim)
        out, held = pair_victims(records)
        if held is not None and held is carried:
            out.append(held)  # waited a whole pass for its second line: the summary alone
            held = None
        self._held = held
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
