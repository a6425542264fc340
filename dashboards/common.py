"""House style for headroom's dashboards: variables, selectors and panel helpers.

Every dashboard builds its panels with these helpers, so all of them share one look and
one set of rules: the ``${datasource}`` variable on every panel and query, a ``job``
variable (default ``headroom``) in every selector of a raw series, base units,
``$__rate_interval`` in every rate/increase, a description on every panel.

Metric names come from ``exporter.catalog`` and recording-rule names from
``alerts.rules``: a rename there changes the dashboards on the next ``headroom generate``.

grafanalib 0.7.1 still emits a Grafana 6/7 era model (``schemaVersion`` 12, string
datasources, ``span``/``height`` and friends); ``dashboards.generate`` normalises its
output to the current JSON model. Layout (``gridPos``) and panel ids are assigned here,
in source order, so they are stable from one generation to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attr
from grafanalib import core as g

from alerts import rules as r
from alerts.config import DEFAULT, promql_duration
from exporter import catalog as c

# grafanalib ships no type information: its objects are Any to mypy.
Panel = Any

# --- datasource, selectors -----------------------------------------------------------------
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39  # Grafana 11.0's model; later versions migrate it on load.
TAGS = ["headroom", "vllm", "memory"]

JOB = 'job=~"$job"'
NAMESPACE = 'namespace=~"$namespace"'
POD = 'pod=~"$pod"'
INSTANCE = 'instance=~"$instance"'
NODE = 'instance=~"$node"'  # the node variable's value is the exporter's instance
POD_CGROUP = 'container=""'  # cAdvisor's convention: the pod-level cgroup
CONTAINERS = 'container=~"$container"'  # the container variable's All is .+ (real ones)
# The pod-level cgroup and the selected containers (an empty alternative matches "").
CGROUPS = 'container=~"|$container"'
POD_CGROUP_NAME = "pod cgroup"

# Durations and thresholds shared with the rules, so a panel says what the alert means.
RULES_CONFIG = DEFAULT
BASELINE = promql_duration(RULES_CONFIG.baseline_window_s)
RATE = "$__rate_interval"
RANGE = "$__range"

# Titles and uids of the dashboards, for links between them.
UIDS = {
    "fleet": "headroom-fleet",
    "pod": "headroom-pod",
    "node": "headroom-node",
    "exporter": "headroom-exporter",
}


def sel(*matchers: str) -> str:
    """A ``{...}`` block from label matchers (empty ones are skipped)."""
    return "{" + ", ".join(m for m in matchers if m) + "}"


def metric(spec: c.MetricSpec | str, *matchers: str) -> str:
    """A catalog metric (or recording rule name) with a selector."""
    name = spec.name if isinstance(spec, c.MetricSpec) else spec
    return name + (sel(*matchers) if matchers else "")


def eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def re_(label: str, values: Iterable[str]) -> str:
    return f'{label}=~"{"|".join(values)}"'


def by(*labels: str) -> str:
    return "(" + ", ".join(labels) + ")"


def name_pod_cgroup(expr: str) -> str:
    """Gives the pod-level cgroup (container="") a readable name in legends."""
    return f'label_replace({expr}, "container", "{POD_CGROUP_NAME}", "container", "")'


def growth_since_baseline(series: str) -> str:
    """Each series minus its own lowest value over the baseline window (the rules' 1d):
    what grew since its floor; for a pod younger than the window, since it started."""
    return f"({series} - min_over_time({series}[{BASELINE}]))"


# --- links -------------------------------------------------------------------------------
def pod_link(title: str, namespace: str, pod: str) -> dict[str, Any]:
    """A data link to the pod dashboard, keeping datasource, job and time range."""
    return {
        "title": title,
        "url": (
            f"/d/{UIDS['pod']}/headroom-pod-memory?var-datasource=${{datasource}}"
            f"&${{job:queryparam}}&var-namespace={namespace}&var-pod={pod}"
            f"&${{__url_time_range}}"
        ),
    }


# On a series (its labels) and in a table (the row's namespace, the cell's pod).
SERIES_POD_LINK = pod_link(
    "Pod ${__field.labels.namespace}/${__field.labels.pod}",
    "${__field.labels.namespace}", "${__field.labels.pod}",
)
TABLE_POD_LINK = pod_link(
    "Pod ${__data.fields.namespace}/${__value.raw}", "${__data.fields.namespace}",
    "${__value.raw}",
)


def dashboard_links() -> list[Any]:
    """A drop-down of every headroom dashboard, passing the time range and variables."""
    return [
        g.DashboardLink(
            asDropdown=True, includeVars=True, keepTime=True, tags=["headroom"],
            title="headroom", type="dashboards",
        )
    ]


# --- template variables ---------------------------------------------------------------------
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
) -> Any:
    """A Prometheus query variable, refreshed on time-range change (linter rule)."""
    t = g.Template(
        name=name, label=label, query=query, dataSource=DATASOURCE,
        multi=multi, includeAll=include_all, allValue=all_value if include_all else None,
        default=default, regex=regex, refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=g.SORT_ALPHA_ASC, hide=hide,
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
        multi=multi, include_all=multi,
    )


def pod_var() -> Any:
    return query_var(
        "pod", "Pod",
        f"label_values({metric(c.MEMORY_LIMIT_BYTES, JOB, NAMESPACE)}, pod)",
        multi=False, include_all=False,
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


# Process names of a vLLM server (catalog: the title without VLLM::, APIServer for the
# un-retitled `vllm serve`): a pod running one of them is a vLLM pod.
VLLM_PROCESSES = "APIServer.*|EngineCore.*|Worker.*|DPCoordinator.*"
SCOPE = 'process=~"$scope"'


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


def in_scope(expr: str) -> str:
    """``expr`` for the pods the scope variable selects (joined on namespace, pod)."""
    pods = (
        f"max by (namespace, pod) ({metric(c.PROCESS_COUNT, JOB, NAMESPACE, SCOPE)})"
        f"\n  or\n  max by (namespace, pod) ({metric(c.VLLM_UP, JOB, NAMESPACE)})"
    )
    # Parenthesised: `and` binds looser than the comparisons callers append.
    return f"(\n  {expr}\nand on (namespace, pod) (\n  {pods}\n)\n)"


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


# --- targets ----------------------------------------------------------------------------
def target(expr: str, legend: str = "", *, instant: bool = False) -> Any:
    """One PromQL query; instant ones feed tables, bar gauges and stats of a range."""
    return g.Target(
        expr=expr, legendFormat=legend, instant=instant, datasource=DATASOURCE,
        format="table" if instant else "time_series",
    )


Targets = Sequence[tuple[str, str]]


def _targets(targets: Targets, *, instant: bool = False) -> list[Any]:
    out = []
    for i, (expr, legend) in enumerate(targets):
        t = target(expr, legend, instant=instant)
        out.append(attr.evolve(t, refId=chr(ord("A") + i)))
    return out


def _grid(w: int, h: int) -> Any:
    # x and y are placed by layout(); width and height are the panel's own.
    return g.GridPos(h=h, w=w, x=0, y=0)


def thresholds(*steps: tuple[str, float]) -> list[dict[str, Any]]:
    """A base colour (value null: from -inf) followed by (colour, from value) steps."""
    base, *rest = steps
    return [{"color": base[0], "value": None}] + [
        {"color": col, "value": v} for col, v in rest
    ]


NO_THRESHOLDS = thresholds(("green", 0))


def override(name: str, **props: Any) -> dict[str, Any]:
    """A field override by display name (e.g. ``custom.lineStyle``)."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()],
    }


