"""``headroom explain NAMESPACE/POD``: why is this pod close to an OOM kill, in plain words.

Fetches the evidence from Prometheus: the forecast contract's recorded series for the
verdict and the time to limit (the answer the page, the dashboard and ``top`` give; when
the recording rules are not loaded, the same definition computed here from the raw series,
and said so), the exporter's own series for what grows and why. Judges it with
:mod:`exporter.oncall.diagnose` and prints a diagnosis, or JSON (``--output json``).

Exit codes (design.md section 7): 0 healthy, 1 at risk, 2 bad usage, 3 no data
(no series for the pod, or Prometheus could not answer).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from exporter import catalog as c
from exporter.oncall import forecast as fc
from exporter.oncall.diagnose import (
    AT_RISK,
    HEALTHY,
    NO_DATA,
    RUNBOOK_BASE,
    CgroupEvidence,
    Diagnosis,
    Evidence,
    KillEvidence,
    KvEvidence,
    ProcessEvidence,
    TmpfsEvidence,
    Trend,
    diagnose,
    fmt_bytes,
    fmt_duration,
    fmt_rate,
    printable,
    where,
)
from exporter.oncall.prom_client import (
    PromAuth,
    PromClient,
    PromError,
    RangeSeries,
    Sample,
    url_problem,
)

USAGE, NO_DATA_EXIT = 2, 3

Key = tuple[str, ...]


class UsageError(Exception):
    pass


# --- queries (pure) ---------------------------------------------------------------------------
def quote(value: str) -> str:
    """A PromQL string literal (JSON escaping is a subset of what PromQL accepts)."""
    return json.dumps(value)


def selector(namespace: str | None, pod: str, extra: str = "", **more: str) -> str:
    parts = [extra] if extra else []
    if namespace is not None:
        parts.append(f"namespace={quote(namespace)}")
    parts.append(f"pod={quote(pod)}")
    parts += [f"{k}={quote(v)}" for k, v in more.items()]
    return "{" + ", ".join(parts) + "}"


def with_matchers(sel: str, matchers: str) -> str:
    return sel[:-1] + ", " + matchers + "}"


MAX_EVENT = 'event="max"'
TREND_FIELDS = ("now", "d1h", "d6h", "d1d", "rise1d")


def trend_queries(metric: str, by: Sequence[str]) -> dict[str, str]:
    """Value, slopes over 1 h / 6 h / 1 d and the rise of the daily floor of ``metric``
    (a series selector), one series per ``by`` (max: two exporters may overlap)."""
    g = ", ".join(by)
    return {
        "now": f"max by ({g}) ({metric})",
        "d1h": f"max by ({g}) (deriv({metric}[1h]))",
        "d6h": f"max by ({g}) (deriv({metric}[6h]))",
        "d1d": f"max by ({g}) (deriv({metric}[1d]))",
        "rise1d": (f"min by ({g}) (min_over_time({metric}[1d]))\n"
                   f"  - min by ({g}) (min_over_time({metric}[1d] offset 1d))"),
    }


def pod_queries(namespace: str, pod: str, extra: str = "") -> dict[str, str]:
    """Every query explain runs for one pod, by name."""
    s = selector(namespace, pod, extra)
    cont = ("container",)
    q: dict[str, str] = {
        "limit": f"max by (container) ({c.MEMORY_LIMIT_BYTES.name}{s})",
        "usage": f"max by (container) ({c.MEMORY_USAGE_BYTES.name}{s})",
        "working_set": f"max by (container) ({c.MEMORY_WORKING_SET_BYTES.name}{s})",
        "peak1d": f"max by (container) (max_over_time({c.MEMORY_UNRECLAIMABLE_BYTES.name}"
                  f"{s}[1d]))",
        "reclaim": f"max by (container) (rate({c.MEMORY_EVENTS_TOTAL.name}"
                   f"{with_matchers(s, MAX_EVENT)}[1h]))",
        "tmpfs_size": f"max by (container, mount) ({c.TMPFS_SIZE_BYTES.name}{s})",
        "kv_capacity": f"sum by (container, medium) (max by (container, medium, model_name, "
                       f"engine) ({c.VLLM_KV_CACHE_CAPACITY_BYTES.name}{s}))",
        "kv_usage": f"max by (container, medium) ({c.VLLM_KV_CACHE_USAGE_RATIO.name}{s})",
        "kills": f"max by (container, process, instance) ({c.OOM_KILLS_TOTAL.name}{s})",
        "kills1d": f"max by (container, process, instance) (increase("
                   f"{c.OOM_KILLS_TOTAL.name}{s}[1d]))",
    }
    trends: dict[str, tuple[str, Sequence[str]]] = {
        "unreclaimable": (c.MEMORY_UNRECLAIMABLE_BYTES.name + s, cont),
        "kinds": (c.MEMORY_BYTES.name + s, (*cont, "kind")),
        "processes": (c.PROCESS_MEMORY_BYTES.name
                      + with_matchers(s, 'kind=~"rss_anon|rss_shmem"'),
                      (*cont, "process", "kind")),
        "tmpfs": (c.TMPFS_USED_BYTES.name + s, (*cont, "mount")),
        "orphaned": (c.TMPFS_ORPHANED_BYTES.name + s, (*cont, "mount")),
        "prefix": (c.VLLM_PREFIX_CACHE_BLOCKS.name + s, (*cont, "medium")),
    }
    for name, (metric, by) in trends.items():
        for f, expr in trend_queries(metric, by).items():
            q[f"{name}.{f}"] = expr
    return q


# --- answers -> evidence (pure) -------------------------------------------------------------
Answers = Mapping[str, Sequence[Sample]]


def _values(answers: Answers, name: str, by: Sequence[str]) -> dict[Key, float]:
    return {tuple(printable(s.labels.get(k, "")) for k in by): s.value
            for s in answers.get(name, ())}


def _trends(answers: Answers, name: str, by: Sequence[str]) -> dict[Key, Trend]:
    parts = {f: _values(answers, f"{name}.{f}", by) for f in TREND_FIELDS}
    return {k: Trend(v, *(parts[f].get(k) for f in TREND_FIELDS[1:]))
            for k, v in parts["now"].items()}


def evidence(namespace: str, pod: str, at: float, answers: Answers) -> Evidence:
    limits = _values(answers, "limit", ("container",))
    unrecl = _trends(answers, "unreclaimable", ("container",))
    kinds = _trends(answers, "kinds", ("container", "kind"))
    usage = _values(answers, "usage", ("container",))
    ws = _values(answers, "working_set", ("container",))
    peak = _values(answers, "peak1d", ("container",))
    reclaim = _values(answers, "reclaim", ("container",))
    cgroups = tuple(
        CgroupEvidence(
            k[0], limits[k], unrecl[k], usage.get(k), ws.get(k), peak.get(k),
            {kind: t for (cont, kind), t in kinds.items() if cont == k[0]}, reclaim.get(k))
        for k in sorted(limits) if k in unrecl and limits[k] > 0)
    procs = _trends(answers, "processes", ("container", "process", "kind"))
    names = sorted({(cont, p) for cont, p, _ in procs})
    processes = tuple(ProcessEvidence(cont, p, procs.get((cont, p, "rss_anon")),
                                      procs.get((cont, p, "rss_shmem"))) for cont, p in names)
    used = _trends(answers, "tmpfs", ("container", "mount"))
    orphaned = _trends(answers, "orphaned", ("container", "mount"))
    size = _values(answers, "tmpfs_size", ("container", "mount"))
    tmpfs = tuple(TmpfsEvidence(k[0], k[1], t, size.get(k), orphaned.get(k))
                  for k, t in sorted(used.items()))
    cap = _values(answers, "kv_capacity", ("container", "medium"))
    ratio = _values(answers, "kv_usage", ("container", "medium"))
    prefix = _trends(answers, "prefix", ("container", "medium"))
    kv = tuple(KvEvidence(k[0], k[1], cap.get(k), ratio.get(k), prefix.get(k))
               for k in sorted(set(cap) | set(ratio) | set(prefix)))
    totals = _values(answers, "kills", ("container", "process", "instance"))
    day = _values(answers, "kills1d", ("container", "process", "instance"))
    merged: dict[tuple[str, str], KillEvidence] = {}
    for (cont, proc, inst), n in totals.items():
        k = KillEvidence(cont, proc, n, day.get((cont, proc, inst), 0.0), inst)
        old = merged.get((cont, proc))
        if old is None or k.total > old.total:  # two exporters: the one that saw most
            merged[(cont, proc)] = k
    # Queried with the raw names; shown printable.
    return Evidence(printable(namespace), printable(pod), at, cgroups, processes, tmpfs, kv,
                    tuple(merged[k] for k in sorted(merged)))


# --- I/O ------------------------------------------------------------------------------------
def parse_target(target: str) -> tuple[str | None, str]:
    """``NAMESPACE/POD`` or ``POD``. A pod named by its cgroup path (outside Kubernetes,
    namespace "") keeps its slashes: ``/system.slice/vllm.service``."""
    if not target.strip() or target.endswith("/"):
        raise UsageError(f"expected NAMESPACE/POD or POD, got {target!r}")
    if "/" not in target:
        return None, target
    ns, _, pod = target.partition("/")
    return ns, pod


async def resolve(prom: PromClient, target: str, extra: str, at: float
                  ) -> list[tuple[str, str]]:
    """The (namespace, pod) pairs the target names that have series in the last day."""
    ns, pod = parse_target(target)
    tries = [(ns, pod)] if ns is None else [(ns, pod), (None, target)]
    for t_ns, t_pod in tries:
        expr = (f"count by (namespace, pod) (last_over_time("
                f"{c.MEMORY_LIMIT_BYTES.name}{selector(t_ns, t_pod, extra)}[1d]))")
        found = sorted({(s.labels.get("namespace", ""), s.labels.get("pod", ""))
                        for s in await prom.query(expr, at)})
        if found:
            return found
    return []


async def fetch(prom: PromClient, namespace: str, pod: str, extra: str, at: float
                ) -> Evidence:
    queries = pod_queries(namespace, pod, extra)
    results = await prom.query_many(list(queries.values()), at)
    ev = evidence(namespace, pod, at, dict(zip(queries, results, strict=True)))
    if not ev.cgroups:
        return ev
    rq = fc.recorded_queries(selector(namespace, pod, extra))
    recorded = fc.from_recorded(dict(zip(rq, await prom.query_many(list(rq.values()), at),
                                         strict=True)))
    w = fc.Windows.of()
    span = 2 * w.baseline + HISTORY_MARGIN
    ranges = range_queries(namespace, pod, extra)
    answers = await asyncio.gather(*(prom.query_range(q, at - span, at, RANGE_STEP)
                                     for q in ranges.values()))
    hist = histories(ev, dict(zip(ranges, answers, strict=True)))
    if recorded:
        forecasts = tuple(recorded.values())
    else:  # no recording rules: the same definition over the raw series (said so)
        forecasts = tuple(fc.mark_binding(
            f for h in hist if (f := fc.local_forecast(h, at, w)) is not None))
    kill_series = await prom.query_range(
        f"max by (container, process) ({c.OOM_KILLS_TOTAL.name}{selector(namespace, pod, extra)})",
        at - DAY_S, at, KILL_STEP)
    kills = tuple(_with_kill_time(k, kill_series, hist) for k in ev.kills)
    return dataclasses.replace(ev, forecasts=forecasts, kills=kills)


RANGE_STEP = 60.0  # the rules' evaluation interval: the mirror sees what they see
KILL_STEP = 15.0
DAY_S = 86400.0
HISTORY_MARGIN = 3600.0
BEFORE_KILL = 30 * 60.0  # "what grew before it": the half hour before the kill


def range_queries(namespace: str, pod: str, extra: str = "") -> dict[str, str]:
    """The raw series the local forecast and the kill's story read over two days."""
    s = selector(namespace, pod, extra)
    kinds = with_matchers(s, 'kind=~"anon|shmem|kernel"')
    procs = with_matchers(s, 'kind=~"rss_anon|rss_shmem"')
    shm = with_matchers(s, 'mount="/dev/shm"')
    return {
        "unreclaimable": f"max by (container) ({c.MEMORY_UNRECLAIMABLE_BYTES.name}{s})",
        "kinds": f"max by (container, kind) ({c.MEMORY_BYTES.name}{kinds})",
        "processes": f"sum by (container, process) (max by (container, process, kind) ("
                     f"{c.PROCESS_MEMORY_BYTES.name}{procs}))",
        "dev_shm": f"max by (container) ({c.TMPFS_USED_BYTES.name}{shm})",
    }


