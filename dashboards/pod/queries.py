"""The pod dashboard's queries: the pod's raw series and recording rules, the cgroup the
tiles read (the binding one, else the tightest), per-process attribution and growth."""

from __future__ import annotations

from collections.abc import Callable

from dashboards.knobs import Knobs
from dashboards.names import RULE as r
from dashboards.selectors import (
    CGROUPS,
    CONTAINERS,
    JOB,
    NAMESPACE,
    POD,
    POD_CGROUP,
    UNRECLAIMABLE_KINDS,
    W,
    by,
    eq,
    metric,
    name_pod_cgroup,
    re_,
    rule,
)
from dashboards.style import DOTTED, fixed, limit_style, override_regex
from exporter import catalog as c

RAW = (JOB, NAMESPACE, POD)  # a raw series of this pod
SCOPE = (NAMESPACE, POD)  # the pod, for the job join of a recording rule
STACKED_KINDS = c.MEMORY_KINDS  # least reclaimable at the bottom
RSS_KINDS = (c.RSS_ANON, c.RSS_SHMEM, c.RSS_FILE)
ATTRIBUTED_KINDS = (c.RSS_ANON, c.RSS_SHMEM)
P = ("namespace", "pod", "container", "process")


def pod_rule(name: str, *matchers: str, fn: Callable[[str], str] = str) -> str:
    """A recording rule of this pod (optionally wrapped by ``fn``), limited to $job."""
    return rule(name, *SCOPE, *matchers, fn=fn, scope=SCOPE)


# --- the binding cgroup: the tiles and the first chart read the same one ----------------
HEADROOM_NOW = pod_rule(r.HEADROOM, CGROUPS)
BINDING_NOW = pod_rule(r.BINDING, CGROUPS)
# The cgroup the forecast rules mark as binding (the answer explain and top give); the
# least headroom while the binding series is absent.
TIGHTEST = (f"bottomk(1, ({HEADROOM_NOW} and on {by(*W)} ({BINDING_NOW} == 1))\n"
            f"  or ({HEADROOM_NOW} unless on () count({BINDING_NOW})))")
# -1 when the pod has raw series but the forecast rules recorded nothing for it: the
# rules are not loaded (a dashboard imported by hand), shown as "rules missing".
RULES_MISSING = (f"(vector(-1) unless on () count({BINDING_NOW}))\n"
                 f"  and on () count({metric(c.MEMORY_LIMIT_BYTES, *RAW)})")
MISSING = [{"type": "value", "options": {"-1": {"text": "rules missing", "color": "text",
                                                "index": 0}}}]


def of_binding(expr: str) -> str:
    """``expr`` (one series per cgroup) for the binding cgroup only."""
    return f"({expr}\n  and on {by(*W)}\n  ({BINDING_NOW} == 1))"


def of_tightest(expr: str) -> str:
    """``expr`` (one series per cgroup) for the cgroup with the least headroom."""
    return f"({expr}\n  and on {by(*W)}\n  {TIGHTEST})"


def tightest_line(name: str, fn: Callable[[str], str] = str) -> str:
    """A recording rule (wrapped by ``fn``) of the tightest cgroup, for a graph."""
    line = of_tightest(pod_rule(name, CGROUPS, fn=fn))
    return name_pod_cgroup(f"max by {by(*W)} ({line})")


def per_process_attributed(*matchers: str) -> str:
    """anon + mapped shmem per process name, as the rules attribute it: PSS where the
    exporter read it (it splits pages shared by several processes), RSS otherwise; so
    the processes plus the hidden memory add up to the unreclaimable figure."""
    by_p = by(*P)

    def part(pss_kind: str, rss_kind: str) -> str:
        pss = metric(c.PROCESS_MEMORY_PSS_BYTES, *RAW, *matchers, eq("kind", pss_kind))
        rss = metric(c.PROCESS_MEMORY_BYTES, *RAW, *matchers, eq("kind", rss_kind))
        return f"(max by {by_p} ({pss}) or max by {by_p} ({rss}))"

    return f"sum by (process) ({part(c.PSS_ANON, c.RSS_ANON)} + {part(c.PSS_SHMEM, c.RSS_SHMEM)})"


