"""Placing panels on Grafana's grid and assembling a dashboard of the house style.

Grafana draws 24 columns; one grid unit is 30 px plus an 8 px gap. Layout (``gridPos``)
and panel ids are assigned here, in source order, so they are stable from one generation
to the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attr
from grafanalib import core as g

from dashboards.links import dashboard_links
from dashboards.panels import Panel
from dashboards.variables import datasource_var, job_var

TAGS = ["headroom", "vllm", "memory"]
# Below the top bar and the variables, a 1920x1080 screen shows 24 units: the "first
# screen".
FIRST_SCREEN_UNITS = 24


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


def assemble(
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


