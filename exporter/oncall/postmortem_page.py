"""The post-mortem as a page: flight-recorder documents -> HTML with inline SVG charts.

Pure functions, no I/O: ``render_index`` lists the documents, ``render_document`` draws
one kill: a headline with the victim, the limit and what grew and how fast (the same
function explain's "what grew before the kill" uses), then the climb: usage (the
sampler's 1 s points, up to the kill), unreclaimable memory, the kinds stacked, the top
processes, the limit line and the moment of the kill, on an axis zoomed to the climb. The
whole recorded window (15 minutes) is one click away (``<details>``: no script).
Everything is drawn on the server: no script, no stylesheet or font from elsewhere, so it
works on an air-gapped cluster and on a phone.

A document comes from the flight recorder (``exporter/postmortem.py``, kind
``headroom.oom_kill/v1``) but its strings come from the pods: process names, pod names
and mounts are hostile input. Every string is escaped; every number goes through
``_num``, so a malformed document draws less, never fails.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.oncall.forecast import climb_start, rose_most

MiB = 1 << 20
GiB = 1 << 30

# Stacking order: least reclaimable at the bottom (the catalogue's order).
KINDS = ("anon", "shmem", "kernel", "sock", "unaccounted", "file_active", "file_inactive")
KIND_COLOURS = {
    "anon": "#d62728", "shmem": "#9467bd", "kernel": "#8c564b", "sock": "#e377c2",
    "unaccounted": "#7f7f7f", "file_active": "#9ecae1", "file_inactive": "#c6dbef",
}
PROCESS_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#bcbd22")
TOP_PROCESSES = 5


# --- content negotiation ---------------------------------------------------------------------
def wants_html(accept: str | None, fmt: str | None) -> bool:
    """``?format=json|html`` decides; else the first of text/html and application/json in
    Accept (browsers send text/html first); else JSON, for scripts and curl."""
    if fmt in ("json", "html"):
        return fmt == "html"
    for part in (accept or "").split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media in ("text/html", "application/xhtml+xml"):
            return True
        if media == "application/json":
            return False
    return False


# --- safe reading of a document ----------------------------------------------------------------
def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _str(x: object, limit: int = 200) -> str:
    return str(x)[:limit] if x is not None else ""


def _list(x: object) -> list[Any]:
    return x if isinstance(x, list) else []


def _dict(x: object) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def e(x: object) -> str:
    return html.escape(_str(x), quote=True)


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
        (t, v) for t, v in ((_num(p[0]), _num(p[1])) for p in _list(part.get("usage"))
                            if isinstance(p, list) and len(p) == 2)
        if t is not None and v is not None and start <= t <= kill + 60))
    scrapes = sorted((s for s in (_dict(x) for x in _list(part.get("scrapes")))
                      if (t := _num(s.get("time"))) is not None and t >= start),
                     key=lambda s: _num(s["time"]) or 0)

    def line(key: str) -> tuple[Point, ...]:
        return tuple((_num(s["time"]) or 0, v) for s in scrapes
                     if (v := _num(s.get(key))) is not None)

    kinds = tuple(Series(k, tuple((_num(s["time"]) or 0, _num(_dict(s.get("kinds")).get(k))
                                   or 0.0) for s in scrapes))
                  for k in KINDS if any(_num(_dict(s.get("kinds")).get(k)) for s in scrapes))
    held: dict[str, dict[float, float]] = {}
    for s in scrapes:
        t = _num(s["time"]) or 0
        for p in (_dict(x) for x in _list(s.get("processes"))):
            name = _str(p.get("process"), 80)
            held.setdefault(name, {})[t] = (_num(p.get("rss_anon")) or 0) + (
                _num(p.get("rss_shmem")) or 0)
    top = sorted(held, key=lambda n: -max(held[n].values()))[:TOP_PROCESSES]
    processes = tuple(Series(n, tuple(sorted(held[n].items()))) for n in top)
    return ChartData(kill, start, usage, line("unreclaimable"), line("limit"), kinds,
                     processes)


# --- SVG -----------------------------------------------------------------------------------------
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


def _legend(d: ChartData, kind: str) -> str:
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


# --- pages ---------------------------------------------------------------------------------------
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1000px;padding:12px;color:#111;line-height:1.4}
h1{font-size:1.35rem;margin:.2em 0}h2{font-size:1.1rem;margin:1.2em 0 .3em}
.verdict{background:#fdecea;border-left:6px solid #d62728;padding:8px 12px;margin:8px 0}
table{border-collapse:collapse;width:100%;font-size:.92rem}
td,th{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
svg.chart{width:100%;height:auto;display:block}svg.narrow{display:none}
@media (max-width:640px){svg.wide{display:none}svg.narrow{display:block}}
svg .plot{fill:#fafafa;stroke:#bbb}svg .grid{stroke:#e3e3e3}
svg text{font-size:13px}svg .label{font-size:14px;font-weight:600}
.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:.9rem}
.swatch{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px}
.muted{color:#666;font-size:.9rem}code{word-break:break-all}
details.context{margin:1em 0}details.context summary{cursor:pointer;font-weight:600}
"""


