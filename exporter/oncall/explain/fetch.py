"""The I/O of ``explain``: find the pod, fetch its evidence (the recorded forecast, else
the same definition over the raw series) and judge it."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from exporter import catalog as c
from exporter.oncall import forecast as fc
from exporter.oncall.diagnosis import NO_DATA, RUNBOOK_BASE, Diagnosis, Evidence, diagnose
from exporter.oncall.explain.answers import (
    KILL_STEP,
    RANGE_STEP,
    evidence,
    histories,
    with_kill_time,
)
from exporter.oncall.explain.queries import pod_queries, range_queries, selector
from exporter.oncall.prom_client import PromAuth, PromClient
from exporter.oncall.units import printable

DAY_S = 86400.0
# Beyond the two envelope windows: the lasting horizon's first two hours (a warm-up is
# no floor) and an hour's slack.
HISTORY_MARGIN = 3 * 3600.0


class UsageError(Exception):
    pass


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
    # Without recording rules: the same definition over the raw series (said so).
    forecasts = tuple(recorded.values()) if recorded else tuple(fc.pod_forecasts(hist, at, w))
    kill_series = await prom.query_range(
        f"max by (container, process) ({c.OOM_KILLS_TOTAL.name}{selector(namespace, pod, extra)})",
        at - DAY_S, at, KILL_STEP)
    kills = tuple(with_kill_time(k, kill_series, hist) for k in ev.kills)
    return dataclasses.replace(ev, forecasts=forecasts, kills=kills)


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