def histories(ev: Evidence, ranges: Mapping[str, Sequence[RangeSeries]]
              ) -> list[fc.History]:
    """Range answers -> one History per cgroup of the pod. The pod-level cgroup holds
    every container's processes and the pod's /dev/shm."""
    def lab(r: RangeSeries, k: str) -> str:
        return printable(r.labels.get(k, ""))

    unrecl = {lab(r, "container"): r.points for r in ranges.get("unreclaimable", ())}
    out = []
    for cg in ev.cgroups:
        if cg.container not in unrecl:
            continue
        kinds = {lab(r, "kind"): r.points for r in ranges.get("kinds", ())
                 if lab(r, "container") == cg.container}
        for r in ranges.get("dev_shm", ()):
            if cg.container == "":
                kinds["dev_shm"] = r.points
        procs = {lab(r, "process"): r.points for r in ranges.get("processes", ())
                 if cg.container == "" or lab(r, "container") == cg.container}
        out.append(fc.History(ev.namespace, ev.pod, cg.container, cg.limit,
                              unrecl[cg.container], kinds, procs))
    return out


def kill_time(points: Sequence[tuple[float, float]], start: float, step: float
              ) -> float | None:
    """The last moment the counter rose; a series born with a kill counts from birth."""
    last = None
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if v1 > v0 or (t1 - t0 > 2 * step and v1 > 0):
            last = t1
    if last is None and points and points[0][1] > 0 and points[0][0] > start + step:
        last = points[0][0]
    return last