def _page(title: str, body: str) -> str:
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{e(title)}</title>\n<style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t is not None else "?"


def _workload(doc: Mapping[str, Any]) -> str:
    ns, pod, c = _str(doc.get("namespace")), _str(doc.get("pod")), _str(doc.get("container"))
    return f"{ns + '/' if ns else ''}{pod}" + (f" (container {c})" if c else " (pod level)")


def render_index(entries: Iterable[tuple[str, Mapping[str, Any] | None]]) -> str:
    """The list of documents, newest first: when, where, the victim."""
    rows = []
    for name, doc in sorted(entries, key=lambda x: x[0], reverse=True):
        doc = _dict(doc)
        victim = _dict(doc.get("victim"))
        rows.append(f'<tr><td><a href="{e(name)}">{e(_when(_num(doc.get("time"))))}</a></td>'
                    f"<td>{e(_workload(doc)) if doc else e(name)}</td>"
                    f"<td>{e(victim.get('process', '?'))}</td></tr>")
    body = ("<h1>OOM kills on this node</h1>\n"
            '<p class="muted">Flight-recorder documents, newest first. '
            'JSON: <a href="?format=json">?format=json</a>.</p>\n')
    body += ("<table><tr><th>when</th><th>workload</th><th>victim</th></tr>\n"
             + "\n".join(rows) + "</table>") if rows else "<p>No OOM kill recorded.</p>"
    return _page("headroom: OOM kills", body)


def _last_table(scrape: Mapping[str, Any]) -> str:
    rows = [("limit", _num(scrape.get("limit"))), ("usage", _num(scrape.get("usage"))),
            ("unreclaimable", _num(scrape.get("unreclaimable"))),
            ("working set", _num(scrape.get("working_set")))]
    kinds = _dict(scrape.get("kinds"))
    rows += [(f"  {k}", _num(kinds.get(k))) for k in KINDS if k in kinds]
    return "<table>" + "".join(f'<tr><td>{e(k)}</td><td class="n">{e(fmt_bytes(v))}</td>'
                               f"</tr>" for k, v in rows) + "</table>"


def _process_table(scrape: Mapping[str, Any]) -> str:
    procs = [_dict(p) for p in _list(scrape.get("processes"))]
    if not procs:
        return '<p class="muted">No process table in the last scrape.</p>'
    head = ('<table><tr><th>process</th><th class="n">count</th><th class="n">anon</th>'
            '<th class="n">shmem</th><th class="n">file</th></tr>')
    return head + "".join(
        f'<tr><td><code>{e(p.get("process"))}</code></td>'
        f'<td class="n">{e(_num(p.get("count")) and int(_num(p.get("count")) or 0))}</td>'
        f'<td class="n">{e(fmt_bytes(_num(p.get("rss_anon"))))}</td>'
        f'<td class="n">{e(fmt_bytes(_num(p.get("rss_shmem"))))}</td>'
        f'<td class="n">{e(fmt_bytes(_num(p.get("rss_file"))))}</td></tr>'
        for p in procs) + "</table>"


