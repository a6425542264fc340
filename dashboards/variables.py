"""The dashboards' template variables: data source, job, namespace, pod, container,
exporter, scope, instance and node. Every query variable refreshes on a time-range change
(a dashboard-linter rule)."""

from __future__ import annotations

from typing import Any

import attr
from grafanalib import core as g

from dashboards.selectors import DATASOURCE, JOB, NAMESPACE, POD, VLLM_PROCESSES, metric
from exporter import catalog as c


def datasource_var() -> Any:
    return g.Template(
        name="datasource", label="Data source", query="prometheus", type="datasource",
        default="default", regex="",
    )


def query_var(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = True,
    include_all: bool = True,
    all_value: str | None = ".*",
    default: str | None = None,
    regex: str = "",
    hide: int = g.SHOW,
    sort: int = g.SORT_ALPHA_ASC,
) -> Any:
    """A Prometheus query variable, refreshed on time-range change (linter rule)."""
    t = g.Template(
        name=name, label=label, query=query, dataSource=DATASOURCE,
        multi=multi, includeAll=include_all, allValue=all_value if include_all else None,
        default=default, regex=regex, refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=sort, hide=hide,
    )
    if default is None and include_all:
        # Start on All, as kubernetes-mixin does for namespaces.
        t = attr.evolve(t, default="$__all")
    return t


def job_var() -> Any:
    # The dashboard-linter's template-job-rule: multi, All = .+, default headroom.
    return query_var(
        "job", "Job", f"label_values({c.BUILD_INFO.name}, job)",
        all_value=".+", default="headroom",
    )


def namespace_var(*, multi: bool = True) -> Any:
    # All = .* so that cgroups outside Kubernetes (namespace="") are kept too.
    return query_var(
        "namespace", "Namespace",
        f"label_values({metric(c.MEMORY_LIMIT_BYTES, JOB)}, namespace)",
        multi=multi, include_all=True,
    )


def pod_var() -> Any:
    """One pod, vLLM pods first: Grafana selects the first option when the URL names
    none, so the dashboard opens on a vLLM pod. The query ranks every tracked pod, 2 for
    vLLM ones (by their processes or a vLLM /metrics headroom reads), 1 for the rest;
    sort_desc keeps that order and the variable does not re-sort it."""
    vllm = (
        f"max by (pod) ({metric(c.PROCESS_COUNT, JOB, NAMESPACE, f'process=~{VLLM_PROCESSES!r}')}"
        f" * 0 + 2)\n  or max by (pod) ({metric(c.VLLM_UP, JOB, NAMESPACE)} * 0 + 2)"
    ).replace("'", '"')
    every = f"max by (pod) ({metric(c.MEMORY_LIMIT_BYTES, JOB, NAMESPACE)} * 0 + 1)"
    return query_var(
        "pod", "Pod", f"query_result(sort_desc({vllm}\n  or {every}))",
        multi=False, include_all=False, regex='/pod="([^"]+)"/', sort=g.SORT_DISABLED,
    )


def container_var() -> Any:
    # All = .+: the containers only. Panels that want the pod-level cgroup as well say
    # so with CGROUPS, those that stack use one level at a time (the pod cgroup already
    # contains its containers: stacking both would count them twice).
    return query_var(
        "container", "Container",
        f"label_values({metric(c.MEMORY_LIMIT_BYTES, JOB, NAMESPACE, POD)}, container)",
        all_value=".+",
    )


def exporter_var() -> Any:
    """The exporter (instance) that reports the pod: where its /debug/oom/ documents are."""
    return query_var(
        "exporter", "Exporter",
        f"label_values({metric(c.MEMORY_LIMIT_BYTES, JOB, NAMESPACE, POD)}, instance)",
        multi=False, include_all=False, hide=g.HIDE_VARIABLE,
    )


def scope_var() -> Any:
    """Which pods the fleet views rank: vLLM pods (by their processes, or a vLLM
    /metrics headroom reads) or every pod headroom tracks."""
    options = [
        {"selected": True, "text": "vLLM pods", "value": VLLM_PROCESSES},
        {"selected": False, "text": "all pods", "value": ".+"},
    ]
    return g.Template(
        name="scope", label="Pods", type="custom", options=options,
        query=",".join(f"{o['text']} : {o['value']}" for o in options),
        default=VLLM_PROCESSES,
    )


def instance_var() -> Any:
    return query_var(
        "instance", "Instance", f"label_values({metric(c.BUILD_INFO, JOB)}, instance)",
        all_value=".+",
    )


def node_var() -> Any:
    """The node, by the ``node`` label where the scrape config adds it, else by
    ``instance``. Its value is always the exporter's instance (every series has it);
    its text is the node name. label_join/label_replace fill node from instance when the
    node label is absent; the regex's named groups split text and value."""
    joined = (
        f'label_join({metric(c.BUILD_INFO, JOB)}, "node_or_instance", ";", '
        f'"node", "instance")'
    )
    filled = f'label_replace({joined}, "node", "$1", "node_or_instance", ";(.*)")'
    return query_var(
        "node", "Node", f"query_result(max by (node, instance) ({filled}))",
        multi=False, include_all=False,
        regex='/instance="(?<value>[^"]+)".*node="(?<text>[^"]+)"/',
    )