def _with_kill_time(k: KillEvidence, series: Sequence[RangeSeries],
                    hist: Sequence[fc.History]) -> KillEvidence:
    pts = next((r.points for r in series if printable(r.labels.get("container", "")) ==
                k.container and printable(r.labels.get("process", "")) == k.process), ())
    start = pts[0][0] - KILL_STEP if pts else 0.0
    when = kill_time(pts, start, KILL_STEP) if k.last_day else None
    if when is None:
        return k
    text, rate = before_kill(hist, k.container, when)
    return dataclasses.replace(k, when=when, grew=text, grew_rate=rate)


def before_kill(hist: Sequence[fc.History], container: str, when: float
                ) -> tuple[str, float | None]:
    """What grew in the half hour before a kill and how fast: the process (else kind)
    that rose most (the post-mortem page's headline reads the same function)."""
    h = next((h for h in hist if h.container == container), None) or next(
        (h for h in hist if h.container == ""), None)
    if h is None:
        return "", None
    series = {**h.processes, **{f"{k} (no process)": v for k, v in h.kinds.items()}}
    r = fc.rose_most(series, when, BEFORE_KILL, RANGE_STEP)
    if r is None:
        return "nothing rose in the half hour before it", None
    return (f"{r.name} +{fmt_bytes(r.rise)} in the {fmt_duration(when - r.start)} "
            f"before it ({fmt_rate(r.rate)})", r.rate)


