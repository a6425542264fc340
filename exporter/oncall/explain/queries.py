"""Every PromQL query ``explain`` runs for one pod, by name (pure)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from exporter import catalog as c
from exporter.promql import KIND_DEV_SHM


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


MAX_EVENT = f'event="{c.EVENT_MAX}"'
PROCESS_KINDS = f'kind=~"{c.RSS_ANON}|{c.RSS_SHMEM}"'  # what a process holds
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
                      + with_matchers(s, PROCESS_KINDS),
                      (*cont, "process", "kind")),
        "tmpfs": (c.TMPFS_USED_BYTES.name + s, (*cont, "mount")),
        "orphaned": (c.TMPFS_ORPHANED_BYTES.name + s, (*cont, "mount")),
        "prefix": (c.VLLM_PREFIX_CACHE_BLOCKS.name + s, (*cont, "medium")),
    }
    for name, (metric, by) in trends.items():
        for f, expr in trend_queries(metric, by).items():
            q[f"{name}.{f}"] = expr
    return q


def range_queries(namespace: str, pod: str, extra: str = "") -> dict[str, str]:
    """The raw series the local forecast and the kill's story read over two days."""
    s = selector(namespace, pod, extra)
    kinds = with_matchers(s, f'kind=~"{c.KIND_ANON}|{c.KIND_SHMEM}|{c.KIND_KERNEL}"')
    procs = with_matchers(s, PROCESS_KINDS)
    shm = with_matchers(s, 'mount="/dev/shm"')
    return {
        "unreclaimable": f"max by (container) ({c.MEMORY_UNRECLAIMABLE_BYTES.name}{s})",
        "kinds": f"max by (container, kind) ({c.MEMORY_BYTES.name}{kinds})",
        "processes": f"sum by (container, process) (max by (container, process, kind) ("
                     f"{c.PROCESS_MEMORY_BYTES.name}{procs}))",
        KIND_DEV_SHM: f"max by (container) ({c.TMPFS_USED_BYTES.name}{shm})",
    }

