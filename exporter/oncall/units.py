"""Numbers and names in the words an engineer reads: bytes, rates and durations, and
label values made safe for a terminal. Shared by the diagnosis, its renderers and ``top``;
knows nothing of any of them.
"""

from __future__ import annotations

MiB = 1 << 20
GiB = 1 << 30
HOUR = 3600.0
DAY = 86400.0


def printable(text: str, limit: int = 120) -> str:
    """A label value fit for a terminal: process and pod names are hostile input, and a
    name holding an escape sequence must not drive the engineer's terminal."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def fmt_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{sign}{n / size:.1f} {unit}"
    return f"{sign}{n:.0f} B"


def fmt_rate(per_s: float | None) -> str:
    """A rate in the unit an engineer reads best: per day for slow leaks, per second for
    a ramp that kills within minutes."""
    if per_s is None:
        return "n/a"
    sign = "+" if per_s >= 0 else "-"
    a = abs(per_s)
    if a >= MiB:
        return f"{sign}{fmt_bytes(a)}/s"
    if a * HOUR >= GiB:
        return f"{sign}{fmt_bytes(a * HOUR)}/h"
    return f"{sign}{fmt_bytes(a * DAY)}/day"


def fmt_duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * HOUR:
        return f"{s / 60:.0f} min"
    if s < 2 * DAY:
        return f"{s / HOUR:.1f} h"
    return f"{s / DAY:.1f} days"


def where(container: str) -> str:
    return f"container {container}" if container else "pod-level cgroup"


def fit(text: str, width: int = 80) -> str:
    """Cut in the middle: the end of a pod name (its replica hash) tells pods apart."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep * 2 // 3] + "…" + text[len(text) - keep * 2 // 3:]
