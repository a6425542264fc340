"""The kernel log (/dev/kmsg) as a source of OOM victims: the kernel names the killed
process and its memory cgroup (``oom-kill:...,task_memcg=<cgroup>,task=<comm>,pid=<pid>``).
Read by the OOM watcher on the sampler thread, never at scrape time."""

from __future__ import annotations

import errno
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_OOM_KILL_RE = re.compile(r"oom-kill:.*?task_memcg=(?P<memcg>[^,]*),task=(?P<comm>[^,]*),"
                          r"pid=(?P<pid>\d+)")
_KILLED_RE = re.compile(r"Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)")


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
    m = _OOM_KILL_RE.search(message)
    if m:
        return KernelVictim(int(m["pid"]), m["comm"], m["memcg"].strip("/"), message)
    m = _KILLED_RE.search(message)
    if m:
        return KernelVictim(int(m["pid"]), m["comm"], "", message)
    return None


class KmsgReader:
    """Non-blocking reader of new /dev/kmsg records (history is skipped at open)."""

    def __init__(self, path: Path | None) -> None:
        self._fd: int | None = None
        if path is None:
            return
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            log.info("kernel log %s not readable (%s): OOM victims are inferred", path,
                     exc.strerror)
            self._fd = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def read_victims(self) -> list[KernelVictim]:
        out: list[KernelVictim] = []
        if self._fd is None:
            return out
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: go on
                    continue
                raise
            if not record:
                return out
            victim = parse_kmsg_record(record.decode("utf-8", "replace"))
            if victim is not None:
                out.append(victim)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
