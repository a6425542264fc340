"""The node's own memory pressure: PSI for the whole node (``/proc/pressure/memory``) and
the kernel's reclaim and OOM counters (``/proc/vmstat``), read from ``--path.procfs``.

A pod's figures say how close it is to its own limit; these say whether the node is short
of memory for everyone: kswapd scanning pages in the background, allocations stalled in
direct reclaim, the global OOM killer. A pod far from its limit can still be killed when
the node runs out (the kubelet evicts, or the kernel's global OOM killer picks it).

- PSI ``some``: the share of wall time at least one task waited for memory; ``full``: all
  non-idle tasks did at once. ``avg10``/``avg60`` are percentages over 10 s and 60 s
  (exported as ratios 0-1), ``total`` the stall time in microseconds (exported in
  seconds). A kernel built without PSI, or booted with ``psi=0``, has no such file (or
  refuses the read): no pressure series, not a failure.
- vmstat ``pgscan_<reclaimer>`` / ``pgsteal_<reclaimer>``: pages scanned / reclaimed since
  boot by who reclaimed (kswapd, direct, khugepaged, proactive), a partition of all
  reclaim; the ``_anon``/``_file`` split of newer kernels is a second partition of the
  same pages and is left out, so the series sum to the total. ``oom_kill``: processes the
  kernel's OOM killer killed since boot, every memcg and the global one (each process
  signalled counts: a group kill of three processes is 3; headroom's per-pod kill count
  is ``headroom_oom_kills_total``).

Two small files, read with raw syscalls and at most ``MAX_BYTES`` each (a line the cap
cuts is dropped); only the keys above are kept, so the series are bounded whatever the
kernel adds, and a figure the kernel could not have written (a negative counter, a
percentage past 100, a number past 64 bits) fails the file instead of being exported.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter import catalog as c
from exporter.contract.source import (
    Context,
    Key,
    NoSettings,
    Result,
    SourceBase,
    SourceSpec,
    in_thread,
)
from exporter.host.paths import HostPaths, read_bytes

# PSI reads that mean "this kernel has no PSI", not a failure.
_NO_PSI = (errno.ENOENT, errno.EOPNOTSUPP)
MAX_BYTES = 1 << 16  # each file read at most this far (vmstat of a 6.x kernel: ~5 KiB)
_DIGITS = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"[0-9]+(\.[0-9]+)?")


def _read(path: str) -> str:
    return _whole_lines(read_bytes(path, MAX_BYTES)).decode("ascii", "replace")


def _whole_lines(data: bytes) -> bytes:
    """A read that reached the cap ends in a line the cap cut, whose number is only its
    first digits: dropped, never taken for a figure."""
    if len(data) < MAX_BYTES:
        return data
    return data[: data.rfind(b"\n") + 1]


def _counter(text: str) -> int:
    """A kernel counter: decimal digits only (an unsigned 64-bit value)."""
    if not _DIGITS.fullmatch(text) or int(text) >= 1 << 64:
        raise ValueError(f"not a counter: {text!r}")
    return int(text)


def _percent(text: str) -> float:
    """A PSI average: a percentage 0-100 with two decimals, as the kernel prints it."""
    if not _PERCENT.fullmatch(text) or float(text) > 100:
        raise ValueError(f"not a percentage: {text!r}")
    return float(text)


@dataclass(frozen=True)
class Stall:
    """One PSI line (``some`` or ``full``)."""

    averages: Mapping[str, float]  # window ("10s", "60s") -> ratio 0-1
    total_seconds: float


@dataclass(frozen=True)
class NodePressure:
    stalls: Mapping[str, Stall] = field(default_factory=dict)  # level -> stall; {}: no PSI
    scanned: Mapping[str, int] = field(default_factory=dict)  # reclaimer -> pages
    reclaimed: Mapping[str, int] = field(default_factory=dict)
    oom_kills: int | None = None  # None: the kernel has no such counter (before 4.13)


KEY: Key[NodePressure] = Key("node_pressure")


def parse_psi(text: str) -> dict[str, Stall]:
    """``some avg10=1.50 avg60=0.20 avg300=0.05 total=123456`` lines -> level -> stall."""
    out: dict[str, Stall] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] not in c.PRESSURE_LEVELS:
            continue
        level = words[0]
        kv = {}
        for pair in words[1:]:
            key, _, value = pair.partition("=")
            kv[key] = value
        try:
            averages = {w: _percent(kv["avg" + w.removesuffix("s")]) / 100
                        for w in c.PRESSURE_WINDOWS}
            out[level] = Stall(averages, _counter(kv["total"]) / 1e6)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"PSI line {line!r}: {exc}") from None
    return out


def parse_vmstat(text: str) -> NodePressure:
    """``name value`` lines -> the reclaim counters and oom_kill (other keys ignored)."""
    scanned: dict[str, int] = {}
    reclaimed: dict[str, int] = {}
    wanted = {**{f"pgscan_{r}": (scanned, r) for r in c.RECLAIMERS},
              **{f"pgsteal_{r}": (reclaimed, r) for r in c.RECLAIMERS}}
    oom_kills = None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            oom_kills = _counter(value)
        elif name in wanted:
            into, reclaimer = wanted[name]
            into[reclaimer] = _counter(value)
    return NodePressure({}, scanned, reclaimed, oom_kills)


def read_node_pressure(paths: HostPaths) -> Result[NodePressure]:
    """Each file on its own: one that fails is an error, the other's figures still count;
    nothing read at all is no data."""
    errors: list[str] = []
    counters: NodePressure | None = None
    try:
        counters = parse_vmstat(_read(str(paths.proc("vmstat"))))
    except (OSError, ValueError) as exc:
        errors.append(f"vmstat: {exc}")
    stalls: dict[str, Stall] = {}
    try:
        stalls = parse_psi(_read(str(paths.proc("pressure", "memory"))))
    except OSError as exc:
        if exc.errno not in _NO_PSI:
            errors.append(f"pressure/memory: {exc}")
    except ValueError as exc:
        errors.append(f"pressure/memory: {exc}")
    if counters is None and not stalls:
        return Result(None, tuple(errors))
    counters = counters or NodePressure()
    return Result(NodePressure(stalls, counters.scanned, counters.reclaimed, counters.oom_kills),
                  tuple(errors))


class NodePressureSource(SourceBase):
    def __init__(self, paths: HostPaths) -> None:
        self._paths = paths

    async def collect(self, ctx: Context) -> Result[NodePressure]:
        return await in_thread(lambda: read_node_pressure(self._paths))


def _build(_settings: NoSettings, paths: HostPaths) -> NodePressureSource:
    return NodePressureSource(paths)


SPEC = SourceSpec(KEY, "the node's memory pressure (/proc/pressure/memory) and reclaim "
                  "and OOM counters (/proc/vmstat)", NoSettings, _build, needs_cgroups=False)