def _ago(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else (
        f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min")


def fmt_rate(per_s: float) -> str:
    if per_s >= MiB:
        return f"+{fmt_bytes(per_s)}/s"
    if per_s * 3600 >= MiB:
        return f"+{fmt_bytes(per_s * 3600)}/h"
    return f"+{fmt_bytes(per_s * 86400)}/day"


def zoom(data: ChartData, kill: float, window: float) -> float:
    """Where the chart starts: a little before the last climb to the kill (a quarter of
    the climb, at least 10 s; at least 60 s shown), else the whole window."""
    points = data.usage or data.unreclaimable
    began = climb_start(points, kill)
    if began is None:
        return kill - window
    margin = max(10.0, 0.25 * (kill - began))
    return max(kill - window, min(began - margin, kill - 60.0))


def what_grew(data: ChartData, kill: float, since: float) -> str:
    """The process (else the kind) that rose most over the climb, with its rate: the
    function explain uses for "what grew before the kill"."""
    series = {s.name: s.points for s in data.processes}
    kinds = {f"{s.name} (no process)": s.points for s in data.kinds
             if s.name in ("anon", "shmem", "kernel")}
    r = rose_most(series, kill, kill - since) or rose_most(kinds, kill, kill - since)
    if r is None:
        return "nothing rose before it"
    return (f"{r.name} grew +{fmt_bytes(r.rise)} in the {_ago(kill - r.start)} before it "
            f"({fmt_rate(r.rate)})")


def render_document(name: str, doc: Mapping[str, Any]) -> str:
    kill = _num(doc.get("time")) or 0.0
    # A window from the document, within sense: the chart divides by it.
    window = min(max(_num(doc.get("window_seconds")) or 900.0, 60.0), 86400.0)
    victim = _dict(doc.get("victim"))
    process = _str(victim.get("process") or "unknown", 80)
    source = {"kmsg": "named by the kernel log", "guess": "a guess: the largest process "
              "that vanished", "unknown": "not known"}.get(_str(victim.get("source")),
                                                          "source unknown")
    full = chart_data(doc, kill, window)
    start = zoom(full, kill, window)
    data = chart_data(doc, kill, window, start)
    scrapes = [_dict(s) for s in _list(doc.get("scrapes"))]
    last = scrapes[-1] if scrapes else {}
    limit = data.limit[-1][1] if data.limit else (full.limit[-1][1] if full.limit else None)
    peak = max((v for _, v in full.usage), default=None)
    where = _workload(doc)
    grew = what_grew(full, kill, start)
    sampled = [t for t, _ in full.usage if t <= kill + 1]
    last_scrape = _num(last.get("time"))
    readings = []
    if sampled:
        readings.append(f"the sampler's last reading {_ago(max(0.0, kill - sampled[-1]))} "
                        "before the kill")
    if last_scrape is not None:
        readings.append(f"the last scrape {_ago(max(0.0, kill - last_scrape))} before it")
    body = [
        '<p class="muted"><a href="./">all kills</a> · <a href="?format=json">JSON</a></p>',
        f"<h1>OOM kill: {e(where)}</h1>",
        f'<div class="verdict"><b>{e(grew)}</b>. <b>{e(process)}</b> (pid '
        f'{e(victim.get("pid") or "?")}, {e(source)}) was killed at {e(_when(kill))} when '
        f"the cgroup reached its limit of <b>{e(fmt_bytes(limit))}</b>"
        + (f"; usage peaked at {e(fmt_bytes(peak))}" if peak is not None else "") + ".</div>",
        f'<p class="muted">cgroup <code>{e(doc.get("cgroup"))}</code> · the climb: the last '
        f"{_ago(kill - start)} before the kill" + (f" ({e('; '.join(readings))})"
                                                  if readings else "") + "</p>",
        "<h2>Memory: kinds stacked, usage, unreclaimable, limit</h2>",
        charts(data, f"memory of {where} before the OOM kill", process),
        _legend(data, "memory"),
        "<h2>Top processes (anon + mapped shmem)</h2>",
        charts(data, f"top processes of {where}", process, "processes"),
        _legend(data, "processes"),
        f'<details class="context"><summary>The whole recorded window: {window / 60:.0f} '
        "minutes before the kill</summary>",
        charts(full, f"memory of {where}, {window / 60:.0f} minutes", process, "context"),
        charts(full, f"top processes of {where}, {window / 60:.0f} minutes", process,
               "processes"),
        "</details>",
        "<h2>The last scrape before the kill"
        + (f" ({_ago(max(0.0, kill - last_scrape))} before it)" if last_scrape is not None
           else "") + "</h2>",
        _last_table(last), _process_table(last),
    ]
    pod = _dict(doc.get("pod_level"))
    if pod.get("usage") or pod.get("scrapes"):
        pdata = chart_data(pod, kill, window, start)
        body += [f"<h2>Pod-level cgroup <code>{e(pod.get('cgroup'))}</code></h2>",
                 charts(pdata, f"pod-level cgroup of {where}", process, "pod"),
                 _legend(pdata, "memory")]
    return _page(f"OOM kill: {where}", "\n".join(body))