async def degraded_notes(prom: PromClient, sel: str, at: float) -> list[str]:
    """The exporters serving the pod that lost data to a missing capability or device
    (headroom_collector_degraded): some figures above may be missing, not zero."""
    expr = (f"max by (instance, collector, reason) ({c.COLLECTOR_DEGRADED.name} == 1 "
            f"and on (instance) count by (instance) ({c.MEMORY_LIMIT_BYTES.name}{sel}))")
    return [printable(f"exporter {s.labels.get('instance', '')}: collector "
                      f"{s.labels.get('collector', '')} degraded "
                      f"({s.labels.get('reason', '')}): its figures are missing, not zero")
            for s in await prom.query(expr, at)]


async def explain(url: str, target: str, auth: PromAuth, extra: str = "",
                  at: float | None = None, runbook_base: str = RUNBOOK_BASE,
                  timeout: float = 30.0) -> Diagnosis:
    at = time.time() if at is None else at
    async with PromClient(url, auth, timeout=timeout) as prom:
        found = await resolve(prom, target, extra, at)
        if len(found) > 1:
            raise UsageError(f"{target!r} is ambiguous: " + ", ".join(
                printable(f"{n or '(no namespace)'}/{p}") for n, p in found)
                + "; give NAMESPACE/POD")
        if not found:
            ns, pod = parse_target(target)
            return diagnose(Evidence(printable(ns or ""), printable(pod), at), runbook_base)
        namespace, pod = found[0]
        d = diagnose(await fetch(prom, namespace, pod, extra, at), runbook_base)
        d = dataclasses.replace(d, notes=(*d.notes, *await degraded_notes(
            prom, selector(namespace, pod, extra), at)))
        if d.verdict == NO_DATA:
            # Seen in the last day, gone now (deleted, rescheduled, the node down): say
            # when, so the engineer can judge that moment with --time.
            expr = (f"max(max_over_time(timestamp({c.MEMORY_LIMIT_BYTES.name}"
                    f"{selector(namespace, pod, extra)})[1d:1m]))")
            seen = await prom.query(expr, at)
            if seen:
                last = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seen[0].value))
                d = dataclasses.replace(d, notes=(
                    f"last series at {last}: run again with --time={last}", *d.notes))
        return d


