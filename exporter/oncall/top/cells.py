"""Numbers and widths that survive hostile values (NaN, Inf, 1e300, CJK names): top's
cells."""

from __future__ import annotations

import math
import unicodedata

from exporter.oncall.units import fmt_duration, fmt_rate

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PiB = 1 << 50


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def human_bytes(n: float | None) -> str:
    if n is None or math.isnan(n):
        return "n/a"
    if abs(n) >= 1000 * PiB:
        return ">999 PiB" if n > 0 else "<-999 PiB"
    sign = "-" if n < 0 else ""
    a = abs(n)
    for unit, size in (("PiB", PiB), ("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB),
                       ("KiB", KiB)):
        if a >= size:
            return f"{sign}{a / size:.1f} {unit}"
    return f"{sign}{a:.0f} B"


def human_rate(r: float | None) -> str:
    if r is None or math.isnan(r):
        return "n/a"
    if abs(r) >= 1000 * PiB:
        return ">999 PiB/s"
    return fmt_rate(r)


def human_duration(s: float | None) -> str:
    if s is None or math.isnan(s) or s < 0:
        return "-"
    if s > 999 * 86400:
        return ">999 days"
    return fmt_duration(s)


def char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width_of(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def cut(text: str, width: int) -> str:
    """The longest prefix that fits ``width`` columns."""
    out, used = [], 0
    for ch in text:
        w = char_width(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out)


def cut_middle(text: str, width: int) -> str:
    """Fit ``width`` columns keeping both ends: "llm/vllm-7f9…-x2kq9"."""
    if width_of(text) <= width:
        return text
    if width <= 1:
        return cut(text, width)
    tail_w = (width - 1) * 2 // 3
    head = cut(text, width - 1 - tail_w)
    tail, used = [], 0
    for ch in reversed(text):
        w = char_width(ch)
        if used + w > tail_w:
            break
        tail.append(ch)
        used += w
    return head + "\u2026" + "".join(reversed(tail))


def pad(text: str, width: int, right: bool = False) -> str:
    text = cut(text, width)
    gap = " " * (width - width_of(text))
    return gap + text if right else text + gap

