"""House style for headroom's dashboards: variables, selectors and panel helpers.

Every dashboard builds its panels with these helpers, so all of them share one look and
one set of rules: the ``${datasource}`` variable on every panel and query, the ``job``
variable in every query (raw series select it, recording rules are joined to a raw series
that does), base units, ``$__rate_interval`` in every rate/increase, a description on
every panel, legends shown, colours fixed by memory kind.

Metric names come from ``exporter.catalog``; recording-rule names, the rules' config
(thresholds, windows, runbooks) and the selector builder from ``exporter.promql``
(the dashboards never import ``alerts/``): a rename or a new threshold there changes the
dashboards on the next ``headroom generate``.

grafanalib emits a Grafana 6/7 era model; ``dashboards.generate`` normalises its output
to the current JSON model. Layout (``gridPos``) and panel ids are assigned here, in source
order, so they are stable from one generation to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import attr
from grafanalib import core as g

from dashboards.names import CONFIG, RULE, promql_duration, selector, series
from dashboards.names import by as by
from exporter import catalog as c

# grafanalib ships no type information: its objects are Any to mypy.
Panel = Any

# --- datasource, selectors -----------------------------------------------------------------
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# The model of Grafana 11.6 (grafana-foundation-sdk 11.6's default), which the tests parse.
SCHEMA_VERSION = 41
TAGS = ["headroom", "vllm", "memory"]
# Grafana draws 24 columns; one grid unit is 30 px plus an 8 px gap. Below the top bar
# and the variables, a 1920x1080 screen shows 24 units: the "first screen".
FIRST_SCREEN_UNITS = 24

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

# Durations and thresholds shared with the rules, so a panel says what the alert means.
RULES_CONFIG = CONFIG
DERIV = promql_duration(CONFIG.slope_window_s)
BASELINE = promql_duration(CONFIG.baseline_window_s)
CRITICAL_S = CONFIG.fill_critical_horizon_s
WARNING_S = CONFIG.fill_warning_horizon_s
RATE = "$__rate_interval"
RANGE = "$__range"
# Sustained growth, as the rules define it, per second: the floor of the growth tiles.
MIN_GROWTH_BPS = CONFIG.min_baseline_rise_bytes / CONFIG.baseline_window_s
MIN_HIDDEN_GROWTH_BPS = CONFIG.hidden_min_rise_bytes / CONFIG.baseline_window_s

# Titles and uids of the dashboards, for links between them.
UIDS = {
    "fleet": "headroom-fleet",
    "pod": "headroom-pod",
    "node": "headroom-node",
    "exporter": "headroom-exporter",
}
SLUGS = {
    "fleet": "headroom-fleet",
    "pod": "headroom-pod-memory",
    "node": "headroom-node",
    "exporter": "headroom-exporter",
}

# Colours by memory kind, so a kind looks the same on every panel and every cgroup
# version: what the kernel cannot reclaim is warm, page cache is cool.
KIND_COLOURS: dict[str, str] = {
    "anon": "red",
    "shmem": "orange",
    "kernel": "yellow",
    "sock": "dark-yellow",
    "unaccounted": "dark-orange",
    "file_active": "blue",
    "file_inactive": "super-light-blue",
}
assert set(KIND_COLOURS) == set(c.MEMORY_KINDS)
HIDDEN_COLOUR = "dark-red"  # memory no process owns
PAGE_CACHE_COLOUR = "blue"
LIMIT_COLOUR = "red"


def sel(*matchers: str) -> str:
    """A ``{...}`` block from label matchers (empty ones are skipped)."""
    return selector(*matchers)


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


def growth_since_baseline(series: str) -> str:
    """Each series minus its own lowest value over the baseline window: what grew since
    its floor; for a pod younger than the window, since it started (the young pods'
    fallback: the rules' baseline rise needs two windows of data)."""
    return f"({series} - min_over_time({series}[{BASELINE}]))"


def oom_kills(increase_range: str, *scope: str, by_labels: Sequence[str] = ("namespace", "pod")
              ) -> str:
    """OOM kills per pod from every source, on cgroup v1 and v2, as a whole number.

    The pod cgroup's ``oom_kill`` counts its containers' kills, even a container's whose
    cgroup is gone after a restart (v2: the kernel's hierarchical count; v1: the exporter
    sums them, the kernel counting a kill only in the victim's own cgroup); the
    containers' own counters, summed, are the second source. The kernel's counters count
    each process a memory.oom.group kill signals; headroom's watcher counter, the third
    source, counts each kill once as ``exporter/oom/watcher.py`` defines it (a 0 for each
    process name running in the pod, so increase() sees a first kill). The largest of the
    three is the count; increase() extrapolates to the range edges, hence round()."""
    grouping = by(*by_labels)
    events = c.MEMORY_EVENTS_TOTAL
    sources = (
        ("pod cgroup", metric(events, JOB, *scope, POD_CGROUP, eq("event", "oom_kill"))),
        ("containers", metric(events, JOB, *scope, ANY_CONTAINER, eq("event", "oom_kill"))),
        ("watcher", metric(c.OOM_KILLS_TOTAL, JOB, *scope)),
    )
    parts = [
        f'label_replace(sum by {grouping} (increase({sel_}[{increase_range}])), '
        f'"source", "{name}", "", "")'
        for name, sel_ in sources
    ]
    union = "\n  or ".join(parts)
    return f"round(max by {grouping} (\n  {union}\n))"


# --- links -------------------------------------------------------------------------------
def dashboard_url(key: str, *params: str) -> str:
    """A link to another headroom dashboard, keeping datasource, job and time range."""
    query = "&".join(("var-datasource=${datasource}", "${job:queryparam}", *params,
                      "${__url_time_range}"))
    return f"/d/{UIDS[key]}/{SLUGS[key]}?{query}"


def pod_link(title: str, namespace: str, pod: str) -> dict[str, Any]:
    """A data link to the pod dashboard."""
    return {"title": title, "url": dashboard_url("pod", f"var-namespace={namespace}",
                                                 f"var-pod={pod}")}


# On a series (its labels) and in a table (the row's namespace, the cell's pod).
SERIES_POD_LINK = pod_link(
    "Pod ${__field.labels.namespace}/${__field.labels.pod}",
    "${__field.labels.namespace}", "${__field.labels.pod}",
)
TABLE_POD_LINK = pod_link(
    "Pod ${__data.fields.namespace}/${__value.raw}", "${__data.fields.namespace}",
    "${__value.raw}",
)


def runbook(alertname: str) -> dict[str, Any]:
    """A panel link (the panel header's link menu) to an alert's runbook: the URL the
    alert's runbook_url annotation carries. Panel links are dashboard links in the
    current model, hence every field."""
    return {
        "asDropdown": False, "icon": "doc", "includeVars": False, "keepTime": False,
        "tags": [], "targetBlank": True, "title": f"Runbook: {alertname}",
        "tooltip": f"What to do when {alertname} fires", "type": "link",
        "url": CONFIG.runbook_url(alertname),
    }


def link(title: str, url: str, *, tooltip: str = "", new_tab: bool = False) -> Any:
    return g.DashboardLink(
        title=title, uri=url, type="link", tooltip=tooltip, targetBlank=new_tab,
        keepTime=False, includeVars=False, asDropdown=False, icon="external link",
    )


def dashboard_links(*extra: Any) -> list[Any]:
    """A drop-down of every headroom dashboard (time range and variables carried), then
    the dashboard's own links."""
    return [
        g.DashboardLink(
            asDropdown=True, includeVars=True, keepTime=True, tags=["headroom"],
            title="headroom", type="dashboards",
        ),
        *extra,
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


# Process names of a vLLM server (catalog: the title without VLLM::, APIServer for the
# un-retitled `vllm serve`): a pod running one of them is a vLLM pod.
VLLM_PROCESSES = "APIServer.*|EngineCore.*|Worker.*|DPCoordinator.*"
SCOPE = 'process=~"$scope"'


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
@dataclass(frozen=True)
class Q:
    """One query of a panel: PromQL, legend, and whether it is instant."""

    expr: str
    legend: str = ""
    instant: bool = False


QueryLike = Q | tuple[str, str]
Targets = Sequence[QueryLike]


def _as_q(t: QueryLike, instant: bool) -> Q:
    return t if isinstance(t, Q) else Q(t[0], t[1], instant)


def _targets(targets: Targets, *, instant: bool = False, table: bool = False) -> list[Any]:
    out = []
    for i, t in enumerate(targets):
        q = _as_q(t, instant)
        out.append(g.Target(
            expr=q.expr, legendFormat=q.legend, instant=q.instant, datasource=DATASOURCE,
            format="table" if table else "time_series", refId=chr(ord("A") + i),
        ))
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
# Time to the limit, as the FillingUp alert's horizons colour it.
TIME_STEPS = thresholds(("red", 0), ("orange", CRITICAL_S), ("green", WARNING_S))
# Unreclaimable / limit, as NearLimit (red) and ReclaimAtLimit (orange) read it.
RATIO_STEPS = thresholds(
    ("green", 0), ("orange", CONFIG.high_ratio), ("red", CONFIG.near_limit_ratio)
)
# The same two lines as headroom left, in percent of the limit.
HEADROOM_PERCENT_STEPS = thresholds(
    ("red", 0),
    ("orange", round((1 - CONFIG.near_limit_ratio) * 100, 6)),
    ("green", round((1 - CONFIG.high_ratio) * 100, 6)),
)
OOM_STEPS = thresholds(("green", 0), ("red", 1))


def props(**kw: Any) -> list[dict[str, Any]]:
    return [{"id": k.replace("__", "."), "value": v} for k, v in kw.items()]


def override(name: str, **kw: Any) -> dict[str, Any]:
    """A field override by display name (e.g. ``custom__lineStyle``)."""
    return {"matcher": {"id": "byName", "options": name}, "properties": props(**kw)}


def override_regex(pattern: str, **kw: Any) -> dict[str, Any]:
    """A field override for every series whose display name matches ``pattern``."""
    return {"matcher": {"id": "byRegexp", "options": pattern}, "properties": props(**kw)}


def fixed(colour: str) -> dict[str, str]:
    return {"fixedColor": colour, "mode": "fixed"}


DASHED = {"dash": [10, 10], "fill": "dash"}
DOTTED = {"dash": [2, 4], "fill": "dot"}
NOT_STACKED = {"group": "A", "mode": "none"}


def limit_style(pattern: str) -> dict[str, Any]:
    """Limits and sizes: red dashed lines that never stack or fill."""
    return override_regex(
        pattern, custom__lineStyle=DASHED, custom__stacking=NOT_STACKED,
        custom__fillOpacity=0, color=fixed(LIMIT_COLOUR),
    )


def kind_colours(suffix: str = "") -> list[dict[str, Any]]:
    """Overrides that colour each kind (a series named ``<kind><suffix>``) by name."""
    return [override(f"{kind}{suffix}", color=fixed(col)) for kind, col in KIND_COLOURS.items()]


def legend_only(pattern: str) -> dict[str, Any]:
    """A series shown in the legend (its last value) but not drawn, e.g. a mount's size,
    so a node-sized figure does not flatten the axis."""
    return override_regex(
        pattern, custom__hideFrom={"legend": False, "tooltip": True, "viz": True},
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
    legend_right: bool = False,
    min_zero: bool = False,
    steps: Sequence[dict[str, Any]] | None = None,
    runbooks: Sequence[str] = (),
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
        stacking={"group": "A", "mode": "normal"} if stack else NOT_STACKED,
        fillOpacity=60 if bars else (25 if stack else 10),
        drawStyle="bars" if bars else "line",
        lineWidth=1,
        showPoints="never",
        spanNulls=False,
        legendDisplayMode="table" if legend_table else "list",
        legendPlacement="right" if legend_right or (legend_table and w == 24) else "bottom",
        legendCalcs=["lastNotNull", "max"] if legend_table else [],
        tooltipMode="multi",
        tooltipSort="desc",
        overrides=list(overrides),
        thresholds=list(steps) if steps is not None else NO_THRESHOLDS,
        valueMin=0 if min_zero else None,
        links=[runbook(n) for n in runbooks],
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
    percent_steps: bool = False,
    no_value: str = "no data",
    instant: bool = True,
    mappings: Sequence[dict[str, Any]] = (),
    text_mode: str = "auto",
    links: Sequence[dict[str, Any]] = (),
    transformations: Sequence[dict[str, Any]] = (),
    min_zero: bool = False,
    runbooks: Sequence[str] = (),
) -> Panel:
    """A tile. Instant by default: evaluated at the end of the range, so a series that
    ended shows ``no_value``, never its last value (a stale countdown in red)."""
    defaults: dict[str, Any] = {"links": list(links)}
    if percent_steps:
        defaults["thresholds"] = {"mode": "percentage", "steps": list(steps)}
    if min_zero:
        defaults["min"] = 0
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
        transformations=list(transformations),
        links=[runbook(n) for n in runbooks],
        extraJson={"fieldConfig": {"defaults": defaults}},
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
    targets = _targets([(expr, "") for _, expr, _ in columns], instant=True, table=True)
    rename = {f"Value #{chr(ord('A') + i)}": col for i, (col, _, _) in enumerate(columns)}
    order = {name: i for i, name in enumerate([*labels, *rename.values()])}
    overrides = [override(col, unit=unit) for col, _, unit in columns]
    for field, target_link in (links or {}).items():
        overrides.append(override(field, links=[target_link]))
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
    runbooks: Sequence[str] = (),
) -> Panel:
    """A ranked bar list (instant queries, e.g. topk)."""
    return g.BarGauge(
        title=title,
        links=[runbook(n) for n in runbooks],
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


def row(title: str, *, collapsed: bool = False) -> Panel:
    """A row; a collapsed one holds the panels that follow it (up to the next row)."""
    return g.RowPanel(title=title, gridPos=_grid(24, 1), collapsed=collapsed)


# --- annotations ------------------------------------------------------------------------------
def annotation(name: str, expr: str, *, color: str) -> dict[str, Any]:
    """A Prometheus annotation: one event wherever ``expr`` has a sample. The current
    model keeps name, colour and query only (titleFormat/textFormat are legacy keys that
    the model drops), so the name says what happened."""
    return {
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": color,
        "name": name,
        # The current model (@grafana/schema 12+) puts the query in ``target``; the
        # top-level ``expr`` of older dashboards is gone from it.
        "target": {"refId": "Anno", "expr": expr, "datasource": DATASOURCE},
    }


# --- the dashboard ----------------------------------------------------------------------------
def _is_row(p: Panel) -> bool:
    return p.__class__ is g.RowPanel


def layout(panels: Sequence[Panel]) -> list[Panel]:
    """Place panels left to right, wrapping at 24 columns; a row starts a new line.
    A collapsed row takes the panels up to the next row inside it (placed as they will
    be when it opens) and one grid unit on the page. Ids follow source order."""
    placed: list[Panel] = []
    x = y = line_h = 0
    holder: list[Panel] | None = None  # panels of the open collapsed row
    for i, p in enumerate(panels, start=1):
        w, h = p.gridPos.w, p.gridPos.h
        if _is_row(p) or x + w > 24:
            x, y, line_h = 0, y + line_h, 0
        item = attr.evolve(p, id=i, gridPos=g.GridPos(h=h, w=w, x=x, y=y))
        if _is_row(p):
            if holder is not None:
                # The previous collapsed row's panels do not take room on the page.
                y = placed[-1].gridPos.y + 1
                item = attr.evolve(item, gridPos=g.GridPos(h=h, w=w, x=0, y=y))
            holder = [] if p.collapsed else None
            placed.append(item)
            x, y, line_h = 0, y + h, 0
            continue
        if holder is not None:
            holder.append(item)
            placed[-1] = attr.evolve(placed[-1], panels=list(holder))
        else:
            placed.append(item)
        x += w
        line_h = max(line_h, h)
    return placed


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    variables: Sequence[Any],
    panels: Sequence[Panel],
    annotations: Sequence[dict[str, Any]] = (),
    links: Sequence[Any] = (),
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
        links=dashboard_links(*links),
        panels=layout(panels),
    )


# --- names reused by the dashboards (recording rules, catalog) -----------------------------
CATALOG = c
__all__ = ["CATALOG", "RULE", "RULES_CONFIG"]