# --- rendering (pure) ------------------------------------------------------------------------
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


# --- the command -------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser, env: Mapping[str, str] = os.environ) -> None:
    def e(name: str, default: str | None = None) -> str | None:
        return env.get(name, default)

    p.add_argument("target", metavar="NAMESPACE/POD", help="the pod (or POD alone)")
    p.add_argument("--prometheus.url", dest="prometheus_url",
                   default=e("HEADROOM_PROMETHEUS_URL"),
                   help="Prometheus base URL, e.g. http://prometheus:9090 "
                        "(env HEADROOM_PROMETHEUS_URL)")
    p.add_argument("--prometheus.ca-file", dest="ca_file",
                   default=e("HEADROOM_PROMETHEUS_CA_FILE"), help="CA bundle for TLS")
    p.add_argument("--prometheus.cert-file", dest="cert_file",
                   default=e("HEADROOM_PROMETHEUS_CERT_FILE"), help="client certificate")
    p.add_argument("--prometheus.key-file", dest="key_file",
                   default=e("HEADROOM_PROMETHEUS_KEY_FILE"), help="client key")
    p.add_argument("--prometheus.username", dest="username",
                   default=e("HEADROOM_PROMETHEUS_USERNAME"), help="basic auth user")
    p.add_argument("--prometheus.password-file", dest="password_file",
                   default=e("HEADROOM_PROMETHEUS_PASSWORD_FILE"),
                   help="file holding the basic auth password")
    p.add_argument("--prometheus.insecure-skip-verify", dest="insecure",
                   action="store_true",
                   default=e("HEADROOM_PROMETHEUS_INSECURE_SKIP_VERIFY", "") in ("1", "true"),
                   help="do not verify the server's certificate")
    p.add_argument("--prometheus.timeout", dest="timeout", type=float, default=30.0,
                   help="seconds for each query (default 30)")
    p.add_argument("--selector", default=e("HEADROOM_EXPLAIN_SELECTOR", ""),
                   help='extra label matchers for headroom\'s series, e.g. job="headroom"')
    p.add_argument("--time", dest="at", default=None,
                   help="judge as of this moment (RFC 3339 or Unix seconds; default now)")
    p.add_argument("--runbook.base-url", dest="runbook_base", default=RUNBOOK_BASE)
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")


def parse_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UsageError(f"--time: not RFC 3339 or Unix seconds: {text!r}") from None


def auth_from(args: argparse.Namespace) -> PromAuth:
    def path(v: str | None) -> Path | None:
        return Path(v) if v else None

    if args.password_file and not args.username:
        raise UsageError("--prometheus.password-file needs --prometheus.username")
    if args.key_file and not args.cert_file:
        raise UsageError("--prometheus.key-file needs --prometheus.cert-file")
    return PromAuth(path(args.ca_file), path(args.cert_file), path(args.key_file),
                    args.username, path(args.password_file), bool(args.insecure))


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        if not args.prometheus_url:
            raise UsageError("--prometheus.url is required (or HEADROOM_PROMETHEUS_URL)")
        problem = url_problem(args.prometheus_url)
        if problem:
            raise UsageError(f"--prometheus.url: {problem}")
        at = parse_time(args.at) if args.at else None
        auth = auth_from(args)
        d = asyncio.run(explain(args.prometheus_url, args.target, auth, args.selector, at,
                                args.runbook_base, args.timeout))
    except UsageError as exc:
        print(f"headroom explain: {exc}", file=err)
        return USAGE
    except (PromError, OSError) as exc:
        print(f"headroom explain: no data: {exc}", file=err)
        return NO_DATA_EXIT
    if args.output == "json":
        out.write(to_json(d) + "\n")
    else:
        tty = args.color == "always" or (args.color == "auto" and out.isatty()
                                          and "NO_COLOR" not in os.environ)
        out.write(to_text(d, ansi if tty else plain))
    return d.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="headroom explain",
                                description="Why is this pod close to an OOM kill?")
    add_arguments(p)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
