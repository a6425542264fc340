"""headroom's Grafana dashboards: grafanalib sources (``*.dashboard.py``, each a
``dashboard(config)`` function), the house style they share (``selectors``, ``variables``,
``panels``, ``style``, ``links``, ``layout``, ``knobs``, ``oom``) and the generator of the
committed JSON (``generate``, with ``upgrade`` to Grafana's current model).

``queries()`` lists every PromQL expression of every panel (and annotation), so tests can
run them against a real Prometheus; ``MAY_BE_EMPTY`` names the panels that may
legitimately return nothing on a given machine, and why. A panel with several queries
(a table's columns, a graph's lines) has data when any of them returns some: e.g. the
"time to limit" column of a ranking is empty while nothing grows, the others are not.
The exporter dashboard's ``up`` and ``scrape_*`` series exist wherever Prometheus scrapes
the exporter (not in a backfilled TSDB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.promql import Config

ANNOTATION_PREFIX = "annotation: "

_NO_GPU = "needs an NVIDIA driver (NVML) on the node"
_NO_VLLM = "needs a running vLLM whose /metrics the exporter reads"
_NO_KV_EVENTS = "needs vLLM KV cache events enabled (--kv-events-config)"
_NO_OFFLOAD = "needs vLLM's CPU KV-offload tier configured"
_NO_OOM = "only has samples after an OOM kill in the time range"

MAY_BE_EMPTY: dict[str, str] = {
    # vLLM
    "KV cache blocks in use vs capacity": _NO_VLLM,
    "Prefix-cache entries vs capacity": _NO_KV_EVENTS,
    "vLLM KV cache and CPU offload against the headroom": _NO_VLLM
    + " (the headroom line alone has data elsewhere)",
    "Requests: running and waiting": _NO_VLLM,
    "Preemptions": _NO_VLLM,
    "vLLM /metrics read": _NO_VLLM,
    "vLLM /metrics scrape success": _NO_VLLM,
    "vLLM /metrics failing now": _NO_VLLM,
    # GPU
    "GPU memory per process": _NO_GPU,
    "GPU memory per GPU: used vs total": _NO_GPU,
    "GPU memory per workload": _NO_GPU,
    "GPUs": _NO_GPU,
    # kernel
    "Memory pressure (PSI stall time)": "cgroup v2 with PSI enabled (psi=1) only",
    "Memory pressure per pod (PSI some)": "cgroup v2 with PSI enabled (psi=1) only",
    "Memory per process (PSS)": "smaps_rollup is read at a low rate and size-gated; "
    "absent until the first PSS pass and for processes above the gate",
    "Swap in use": "only where the node has swap and the cgroup uses it",
    # growth and predictions (recording rules that need a growing pod or a day of data)
    "Time to limit": "headroom:memory_time_to_limit:seconds exists only while a horizon "
    "forecasts a kill (and 'rules missing' needs the pod's raw series)",
    "Time to limit: the 10 closest pods": "only pods whose unreclaimable memory grows",
    "Top grower": "headroom:memory_top_grower:rate exists only while the binding cgroup "
    "grows",
    "Hidden memory growth": "only while the hidden-memory recording rule has a slope",
    "Largest growth since baseline (1d)": "needs the baseline window (1d) of data "
    "twice before the baseline rise exists",
    "Largest hidden-memory growth (1d)": "needs the baseline window (1d) of data twice",
    # OOM kills and restarts
    "OOM kills": _NO_OOM,
    "OOM kills per pod": _NO_OOM,
    "Memory events (reclaim at the limit, OOM)": "only has samples while an event "
    "counter rises (reclaim at the limit, an OOM)",
    ANNOTATION_PREFIX + "OOM kill": _NO_OOM,
    ANNOTATION_PREFIX + "Firing headroom alert": "only while a headroom alert fires",
    ANNOTATION_PREFIX + "Container restart": "only after a container's unreclaimable "
    "memory fell below half its floor (a restart)",
    # tmpfs
    "tmpfs used per pod": "only pods with a /dev/shm or memory emptyDir mount seen",
    "tmpfs used against the pod's headroom": "only pods with a /dev/shm or memory "
    "emptyDir mount seen (the headroom line alone has data elsewhere)",
}


def queries(config: Config | None = None) -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, PromQL) for every panel target and annotation, in
    dashboard order. Annotations are titled ``"annotation: <name>"``. ``config``: the
    rules' config the dashboards are drawn for (default: the shipped one)."""
    from dashboards.generate import dashboards

    out: list[tuple[str, str, str]] = []
    for d in dashboards(config).values():
        uid = d["uid"]
        for panel in _panels(d["panels"]):
            for t in panel.get("targets", []):
                out.append((uid, panel["title"], t["expr"]))
        for a in d["annotations"]["list"]:
            expr = (a.get("target") or {}).get("expr")
            if expr:
                out.append((uid, ANNOTATION_PREFIX + a["name"], expr))
    return out


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))
    return out


__all__ = ["MAY_BE_EMPTY", "queries"]
