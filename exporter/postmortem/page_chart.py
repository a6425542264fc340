"""The post-mortem's charts as inline SVG: kinds stacked, usage, unreclaimable, the
limit and the kill; each drawn wide and narrow (CSS shows one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.catalog import (
    KIND_ANON,
    KIND_FILE_ACTIVE,
    KIND_FILE_INACTIVE,
    KIND_KERNEL,
    KIND_SHMEM,
    KIND_SOCK,
    KIND_UNACCOUNTED,
)
from exporter.postmortem.page_data import ChartData, GiB, MiB, Point, e, fmt_bytes

KIND_COLOURS = {
    KIND_ANON: "#d62728", KIND_SHMEM: "#9467bd", KIND_KERNEL: "#8c564b", KIND_SOCK: "#e377c2",
    KIND_UNACCOUNTED: "#7f7f7f", KIND_FILE_ACTIVE: "#9ecae1", KIND_FILE_INACTIVE: "#c6dbef",
}
PROCESS_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#bcbd22")


@dataclass(frozen=True)
class Frame:
    """A chart's canvas in SVG units. The page carries a wide and a narrow drawing of each
    chart and CSS shows one: text stays readable on a desktop and on a phone alike."""

    name: str
    w: int
    h: int
    left: int
    right: int = 12
    top: int = 18
    bottom: int = 36
    x_labels: int = 8


WIDE = Frame("wide", 960, 380, 78, 16)
NARROW = Frame("narrow", 420, 340, 72, 10, x_labels=4)


def _ticks(top: float) -> list[float]:
    """About five round byte ticks from 0 to top."""
    if top <= 0:
        return [0.0]
    raw = top / 5
    unit = MiB if top < 4 * GiB else GiB
    steps = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    step = next((s * unit for s in steps if s * unit >= raw), raw)
    return [i * step for i in range(int(top // step) + 1)]


def _path(points: Sequence[Point], x: Any, y: Any) -> str:
    return " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}"
                    for i, (t, v) in enumerate(points))


def svg_chart(d: ChartData, title: str, victim: str, kind: str = "memory",
              f: Frame = WIDE) -> str:
    """One chart: kinds stacked as areas, usage, unreclaimable and the limit as lines, a
    red rule at the kill. ``kind="processes"`` draws the top processes instead."""
    x0, y0 = f.left, f.top
    pw, ph = f.w - f.left - f.right, f.h - f.top - f.bottom
    end = d.kill + 5
    values = [v for _, v in (*d.usage, *d.unreclaimable, *d.limit)]
    if kind == "processes":
        values = [v for s in d.processes for _, v in s.points] + [v for _, v in d.limit]
    else:
        stack_tops = [sum(v for s in d.kinds for tt, v in s.points if tt == t)
                      for t, _ in (d.kinds[0].points if d.kinds else ())]
        values += stack_tops
    top = max(values, default=1.0) * 1.08 or 1.0

    def x(t: float) -> float:
        return x0 + (min(max(t, d.start), end) - d.start) / (end - d.start) * pw

    def y(v: float) -> float:
        return y0 + ph - v / top * ph

    out = [f'<svg class="chart chart-{kind} {f.name}" viewBox="0 0 {f.w} {f.h}" role="img" '
           f'aria-label="{e(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<title>{e(title)}</title>',
           f'<rect class="plot" x="{x0}" y="{y0}" width="{pw}" height="{ph}"/>']
    for v in _ticks(top):
        out.append(f'<line class="grid" x1="{x0}" x2="{x0 + pw}" y1="{y(v):.1f}" '
                   f'y2="{y(v):.1f}"/><text class="axis" x="{x0 - 6}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{e(fmt_bytes(v).replace(".0 ", " "))}</text>')
    span = end - d.start
    step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
                 if span / s <= f.x_labels), 14400)
    t = d.kill
    while t >= d.start:
        ago = d.kill - t
        label = "kill" if t == d.kill else (f"-{ago:.0f} s" if step < 60
                                            else f"-{ago / 60:.0f} min")
        out.append(f'<text class="axis" x="{x(t):.1f}" y="{y0 + ph + 18}" '
                   f'text-anchor="middle">{label}</text>')
        t -= step
    if kind == "processes":
        for i, s in enumerate(d.processes):
            colour = PROCESS_COLOURS[i % len(PROCESS_COLOURS)]
            out.append(f'<path class="process" data-process="{e(s.name)}" fill="none" '
                       f'stroke="{colour}" stroke-width="2.5" d="{_path(s.points, x, y)}">'
                       f'<title>{e(s.name)}</title></path>')
    else:
        base: dict[float, float] = {}
        for s in d.kinds:
            lower = [(t, base.get(t, 0.0)) for t, _ in s.points]
            upper = [(t, base.get(t, 0.0) + v) for t, v in s.points]
            for t, v in upper:
                base[t] = v
            if not upper:
                continue
            area = _path(upper, x, y) + " " + _path(list(reversed(lower)), x, y).replace(
                "M", "L", 1) + " Z"
            out.append(f'<path class="kind kind-{e(s.name)}" data-kind="{e(s.name)}" '
                       f'fill="{KIND_COLOURS.get(s.name, "#ccc")}" fill-opacity="0.75" '
                       f'stroke="none" d="{area}"><title>{e(s.name)}</title></path>')
        if d.usage:
            out.append(f'<path class="usage" fill="none" stroke="#111" stroke-width="1.5" '
                       f'd="{_path(d.usage, x, y)}"><title>usage (1 s)</title></path>')
            # The sampler's own readings as dots where they are few enough to tell apart
            # (the zoomed climb): they run up to the kill, past the last scrape.
            if len(d.usage) <= pw / 4:
                out.append('<g class="samples" fill="#111">' + "".join(
                    f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2"/>' for t, v in d.usage)
                    + "<title>the sampler's readings</title></g>")
        if d.unreclaimable:
            out.append(f'<path class="unreclaimable" fill="none" stroke="#e6550d" '
                       f'stroke-width="3" d="{_path(d.unreclaimable, x, y)}">'
                       f'<title>unreclaimable</title></path>')
    if d.limit:
        lim = d.limit[-1][1]
        out.append(f'<line class="limit" x1="{x0}" x2="{x0 + pw}" y1="{y(lim):.1f}" '
                   f'y2="{y(lim):.1f}" stroke="#000" stroke-width="2" '
                   f'stroke-dasharray="8 5"/><text class="label" x="{x0 + 6}" '
                   f'y="{y(lim) - 6:.1f}">limit {e(fmt_bytes(lim))}</text>')
    kx = x(d.kill)
    out.append(f'<line class="kill" x1="{kx:.1f}" x2="{kx:.1f}" y1="{y0}" '
               f'y2="{y0 + ph}" stroke="#e00" stroke-width="2.5"/>'
               f'<text class="label kill-label" x="{kx - 6:.1f}" y="{y0 + 14}" '
               f'text-anchor="end" fill="#e00">OOM kill: {e(victim)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def charts(d: ChartData, title: str, victim: str, kind: str = "memory") -> str:
    return svg_chart(d, title, victim, kind, WIDE) + "\n" + svg_chart(d, title, victim, kind,
                                                                        NARROW)


def legend(d: ChartData, kind: str) -> str:
    if kind == "processes":
        items = [(PROCESS_COLOURS[i % len(PROCESS_COLOURS)], s.name)
                 for i, s in enumerate(d.processes)]
    else:
        items = [("#111", "usage (1 s samples)"), ("#e6550d", "unreclaimable"),
                 *((KIND_COLOURS.get(s.name, "#ccc"), s.name) for s in d.kinds)]
    items.append(("#000", "limit (dashed)"))
    return '<ul class="legend">' + "".join(
        f'<li><span class="swatch" style="background:{c}"></span>{e(n)}</li>'
        for c, n in items) + "</ul>"