def override_regex(pattern: str, **props: Any) -> dict[str, Any]:
    """A field override for every series whose display name matches ``pattern``."""
    return {
        "matcher": {"id": "byRegexp", "options": pattern},
        "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()],
    }


DASHED = {"dash": [10, 10], "fill": "dash"}


def limit_style(pattern: str) -> dict[str, Any]:
    """Limits and sizes: red dashed lines that never stack or fill."""
    return override_regex(
        pattern,
        custom__lineStyle=DASHED,
        custom__stacking={"group": "A", "mode": "none"},
        custom__fillOpacity=0,
        color={"fixedColor": "red", "mode": "fixed"},
    )


def timeseries(
    title: str,
    description: str,
    targets: Targets,
    *,
    unit: str,
    w: int = 12,
    h: int = 8,
    stack: bool = False,
    bars: bool = False,
    overrides: Sequence[dict[str, Any]] = (),
    links: Sequence[dict[str, Any]] = (),
    legend_table: bool = False,
    min_zero: bool = False,
    steps: Sequence[dict[str, Any]] | None = None,
) -> Panel:
    extra: dict[str, Any] = {"fieldConfig": {"defaults": {"links": list(links)}}}
    if steps is not None:
        extra["fieldConfig"]["defaults"]["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(targets),
        unit=unit,
        gridPos=_grid(w, h),
        stacking={"group": "A", "mode": "normal"} if stack else {"group": "A", "mode": "none"},
        fillOpacity=60 if bars else (25 if stack else 10),
        drawStyle="bars" if bars else "line",
        lineWidth=1,
        showPoints="never",
        spanNulls=False,
        legendDisplayMode="table" if legend_table else "list",
        legendPlacement="right" if legend_table and w == 24 else "bottom",  # room for it
        legendCalcs=["lastNotNull", "max"] if legend_table else [],
        tooltipMode="multi",
        tooltipSort="desc",
        overrides=list(overrides),
        thresholds=list(steps) if steps is not None else NO_THRESHOLDS,
        valueMin=0 if min_zero else None,
        extraJson=extra,
    )


