"""Cluster mode: every pod from Prometheus' recorded forecast, with each pod's
/dev/shm, KV usage, kills and processes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter import catalog as c
from exporter.oncall import forecast as fc
from exporter.oncall.prom_client import PromSample
from exporter.oncall.top.cells import finite
from exporter.oncall.top.local import Key, Proc
from exporter.oncall.top.rows import KillMark, Row, row_of
from exporter.oncall.top.wire import query_prometheus
from exporter.oncall.units import printable


@dataclass(frozen=True)
class Cluster:
    forecasts: dict[fc.Workload, fc.Forecast]
    shm: dict[Key, float]
    orphaned: dict[Key, float]
    kv: dict[Key, float]
    kills: dict[Key, KillMark]
    processes: dict[Key, tuple[Proc, ...]] = field(default_factory=dict)
    process_growth: dict[tuple[str, str, str, str], float] = field(default_factory=dict)


def cluster_queries(extra: str = "") -> dict[str, str]:
    sel = "{" + extra + "}" if extra else ""
    q = fc.recorded_queries(sel)
    shm = "{" + ", ".join(x for x in (extra, 'mount="/dev/shm"') if x) + "}"
    q["shm"] = (f"sum by (namespace, pod) (max by (namespace, pod, mount) "
                f"({c.TMPFS_USED_BYTES.name}{shm}))")
    q["orphaned"] = (f"sum by (namespace, pod) (max by (namespace, pod, mount) "
                     f"({c.TMPFS_ORPHANED_BYTES.name}{sel}))")
    kv = "{" + ", ".join(x for x in (extra, f'medium="{c.MEDIUM_GPU}"') if x) + "}"
    q["kv"] = f"max by (namespace, pod) ({c.VLLM_KV_CACHE_USAGE_RATIO.name}{kv})"
    kills = "{" + ", ".join(x for x in (extra, 'container=""') if x) + "}"
    q["kills"] = f"sum by (namespace, pod, instance) ({c.OOM_KILLS_TOTAL.name}{kills})"
    # When each pod's counter last moved (to the minute), over the last day.
    q["kill_at"] = (f"max by (namespace, pod) (max_over_time((timestamp("
                    f"{c.OOM_KILLS_TOTAL.name}{kills}) and changes("
                    f"{c.OOM_KILLS_TOTAL.name}{kills}[2m]) > 0)[1d:1m]))")
    # The process view: what the local view reads from the exposition (anon, shmem and
    # count per process; max over exporters that overlap in a rollout), and the growth
    # the rules record (PROCESS_GROWTH, in recorded_queries).
    procs = "{" + ", ".join(x for x in (extra, f'kind=~"{c.RSS_ANON}|{c.RSS_SHMEM}"') if x) + "}"
    q["proc_memory"] = (f"max by (namespace, pod, container, process, kind) "
                        f"({c.PROCESS_MEMORY_BYTES.name}{procs})")
    q["proc_count"] = (f"max by (namespace, pod, container, process) "
                       f"({c.PROCESS_COUNT.name}{sel})")
    return q


def cluster_of(answers: Mapping[str, Sequence[PromSample]]) -> Cluster:
    """The answers of :func:`cluster_queries` -> forecasts and each pod's extras."""
    def per_pod(name: str) -> dict[Key, float]:
        return {(printable(s.labels.get("namespace", "")), printable(s.labels.get("pod", ""))):
                s.value for s in answers.get(name, ())}

    clean = {k: [PromSample({lk: printable(lv) for lk, lv in s.labels.items()}, s.value)
                 for s in v] for k, v in answers.items()}
    at = per_pod("kill_at")
    kills: dict[Key, KillMark] = {}
    for s in clean.get("kills", ()):
        key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
        if s.value > 0:
            inst = s.labels.get("instance", "")
            kills[key] = KillMark(s.value, at.get(key),
                                  f"http://{inst}/debug/oom/" if inst else "/debug/oom/")
    return Cluster(fc.from_recorded(clean), per_pod("shm"), per_pod("orphaned"),
                   per_pod("kv"), kills, *cluster_processes(clean))


def cluster_processes(answers: Mapping[str, Sequence[PromSample]]
                      ) -> tuple[dict[Key, tuple[Proc, ...]],
                                 dict[tuple[str, str, str, str], float]]:
    """The process view's rows per pod and their recorded growth (PROCESS_GROWTH)."""
    def ident(s: PromSample) -> tuple[str, str, str, str]:
        lb = s.labels
        return (lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", ""),
                lb.get("process", ""))

    parts: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for s in answers.get("proc_memory", ()):
        parts.setdefault(ident(s), {})[s.labels.get("kind", "")] = s.value
    for s in answers.get("proc_count", ()):
        parts.setdefault(ident(s), {})["count"] = s.value
    procs: dict[Key, tuple[Proc, ...]] = {}
    for (ns, pod, cont, name), f in sorted(parts.items()):
        proc = Proc(cont, name, finite(f.get(c.RSS_ANON)) or 0.0,
                    finite(f.get(c.RSS_SHMEM)) or 0.0, 0.0,
                    int(finite(f.get("count")) or 0))
        procs[(ns, pod)] = (*procs.get((ns, pod), ()), proc)
    growth = {ident(s): s.value for s in answers.get("process_growth", ())
              if math.isfinite(s.value)}
    return procs, growth


def fetch_cluster(base: str, extra: str = "", timeout: float = 10.0) -> Cluster:
    qs = cluster_queries(extra)
    return cluster_of({k: query_prometheus(base, q, timeout) for k, q in qs.items()})


def cluster_rows(cl: Cluster) -> tuple[list[Row], dict[Key, list[fc.Forecast]]]:
    pods = fc.by_pod(cl.forecasts)
    rows = []
    for key, fs in pods.items():
        b = fc.tightest(fs)
        if b is not None:
            rows.append(row_of(b, cl.shm.get(key), cl.orphaned.get(key), cl.kv.get(key),
                               cl.kills.get(key)))
    return rows, pods

