"""A flight-recorder document read defensively: every number through :func:`as_num`,
every string escaped with :func:`e`, so a malformed document draws less, never fails;
and one cgroup's points for the charts."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.catalog import MEMORY_KINDS, RSS_ANON, RSS_SHMEM

MiB = 1 << 20
GiB = 1 << 30
# Stacking order: least reclaimable at the bottom (the catalogue's order).
KINDS = MEMORY_KINDS
TOP_PROCESSES = 5


# --- safe reading of a document ----------------------------------------------------------------
def as_num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def as_str(x: object, limit: int = 200) -> str:
    return str(x)[:limit] if x is not None else ""


def as_list(x: object) -> list[Any]:
    return x if isinstance(x, list) else []


def as_dict(x: object) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def e(x: object) -> str:
    return html.escape(as_str(x), quote=True)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class ChartData:
    """What one cgroup's chart draws, read defensively from a document part."""

    kill: float
    start: float
    usage: tuple[Point, ...]  # 1 s samples
    unreclaimable: tuple[Point, ...]
    limit: tuple[Point, ...]
    kinds: tuple[Series, ...]  # stacked, in KINDS order
    processes: tuple[Series, ...]  # anon + mapped shmem of the top processes


def chart_data(part: Mapping[str, Any], kill: float, window: float,
               start: float | None = None) -> ChartData:
    """The part's points from ``start`` (default: ``window`` before the kill)."""
    start = kill - window if start is None else max(start, kill - window)
    usage = tuple(sorted(
        (t, v) for t, v in ((as_num(p[0]), as_num(p[1])) for p in as_list(part.get("usage"))
                            if isinstance(p, list) and len(p) == 2)
        if t is not None and v is not None and start <= t <= kill + 60))
    scrapes = sorted((s for s in (as_dict(x) for x in as_list(part.get("scrapes")))
                      if (t := as_num(s.get("time"))) is not None and t >= start),
                     key=lambda s: as_num(s["time"]) or 0)

    def line(key: str) -> tuple[Point, ...]:
        return tuple((as_num(s["time"]) or 0, v) for s in scrapes
                     if (v := as_num(s.get(key))) is not None)

    kinds = tuple(Series(k, tuple((as_num(s["time"]) or 0, as_num(as_dict(s.get("kinds")).get(k))
                                   or 0.0) for s in scrapes))
                  for k in KINDS if any(as_num(as_dict(s.get("kinds")).get(k)) for s in scrapes))
    held: dict[str, dict[float, float]] = {}
    for s in scrapes:
        t = as_num(s["time"]) or 0
        for p in (as_dict(x) for x in as_list(s.get("processes"))):
            name = as_str(p.get("process"), 80)
            held.setdefault(name, {})[t] = (as_num(p.get(RSS_ANON)) or 0) + (
                as_num(p.get(RSS_SHMEM)) or 0)
    top = sorted(held, key=lambda n: -max(held[n].values()))[:TOP_PROCESSES]
    processes = tuple(Series(n, tuple(sorted(held[n].items()))) for n in top)
    return ChartData(kill, start, usage, line("unreclaimable"), line("limit"), kinds,
                     processes)
