"""The exporter's own RSS, CPU, open fds and start time (its memory must stay bounded),
under client_python's standard ``process_*`` names."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from exporter import catalog as c
from exporter.exposition.encode import Family

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
FD_COUNT_INTERVAL = 10.0


class SelfMetrics:
    """One per exporter. Listing /proc/self/fd costs milliseconds with the ~1,000 kernel
    files the sources keep open: the count is refreshed at most every 10 s."""

    def __init__(self, procfs: Path = Path("/proc"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._self = procfs / "self"
        self._stat = procfs / "stat"
        self._clock = clock
        self._fds = 0
        self._fds_at = -1e18

    def _open_fds(self) -> int:
        now = self._clock()
        if now - self._fds_at > FD_COUNT_INTERVAL:
            self._fds, self._fds_at = len(os.listdir(self._self / "fd")), now
        return self._fds

    def families(self) -> list[Family]:
        try:
            stat = (self._self / "stat").read_text().rsplit(")", 1)[1].split()
            boot = next(float(line.split()[1]) for line in
                        self._stat.read_text().splitlines() if line.startswith("btime"))
            fds = self._open_fds()
        except (OSError, StopIteration, IndexError):
            return []
        out = []
        for spec, value in (
            (c.SELF_RESIDENT_MEMORY_BYTES, int(stat[21]) * _PAGE),
            (c.SELF_CPU_SECONDS_TOTAL, (int(stat[11]) + int(stat[12])) / _TICKS),
            (c.SELF_OPEN_FDS, fds),
            (c.SELF_START_TIME_SECONDS, boot + int(stat[19]) / _TICKS),
        ):
            fam = Family(spec)
            fam.add((), value)
            out.append(fam)
        return out