def stat(
    title: str,
    description: str,
    targets: Targets,
    *,
    unit: str,
    w: int = 4,
    h: int = 5,
    steps: Sequence[dict[str, Any]] = NO_THRESHOLDS,
    no_value: str = "no data",
    instant: bool = False,
    mappings: Sequence[dict[str, Any]] = (),
    text_mode: str = "auto",
    links: Sequence[dict[str, Any]] = (),
) -> Panel:
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(targets, instant=instant),
        format=unit,
        gridPos=_grid(w, h),
        thresholds=list(steps),
        color={"mode": "thresholds"},
        colorMode="value",
        graphMode="none" if instant else "area",
        reduceCalc="lastNotNull",
        noValue=no_value,
        mappings=list(mappings),
        textMode=text_mode,
        extraJson={"fieldConfig": {"defaults": {"links": list(links)}}},
    )


def table(
    title: str,
    description: str,
    columns: Sequence[tuple[str, str, str]],
    *,
    labels: Sequence[str],
    sort_by: str,
    descending: bool = False,
    w: int = 24,
    h: int = 10,
    links: dict[str, dict[str, Any]] | None = None,
) -> Panel:
    """An instant table: one query per (column title, expr, unit), joined on ``labels``
    by Grafana's merge transformation; other labels and the time column are hidden."""
    targets = _targets([(expr, "") for _, expr, _ in columns], instant=True)
    rename = {f"Value #{chr(ord('A') + i)}": col for i, (col, _, _) in enumerate(columns)}
    order = {name: i for i, name in enumerate([*labels, *rename.values()])}
    overrides = [override(col, unit=unit) for col, _, unit in columns]
    for field, link in (links or {}).items():
        overrides.append(override(field, links=[link]))
    return g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets,
        gridPos=_grid(w, h),
        unit="none",
        thresholds=NO_THRESHOLDS,
        filterable=True,
        overrides=overrides,
        sortBy=[g.TableSortByField(displayName=sort_by, desc=descending)],
        transformations=[
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    # Everything but the join labels and the values: hide.
                    "excludeByName": {"Time": True},
                    "indexByName": order,
                    "renameByName": rename,
                },
            },
            {
                "id": "filterFieldsByName",
                "options": {"include": {"names": [*labels, *rename.values()]}},
            },
        ],
    )


