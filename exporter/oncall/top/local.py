"""One read of the local exporter: its exposition -> pods with all their cgroups,
processes and extras (the binding cgroup is chosen later)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from exporter.oncall.top.cells import finite
from exporter.oncall.units import printable

Key = tuple[str, str]
W = tuple[str, str, str]


@dataclass(frozen=True)
class Proc:
    container: str
    process: str
    anon: float = 0.0
    shmem: float = 0.0
    file: float = 0.0
    count: int = 0

    @property
    def held(self) -> float:
        return self.anon + self.shmem


@dataclass(frozen=True)
class Cgroup:
    container: str  # "" = the pod-level cgroup
    limit: float | None = None
    unreclaimable: float | None = None
    usage: float | None = None
    kinds: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Pod:
    namespace: str
    pod: str
    cgroups: tuple[Cgroup, ...] = ()
    shm: float | None = None
    orphaned: float | None = None
    kv_usage: float | None = None
    processes: tuple[Proc, ...] = ()
    kills: float = 0.0
    exporter: str = ""  # where its /debug/oom/ is

    @property
    def key(self) -> Key:
        return self.namespace, self.pod


def parse(text: str, exporter: str = "") -> dict[Key, Pod]:
    """An exposition -> pods with all their cgroups (the binding one is chosen later)."""
    cg: dict[W, dict[str, float]] = {}
    kinds: dict[W, dict[str, float]] = {}
    procs: dict[tuple[str, str, str, str], dict[str, float]] = {}
    shm: dict[Key, float] = {}
    orphaned: dict[Key, float] = {}
    kv: dict[Key, float] = {}
    kills: dict[Key, float] = {}
    wanted = {c.MEMORY_LIMIT_BYTES.name: "limit",
              c.MEMORY_UNRECLAIMABLE_BYTES.name: "unreclaimable",
              c.MEMORY_USAGE_BYTES.name: "usage"}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            lb = {k: printable(v) for k, v in s.labels.items()}  # hostile names
            w = (lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", ""))
            pk = w[:2]
            v = float(s.value)
            if s.name in wanted:
                cg.setdefault(w, {})[wanted[s.name]] = v
            elif s.name == c.MEMORY_BYTES.name:
                kinds.setdefault(w, {})[lb.get("kind", "")] = v
            elif s.name == c.PROCESS_MEMORY_BYTES.name:
                procs.setdefault((*w, lb.get("process", "")), {})[lb.get("kind", "")] = v
            elif s.name == c.PROCESS_COUNT.name:
                procs.setdefault((*w, lb.get("process", "")), {})["count"] = v
            elif s.name == c.TMPFS_USED_BYTES.name and lb.get("mount") == "/dev/shm":
                shm[pk] = shm.get(pk, 0.0) + v
            elif s.name == c.TMPFS_ORPHANED_BYTES.name:
                orphaned[pk] = orphaned.get(pk, 0.0) + v
            elif s.name == c.VLLM_KV_CACHE_USAGE_RATIO.name and lb.get("medium") == c.MEDIUM_GPU:
                kv[pk] = max(kv.get(pk, 0.0), v)
            elif s.name == c.OOM_KILLS_TOTAL.name and w[2] == "":
                # Pod-level series (one per victim name); a container's copy would count
                # the same kill twice.
                kills[pk] = kills.get(pk, 0.0) + v
    pods: dict[Key, Pod] = {}
    for (ns, pod, container), f in sorted(cg.items()):
        p = pods.get((ns, pod)) or Pod(ns, pod, shm=shm.get((ns, pod)),
                                        orphaned=orphaned.get((ns, pod)),
                                        kv_usage=kv.get((ns, pod)),
                                        kills=kills.get((ns, pod), 0.0), exporter=exporter)
        cgroup = Cgroup(container, f.get("limit"), f.get("unreclaimable"), f.get("usage"),
                        kinds.get((ns, pod, container), {}))
        pods[(ns, pod)] = Pod(p.namespace, p.pod, (*p.cgroups, cgroup), p.shm, p.orphaned,
                              p.kv_usage, p.processes, p.kills, p.exporter)
    for (ns, pod, container, name), f in sorted(procs.items()):
        if (ns, pod) in pods:
            p = pods[(ns, pod)]
            proc = Proc(container, name, f.get(c.RSS_ANON, 0.0), f.get(c.RSS_SHMEM, 0.0),
                        f.get(c.RSS_FILE, 0.0), int(finite(f.get("count", 0.0)) or 0))
            pods[(ns, pod)] = Pod(p.namespace, p.pod, p.cgroups, p.shm, p.orphaned,
                                  p.kv_usage, (*p.processes, proc), p.kills, p.exporter)
    return pods

