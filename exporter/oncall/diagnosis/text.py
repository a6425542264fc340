"""A diagnosis as text for a terminal (plain or coloured) or as JSON."""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
import time
from collections.abc import Callable
from typing import Any

from exporter.oncall import forecast as fc
from exporter.oncall.diagnosis.verdict import AT_RISK, HEALTHY, NO_DATA, Diagnosis
from exporter.oncall.units import fmt_bytes, fmt_duration, fmt_rate, where


def to_json(d: Diagnosis) -> str:
    doc: dict[str, Any] = dataclasses.asdict(d)
    doc["exit_code"] = d.exit_code
    return json.dumps(doc, indent=2, sort_keys=False)


Style = Callable[[str, str], str]


def ansi(text: str, style: str) -> str:
    codes = {"bold": "1", "red": "1;31", "green": "1;32", "yellow": "1;33", "dim": "2"}
    return f"\x1b[{codes[style]}m{text}\x1b[0m"


def plain(text: str, style: str) -> str:
    return text


_UNIT = re.compile(r"(\d) (GiB|MiB|KiB|B|days|h|min|s)\b")


def _wrap(text: str, width: int = 100, bullet: str = "  - ") -> list[str]:
    """A bullet wrapped for a terminal; URLs and "2.0 GiB/day" are never broken."""
    glued = _UNIT.sub("\\1\u00a0\\2", text)
    return [line.replace("\u00a0", " ") for line in textwrap.wrap(
        glued, width, initial_indent=bullet, subsequent_indent=" " * len(bullet),
        break_long_words=False, break_on_hyphens=False)]


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


SOURCES = {"recorded": "the recorded forecast",
           "local": "computed here: the recording rules are not loaded",
           "trends": "the raw trends"}


def to_text(d: Diagnosis, style: Style = plain, width: int = 80) -> str:
    colour = {AT_RISK: "red", HEALTHY: "green", NO_DATA: "yellow"}[d.verdict]
    head = d.headline or (f"{d.namespace}/{d.pod}" if d.namespace else d.pod)
    lines = [style(head[:width], colour)]
    lines += [style(ln, "bold") for ln in _wrap(d.summary, width, bullet="")]
    if d.commands:
        lines += ["", style("Run now", "bold")]
        lines += [f"  {cmd}" for cmd in d.commands]
    if d.kills:
        lines += ["", style("Kills", "bold")]
        for k in d.kills:
            when = (f"last at {_stamp(k.when)} ({fmt_duration(k.age_s or 0.0)} ago), "
                    if k.when is not None else "")
            lines += _wrap(f"{when}{k.total} total, {k.last_day} in the last day: victim "
                           f"{k.process} in the {where(k.container)}"
                           + (f"; {k.grew}" if k.grew else "")
                           + f"; post-mortem: {k.postmortem}", width)
    cl = d.closeness
    if cl is not None:
        lines += ["", style(f"How close ({cl.cgroup}, binding)", "bold"),
                  f"  unreclaimable  {fmt_bytes(cl.unreclaimable)} of {fmt_bytes(cl.limit)} "
                  f"({cl.ratio:.0%}); headroom {fmt_bytes(cl.headroom)}"]
        if cl.time_to_limit_s is not None:
            lines.append(f"  time to limit  about {fmt_duration(cl.time_to_limit_s)} at "
                         f"{fmt_rate(cl.lasting_rate)} ({cl.horizon or 'lasting'} growth)")
        elif cl.lasting_rate:
            lines.append(f"  time to limit  none forecast; grows {fmt_rate(cl.lasting_rate)}")
        else:
            lines.append("  time to limit  none forecast: not growing at any horizon")
        lines.append(f"  forecast from  {SOURCES.get(cl.source, cl.source)}")
        if cl.source in (fc.RECORDED, fc.LOCAL):  # the forecast's rates, as recorded
            rates = dict(cl.by_horizon)
            lines.append("  growth        " + "".join(
                f" {h} {fmt_rate(rates[h]) if h in rates else '-'} " for h in fc.HORIZONS))
        else:
            lines.append(f"  trend          1h {fmt_rate(cl.trend_1h)}   6h "
                         f"{fmt_rate(cl.trend_6h)}   1d {fmt_rate(cl.trend_1d)}"
                         + (f"   daily floor {fmt_bytes(cl.floor_rise_1d)}/day"
                            if cl.floor_rise_1d is not None else ""))
        if cl.peak_swings is not None:
            lines.append(f"  peaks          {cl.peak_swings:.2f} quiet-hour swings below the "
                         f"limit (the page fires below {fc.NOISE_BAND_SWINGS:g})")
        if cl.working_set is not None:
            lines.append(f"  working set    {fmt_bytes(cl.working_set)} (kubelet's view)")
        if cl.reclaim_per_s:
            lines.append(f"  reclaim        the kernel hit the limit {cl.reclaim_per_s:.1f}"
                         " times/s over the last hour")
    if d.growth:
        lines += ["", style("What grows", "bold")]
        for g in d.growth:
            label = {"kind": f"{g.name} (kind)", "process": f"{g.name} ({where(g.container)})",
                     "grower": f"{g.name} (top grower)"}.get(g.what, g.name)
            rate = "flat" if g.detail == "flat" else fmt_rate(g.rate)
            lines.append(f"  {label:<38} {rate:>16}"
                         + (f"   now {fmt_bytes(g.now)}" if g.now is not None else "")
                         + (f"   {g.detail}" if g.detail and g.what == "process" else ""))
    if d.causes:
        lines += ["", style("Likely cause", "bold")]
        for cause in d.causes:
            lines += _wrap(f"{cause.title}: {cause.detail}", width)
            if cause.settings:
                lines.append(f"    setting: {', '.join(cause.settings)}")
    if d.actions:
        lines += ["", style("What to do now", "bold")]
        for a in d.actions:
            lines += [f"  - {a}"] if a.startswith("runbook: ") else _wrap(a, width)
    if d.notes:
        lines.append("")
        for n in d.notes:
            lines += [style(ln, "dim") for ln in _wrap(n, width, bullet="  note: ")]
    return "\n".join(lines) + "\n"

