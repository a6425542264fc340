"""Reading the recorded series of the forecast contract: the instant queries, and their
answers -> one :class:`Forecast` per cgroup."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from exporter.oncall.forecast.data import HORIZONS, RECORDED, Forecast, Grower, Workload
from exporter.oncall.prom_client import PromSample
from exporter.promql import (
    BINDING,
    GROWTH,
    KIND_GROWTH,
    LIMIT,
    PEAK_ENVELOPE,
    PEAK_HEADROOM_SWINGS,
    PROCESS_GROWTH,
    TIME_TO_LIMIT,
    TOP_GROWER,
    UNRECLAIMABLE,
)


def recorded_queries(sel: str) -> dict[str, str]:
    """One instant query per contract series for the selector ``{...}`` (or "")."""
    return {
        "limit": f"{LIMIT}{sel}",
        "unreclaimable": f"{UNRECLAIMABLE}{sel}",
        "binding": f"{BINDING}{sel}",
        "growth": f"{GROWTH}{sel}",
        "envelope": f"{PEAK_ENVELOPE}{sel}",
        "ttl": f"{TIME_TO_LIMIT}{sel}",
        "grower": f"{TOP_GROWER}{sel}",
        "kind_growth": f"{KIND_GROWTH}{sel}",
        "process_growth": f"{PROCESS_GROWTH}{sel}",
        "swings": f"{PEAK_HEADROOM_SWINGS}{sel}",
    }


def from_recorded(answers: Mapping[str, Sequence[PromSample]]) -> dict[Workload, Forecast]:
    """The answers of :func:`recorded_queries` -> one forecast per cgroup. Two exporters
    scraping one cgroup (or two Prometheus replicas) give the same series twice: the
    highest value wins (the nearer kill for time to limit)."""
    def key(r: PromSample) -> Workload:
        lb = r.labels
        return lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", "")

    def fin(v: float) -> bool:
        return math.isfinite(v)

    def table(name: str) -> dict[Workload, float]:
        out: dict[Workload, float] = {}
        for r in answers.get(name, ()):
            if fin(r.value):
                out[key(r)] = max(out.get(key(r), -math.inf), r.value)
        return out

    limits, unrecl, binding = table("limit"), table("unreclaimable"), table("binding")
    envelope, swings = table("envelope"), table("swings")
    growth: dict[Workload, dict[str, float]] = {}
    for r in answers.get("growth", ()):
        h = r.labels.get("horizon", "")
        if h in HORIZONS and fin(r.value) and r.value > 0:
            g = growth.setdefault(key(r), {})
            g[h] = max(g.get(h, 0.0), r.value)
    ttl: dict[Workload, tuple[float, str]] = {}
    for r in answers.get("ttl", ()):
        if fin(r.value) and r.value >= 0 and (key(r) not in ttl or r.value < ttl[key(r)][0]):
            ttl[key(r)] = (r.value, r.labels.get("horizon", ""))
    grower: dict[Workload, Grower] = {}
    for r in answers.get("grower", ()):
        if fin(r.value) and (key(r) not in grower or r.value > grower[key(r)].rate):
            grower[key(r)] = Grower(r.labels.get("kind", ""), r.labels.get("process", ""),
                                    r.value)
    kinds: dict[Workload, dict[str, float]] = {}
    for r in answers.get("kind_growth", ()):
        if fin(r.value):
            kinds.setdefault(key(r), {})[r.labels.get("kind", "")] = r.value
    procs: dict[Workload, dict[str, float]] = {}
    for r in answers.get("process_growth", ()):
        if fin(r.value):
            ns, pod, cont = key(r)
            name = r.labels.get("process", "")
            for w in ((ns, pod, cont), (ns, pod, "")):  # the pod level holds them all
                ps = procs.setdefault(w, {})
                ps[name] = max(ps.get(name, -math.inf), r.value)
    out: dict[Workload, Forecast] = {}
    for k, lim in limits.items():
        if k not in unrecl or lim <= 0:
            continue
        t = ttl.get(k)
        out[k] = Forecast(*k, lim, unrecl[k], binding.get(k, 0.0) >= 1, growth.get(k, {}),
                          envelope.get(k), t[0] if t else None, t[1] if t else None,
                          grower.get(k), RECORDED, kinds.get(k, {}), procs.get(k, {}),
                          swings.get(k))
    return out


def by_pod(cgroups: Mapping[Workload, Forecast]) -> dict[tuple[str, str], list[Forecast]]:
    out: dict[tuple[str, str], list[Forecast]] = {}
    for (ns, pod, _), f in sorted(cgroups.items()):
        out.setdefault((ns, pod), []).append(f)
    return out