def process_growth(k: Knobs, *matchers: str) -> str:
    """bytes/s per process name: the slope (deriv over the trend window) of the anon and
    mapped shmem its processes hold, for names that run now (``and`` the series now): a
    killed process keeps a slope over its last window, it must not stay "fastest"."""
    series = metric(c.PROCESS_MEMORY_BYTES, *RAW, *matchers, re_("kind", ATTRIBUTED_KINDS))
    return f"sum by (process) (deriv({series}[{k.deriv}]) and {series})"


def hidden_growth(k: Knobs) -> str:
    """The slope of the memory no process accounts for, in the pod cgroup."""
    return pod_rule(r.HIDDEN, POD_CGROUP, fn=lambda s: f"deriv({s}[{k.deriv}])")

POD_LIMIT = metric(c.MEMORY_LIMIT_BYTES, *RAW, POD_CGROUP)
POD_USAGE = metric(c.MEMORY_USAGE_BYTES, *RAW, POD_CGROUP)
POD_UNRECL = metric(c.MEMORY_UNRECLAIMABLE_BYTES, *RAW, POD_CGROUP)
POD_HIDDEN = pod_rule(r.HIDDEN, POD_CGROUP)
KV_USAGE = metric(c.VLLM_KV_CACHE_USAGE_RATIO, *RAW, CONTAINERS)
KV_BLOCKS = metric(c.VLLM_KV_CACHE_CAPACITY_BLOCKS, *RAW, CONTAINERS)
PREFIX_BLOCKS = metric(c.VLLM_PREFIX_CACHE_BLOCKS, *RAW, CONTAINERS)
OFFLOAD_BYTES = metric(c.VLLM_KV_CACHE_CAPACITY_BYTES, *RAW, CONTAINERS, eq("medium", c.MEDIUM_CPU))
OFFLOAD_USAGE = metric(c.VLLM_KV_CACHE_USAGE_RATIO, *RAW, CONTAINERS, eq("medium", c.MEDIUM_CPU))
PREEMPTIONS = metric(c.VLLM_PREEMPTIONS_TOTAL, *RAW, CONTAINERS)
UNRECL = re_("kind", UNRECLAIMABLE_KINDS)
# Every memory.events counter but low (memory.low breached is protection, not pressure).
EVENT_LOW = c.MEMORY_EVENTS[0]  # the catalogue lists low first
EVENTS = re_("event", (e for e in c.MEMORY_EVENTS if e != EVENT_LOW))
KV_BY = by(*W, "model_name", "engine")


def pod_kind(kind: str) -> str:
    return metric(c.MEMORY_BYTES, *RAW, POD_CGROUP, eq("kind", kind))


def cgroup_rule(name: str) -> str:
    """A recording rule for the pod cgroup and the selected containers."""
    return name_pod_cgroup(pod_rule(name, CGROUPS))


def memory_lines(level: str, legend_prefix: str) -> list[tuple[str, str]]:
    """limit, peak, usage, working set and unreclaimable of one cgroup level."""
    group = by(*W)
    out = []
    for spec, what in (
        (c.MEMORY_LIMIT_BYTES, "limit"),
        (c.MEMORY_PEAK_BYTES, "peak"),
        (c.MEMORY_USAGE_BYTES, "usage"),
        (c.MEMORY_WORKING_SET_BYTES, "working set"),
        (c.MEMORY_UNRECLAIMABLE_BYTES, "unreclaimable"),
    ):
        # max by: one series per cgroup even while two exporter pods overlap.
        out.append((f"max by {group} ({metric(spec, *RAW, level)})", f"{legend_prefix}{what}"))
    return out


def kinds_stack(level: str, aggregate: str) -> list[tuple[str, str]]:
    """One query per kind, in catalog stacking order (Grafana stacks in query order)."""
    return [
        (
            f"{aggregate} (max by {by(*W, 'kind')} "
            f"({metric(c.MEMORY_BYTES, *RAW, level, eq('kind', kind))}))",
            kind,
        )
        for kind in STACKED_KINDS
    ]


LINE_STYLES = [
    limit_style(".*limit$"),
    override_regex(".*unreclaimable$", custom__lineWidth=3, color=fixed("orange")),
    override_regex(".*peak$", custom__lineStyle=DOTTED),
]

OOM_DOCS = "http://${exporter}/debug/oom/?namespace=${namespace}&pod=${pod}"
OOM_DOCS_LINK = {"title": "OOM post-mortems of this pod (the exporter's /debug/oom/)",
                 "url": OOM_DOCS, "targetBlank": True}
