"""Panel factories of the house style: time series, stat tiles, tables, bar lists, rows
and annotations, each with a description, the ``${datasource}`` variable, base units and
legends shown.

A panel gets its width and height here; ``dashboards.layout`` places it (``gridPos``)
and numbers it, in source order. Runbook links come built (``Knobs.runbooks``), so no
factory reads the rules' config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grafanalib import core as g

from dashboards.selectors import DATASOURCE
from dashboards.style import NO_THRESHOLDS, NOT_STACKED, override

# grafanalib ships no type information: its objects are Any to mypy.
Panel = Any
Json = dict[str, Any]


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
    runbooks: Sequence[Json] = (),
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
        links=list(runbooks),
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
    runbooks: Sequence[Json] = (),
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
        links=list(runbooks),
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
    runbooks: Sequence[Json] = (),
) -> Panel:
    """A ranked bar list (instant queries, e.g. topk)."""
    return g.BarGauge(
        title=title,
        links=list(runbooks),
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