def bargauge(
    title: str,
    description: str,
    targets: Targets,
    *,
    unit: str,
    w: int = 12,
    h: int = 9,
    steps: Sequence[dict[str, Any]] = NO_THRESHOLDS,
    links: Sequence[dict[str, Any]] = (),
) -> Panel:
    """A ranked bar list (instant queries, e.g. topk): the current bar gauge model;
    grafanalib's own emits the Grafana 6 ``fieldOptions`` layout, replaced here."""
    return g.BarGauge(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(targets, instant=True),
        gridPos=_grid(w, h),
        thresholds=list(steps),
        extraJson={
            "fieldConfig": {
                "defaults": {
                    "unit": unit,
                    "min": 0,
                    "links": list(links),
                    "color": {"mode": "thresholds"},
                    "thresholds": {"mode": "absolute", "steps": list(steps)},
                },
                "overrides": [],
            },
            "options": {
                "displayMode": "gradient",
                "orientation": "horizontal",
                "showUnfilled": True,
                "valueMode": "color",
                "namePlacement": "auto",
                "sizing": "auto",
                "minVizHeight": 16,
                "maxVizHeight": 300,
                "minVizWidth": 8,
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            },
        },
    )


def row(title: str) -> Panel:
    return g.RowPanel(title=title, gridPos=_grid(24, 1), collapsed=False)


# --- annotations ------------------------------------------------------------------------------
def annotation(name: str, expr: str, *, color: str, title: str, text: str) -> dict[str, Any]:
    """A Prometheus annotation: one event wherever ``expr`` has a sample."""
    return {
        "datasource": DATASOURCE,
        "enable": True,
        "expr": expr,
        "hide": False,
        "iconColor": color,
        "name": name,
        "tagKeys": "namespace,pod,container,process",
        "textFormat": text,
        "titleFormat": title,
        "useValueForTime": False,
    }


# --- the dashboard ----------------------------------------------------------------------------
def layout(panels: Sequence[Panel]) -> list[Panel]:
    """Place panels left to right, wrapping at 24 columns; a row starts a new line.
    Ids follow source order (1, 2, ...), so they are stable."""
    placed: list[Panel] = []
    x = y = line_h = 0
    for i, p in enumerate(panels, start=1):
        w, h = p.gridPos.w, p.gridPos.h
        if p.__class__ is g.RowPanel or x + w > 24:
            x, y, line_h = 0, y + line_h, 0
        placed.append(attr.evolve(p, id=i, gridPos=g.GridPos(h=h, w=w, x=x, y=y)))
        x += w
        line_h = max(line_h, h)
        if p.__class__ is g.RowPanel:
            x, y, line_h = 0, y + h, 0
    return placed


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    variables: Sequence[Any],
    panels: Sequence[Panel],
    annotations: Sequence[dict[str, Any]] = (),
    time_from: str = "now-24h",
) -> Any:
    return g.Dashboard(
        uid=uid,
        title=title,
        description=description,
        tags=TAGS,
        timezone="utc",
        editable=True,
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        refresh="1m",
        time=g.Time(time_from, "now"),
        templating=g.Templating(list=[datasource_var(), job_var(), *variables]),
        annotations=g.Annotations(list=list(annotations)),
        links=dashboard_links(),
        panels=layout(panels),
    )


# --- names reused by the dashboards (recording rules, catalog) -----------------------------
RULE = r  # alerts.rules: recording-rule names (r.TIME_TO_LIMIT, ...)
CATALOG = c
