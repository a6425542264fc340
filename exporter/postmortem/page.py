"""The post-mortem as a page: flight-recorder documents -> HTML with inline SVG charts.

Pure functions, no I/O: ``render_index`` lists the documents, ``render_document`` draws
one kill: a headline with the victim, the limit and what grew and how fast (the same
function explain's "what grew before the kill" uses), then the climb: usage (the
sampler's 1 s points, up to the kill), unreclaimable memory, the kinds stacked, the top
processes, the limit line and the moment of the kill, on an axis zoomed to the climb. The
whole recorded window (15 minutes) is one click away (``<details>``: no script).
Everything is drawn on the server: no script, no stylesheet or font from elsewhere, so it
works on an air-gapped cluster and on a phone.

A document comes from the flight recorder (``exporter/postmortem/documents.py``, kind
``headroom.oom_kill/v1``) but its strings come from the pods: process names, pod names
and mounts are hostile input. Every string is escaped; every number goes through
``as_num``, so a malformed document draws less, never fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.catalog import KIND_ANON, KIND_KERNEL, KIND_SHMEM, RSS_ANON, RSS_FILE, RSS_SHMEM
from exporter.oncall.forecast import climb_start, rose_most
from exporter.postmortem.page_chart import charts, legend
from exporter.postmortem.page_data import (
    KINDS,
    ChartData,
    MiB,
    as_dict,
    as_list,
    as_num,
    as_str,
    chart_data,
    e,
    fmt_bytes,
)


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
    ns, pod, c = as_str(doc.get("namespace")), as_str(doc.get("pod")), as_str(doc.get("container"))
    return f"{ns + '/' if ns else ''}{pod}" + (f" (container {c})" if c else " (pod level)")


def render_index(entries: Iterable[tuple[str, Mapping[str, Any] | None]]) -> str:
    """The list of documents, newest first: when, where, the victim."""
    rows = []
    for name, doc in sorted(entries, key=lambda x: x[0], reverse=True):
        doc = as_dict(doc)
        victim = as_dict(doc.get("victim"))
        rows.append(f'<tr><td><a href="{e(name)}">{e(_when(as_num(doc.get("time"))))}</a></td>'
                    f"<td>{e(_workload(doc)) if doc else e(name)}</td>"
                    f"<td>{e(victim.get('process', '?'))}</td></tr>")
    body = ("<h1>OOM kills on this node</h1>\n"
            '<p class="muted">Flight-recorder documents, newest first. '
            'JSON: <a href="?format=json">?format=json</a>.</p>\n')
    body += ("<table><tr><th>when</th><th>workload</th><th>victim</th></tr>\n"
             + "\n".join(rows) + "</table>") if rows else "<p>No OOM kill recorded.</p>"
    return _page("headroom: OOM kills", body)


def _last_table(scrape: Mapping[str, Any]) -> str:
    rows = [("limit", as_num(scrape.get("limit"))), ("usage", as_num(scrape.get("usage"))),
            ("unreclaimable", as_num(scrape.get("unreclaimable"))),
            ("working set", as_num(scrape.get("working_set")))]
    kinds = as_dict(scrape.get("kinds"))
    rows += [(f"  {k}", as_num(kinds.get(k))) for k in KINDS if k in kinds]
    return "<table>" + "".join(f'<tr><td>{e(k)}</td><td class="n">{e(fmt_bytes(v))}</td>'
                               f"</tr>" for k, v in rows) + "</table>"


def _process_table(scrape: Mapping[str, Any]) -> str:
    procs = [as_dict(p) for p in as_list(scrape.get("processes"))]
    if not procs:
        return '<p class="muted">No process table in the last scrape.</p>'
    head = ('<table><tr><th>process</th><th class="n">count</th><th class="n">anon</th>'
            '<th class="n">shmem</th><th class="n">file</th></tr>')
    return head + "".join(
        f'<tr><td><code>{e(p.get("process"))}</code></td>'
        f'<td class="n">{e(as_num(p.get("count")) and int(as_num(p.get("count")) or 0))}</td>'
        f'<td class="n">{e(fmt_bytes(as_num(p.get(RSS_ANON))))}</td>'
        f'<td class="n">{e(fmt_bytes(as_num(p.get(RSS_SHMEM))))}</td>'
        f'<td class="n">{e(fmt_bytes(as_num(p.get(RSS_FILE))))}</td></tr>'
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
             if s.name in (KIND_ANON, KIND_SHMEM, KIND_KERNEL)}
    r = rose_most(series, kill, kill - since) or rose_most(kinds, kill, kill - since)
    if r is None:
        return "nothing rose before it"
    return (f"{r.name} grew +{fmt_bytes(r.rise)} in the {_ago(kill - r.start)} before it "
            f"({fmt_rate(r.rate)})")


def render_document(name: str, doc: Mapping[str, Any]) -> str:
    kill = as_num(doc.get("time")) or 0.0
    # A window from the document, within sense: the chart divides by it.
    window = min(max(as_num(doc.get("window_seconds")) or 900.0, 60.0), 86400.0)
    victim = as_dict(doc.get("victim"))
    process = as_str(victim.get("process") or "unknown", 80)
    source = {"kmsg": "named by the kernel log", "guess": "a guess: the largest process "
              "that vanished", "unknown": "not known"}.get(as_str(victim.get("source")),
                                                          "source unknown")
    full = chart_data(doc, kill, window)
    start = zoom(full, kill, window)
    data = chart_data(doc, kill, window, start)
    scrapes = [as_dict(s) for s in as_list(doc.get("scrapes"))]
    last = scrapes[-1] if scrapes else {}
    limit = data.limit[-1][1] if data.limit else (full.limit[-1][1] if full.limit else None)
    peak = max((v for _, v in full.usage), default=None)
    where = _workload(doc)
    grew = what_grew(full, kill, start)
    sampled = [t for t, _ in full.usage if t <= kill + 1]
    last_scrape = as_num(last.get("time"))
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
        legend(data, "memory"),
        "<h2>Top processes (anon + mapped shmem)</h2>",
        charts(data, f"top processes of {where}", process, "processes"),
        legend(data, "processes"),
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
    pod = as_dict(doc.get("pod_level"))
    if pod.get("usage") or pod.get("scrapes"):
        pdata = chart_data(pod, kill, window, start)
        body += [f"<h2>Pod-level cgroup <code>{e(pod.get('cgroup'))}</code></h2>",
                 charts(pdata, f"pod-level cgroup of {where}", process, "pod"),
                 legend(pdata, "memory")]
    return _page(f"OOM kill: {where}", "\n".join(body))
