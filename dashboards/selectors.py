"""The PromQL the dashboards share: label matchers, the job join and workload scopes.

Every query selects ``${job}`` (raw series by matcher, recording rules by a join to a raw
series that does: the rules keep no job label) and uses ``$__rate_interval`` in every
rate or increase. Metric names come from ``exporter.catalog``, recording-rule names and
the selector builder from ``exporter.promql`` (through ``dashboards.names``), so a rename
there changes the dashboards on the next ``headroom generate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from dashboards.names import RULE, series
from dashboards.names import by as by
from exporter import catalog as c

# Every panel and query reads the data source the ``datasource`` variable selects.
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}

JOB = 'job=~"$job"'
NAMESPACE = 'namespace=~"$namespace"'
POD = 'pod=~"$pod"'
INSTANCE = 'instance=~"$instance"'
NODE = 'instance=~"$node"'  # the node variable's value is the exporter's instance
POD_CGROUP = 'container=""'  # cAdvisor's convention: the pod-level cgroup
ANY_CONTAINER = 'container!=""'
CONTAINERS = 'container=~"$container"'  # the container variable's All is .+ (real ones)
# The pod-level cgroup and the selected containers (an empty alternative matches "").
CGROUPS = 'container=~"|$container"'
POD_CGROUP_NAME = "pod cgroup"
W = c.WORKLOAD_LABELS
RATE = "$__rate_interval"
RANGE = "$__range"

# Page cache: the catalogue's file_* kinds, which the kernel reclaims first; every other
# kind is memory it cannot take back without swap.
PAGE_CACHE_KINDS = tuple(k for k in c.MEMORY_KINDS if k.startswith("file_"))
UNRECLAIMABLE_KINDS = tuple(k for k in c.MEMORY_KINDS if k not in PAGE_CACHE_KINDS)

# Process names of a vLLM server (catalog: the title without VLLM::, APIServer for the
# un-retitled `vllm serve`): a pod running one of them is a vLLM pod.
VLLM_PROCESSES = "APIServer.*|EngineCore.*|Worker.*|DPCoordinator.*"
SCOPE = 'process=~"$scope"'


def metric(spec: c.MetricSpec | str, *matchers: str) -> str:
    """A catalog metric (or recording rule name) with a selector."""
    return series(spec, *matchers)


def eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def re_(label: str, values: Iterable[str]) -> str:
    return f'{label}=~"{"|".join(values)}"'


def name_pod_cgroup(expr: str) -> str:
    """Gives the pod-level cgroup (container="") a readable name in legends."""
    return f'label_replace({expr}, "container", "{POD_CGROUP_NAME}", "container", "")'


def jobbed(expr: str, *scope: str) -> str:
    """``expr`` (a recording rule: the rules keep no job label) kept only for workloads
    that a target of ``$job`` reports now: joined to the raw limit series, which selects
    it. The join also drops a cgroup whose raw series ended (a restarted container): the
    rules hold their figures across scrape gaps (``hold_s``), a tile must not keep
    showing an ended cgroup's headroom or countdown."""
    raw = metric(c.MEMORY_LIMIT_BYTES, JOB, *scope)
    return f"({expr}\n  and on {by(*W)}\n  {raw})"


def rule(
    name: str, *matchers: str, fn: Callable[[str], str] = lambda s: s, scope: Sequence[str] = (),
) -> str:
    """A recording rule with matchers, optionally wrapped (``fn``, e.g. a deriv), limited
    to ``$job`` (``scope``: matchers that narrow the join, e.g. the namespace)."""
    return jobbed(fn(metric(name, *matchers)), *scope)


def of_binding(expr: str, *matchers: str) -> str:
    """``expr`` (one series per cgroup) on the cgroup the forecast rules mark as binding
    (``BINDING == 1``): the cgroup the page, explain, top and the pod dashboard's tiles
    speak of, so a table or bar names the same cgroup and figure as they do."""
    return f"({expr}\n  and on {by(*W)}\n  ({metric(RULE.BINDING, *matchers)} == 1))"


def in_scope(expr: str) -> str:
    """``expr`` for the pods the scope variable selects (joined on namespace, pod): pods
    that ran such a process, or had a vLLM /metrics read, at any time in the dashboard's
    range. Not only now: a pod whose vLLM was just OOM-killed has no process left, and
    must not drop out of the ranking (or its kill out of the count) at that moment."""
    pods = (
        f"max by (namespace, pod) (max_over_time("
        f"{metric(c.PROCESS_COUNT, JOB, NAMESPACE, SCOPE)}[{RANGE}]))"
        f"\n  or\n  max by (namespace, pod) (max_over_time("
        f"{metric(c.VLLM_UP, JOB, NAMESPACE)}[{RANGE}]))"
    )
    # Parenthesised: `and` binds looser than the comparisons callers append.
    return f"(\n  {expr}\nand on (namespace, pod) (\n  {pods}\n)\n)"
