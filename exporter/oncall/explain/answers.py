"""Prometheus' answers -> the evidence for one pod, the raw series' histories for the
local forecast, and the story of each kill (when, and what grew before it). Pure."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

from exporter.catalog import RSS_ANON, RSS_SHMEM
from exporter.oncall import diagnosis as dx
from exporter.oncall import forecast as fc
from exporter.oncall.explain.queries import TREND_FIELDS
from exporter.oncall.prom_client import PromSample, RangeSeries
from exporter.oncall.units import fmt_bytes, fmt_duration, fmt_rate, printable
from exporter.promql import KIND_DEV_SHM

Key = tuple[str, ...]

RANGE_STEP = 60.0  # the rules' evaluation interval: the mirror sees what they see
KILL_STEP = 15.0
BEFORE_KILL = 30 * 60.0  # "what grew before it": the half hour before the kill

Answers = Mapping[str, Sequence[PromSample]]


def _values(answers: Answers, name: str, by: Sequence[str]) -> dict[Key, float]:
    return {tuple(printable(s.labels.get(k, "")) for k in by): s.value
            for s in answers.get(name, ())}


def _trends(answers: Answers, name: str, by: Sequence[str]) -> dict[Key, dx.Trend]:
    parts = {f: _values(answers, f"{name}.{f}", by) for f in TREND_FIELDS}
    return {k: dx.Trend(v, *(parts[f].get(k) for f in TREND_FIELDS[1:]))
            for k, v in parts["now"].items()}


def evidence(namespace: str, pod: str, at: float, answers: Answers) -> dx.Evidence:
    limits = _values(answers, "limit", ("container",))
    unrecl = _trends(answers, "unreclaimable", ("container",))
    kinds = _trends(answers, "kinds", ("container", "kind"))
    usage = _values(answers, "usage", ("container",))
    ws = _values(answers, "working_set", ("container",))
    peak = _values(answers, "peak1d", ("container",))
    reclaim = _values(answers, "reclaim", ("container",))
    cgroups = tuple(
        dx.CgroupEvidence(
            k[0], limits[k], unrecl[k], usage.get(k), ws.get(k), peak.get(k),
            {kind: t for (cont, kind), t in kinds.items() if cont == k[0]}, reclaim.get(k))
        for k in sorted(limits) if k in unrecl and limits[k] > 0)
    procs = _trends(answers, "processes", ("container", "process", "kind"))
    names = sorted({(cont, p) for cont, p, _ in procs})
    processes = tuple(dx.ProcessEvidence(cont, p, procs.get((cont, p, RSS_ANON)),
                                      procs.get((cont, p, RSS_SHMEM))) for cont, p in names)
    used = _trends(answers, "tmpfs", ("container", "mount"))
    orphaned = _trends(answers, "orphaned", ("container", "mount"))
    size = _values(answers, "tmpfs_size", ("container", "mount"))
    tmpfs = tuple(dx.TmpfsEvidence(k[0], k[1], t, size.get(k), orphaned.get(k))
                  for k, t in sorted(used.items()))
    cap = _values(answers, "kv_capacity", ("container", "medium"))
    ratio = _values(answers, "kv_usage", ("container", "medium"))
    prefix = _trends(answers, "prefix", ("container", "medium"))
    kv = tuple(dx.KvEvidence(k[0], k[1], cap.get(k), ratio.get(k), prefix.get(k))
               for k in sorted(set(cap) | set(ratio) | set(prefix)))
    totals = _values(answers, "kills", ("container", "process", "instance"))
    day = _values(answers, "kills1d", ("container", "process", "instance"))
    merged: dict[tuple[str, str], dx.KillEvidence] = {}
    for (cont, proc, inst), n in totals.items():
        k = dx.KillEvidence(cont, proc, n, day.get((cont, proc, inst), 0.0), inst)
        old = merged.get((cont, proc))
        if old is None or k.total > old.total:  # two exporters: the one that saw most
            merged[(cont, proc)] = k
    # Queried with the raw names; shown printable.
    return dx.Evidence(printable(namespace), printable(pod), at, cgroups, processes, tmpfs, kv,
                    tuple(merged[k] for k in sorted(merged)))


def histories(ev: dx.Evidence, ranges: Mapping[str, Sequence[RangeSeries]]
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
        for r in ranges.get(KIND_DEV_SHM, ()):
            if cg.container == "":
                kinds[KIND_DEV_SHM] = r.points
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


def with_kill_time(k: dx.KillEvidence, series: Sequence[RangeSeries],
                    hist: Sequence[fc.History]) -> dx.KillEvidence:
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

